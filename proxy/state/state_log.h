#pragma once
// The state file's on-disk format (FORMAT.md beside this file): constants, CRC, record encoding,
// replay, and the small file helpers the store and `state set` share. No state lives here.

#include "common/status.h"
#include "http/rules.h"
#include "state/file_ops.h"
#include "state/state_store.h"

#include <cstddef>
#include <cstdint>
#include <functional>
#include <string>
#include <string_view>

namespace fencing {

// Header: magic, version, masked CRC of the first 12 bytes.
inline constexpr std::string_view kMagic = "FENCELOG";
inline constexpr uint32_t kFormatVersion = 2;       // what this build writes
inline constexpr uint32_t kOldestFormatVersion = 1;  // still read: fences only, no key records
inline constexpr size_t kHeaderSize = 16;
inline constexpr size_t kHeaderCrcOffset = 12;

// Record: masked CRC (type + payload), payload length u16, type u8, payload.
inline constexpr size_t kRecordHeaderSize = 4 + 2 + 1;
inline constexpr uint8_t kRecordTypeSetMax = 1;
inline constexpr uint8_t kRecordTypeKeyMax = 2;     // version 2 only
inline constexpr uint8_t kRecordTypeForgetKey = 3;  // version 2 only
inline constexpr size_t kMaxFenceNameSize = kMaxNameLength;  // the name rule's bound (http/rules.h)
inline constexpr size_t kMaxKeySize = kMaxFenceKeyLength;    // the key rule's bound (http/rules.h)
inline constexpr size_t kSetMaxFixedPayload = 8 + 1;  // token, name length
inline constexpr size_t kMinSetMaxPayload = kSetMaxFixedPayload + 1;
inline constexpr size_t kMaxSetMaxPayload = kSetMaxFixedPayload + kMaxFenceNameSize;
inline constexpr size_t kKeyFixedPayload = kSetMaxFixedPayload + 1;  // + key length
inline constexpr size_t kMinKeyPayload = kKeyFixedPayload + 2;
inline constexpr size_t kMaxKeyPayload = kKeyFixedPayload + kMaxFenceNameSize + kMaxKeySize;
inline constexpr size_t kMinPayload = kMinSetMaxPayload;
inline constexpr size_t kMaxPayload = kMaxKeyPayload;
// The largest record of any type: a shorter damaged remainder can only be a torn tail.
inline constexpr size_t kMaxRecordSize = kRecordHeaderSize + kMaxPayload;
static_assert(kMaxRecordSize == 209);

inline constexpr uint32_t kCrcMaskDelta = 0xa282ead8u;

// CRC-32C (Castagnoli) of data.
uint32_t Crc32c(std::string_view data);
// Masked so that a CRC over data containing CRCs stays strong.
uint32_t MaskCrc(uint32_t crc);
uint32_t UnmaskCrc(uint32_t masked);

// [a-z0-9_-]{1,64}
bool IsValidFenceName(std::string_view name);

// The 16 bytes every state file starts with (version kFormatVersion unless told).
std::string EncodeHeader(uint32_t version = kFormatVersion);
// The version of a header CheckHeader accepted.
uint32_t HeaderVersion(std::string_view file);

enum class HeaderCheck {
  kValid,    // a complete, good header
  kInvalid,  // anything else, an empty file included; *reason says what is wrong and what to do
};
// A file is created whole (CreateStateFile), so a file without a good header is never new.
HeaderCheck CheckHeader(std::string_view file, std::string* reason);

// Why a record may not be written (an invalid name or key, a forget without a key); empty if
// it may.
std::string RecordProblem(const FenceRecord& record);
// Appends one encoded record to *out: SET_MAX (no key), KEY_MAX (a key) or FORGET_KEY. The
// record must be valid (RecordProblem empty).
void EncodeRecord(const FenceRecord& record, std::string* out);
void EncodeKeyRecord(uint8_t type, std::string_view fence, std::string_view key, uint64_t token, std::string* out);
// The size EncodeRecord gives a record for this fence (and key).
inline constexpr size_t EncodedRecordSize(std::string_view fence) {
  return kRecordHeaderSize + kSetMaxFixedPayload + fence.size();
}
inline constexpr size_t EncodedKeyRecordSize(std::string_view fence, std::string_view key) {
  return kRecordHeaderSize + kKeyFixedPayload + fence.size() + key.size();
}
// Bytes of a snapshot's header and fence records, and of its key records.
uint64_t SnapshotFenceBytes(const FenceMaxima& maxima);
uint64_t SnapshotKeyBytes(const FenceKeyMaxima& keys);

struct ReplayResult {
  uint32_t version = kFormatVersion;  // the header's
  FenceMaxima maxima;
  FenceKeyMaxima key_maxima;
  uint64_t records = 0;
  uint64_t valid_end = kHeaderSize;  // file offset just past the last good record
  bool torn_tail = false;            // the bytes from valid_end on are a torn last record
  bool corrupt = false;              // damage at valid_end with a full record or more after it
  std::string reason;                // why the record at valid_end was rejected
};
// Replays the records of a whole file whose header was already checked.
ReplayResult ReplayRecords(std::string_view file);
// Applies one decoded record to the maps, as replay does (FORMAT.md "Replay").
void ApplyRecord(const FenceRecord& record, FenceMaxima* maxima, FenceKeyMaxima* keys);
// Its key part only (nothing for a record without a key).
void ApplyKeyRecord(const FenceRecord& record, FenceKeyMaxima* keys);
// Replays [0, end) of an open file, read in slices of kReplaySliceBytes with pread, into
// *result: the header is checked (an error names path), then the records as ReplayRecords does.
inline constexpr size_t kReplaySliceBytes = 1 << 20;
Status ReplayFile(FileOps& ops, const std::string& path, int fd, uint64_t end, ReplayResult* result);

// Encodes the snapshot of maxima and keys (header, then per fence in name order its SET_MAX and
// its keys' KEY_MAX records), handing it to sink in pieces of about kReplaySliceBytes; stops at
// the first piece the sink refuses (returns false). *key_bytes gets the key records' size.
bool EncodeSnapshot(const FenceMaxima& maxima, const FenceKeyMaxima& keys,
                    const std::function<bool(std::string_view)>& sink, uint64_t* key_bytes = nullptr);

// --- File helpers (through a FileOps; errno-preserving, EINTR handled) ---

// Writes all of data; false with errno set on failure.
bool WriteFully(FileOps& ops, int fd, std::string_view data);
// Makes a directory entry change (create, rename) durable.
Status SyncDirectory(FileOps& ops, const std::string& dir);
// The directory holding path ("." for a bare name).
std::string ParentDirectory(const std::string& path);
// Where a new file or a snapshot of path is written before it is renamed to path.
std::string SnapshotTempPath(const std::string& path);

// Creates path, which must not exist, holding just the header: PATH.tmp opened (a stale one is
// taken over), locked, checked to still be the temp name's inode while path is still absent,
// truncated, written, fdatasync'd, renamed to path, directory fsync'd (FORMAT.md "Creation").
// So path never exists without its whole header.
// On success with *created true, *locked_fd is the new file's open, flock'ed descriptor
// (O_RDWR|O_APPEND), under path. With *created false, nothing was made: path exists now, or
// another creator finished meanwhile; open path instead. A second creator at the same time gets
// an error. On an error the descriptor is closed; if the rename happened (only the directory
// sync failed), path holds a whole file. ops null means the real calls.
Status CreateStateFile(const std::string& path, int* locked_fd, bool* created, FileOps* ops = nullptr);

// Replaces path with a snapshot of maxima: PATH.tmp created, locked, written, fdatasync'd,
// renamed over path, directory fsync'd (FORMAT.md "Snapshot"). Crash-safe: the name always
// holds the old or the new complete file.
// *renamed (if not null) tells whether the new file took the name; a failure after that is the
// directory sync's. Before it, nothing under the name changed and the temp file is removed.
// If locked_fd is not null it receives the new file's open, flock'ed descriptor
// (O_RDWR|O_APPEND) whenever the rename happened, even if the directory sync then failed, so
// the caller can keep the lock on the inode the name now holds; otherwise it is closed.
// ops null means the real calls.
Status WriteSnapshot(const std::string& path, const FenceMaxima& maxima, int* locked_fd,
                     FileOps* ops = nullptr, bool* renamed = nullptr);
// The same with keys (the keys' fences need not be in maxima: they are written with floor 0).
Status WriteSnapshot(const std::string& path, const FenceMaxima& maxima, const FenceKeyMaxima& keys,
                     int* locked_fd, FileOps* ops = nullptr, bool* renamed = nullptr);

// The temp-file steps a snapshot shares with creation and compaction (FORMAT.md "Snapshot" 1-3):
// a stale PATH.tmp removed, a fresh one created O_EXCL and flock'ed. *fd is it; on an error
// nothing is left behind.
Status CreateSnapshotTemp(FileOps& ops, const std::string& path, int* fd);
// Gives up a temp file before it has the real name: closed, removed; the error returned.
Status AbandonSnapshotTemp(FileOps& ops, int fd, const std::string& path, const std::string& what, int err);
// Renames PATH.tmp (fd, already written and synced) over path and fsyncs the directory. Before
// the rename a failure abandons the temp file; *renamed says whether the name changed.
Status InstallSnapshotTemp(FileOps& ops, int fd, const std::string& path, bool* renamed);

}  // namespace fencing
