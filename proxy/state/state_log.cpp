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
// *reason says what is wrong with it (the caller decides torn tail or corruption). Key records
// are only valid in a version-2 file.
bool DecodeRecord(std::string_view data, uint32_t version, FenceRecord* record, size_t* size, std::string* reason) {
  if (data.size() < kRecordHeaderSize) {
    *reason = "incomplete record header (" + std::to_string(data.size()) + " of " +
              std::to_string(kRecordHeaderSize) + " bytes)";
    return false;
  }
  const uint32_t stored_crc = GetU32(data.data());
  const size_t length = GetU16(data.data() + 4);
  const uint8_t type = static_cast<uint8_t>(data[6]);
  // Checked before the CRC so that a damaged length never makes us read past a record's bound.
  if (length < kMinPayload || length > kMaxPayload) {
    *reason = "payload length " + std::to_string(length) + " out of range " + std::to_string(kMinPayload) +
              ".." + std::to_string(kMaxPayload);
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
  const bool keyed = type == kRecordTypeKeyMax || type == kRecordTypeForgetKey;
  if (type != kRecordTypeSetMax && !keyed) {
    *reason = "unknown record type " + std::to_string(type);
    return false;
  }
  if (keyed && version < 2) {
    *reason = "record type " + std::to_string(type) + " in a version-" + std::to_string(version) + " file";
    return false;
  }
  const char* payload = data.data() + kRecordHeaderSize;
  const size_t name_size = static_cast<uint8_t>(payload[8]);
  size_t key_size = 0;
  if (keyed) {
    if (kKeyFixedPayload + name_size > length) {
      *reason = "name length " + std::to_string(name_size) + " does not fit payload length " + std::to_string(length);
      return false;
    }
    key_size = static_cast<uint8_t>(payload[kSetMaxFixedPayload + name_size]);
    if (kKeyFixedPayload + name_size + key_size != length) {
      *reason = "name length " + std::to_string(name_size) + " and key length " + std::to_string(key_size) +
                " do not match payload length " + std::to_string(length);
      return false;
    }
  } else if (name_size + kSetMaxFixedPayload != length) {
    *reason = "name length " + std::to_string(name_size) + " does not match payload length " +
              std::to_string(length);
    return false;
  }
  std::string_view name(payload + kSetMaxFixedPayload, name_size);
  if (!IsValidFenceName(name)) {
    *reason = "invalid fence name";
    return false;
  }
  std::string_view key;
  if (keyed) {
    key = std::string_view(payload + kKeyFixedPayload + name_size, key_size);
    if (!IsValidFenceKey(key)) {
      *reason = "invalid fence key";
      return false;
    }
  }
  record->token = GetU64(payload);
  record->fence.assign(name);
  record->key.assign(key);
  record->kind = type == kRecordTypeForgetKey ? FenceRecord::Kind::kForgetKey : FenceRecord::Kind::kSetMax;
  *size = kRecordHeaderSize + length;
  return true;
}

// Encodes type + payload at the end of *out behind a record header, CRC computed in place.
void EncodeBody(uint8_t type, std::string_view fence, std::string_view key, bool keyed, uint64_t token,
                std::string* out) {
  const size_t start = out->size();
  out->append(kRecordHeaderSize - 1, '\0');  // CRC and length, filled in below
  out->push_back(static_cast<char>(type));
  PutU64(out, token);
  out->push_back(static_cast<char>(fence.size()));
  out->append(fence);
  if (keyed) {
    out->push_back(static_cast<char>(key.size()));
    out->append(key);
  }
  const size_t length = out->size() - start - kRecordHeaderSize;
  const uint32_t crc = MaskCrc(Crc32c(std::string_view(*out).substr(start + 6)));
  for (int i = 0; i < 4; ++i) (*out)[start + i] = static_cast<char>((crc >> (8 * i)) & 0xff);
  (*out)[start + 4] = static_cast<char>(length & 0xff);
  (*out)[start + 5] = static_cast<char>(length >> 8);
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

std::string EncodeHeader(uint32_t version) {
  std::string header(kMagic);
  PutU32(&header, version);
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
  if (version < kOldestFormatVersion || version > kFormatVersion) {
    *reason = "unsupported format version " + std::to_string(version) + " (this build reads versions " +
              std::to_string(kOldestFormatVersion) + " to " + std::to_string(kFormatVersion) + ")";
    return HeaderCheck::kInvalid;
  }
  if (UnmaskCrc(GetU32(file.data() + kHeaderCrcOffset)) != Crc32c(file.substr(0, kHeaderCrcOffset))) {
    *reason = "header checksum mismatch; " + advice;
    return HeaderCheck::kInvalid;
  }
  return HeaderCheck::kValid;
}

uint32_t HeaderVersion(std::string_view file) { return GetU32(file.data() + kMagic.size()); }

std::string RecordProblem(const FenceRecord& record) {
  if (!IsValidFenceName(record.fence)) return "invalid fence name \"" + record.fence + "\"";
  if (!record.key.empty() && !IsValidFenceKey(record.key)) {
    return "invalid fence key \"" + record.key + "\" (1 to " + std::to_string(kMaxKeySize) +
           " characters of A-Z, a-z, 0-9, '-', '.', '_' and '~')";
  }
  if (record.kind == FenceRecord::Kind::kForgetKey && record.key.empty()) {
    return "a forget record for fence \"" + record.fence + "\" without a key";
  }
  return {};
}

void EncodeRecord(const FenceRecord& record, std::string* out) {
  if (record.kind == FenceRecord::Kind::kForgetKey) {
    EncodeKeyRecord(kRecordTypeForgetKey, record.fence, record.key, record.token, out);
  } else if (!record.key.empty()) {
    EncodeKeyRecord(kRecordTypeKeyMax, record.fence, record.key, record.token, out);
  } else {
    EncodeBody(kRecordTypeSetMax, record.fence, {}, false, record.token, out);
  }
}

void EncodeKeyRecord(uint8_t type, std::string_view fence, std::string_view key, uint64_t token, std::string* out) {
  EncodeBody(type, fence, key, true, token, out);
}

uint64_t SnapshotFenceBytes(const FenceMaxima& maxima) {
  uint64_t bytes = kHeaderSize;
  for (const auto& entry : maxima) bytes += EncodedRecordSize(entry.first);
  return bytes;
}

uint64_t SnapshotKeyBytes(const FenceKeyMaxima& keys) {
  uint64_t bytes = 0;
  for (const auto& [fence, fence_keys] : keys) {
    for (const auto& entry : fence_keys) bytes += EncodedKeyRecordSize(fence, entry.first);
  }
  return bytes;
}

void ApplyRecord(const FenceRecord& record, FenceMaxima* maxima, FenceKeyMaxima* keys) {
  uint64_t& fence_max = (*maxima)[record.fence];  // a key record makes its fence exist (floor 0)
  // A fence's own max and a forget's fold into the floor.
  if (record.key.empty() || record.kind == FenceRecord::Kind::kForgetKey) fence_max = std::max(fence_max, record.token);
  ApplyKeyRecord(record, keys);
}

void ApplyKeyRecord(const FenceRecord& record, FenceKeyMaxima* keys) {
  if (record.key.empty()) return;
  auto it = keys->find(record.fence);
  if (record.kind == FenceRecord::Kind::kForgetKey) {
    if (it != keys->end()) {
      it->second.erase(record.key);
      if (it->second.empty()) keys->erase(it);
    }
    return;
  }
  if (it == keys->end()) it = keys->try_emplace(record.fence).first;
  auto [key_it, inserted] = it->second.try_emplace(record.key, record.token);
  if (!inserted) key_it->second = std::max(key_it->second, record.token);
}

namespace {

// Replays the records in data, which starts at file offset `offset` of a file of file_size
// bytes, stopping at a record that needs bytes beyond data (when data does not reach the end)
// or that fails (torn tail or corruption, decided as FORMAT.md "Recovery" says). Returns the
// offset replay got to.
uint64_t ReplaySlice(std::string_view data, uint64_t offset, uint64_t file_size, ReplayResult* result) {
  const uint64_t data_end = offset + data.size();
  size_t pos = 0;
  FenceRecord record;
  while (pos < data.size()) {
    const uint64_t at = offset + pos;
    // A record never exceeds kMaxRecordSize: with that much (or the rest of the file) in hand,
    // a failure is final; with less, read on first.
    if (data_end < file_size && data.size() - pos < kMaxRecordSize) break;
    size_t size = 0;
    if (!DecodeRecord(data.substr(pos), result->version, &record, &size, &result->reason)) {
      // One interrupted append leaves less than one maximal record behind; more is damage.
      if (file_size - at < kMaxRecordSize) {
        result->torn_tail = true;
      } else {
        result->corrupt = true;
      }
      return at;
    }
    ApplyRecord(record, &result->maxima, &result->key_maxima);
    ++result->records;
    pos += size;
    result->valid_end = offset + pos;
  }
  return offset + pos;
}

}  // namespace

ReplayResult ReplayRecords(std::string_view file) {
  ReplayResult result;
  if (file.size() >= kHeaderSize) result.version = HeaderVersion(file);
  if (file.size() > kHeaderSize) ReplaySlice(file.substr(kHeaderSize), kHeaderSize, file.size(), &result);
  return result;
}

Status ReplayFile(FileOps& ops, const std::string& path, int fd, uint64_t end, ReplayResult* result) {
  *result = ReplayResult{};
  std::string buffer;
  uint64_t buffer_offset = 0;  // file offset of buffer[0]
  uint64_t read_to = 0;        // file offset read so far
  bool header_checked = false;
  while (!header_checked || (result->valid_end < end && !result->torn_tail && !result->corrupt)) {
    // Keep what the last slice left undecoded, then read the next slice after it.
    const uint64_t want = std::min<uint64_t>(kReplaySliceBytes, end - read_to);
    const size_t kept = buffer.size();
    buffer.resize(kept + want);
    size_t got = 0;
    while (got < want) {
      const ssize_t n = ops.Pread(fd, buffer.data() + kept + got, want - got, static_cast<off_t>(read_to + got));
      if (n < 0) {
        if (errno == EINTR) continue;
        return Status::Error(path + ": read failed: " + std::strerror(errno));
      }
      if (n == 0) break;
      got += static_cast<size_t>(n);
    }
    buffer.resize(kept + got);
    read_to += got;
    if (got < want) end = read_to;  // shrank under us: replay what is there
    if (!header_checked) {
      std::string reason;
      if (CheckHeader(buffer, &reason) != HeaderCheck::kValid) return Status::Error(path + ": " + reason);
      result->version = HeaderVersion(buffer);
      header_checked = true;
      buffer_offset = kHeaderSize;
      buffer.erase(0, kHeaderSize);
    }
    const uint64_t reached = ReplaySlice(buffer, buffer_offset, end, result);
    if (result->torn_tail || result->corrupt || read_to >= end) break;
    buffer.erase(0, static_cast<size_t>(reached - buffer_offset));
    buffer_offset = reached;
  }
  return Status::Ok();
}

bool EncodeSnapshot(const FenceMaxima& maxima, const FenceKeyMaxima& keys,
                    const std::function<bool(std::string_view)>& sink, uint64_t* key_bytes) {
  std::string out = EncodeHeader();
  uint64_t keyed = 0;
  auto flush_if_full = [&](bool last) {
    if (out.size() < kReplaySliceBytes && !last) return true;
    if (!out.empty() && !sink(out)) return false;
    out.clear();
    return true;
  };
  // Fences in name order: those in maxima, and any that only the key map names (floor 0).
  auto key_it = keys.begin();
  auto write_keys = [&](const std::string& fence, const KeyMaxima& fence_keys) {
    for (const auto& [key, token] : fence_keys) {
      const size_t before = out.size();
      EncodeKeyRecord(kRecordTypeKeyMax, fence, key, token, &out);
      keyed += out.size() - before;
      if (!flush_if_full(false)) return false;
    }
    return true;
  };
  for (const auto& [fence, token] : maxima) {
    for (; key_it != keys.end() && key_it->first < fence; ++key_it) {
      EncodeBody(kRecordTypeSetMax, key_it->first, {}, false, 0, &out);
      if (!write_keys(key_it->first, key_it->second)) return false;
    }
    EncodeBody(kRecordTypeSetMax, fence, {}, false, token, &out);
    if (key_it != keys.end() && key_it->first == fence) {
      if (!write_keys(fence, key_it->second)) return false;
      ++key_it;
    }
    if (!flush_if_full(false)) return false;
  }
  for (; key_it != keys.end(); ++key_it) {
    EncodeBody(kRecordTypeSetMax, key_it->first, {}, false, 0, &out);
    if (!write_keys(key_it->first, key_it->second)) return false;
  }
  if (key_bytes != nullptr) *key_bytes = keyed;
  return flush_if_full(true);
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

Status AbandonSnapshotTemp(FileOps& ops, int fd, const std::string& path, const std::string& what, int err) {
  return AbandonTemp(ops, fd, SnapshotTempPath(path), what, err);
}

Status CreateSnapshotTemp(FileOps& fs, const std::string& path, int* fd) {
  *fd = -1;
  const std::string tmp = SnapshotTempPath(path);
  // A leftover from a crashed snapshot is garbage; O_EXCL then guarantees a fresh inode. Only
  // the holder of path's lock snapshots, so no other process is using this temp name.
  if (fs.Unlink(tmp) != 0 && errno != ENOENT) {
    return Status::Error(tmp + ": cannot remove stale snapshot: " + std::strerror(errno));
  }
  const int created = OpenRetrying(fs, tmp, O_RDWR | O_APPEND | O_CREAT | O_EXCL | O_CLOEXEC, 0644);
  if (created < 0) return Status::Error(tmp + ": cannot create snapshot: " + std::strerror(errno));
  // Locked before it gets the real name, so no other process can take the new file's lock.
  if (fs.Flock(created, LOCK_EX | LOCK_NB) != 0) return AbandonTemp(fs, created, tmp, "cannot lock snapshot", errno);
  *fd = created;
  return Status::Ok();
}

Status InstallSnapshotTemp(FileOps& fs, int fd, const std::string& path, bool* renamed) {
  *renamed = false;
  const std::string tmp = SnapshotTempPath(path);
  if (fs.Rename(tmp, path) != 0) return AbandonTemp(fs, fd, tmp, "cannot rename to " + path, errno);
  *renamed = true;
  return SyncDirectory(fs, ParentDirectory(path));
}

Status WriteSnapshot(const std::string& path, const FenceMaxima& maxima, int* locked_fd, FileOps* ops,
                     bool* renamed) {
  return WriteSnapshot(path, maxima, FenceKeyMaxima{}, locked_fd, ops, renamed);
}

Status WriteSnapshot(const std::string& path, const FenceMaxima& maxima, const FenceKeyMaxima& keys,
                     int* locked_fd, FileOps* ops, bool* renamed) {
  FileOps& fs = ops != nullptr ? *ops : *DefaultFileOps();
  if (renamed != nullptr) *renamed = false;
  const std::string tmp = SnapshotTempPath(path);
  // Every name and key checked before the disk is touched.
  for (const auto& entry : maxima) {
    if (!IsValidFenceName(entry.first)) return Status::Error(path + ": invalid fence name \"" + entry.first + "\"");
  }
  for (const auto& [fence, fence_keys] : keys) {
    if (!IsValidFenceName(fence)) return Status::Error(path + ": invalid fence name \"" + fence + "\"");
    for (const auto& entry : fence_keys) {
      if (!IsValidFenceKey(entry.first)) return Status::Error(path + ": invalid fence key \"" + entry.first + "\"");
    }
  }

  int fd = -1;
  Status created = CreateSnapshotTemp(fs, path, &fd);
  if (!created.ok()) return created;
  int write_errno = 0;
  const bool written = EncodeSnapshot(maxima, keys, [&](std::string_view piece) {
    if (WriteFully(fs, fd, piece)) return true;
    write_errno = errno;
    return false;
  });
  if (!written) return AbandonTemp(fs, fd, tmp, "write failed", write_errno);
  // A failed sync is not retried: this temp file is given up and a later try starts afresh.
  if (fs.Fdatasync(fd) != 0) return AbandonTemp(fs, fd, tmp, "fdatasync failed", errno);
  bool moved = false;
  Status status = InstallSnapshotTemp(fs, fd, path, &moved);
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
