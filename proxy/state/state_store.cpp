#include "state/state_store.h"

#include "common/log.h"
#include "state/state_log.h"

#include <algorithm>
#include <cerrno>
#include <cstring>

#include <fcntl.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <unistd.h>

namespace fencing {
namespace {

// A snapshot renamed over the file between our open and our flock sends us round again; more
// than a few in a row means something keeps replacing it.
constexpr int kMaxOpenAttempts = 8;

std::string Errno(int err) { return std::strerror(err); }

int OpenRetrying(const char* path, int flags, mode_t mode = 0) {
  int fd;
  do {
    fd = ::open(path, flags, mode);
  } while (fd < 0 && errno == EINTR);
  return fd;
}

// Opens the existing file or, if allowed, creates it. *created tells the caller to write the
// header and make the new name durable.
Status OpenOrCreate(const std::string& path, const OpenOptions& options, int* fd, bool* created) {
  const int open_flags = (options.read_only ? O_RDONLY : O_RDWR | O_APPEND) | O_CLOEXEC;
  *created = false;
  for (;;) {
    *fd = OpenRetrying(path.c_str(), open_flags);
    if (*fd >= 0) return Status::Ok();
    if (errno != ENOENT) return Status::Error(path + ": cannot open state file: " + Errno(errno));
    if (!options.create_if_missing || options.read_only) {
      return Status::Error(path + ": state file does not exist");
    }
    *fd = OpenRetrying(path.c_str(), O_RDWR | O_APPEND | O_CREAT | O_EXCL | O_CLOEXEC, 0644);
    if (*fd >= 0) {
      *created = true;
      return Status::Ok();
    }
    if (errno == EEXIST) continue;  // another process created it first: open theirs
    if (errno == ENOENT) {
      return Status::Error(path + ": directory " + ParentDirectory(path) + " does not exist");
    }
    return Status::Error(path + ": cannot create state file: " + Errno(errno));
  }
}

// Takes the lock, then makes sure the path still names the locked inode.
Status LockCurrentInode(const std::string& path, int fd, bool* replaced) {
  *replaced = false;
  int rc;
  do {
    rc = ::flock(fd, LOCK_EX | LOCK_NB);
  } while (rc != 0 && errno == EINTR);
  if (rc != 0) {
    if (errno == EWOULDBLOCK) {
      return Status::Error(path + " is locked by another process (is another fencing-proxy running on it?)");
    }
    return Status::Error(path + ": cannot lock state file: " + Errno(errno));
  }
  struct stat by_fd {};
  struct stat by_path {};
  if (::fstat(fd, &by_fd) != 0) return Status::Error(path + ": fstat failed: " + Errno(errno));
  if (::stat(path.c_str(), &by_path) != 0) {
    if (errno != ENOENT) return Status::Error(path + ": stat failed: " + Errno(errno));
    *replaced = true;
  } else {
    *replaced = by_fd.st_dev != by_path.st_dev || by_fd.st_ino != by_path.st_ino;
  }
  return Status::Ok();
}

Status ReadWholeFile(const std::string& path, int fd, std::string* data) {
  struct stat st {};
  if (::fstat(fd, &st) != 0) return Status::Error(path + ": fstat failed: " + Errno(errno));
  data->resize(static_cast<size_t>(st.st_size));
  size_t done = 0;
  while (done < data->size()) {
    ssize_t n = ::pread(fd, data->data() + done, data->size() - done, static_cast<off_t>(done));
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

// Writes a fresh header into an empty (or torn-at-creation) file and makes file and name durable.
Status WriteFreshHeader(const std::string& path, int fd) {
  if (::ftruncate(fd, 0) != 0) return Status::Error(path + ": ftruncate failed: " + Errno(errno));
  if (!WriteFully(fd, EncodeHeader())) return Status::Error(path + ": header write failed: " + Errno(errno));
  if (::fdatasync(fd) != 0) return Status::Error(path + ": fdatasync failed: " + Errno(errno));
  return SyncDirectory(ParentDirectory(path));
}

}  // namespace

Status StateStore::Open(const std::string& path, const OpenOptions& options,
                        std::unique_ptr<StateStore>* store) {
  store->reset();
  if (path.empty()) return Status::Error("state file path is empty");
  std::unique_ptr<StateStore> s(new StateStore());
  s->path_ = path;
  s->read_only_ = options.read_only;

  bool created = false;
  for (int attempt = 1;; ++attempt) {
    Status opened = OpenOrCreate(path, options, &s->fd_, &created);
    if (!opened.ok()) return opened;
    if (!options.lock) break;
    bool replaced = false;
    Status locked = LockCurrentInode(path, s->fd_, &replaced);
    if (!locked.ok()) return locked;  // the destructor closes fd_
    if (!replaced) break;
    ::close(s->fd_);
    s->fd_ = -1;
    if (attempt == kMaxOpenAttempts) {
      return Status::Error(path + ": the file kept being replaced while opening it");
    }
  }

  std::string data;
  Status read = ReadWholeFile(path, s->fd_, &data);
  if (!read.ok()) return read;

  std::string reason;
  switch (CheckHeader(data, &reason)) {
    case HeaderCheck::kValid:
      break;
    case HeaderCheck::kInvalid:
      return Status::Error(path + ": " + reason);
    case HeaderCheck::kTornCreation:
      // Only a creation cut short leaves this: nothing was ever acknowledged from this file.
      if (!created) {
        LogWarn("state file has an incomplete header from an interrupted creation; starting empty",
                {{"file", path}, {"bytes", data.size()}, {"rewritten", !options.read_only}});
      }
      if (!options.read_only) {
        Status fresh = WriteFreshHeader(path, s->fd_);
        if (!fresh.ok()) return fresh;
      }
      *store = std::move(s);
      return Status::Ok();
  }

  ReplayResult replay = ReplayRecords(data);
  if (replay.corrupt) {
    return Status::Error(path + ": corrupt record at byte offset " + std::to_string(replay.valid_end) +
                         ": " + replay.reason);
  }
  if (replay.torn_tail) {
    const uint64_t dropped = data.size() - replay.valid_end;
    LogWarn("state file: dropping a torn last record (a crash interrupted an append)",
            {{"file", path},
             {"offset", replay.valid_end},
             {"bytes_dropped", dropped},
             {"reason", replay.reason},
             {"truncated", !options.read_only}});
    if (!options.read_only) {
      if (::ftruncate(s->fd_, static_cast<off_t>(replay.valid_end)) != 0) {
        return Status::Error(path + ": cannot truncate the torn last record: " + Errno(errno));
      }
      if (::fdatasync(s->fd_) != 0) {
        return Status::Error(path + ": fdatasync after truncating the torn last record failed: " +
                             Errno(errno));
      }
    }
    s->torn_tail_bytes_ = dropped;
  }
  s->maxima_ = std::move(replay.maxima);
  *store = std::move(s);
  return Status::Ok();
}

StateStore::~StateStore() {
  if (fd_ >= 0) ::close(fd_);  // also releases the flock
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
  bool ok = WriteFully(fd_, buffer);
  // fdatasync is not retried on any error, EINTR included: its dirty pages may be gone.
  if (ok) {
    step = "fdatasync";
    ok = ::fdatasync(fd_) == 0;
  }
  if (!ok) {
    const int err = errno;
    failed_ = true;
    LogError("state file write failed; no further raises will be accepted until restart",
             {{"file", path_}, {"step", step}, {"error", Errno(err)}, {"records", records.size()}});
    return Status::Error(path_ + ": " + step + " failed: " + Errno(err));
  }
  ++sync_count_;
  for (const FenceRecord& record : records) {
    uint64_t& max = maxima_[record.fence];
    max = std::max(max, record.token);
  }
  return Status::Ok();
}

}  // namespace fencing
