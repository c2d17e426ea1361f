#include "state/state_store.h"

#include "common/log.h"
#include "state/file_ops.h"
#include "state/state_log.h"

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cstring>

#include <fcntl.h>
#include <sys/file.h>
#include <sys/stat.h>

namespace fencing {
namespace {

// A snapshot renamed over the file between our open and our flock sends us round again; more
// than a few in a row means something keeps replacing it.
constexpr int kMaxOpenAttempts = 8;

// A background snapshot fdatasyncs its temp file after every this many bytes (FORMAT.md
// "Compaction", B5).
constexpr uint64_t kSnapshotSyncBytes = 4 << 20;

std::string Errno(int err) { return std::strerror(err); }

int OpenRetrying(FileOps& ops, const std::string& path, int flags, mode_t mode = 0) {
  int fd;
  do {
    fd = ops.Open(path, flags, mode);
  } while (fd < 0 && errno == EINTR);
  return fd;
}

// Opens the existing file or, if allowed, creates it whole (CreateStateFile). *created tells
// the caller that fd is the new file's, already locked, under the name.
Status OpenOrCreate(FileOps& ops, const std::string& path, const OpenOptions& options, int* fd, bool* created) {
  const int open_flags = (options.read_only ? O_RDONLY : O_RDWR | O_APPEND) | O_CLOEXEC;
  *created = false;
  for (int attempt = 1;; ++attempt) {
    *fd = OpenRetrying(ops, path, open_flags);
    if (*fd >= 0) return Status::Ok();
    if (errno != ENOENT) return Status::Error(path + ": cannot open state file: " + Errno(errno));
    if (!options.create_if_missing || options.read_only) {
      return Status::Error(path + ": state file does not exist");
    }
    Status status = CreateStateFile(path, fd, created, &ops);
    if (!status.ok() || *created) return status;
    // Another process created it meanwhile: open theirs.
    if (attempt == kMaxOpenAttempts) {
      return Status::Error(path + ": the file kept appearing and disappearing while opening it");
    }
  }
}

// Takes the lock, then makes sure the path still names the locked inode.
Status LockCurrentInode(FileOps& ops, const std::string& path, int fd, bool* replaced) {
  *replaced = false;
  int rc;
  do {
    rc = ops.Flock(fd, LOCK_EX | LOCK_NB);
  } while (rc != 0 && errno == EINTR);
  if (rc != 0) {
    if (errno == EWOULDBLOCK) {
      return Status::Error(path + " is locked by another process (is another fencing-proxy running on it?)");
    }
    return Status::Error(path + ": cannot lock state file: " + Errno(errno));
  }
  struct stat by_fd {};
  struct stat by_path {};
  if (ops.Fstat(fd, &by_fd) != 0) return Status::Error(path + ": fstat failed: " + Errno(errno));
  if (ops.Stat(path, &by_path) != 0) {
    if (errno != ENOENT) return Status::Error(path + ": stat failed: " + Errno(errno));
    *replaced = true;
  } else {
    *replaced = by_fd.st_dev != by_path.st_dev || by_fd.st_ino != by_path.st_ino;
  }
  return Status::Ok();
}

// A snapshot a crash interrupted (or whose rename a crash undid), or the temp file of a creation
// that found the file already there, is garbage: the file under the real name is complete
// either way. Only called with the real file's lock held, so it is never the temp file of a
// compaction in progress, nor of a creation (that runs only while the real name is absent).
Status RemoveLeftoverSnapshot(FileOps& ops, const std::string& path) {
  const std::string tmp = SnapshotTempPath(path);
  if (ops.Unlink(tmp) == 0) {
    LogWarn("state file: removed a snapshot left over from an interrupted compaction, state set or creation",
            {{"file", tmp}});
    return Status::Ok();
  }
  if (errno == ENOENT) return Status::Ok();
  return Status::Error(tmp + ": cannot remove leftover snapshot: " + Errno(errno));
}

}  // namespace

Status StateStore::Open(const std::string& path, const OpenOptions& options,
                        std::unique_ptr<StateStore>* store) {
  store->reset();
  if (path.empty()) return Status::Error("state file path is empty");
  std::unique_ptr<StateStore> s(new StateStore());
  s->path_ = path;
  s->ops_ = options.file_ops != nullptr ? options.file_ops : DefaultFileOps();
  s->policy_ = options.compaction;
  s->read_only_ = options.read_only;
  FileOps& ops = *s->ops_;

  bool created = false;
  for (int attempt = 1;; ++attempt) {
    Status opened = OpenOrCreate(ops, path, options, &s->fd_, &created);
    if (!opened.ok()) return opened;
    if (created) {
      // Locked before the rename gave it the name, and the name cannot have moved since.
      s->locked_ = options.lock;
      break;
    }
    if (!options.lock) break;
    bool replaced = false;
    Status locked = LockCurrentInode(ops, path, s->fd_, &replaced);
    if (!locked.ok()) return locked;  // the destructor closes fd_
    if (!replaced) {
      s->locked_ = true;
      break;
    }
    ops.Close(s->fd_);
    s->fd_ = -1;
    if (attempt == kMaxOpenAttempts) {
      return Status::Error(path + ": the file kept being replaced while opening it");
    }
  }
  if (s->locked_ && !options.read_only) {
    Status removed = RemoveLeftoverSnapshot(ops, path);
    if (!removed.ok()) return removed;
  }
  if (!created && !options.read_only) {
    // The process before may have died (or failed) between a rename, of a creation or a
    // snapshot, and its directory sync: nothing is acknowledged from this file until its name
    // is durable (FORMAT.md "Locking").
    Status synced = SyncDirectory(ops, ParentDirectory(path));
    if (!synced.ok()) return Status::Error(path + ": " + synced.message());
  }

  struct stat st {};
  if (ops.Fstat(s->fd_, &st) != 0) return Status::Error(path + ": fstat failed: " + Errno(errno));
  ReplayResult replay;
  Status read = ReplayFile(ops, path, s->fd_, static_cast<uint64_t>(st.st_size), &replay);
  if (!read.ok()) return read;
  const uint64_t size = static_cast<uint64_t>(st.st_size);
  if (replay.corrupt) {
    return Status::Error(path + ": corrupt record at byte offset " + std::to_string(replay.valid_end) +
                         ": " + replay.reason);
  }
  s->file_bytes_ = size;
  if (replay.torn_tail) {
    const uint64_t dropped = size - replay.valid_end;
    LogWarn("state file: dropping a torn last record (a crash interrupted an append)",
            {{"file", path},
             {"offset", replay.valid_end},
             {"bytes_dropped", dropped},
             {"reason", replay.reason},
             {"truncated", !options.read_only}});
    if (!options.read_only) {
      if (ops.Ftruncate(s->fd_, static_cast<off_t>(replay.valid_end)) != 0) {
        return Status::Error(path + ": cannot truncate the torn last record: " + Errno(errno));
      }
      if (ops.Fdatasync(s->fd_) != 0) {
        return Status::Error(path + ": fdatasync after truncating the torn last record failed: " +
                             Errno(errno));
      }
      s->file_bytes_ = replay.valid_end;
    }
    s->torn_tail_bytes_ = dropped;
  }
  s->version_ = replay.version;
  s->maxima_ = std::move(replay.maxima);
  s->key_maxima_ = std::move(replay.key_maxima);
  s->fence_snapshot_bytes_ = SnapshotFenceBytes(s->maxima_);
  s->key_snapshot_bytes_ = SnapshotKeyBytes(s->key_maxima_);
  if (s->version_ < kFormatVersion && s->locked_ && !options.read_only) {
    Status upgraded = s->UpgradeToCurrentVersion();
    if (!upgraded.ok()) return upgraded;
  }
  *store = std::move(s);
  return Status::Ok();
}

// FORMAT.md "Versions": key records are only ever appended under a version-2 header, so an
// older build refuses the file instead of taking a last key record for a torn tail.
Status StateStore::UpgradeToCurrentVersion() {
  int new_fd = -1;
  bool renamed = false;
  Status status = WriteSnapshot(path_, maxima_, key_maxima_, &new_fd, ops_, &renamed);
  if (renamed) {
    ops_->Close(fd_);  // the old, nameless inode's lock only
    fd_ = new_fd;
  }
  if (!status.ok()) return Status::Error(path_ + ": cannot upgrade the state file to format version " +
                                         std::to_string(kFormatVersion) + ": " + status.message());
  LogInfo("state file upgraded to the current format version",
          {{"file", path_}, {"from", version_}, {"to", kFormatVersion}});
  version_ = kFormatVersion;
  file_bytes_ = snapshot_bytes();
  return Status::Ok();
}

FenceKeyMaxima StateStore::TakeKeyMaxima() {
  keys_taken_ = true;
  FenceKeyMaxima out = std::move(key_maxima_);
  key_maxima_ = FenceKeyMaxima{};
  return out;
}

StateStore::~StateStore() {
  if (fd_ >= 0) ops_->Close(fd_);  // also releases the flock
}

void StateStore::NoteMaximum(const std::string& fence, uint64_t token) {
  auto [it, inserted] = maxima_.try_emplace(fence, token);
  if (inserted) {
    fence_snapshot_bytes_ += EncodedRecordSize(fence);
  } else {
    it->second = std::max(it->second, token);
  }
}

Status StateStore::AppendAndSync(const std::vector<FenceRecord>& records) {
  if (failed_) {
    return Status::Error(path_ + ": an earlier write or sync of the state file failed; "
                         "nothing more is written to it until the proxy restarts");
  }
  if (read_only_) return Status::Error(path_ + ": state file is open read-only");
  if (records.empty()) return Status::Ok();

  // Kept between calls for its capacity (one allocation per raise less), unless a large batch
  // grew it.
  std::string& buffer = append_buffer_;
  if (buffer.capacity() > kKeepAppendBuffer) std::string().swap(buffer);
  buffer.clear();
  buffer.reserve(records.size() * kMaxRecordSize);
  for (const FenceRecord& record : records) {
    // A caller bug, caught before the disk is touched: not a reason to fail the store.
    if (std::string problem = RecordProblem(record); !problem.empty()) {
      return Status::Error(path_ + ": refusing to write " + problem);
    }
    if (!record.key.empty() && version_ < 2) {
      return Status::Error(path_ + ": refusing to write a key record into a version-" + std::to_string(version_) +
                           " file (a locked, writable open upgrades it)");
    }
    EncodeRecord(record, &buffer);
  }

  const char* step = "write";
  bool ok = WriteFully(*ops_, fd_, buffer);
  // fdatasync is not retried on any error, EINTR included: its dirty pages may be gone.
  if (ok) {
    step = "fdatasync";
    ok = ops_->Fdatasync(fd_) == 0;
  }
  if (!ok) {
    const int err = errno;
    failed_ = true;
    LogError("state file write failed; no further raises will be accepted until restart",
             {{"file", path_}, {"step", step}, {"error", Errno(err)}, {"records", records.size()}});
    return Status::Error(path_ + ": " + step + " failed: " + Errno(err));
  }
  ++sync_count_;
  file_bytes_ += buffer.size();
  for (const FenceRecord& record : records) {
    // A key record makes its fence exist; a forget folds into the floor (FORMAT.md "Replay").
    const bool fence_part = record.key.empty() || record.kind == FenceRecord::Kind::kForgetKey;
    uint64_t folded = fence_part ? record.token : 0;
    if (!keys_taken_) folded = std::max(folded, ApplyKeyRecord(record, &key_maxima_));
    NoteMaximum(record.fence, folded);
  }
  return Status::Ok();
}

bool StateStore::CompactionDue() const {
  return !failed_ && !read_only_ && locked_ && !compaction_in_flight_ && file_bytes_ > policy_.min_file_bytes &&
         file_bytes_ > policy_.snapshot_ratio * snapshot_bytes() && file_bytes_ >= compaction_retry_at_;
}

Status StateStore::Compact() {
  if (failed_) return Status::Error(path_ + ": not compacting: an earlier write or sync failed");
  // The lock must stay on whatever the name holds; without it, a rename could hand the file to
  // a second process.
  if (read_only_ || !locked_) return Status::Error(path_ + ": only a locked, writable store compacts");
  std::unique_ptr<CompactionJob> job = StartCompaction();
  if (!job) return Status::Error(path_ + ": a compaction is already in progress");
  RunCompaction(*job);
  return FinishCompaction(std::move(job));
}

std::unique_ptr<CompactionJob> StateStore::StartCompaction() {
  if (failed_ || read_only_ || !locked_ || compaction_in_flight_) return nullptr;
  auto job = std::make_unique<CompactionJob>();
  job->path_ = path_;
  job->ops_ = ops_;
  job->log_fd_ = fd_;
  job->prefix_end_ = file_bytes_;
  job->background_ = file_bytes_ >= policy_.background_min_bytes;
  compaction_in_flight_ = true;
  return job;
}

void StateStore::RunCompaction(CompactionJob& job) {
  FileOps& ops = *job.ops_;
  // B1: the prefix [0, O) is stable (the log is append-only) and every byte of it was synced.
  ReplayResult prefix;
  Status read = ReplayFile(ops, job.path_, job.log_fd_, job.prefix_end_, &prefix);
  if (!read.ok()) {
    job.status_ = read;
    return;
  }
  if (prefix.torn_tail || prefix.corrupt || prefix.valid_end != job.prefix_end_) {
    job.status_ = Status::Error(job.path_ + ": the log did not replay cleanly for compaction at byte offset " +
                                std::to_string(prefix.valid_end) + ": " + prefix.reason);
    return;
  }
  // B2-B4: a fresh, locked PATH.tmp.
  int fd = -1;
  Status created = CreateSnapshotTemp(ops, job.path_, &fd);
  if (!created.ok()) {
    job.status_ = created;
    return;
  }
  // B5: the snapshot of the prefix, in slices, synced every kSnapshotSyncBytes on the way: on
  // ext4 (data=ordered) the log's next fdatasync commits the journal and so waits for every
  // dirty page of the temp file too; syncing as it goes keeps that wait to a few MiB.
  int write_errno = 0;
  uint64_t written = 0;
  uint64_t unsynced = 0;
  const bool ok = EncodeSnapshot(
      prefix.maxima, prefix.key_maxima,
      [&](std::string_view piece) {
        if (!WriteFully(ops, fd, piece)) {
          write_errno = errno;
          return false;
        }
        written += piece.size();
        unsynced += piece.size();
        if (unsynced >= kSnapshotSyncBytes) {
          if (ops.Fdatasync(fd) != 0) {
            write_errno = errno;
            return false;
          }
          unsynced = 0;
        }
        return true;
      },
      &job.key_bytes_);
  for (const auto& entry : prefix.key_maxima) job.keys_ += entry.second.size();
  prefix = ReplayResult{};  // the compactor's copy of the keys is freed before the sync
  if (!ok) {
    job.status_ = AbandonSnapshotTemp(ops, fd, job.path_, "write or intermediate fdatasync failed", write_errno);
    return;
  }
  // B6. A failed sync is not retried: this temp file is given up and a later try starts afresh.
  if (ops.Fdatasync(fd) != 0) {
    job.status_ = AbandonSnapshotTemp(ops, fd, job.path_, "fdatasync failed", errno);
    return;
  }
  job.tmp_fd_ = fd;
  job.written_ = written;
}

void StateStore::NoteCompactionFailure(const Status& status) {
  // A persistent failure (ENOSPC) must not turn every append into a compaction attempt, and at
  // a million keys each attempt costs a snapshot: wait for that much growth (amortised O(1)).
  compaction_retry_at_ = file_bytes_ + std::max(policy_.min_file_bytes, snapshot_bytes());
  LogWarn("state file compaction failed; appending to the uncompacted log and retrying later",
          {{"file", path_}, {"error", status.message()}, {"retry_at_bytes", compaction_retry_at_}});
}

void StateStore::CloseReplaced(int fd, bool release_blocks) const {
  if (fd < 0) return;
  struct stat st {};
  if (release_blocks && ops_->Fstat(fd, &st) == 0) {
    for (uint64_t size = static_cast<uint64_t>(st.st_size); size > 0;) {
      size = size > kReleaseStepBytes ? size - kReleaseStepBytes : 0;
      if (ops_->Ftruncate(fd, static_cast<off_t>(size)) != 0) break;  // the close frees the rest
    }
  }
  ops_->Close(fd);  // the old, nameless inode's lock; what is left of its blocks is freed here
}

Status StateStore::FinishCompaction(std::unique_ptr<CompactionJob> job, double* stall_seconds, int* replaced_fd) {
  if (replaced_fd != nullptr) *replaced_fd = -1;
  const auto start = std::chrono::steady_clock::now();
  auto stalled = [&] {
    if (stall_seconds != nullptr) {
      *stall_seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    }
  };
  compaction_in_flight_ = false;
  if (!job->status_.ok()) {
    NoteCompactionFailure(job->status_);
    stalled();
    return job->status_;
  }
  if (failed_) {
    // An append failed meanwhile: nothing is renamed any more; the finished part is dropped.
    AbandonSnapshotTemp(*ops_, job->tmp_fd_, path_, "discarded", ECANCELED);
    stalled();
    return Status::Error(path_ + ": compaction discarded: an append failed while it ran");
  }
  const int tmp_fd = job->tmp_fd_;
  // H1-H3: what the writer appended during the background part, each byte synced in the log.
  const uint64_t end = file_bytes_;
  if (end > job->prefix_end_) {
    std::string tail(static_cast<size_t>(end - job->prefix_end_), '\0');
    size_t got = 0;
    while (got < tail.size()) {
      const ssize_t n = ops_->Pread(fd_, tail.data() + got, tail.size() - got,
                                    static_cast<off_t>(job->prefix_end_ + got));
      if (n < 0 && errno == EINTR) continue;
      if (n <= 0) {
        const int err = n < 0 ? errno : EIO;
        Status status = AbandonSnapshotTemp(*ops_, tmp_fd, path_, "cannot read the log's new records", err);
        NoteCompactionFailure(status);
        stalled();
        return status;
      }
      got += static_cast<size_t>(n);
    }
    Status status = Status::Ok();
    if (!WriteFully(*ops_, tmp_fd, tail)) {
      status = AbandonSnapshotTemp(*ops_, tmp_fd, path_, "write failed", errno);
    } else if (ops_->Fdatasync(tmp_fd) != 0) {
      status = AbandonSnapshotTemp(*ops_, tmp_fd, path_, "fdatasync failed", errno);
    }
    if (!status.ok()) {
      NoteCompactionFailure(status);
      stalled();
      return status;
    }
  }
  // H4-H5.
  bool renamed = false;
  Status status = InstallSnapshotTemp(*ops_, tmp_fd, path_, &renamed);
  if (!renamed) {
    // The old log, its descriptor and its lock are untouched: keep appending, try again later.
    NoteCompactionFailure(status);
    stalled();
    return status;
  }
  // H6: the snapshot holds the name (and our lock): append there. Closing the old descriptor
  // releases the lock on the old, now nameless, inode only; with replaced_fd the caller closes
  // it later, off the writer thread (H7).
  const uint64_t log_bytes = file_bytes_;
  if (replaced_fd != nullptr) {
    *replaced_fd = fd_;
  } else {
    ops_->Close(fd_);
  }
  fd_ = tmp_fd;
  file_bytes_ = job->written_ + (end - job->prefix_end_);
  key_snapshot_bytes_ = job->key_bytes_;
  compaction_retry_at_ = 0;
  stalled();
  if (!status.ok()) {
    // The rename may not be durable, and an fsync is never retried: same as a failed append.
    failed_ = true;
    LogError("state file compaction: directory sync failed; no further raises will be accepted until restart",
             {{"file", path_}, {"error", status.message()}});
    return status;
  }
  ++compaction_count_;
  LogInfo("state file compacted", {{"file", path_},
                                   {"log_bytes", log_bytes},
                                   {"snapshot_bytes", job->written_},
                                   {"bytes_appended_meanwhile", end - job->prefix_end_},
                                   {"fences", maxima_.size()},
                                   {"keys", job->keys_}});
  return Status::Ok();
}

}  // namespace fencing
