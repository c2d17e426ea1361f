#pragma once
// The durable record of every fence's max_token: an append-only log (format: FORMAT.md beside
// this file), locked with flock(2) for the life of the process, replayed at open, and compacted
// into a snapshot when it has grown well past what the maxima need.

#include "common/status.h"

#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <unordered_map>
#include <vector>

namespace fencing {

class FileOps;
class StateStoreTestPeer;  // tests/unit/state_test.cpp: reaches the fd to inject I/O failures

struct FenceRecord {
  enum class Kind {
    kSetMax,     // key empty: the fence's max (a keyed fence's floor). Else: the key's max.
    kForgetKey,  // the key is dropped and token folded into the fence's floor (FORMAT.md)
  };
  FenceRecord() = default;
  FenceRecord(std::string fence_name, uint64_t max, std::string key_name = {}, Kind record_kind = Kind::kSetMax)
      : fence(std::move(fence_name)), token(max), key(std::move(key_name)), kind(record_kind) {}
  std::string fence;  // [a-z0-9_-]{1,64}
  uint64_t token = 0;
  std::string key;    // empty: the fence itself; else 1-128 bytes of A-Z a-z 0-9 - . _ ~
  Kind kind = Kind::kSetMax;
};

// fence -> its max; for a keyed fence, the floor its unknown keys start at.
using FenceMaxima = std::map<std::string, uint64_t>;
// fence -> (key -> the key's max), for the fences that have keys.
using KeyMaxima = std::unordered_map<std::string, uint64_t>;
using FenceKeyMaxima = std::map<std::string, KeyMaxima, std::less<>>;

// When the log is compacted: both bounds must be passed (FORMAT.md "Compaction").
struct CompactionPolicy {
  uint64_t min_file_bytes = 64 * 1024;  // a small log is never worth rewriting
  uint64_t snapshot_ratio = 4;          // the log must be this many times its snapshot's size
};

struct OpenOptions {
  bool create_if_missing = true;  // the proxy creates; `state show` does not
  bool lock = true;               // flock(LOCK_EX|LOCK_NB); `state show` reads without it
  bool read_only = false;         // `state show`: never truncates a torn tail or writes
  CompactionPolicy compaction{};
  FileOps* file_ops = nullptr;    // every file-system call goes here; null means the real ones
};

class StateStore {
 public:
  // Opens (creating if allowed, whole: CreateStateFile in state_log.h), locks, replays. A
  // writable open of an existing file fsyncs its directory first, in case the process before
  // died between a rename and its directory sync.
  // A torn last record is truncated (unless read_only) and reported through torn_tail_bytes().
  // Damage before the tail, a bad header (an empty or short file included: never taken for a
  // new one), or a lock held by another process: an error that names the file (and, for damage,
  // the byte offset).
  static Status Open(const std::string& path, const OpenOptions& options,
                     std::unique_ptr<StateStore>* store);

  ~StateStore();
  StateStore(const StateStore&) = delete;
  StateStore& operator=(const StateStore&) = delete;

  const std::string& path() const { return path_; }
  const FenceMaxima& maxima() const { return maxima_; }  // as replayed plus every append since
  // maxima(), failed() and the counters are not synchronized: read them before a StateWriter
  // starts or after it is destroyed (StateWriter::failed() is the thread-safe view).
  uint64_t torn_tail_bytes() const { return torn_tail_bytes_; }

  // Appends the records with one write(2) and makes them durable with one fdatasync(2).
  // The first failure is terminal: this and every later call return an error, nothing is
  // retried on the same file (a failed fsync may have dropped the dirty pages).
  Status AppendAndSync(const std::vector<FenceRecord>& records);
  bool failed() const { return failed_; }
  // Successful fdatasyncs by AppendAndSync (group-commit tests and diagnostics).
  uint64_t sync_count() const { return sync_count_; }

  // True when the log has passed the compaction policy's bounds (and no failed compaction asks
  // to wait for more growth). Only a locked, writable, healthy store compacts.
  bool CompactionDue() const;
  // Rewrites the file as a snapshot of maxima() and appends to the snapshot from then on
  // (FORMAT.md "Compaction"). A failure before the snapshot takes the name is not terminal: the
  // log is kept and the next try waits until it has grown by min_file_bytes more. A failure
  // after it (the directory sync) is terminal, like a failed append.
  Status Compact();
  // Completed compactions (the snapshot under the name and the directory synced).
  uint64_t compaction_count() const { return compaction_count_; }
  // The log's size as this store wrote it; and what a snapshot of maxima() would take.
  uint64_t file_bytes() const { return file_bytes_; }
  uint64_t snapshot_bytes() const { return snapshot_bytes_; }

 private:
  friend class StateStoreTestPeer;
  StateStore() = default;
  void NoteMaximum(const std::string& fence, uint64_t token);

  std::string path_;
  FileOps* ops_ = nullptr;
  CompactionPolicy policy_;
  int fd_ = -1;
  FenceMaxima maxima_;
  uint64_t torn_tail_bytes_ = 0;
  bool failed_ = false;
  bool read_only_ = false;
  bool locked_ = false;
  uint64_t sync_count_ = 0;
  uint64_t compaction_count_ = 0;
  uint64_t file_bytes_ = 0;
  uint64_t snapshot_bytes_ = 0;
  uint64_t compaction_retry_at_ = 0;  // after a failed compaction: the size to grow to first
};

}  // namespace fencing
