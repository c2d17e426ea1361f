#include "state/state_log.h"

#include <boost/crc.hpp>

#include <algorithm>
#include <cerrno>
#include <cstring>

#include <fcntl.h>
#include <sys/file.h>
#include <sys/stat.h>

namespace fencing {
namespace {

using Crc32cComputer = boost::crc_optimal<32, 0x1EDC6F41, 0xFFFFFFFF, 0xFFFFFFFF, true, true>;

void PutU16(std::string* out, uint16_t v) {
  out->push_back(static_cast<char>(v & 0xff));
  out->push_back(static_cast<char>(v >> 8));
}

void PutU32(std::string* out, uint32_t v) {
  for (int i = 0; i < 4; ++i) out->push_back(static_cast<char>((v >> (8 * i)) & 0xff));
}

void PutU64(std::string* out, uint64_t v) {
  for (int i = 0; i < 8; ++i) out->push_back(static_cast<char>((v >> (8 * i)) & 0xff));
}

uint16_t GetU16(const char* p) {
  return static_cast<uint16_t>(static_cast<uint8_t>(p[0]) | (static_cast<uint8_t>(p[1]) << 8));
}

uint32_t GetU32(const char* p) {
  uint32_t v = 0;
  for (int i = 3; i >= 0; --i) v = (v << 8) | static_cast<uint8_t>(p[i]);
  return v;
}

uint64_t GetU64(const char* p) {
  uint64_t v = 0;
  for (int i = 7; i >= 0; --i) v = (v << 8) | static_cast<uint8_t>(p[i]);
  return v;
}

// Decodes the record at the start of data into *record and its size into *size; on failure,
// *reason says what is wrong with it (the caller decides torn tail or corruption).
bool DecodeRecord(std::string_view data, FenceRecord* record, size_t* size, std::string* reason) {
  if (data.size() < kRecordHeaderSize) {
    *reason = "incomplete record header (" + std::to_string(data.size()) + " of " +
              std::to_string(kRecordHeaderSize) + " bytes)";
    return false;
  }
  const uint32_t stored_crc = GetU32(data.data());
  const size_t length = GetU16(data.data() + 4);
  const uint8_t type = static_cast<uint8_t>(data[6]);
  // Checked before the CRC so that a damaged length never makes us read past a record's bound.
  if (length < kMinSetMaxPayload || length > kMaxSetMaxPayload) {
    *reason = "payload length " + std::to_string(length) + " out of range " +
              std::to_string(kMinSetMaxPayload) + ".." + std::to_string(kMaxSetMaxPayload);
    return false;
  }
  if (data.size() < kRecordHeaderSize + length) {
    *reason = "incomplete record (" + std::to_string(data.size()) + " of " +
              std::to_string(kRecordHeaderSize + length) + " bytes)";
    return false;
  }
  const std::string_view covered = data.substr(6, 1 + length);  // type + payload
  if (UnmaskCrc(stored_crc) != Crc32c(covered)) {
    *reason = "checksum mismatch";
    return false;
  }
  if (type != kRecordTypeSetMax) {
    *reason = "unknown record type " + std::to_string(type);
    return false;
  }
  const char* payload = data.data() + kRecordHeaderSize;
  const size_t name_size = static_cast<uint8_t>(payload[8]);
  if (name_size + kSetMaxFixedPayload != length) {
    *reason = "name length " + std::to_string(name_size) + " does not match payload length " +
              std::to_string(length);
    return false;
  }
  std::string_view name(payload + kSetMaxFixedPayload, name_size);
  if (!IsValidFenceName(name)) {
    *reason = "invalid fence name";
    return false;
  }
  record->token = GetU64(payload);
  record->fence.assign(name);
  *size = kRecordHeaderSize + length;
  return true;
}

}  // namespace

uint32_t Crc32c(std::string_view data) {
  Crc32cComputer crc;
  crc.process_bytes(data.data(), data.size());
  return crc.checksum();
}

uint32_t MaskCrc(uint32_t crc) { return ((crc >> 15) | (crc << 17)) + kCrcMaskDelta; }

uint32_t UnmaskCrc(uint32_t masked) {
  const uint32_t rotated = masked - kCrcMaskDelta;
  return (rotated >> 17) | (rotated << 15);
}

bool IsValidFenceName(std::string_view name) { return IsValidName(name); }

std::string EncodeHeader() {
  std::string header(kMagic);
  PutU32(&header, kFormatVersion);
  PutU32(&header, MaskCrc(Crc32c(header)));
  return header;
}

HeaderCheck CheckHeader(std::string_view file, std::string* reason) {
  // No crash can leave a file under its real name without its whole header (it is created under
  // a temporary name and renamed), so this is never a new file: starting empty would forget
  // every fence's max token. The operator decides.
  const std::string advice =
      "a state file is created whole (written under a temporary name, synced, then renamed), so "
      "this is damage, not a new file: restore it from a backup, or remove it deliberately to "
      "start every fence from 0, which loses the fences' max tokens (see Repair in "
      "docs/operations.md)";
  if (file.empty()) {
    *reason = "state file is empty (0 bytes); " + advice;
    return HeaderCheck::kInvalid;
  }
  if (file.size() < kHeaderSize) {
    *reason = "state file is " + std::to_string(file.size()) + " bytes, shorter than the " +
              std::to_string(kHeaderSize) + "-byte header; " + advice;
    return HeaderCheck::kInvalid;
  }
  if (file.substr(0, kMagic.size()) != kMagic) {
    *reason = "not a fencing-proxy state file (bad magic): check that state_file names the right "
              "file; if it does, " + advice;
    return HeaderCheck::kInvalid;
  }
  // Version before CRC: a later version may lay its header out differently.
  const uint32_t version = GetU32(file.data() + kMagic.size());
  if (version != kFormatVersion) {
    *reason = "unsupported format version " + std::to_string(version) + " (this build reads version " +
              std::to_string(kFormatVersion) + ")";
    return HeaderCheck::kInvalid;
  }
  if (UnmaskCrc(GetU32(file.data() + kHeaderCrcOffset)) != Crc32c(file.substr(0, kHeaderCrcOffset))) {
    *reason = "header checksum mismatch; " + advice;
    return HeaderCheck::kInvalid;
  }
  return HeaderCheck::kValid;
}

void EncodeRecord(const FenceRecord& record, std::string* out) {
  std::string body;  // type + payload: what the CRC covers
  body.push_back(static_cast<char>(kRecordTypeSetMax));
  PutU64(&body, record.token);
  body.push_back(static_cast<char>(record.fence.size()));
  body.append(record.fence);
  PutU32(out, MaskCrc(Crc32c(body)));
  PutU16(out, static_cast<uint16_t>(body.size() - 1));
  out->append(body);
}

ReplayResult ReplayRecords(std::string_view file) {
  ReplayResult result;
  size_t offset = kHeaderSize;
  while (offset < file.size()) {
    FenceRecord record;
    size_t size = 0;
    if (!DecodeRecord(file.substr(offset), &record, &size, &result.reason)) {
      // One interrupted append leaves less than one maximal record behind; more is damage.
      if (file.size() - offset < kMaxRecordSize) {
        result.torn_tail = true;
      } else {
        result.corrupt = true;
      }
      break;
    }
    uint64_t& max = result.maxima[record.fence];
    max = std::max(max, record.token);
    ++result.records;
    offset += size;
    result.valid_end = offset;
  }
  return result;
}

bool WriteFully(FileOps& ops, int fd, std::string_view data) {
  while (!data.empty()) {
    ssize_t n = ops.Write(fd, data.data(), data.size());
    if (n < 0) {
      if (errno == EINTR) continue;
      return false;
    }
    if (n == 0) {  // no progress and no error: do not spin
      errno = EIO;
      return false;
    }
    data.remove_prefix(static_cast<size_t>(n));
  }
  return true;
}

std::string ParentDirectory(const std::string& path) {
  const size_t slash = path.find_last_of('/');
  if (slash == std::string::npos) return ".";
  if (slash == 0) return "/";
  return path.substr(0, slash);
}

std::string SnapshotTempPath(const std::string& path) { return path + ".tmp"; }

Status SyncDirectory(FileOps& ops, const std::string& dir) {
  // Not retried on EINTR: like fdatasync, a failed fsync may have lost what it was to write.
  if (ops.SyncDirectory(dir) != 0) {
    return Status::Error(dir + ": fsync of directory failed: " + std::strerror(errno));
  }
  return Status::Ok();
}

namespace {

int OpenRetrying(FileOps& fs, const std::string& path, int flags, mode_t mode) {
  int fd;
  do {
    fd = fs.Open(path, flags, mode);
  } while (fd < 0 && errno == EINTR);
  return fd;
}

int FlockRetrying(FileOps& fs, int fd) {
  int rc;
  do {
    rc = fs.Flock(fd, LOCK_EX | LOCK_NB);
  } while (rc != 0 && errno == EINTR);
  return rc;
}

// Gives up a temp file before it has the real name: closed, removed, the error returned.
Status AbandonTemp(FileOps& fs, int fd, const std::string& tmp, const std::string& what, int err) {
  fs.Close(fd);
  fs.Unlink(tmp);
  return Status::Error(tmp + ": " + what + ": " + std::strerror(err));
}

// The steps a creation and a snapshot share (FORMAT.md "Creation" 6-9, "Snapshot" 4-7): fd is
// the locked, empty temp file under tmp; data is written, fdatasync'd, renamed to path and the
// directory fsync'd. Before the rename a failure abandons the temp file (fd closed); from the
// rename on, *renamed is true and fd stays open: the name holds its inode.
Status InstallTempFile(FileOps& fs, int fd, const std::string& tmp, const std::string& path,
                       std::string_view data, bool* renamed) {
  *renamed = false;
  if (!WriteFully(fs, fd, data)) return AbandonTemp(fs, fd, tmp, "write failed", errno);
  // A failed sync is not retried: this temp file is given up and a later try starts afresh.
  if (fs.Fdatasync(fd) != 0) return AbandonTemp(fs, fd, tmp, "fdatasync failed", errno);
  if (fs.Rename(tmp, path) != 0) return AbandonTemp(fs, fd, tmp, "cannot rename to " + path, errno);
  *renamed = true;
  return SyncDirectory(fs, ParentDirectory(path));
}

}  // namespace

Status WriteSnapshot(const std::string& path, const FenceMaxima& maxima, int* locked_fd, FileOps* ops,
                     bool* renamed) {
  FileOps& fs = ops != nullptr ? *ops : *DefaultFileOps();
  if (renamed != nullptr) *renamed = false;
  const std::string tmp = SnapshotTempPath(path);
  std::string data = EncodeHeader();
  for (const auto& [fence, token] : maxima) {
    if (!IsValidFenceName(fence)) return Status::Error(path + ": invalid fence name \"" + fence + "\"");
    EncodeRecord(FenceRecord{fence, token}, &data);
  }

  // A leftover from a crashed snapshot is garbage; O_EXCL then guarantees a fresh inode. Only
  // the holder of path's lock snapshots, so no other process is using this temp name.
  if (fs.Unlink(tmp) != 0 && errno != ENOENT) {
    return Status::Error(tmp + ": cannot remove stale snapshot: " + std::strerror(errno));
  }
  const int fd = OpenRetrying(fs, tmp, O_RDWR | O_APPEND | O_CREAT | O_EXCL | O_CLOEXEC, 0644);
  if (fd < 0) return Status::Error(tmp + ": cannot create snapshot: " + std::strerror(errno));
  // Locked before it gets the real name, so no other process can take the new file's lock.
  if (fs.Flock(fd, LOCK_EX | LOCK_NB) != 0) return AbandonTemp(fs, fd, tmp, "cannot lock snapshot", errno);

  bool moved = false;
  Status status = InstallTempFile(fs, fd, tmp, path, data, &moved);
  if (renamed != nullptr) *renamed = moved;
  if (!moved) return status;
  if (locked_fd != nullptr) {
    *locked_fd = fd;  // even after a failed directory sync: the name holds this inode now
  } else {
    fs.Close(fd);
  }
  return status;
}

Status CreateStateFile(const std::string& path, int* locked_fd, bool* created, FileOps* ops) {
  FileOps& fs = ops != nullptr ? *ops : *DefaultFileOps();
  *locked_fd = -1;
  *created = false;
  const std::string tmp = SnapshotTempPath(path);

  // Not O_EXCL: what an interrupted creation left is taken over. The temp file's lock is what
  // keeps two creators apart; path does not exist, so nobody holds a lock on it.
  const int fd = OpenRetrying(fs, tmp, O_RDWR | O_APPEND | O_CREAT | O_CLOEXEC, 0644);
  if (fd < 0) {
    if (errno == ENOENT) return Status::Error(path + ": directory " + ParentDirectory(path) + " does not exist");
    return Status::Error(tmp + ": cannot create state file: " + std::strerror(errno));
  }
  auto give_up = [&](Status status) {
    fs.Close(fd);
    return status;
  };
  if (FlockRetrying(fs, fd) != 0) {
    if (errno == EWOULDBLOCK) {
      return give_up(Status::Error(path + " is being created by another process (is another fencing-proxy "
                                          "starting on it?)"));
    }
    return give_up(Status::Error(tmp + ": cannot lock: " + std::strerror(errno)));
  }
  // A creator that finished between our open and our flock renamed this inode to path: then the
  // temp name holds another inode or none, or path exists. Either way, open path instead. A
  // creation that backs out leaves the temp name alone: it may already be someone else's.
  struct stat by_fd {};
  struct stat by_name {};
  struct stat target {};
  if (fs.Fstat(fd, &by_fd) != 0) return give_up(Status::Error(tmp + ": fstat failed: " + std::strerror(errno)));
  if (fs.Stat(tmp, &by_name) != 0) {
    if (errno == ENOENT) return give_up(Status::Ok());
    return give_up(Status::Error(tmp + ": stat failed: " + std::strerror(errno)));
  }
  if (by_fd.st_dev != by_name.st_dev || by_fd.st_ino != by_name.st_ino) return give_up(Status::Ok());
  if (fs.Stat(path, &target) == 0) return give_up(Status::Ok());
  if (errno != ENOENT) return give_up(Status::Error(path + ": stat failed: " + std::strerror(errno)));

  if (fs.Ftruncate(fd, 0) != 0) return AbandonTemp(fs, fd, tmp, "ftruncate failed", errno);
  bool renamed = false;
  Status status = InstallTempFile(fs, fd, tmp, path, EncodeHeader(), &renamed);
  if (!renamed) return status;
  if (!status.ok()) return give_up(status);  // path holds a whole file; the next open syncs its directory
  *locked_fd = fd;
  *created = true;
  return Status::Ok();
}

}  // namespace fencing
