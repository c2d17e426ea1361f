#include "state/state_store.h"

#include "common/log.h"
#include "state/file_ops.h"
#include "state/state_log.h"

#include <algorithm>
#include <cerrno>
#include <cstring>

#include <fcntl.h>
#include <sys/file.h>
#include <sys/stat.h>

namespace fencing {
namespace {

// A snapshot renamed over the file between our open and our flock sends us round again; more
// than a few in a row means something keeps replacing it.
constexpr int kMaxOpenAttempts = 8;

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

Status ReadWholeFile(FileOps& ops, const std::string& path, int fd, std::string* data) {
  struct stat st {};
  if (ops.Fstat(fd, &st) != 0) return Status::Error(path + ": fstat failed: " + Errno(errno));
  data->resize(static_cast<size_t>(st.st_size));
  size_t done = 0;
  while (done < data->size()) {
    ssize_t n = ops.Pread(fd, data->data() + done, data->size() - done, static_cast<off_t>(done));
    if (n < 0) {
      if (errno == EINTR) continue;
      return Status::Error(path + ": read failed: " + Errno(errno));
    }
    if (n == 0) break;  // shrank under us; read what is there
    done += static_cast<size_t>(n);
  }
  data->resize(done);
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

uint64_t SnapshotBytes(const FenceMaxima& maxima) {
  uint64_t bytes = kHeaderSize;
  for (const auto& entry : maxima) bytes += EncodedRecordSize(entry.first);
  return bytes;
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

  std::string data;
  Status read = ReadWholeFile(ops, path, s->fd_, &data);
  if (!read.ok()) return read;

  std::string reason;
  if (CheckHeader(data, &reason) != HeaderCheck::kValid) return Status::Error(path + ": " + reason);

  ReplayResult replay = ReplayRecords(data);
  if (replay.corrupt) {
    return Status::Error(path + ": corrupt record at byte offset " + std::to_string(replay.valid_end) +
                         ": " + replay.reason);
  }
  s->file_bytes_ = data.size();
  if (replay.torn_tail) {
    const uint64_t dropped = data.size() - replay.valid_end;
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
  s->maxima_ = std::move(replay.maxima);
  s->snapshot_bytes_ = SnapshotBytes(s->maxima_);
  *store = std::move(s);
  return Status::Ok();
}

StateStore::~StateStore() {
  if (fd_ >= 0) ops_->Close(fd_);  // also releases the flock
}

void StateStore::NoteMaximum(const std::string& fence, uint64_t token) {
  auto [it, inserted] = maxima_.try_emplace(fence, token);
  if (inserted) {
    snapshot_bytes_ += EncodedRecordSize(fence);
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

  std::string buffer;
  buffer.reserve(records.size() * kMaxRecordSize);
  for (const FenceRecord& record : records) {
    // A caller bug, caught before the disk is touched: not a reason to fail the store.
    if (!IsValidFenceName(record.fence)) {
      return Status::Error(path_ + ": refusing to write invalid fence name \"" + record.fence + "\"");
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
  for (const FenceRecord& record : records) NoteMaximum(record.fence, record.token);
  return Status::Ok();
}

bool StateStore::CompactionDue() const {
  return !failed_ && !read_only_ && locked_ && file_bytes_ > policy_.min_file_bytes &&
         file_bytes_ > policy_.snapshot_ratio * snapshot_bytes_ && file_bytes_ >= compaction_retry_at_;
}

Status StateStore::Compact() {
  if (failed_) return Status::Error(path_ + ": not compacting: an earlier write or sync failed");
  // The lock must stay on whatever the name holds; without it, a rename could hand the file to
  // a second process.
  if (read_only_ || !locked_) return Status::Error(path_ + ": only a locked, writable store compacts");

  const uint64_t log_bytes = file_bytes_;
  int new_fd = -1;
  bool renamed = false;
  Status status = WriteSnapshot(path_, maxima_, &new_fd, ops_, &renamed);
  if (!renamed) {
    // The old log, its descriptor and its lock are untouched: keep appending, try again later.
    compaction_retry_at_ = file_bytes_ + policy_.min_file_bytes;
    LogWarn("state file compaction failed; appending to the uncompacted log and retrying later",
            {{"file", path_}, {"error", status.message()}, {"retry_at_bytes", compaction_retry_at_}});
    return status;
  }
  // The snapshot holds the name (and our lock): append there. Closing the old descriptor
  // releases the lock on the old, now nameless, inode only.
  ops_->Close(fd_);
  fd_ = new_fd;
  file_bytes_ = snapshot_bytes_;
  compaction_retry_at_ = 0;
  if (!status.ok()) {
    // The rename may not be durable, and an fsync is never retried: same as a failed append.
    failed_ = true;
    LogError("state file compaction: directory sync failed; no further raises will be accepted until restart",
             {{"file", path_}, {"error", status.message()}});
    return status;
  }
  ++compaction_count_;
  LogInfo("state file compacted",
          {{"file", path_}, {"log_bytes", log_bytes}, {"snapshot_bytes", snapshot_bytes_}, {"fences", maxima_.size()}});
  return Status::Ok();
}

}  // namespace fencing
