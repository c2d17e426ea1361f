#pragma once
// The durable record of every fence's max_token: an append-only log (format: FORMAT.md beside
// this file), locked with flock(2) for the life of the process, replayed at open, and compacted
// into a snapshot when it has grown well past what the maxima need.

#include "common/status.h"

#include <boost/unordered/unordered_flat_map.hpp>

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
// fence -> (key -> the key's max), for the fences that have keys. A flat map: at a million
// keys of 16 bytes it saves the node allocation and the bucket array of std::unordered_map
// (about 40 bytes per key).
using KeyMaxima = boost::unordered_flat_map<std::string, uint64_t>;
using FenceKeyMaxima = std::map<std::string, KeyMaxima, std::less<>>;

// When the log is compacted: both bounds must be passed (FORMAT.md "Compaction").
struct CompactionPolicy {
  uint64_t min_file_bytes = 64 * 1024;  // a small log is never worth rewriting
  uint64_t snapshot_ratio = 4;          // the log must be this many times its snapshot's size
  // A log at least this large is snapshotted on a background thread (StateWriter); a smaller
  // one inline on the writer thread, where it costs about what the hand-over would.
  uint64_t background_min_bytes = 256 * 1024;
};

// A compaction in progress (FORMAT.md "Compaction"): made by StateStore::StartCompaction on the
// writer thread, its background part run by StateStore::RunCompaction on any one thread, then
// handed over by StateStore::FinishCompaction on the writer thread.
class CompactionJob {
 public:
  bool background() const { return background_; }  // the policy's choice for this log's size
  const Status& status() const { return status_; }   // of the background part, once run

 private:
  friend class StateStore;
  std::string path_;
  FileOps* ops_ = nullptr;
  int log_fd_ = -1;          // the live log: only pread, below prefix_end_, which never changes
  uint64_t prefix_end_ = 0;  // O: the log's end when the compaction started
  bool background_ = false;
  Status status_ = Status::Ok();
  int tmp_fd_ = -1;          // PATH.tmp, written and synced, once the background part succeeded
  uint64_t written_ = 0;     // the snapshot's bytes
  uint64_t key_bytes_ = 0;   // of which key records
  uint64_t keys_ = 0;
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
  // fence -> key -> max, as replayed plus every append since, until TakeKeyMaxima() moves them
  // out: from then on the store keeps no per-key state (the registry holds the only copy).
  const FenceKeyMaxima& key_maxima() const { return key_maxima_; }
  FenceKeyMaxima TakeKeyMaxima();
  // The header version of the file as opened (a writable, locked open upgrades 1 to 2).
  uint32_t format_version() const { return version_; }
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
  // Rewrites the file as a snapshot of its state and appends to the snapshot from then on
  // (FORMAT.md "Compaction"), all on the caller's thread. A failure before the snapshot takes
  // the name is not terminal: the log is kept and the next try waits until it has grown by
  // max(min_file_bytes, snapshot_bytes()) more. A failure after it (the directory sync) is
  // terminal, like a failed append.
  Status Compact();
  // The same in three steps, so that the bulk can run off the writer thread. StartCompaction
  // (writer thread) gives null when this store may not compact or one is in flight.
  // RunCompaction (any one thread, while the writer goes on appending) replays the log's prefix
  // and writes and syncs the snapshot temp file; it touches nothing of the store. FinishCompaction
  // (writer thread, between appends) copies what was appended meanwhile, syncs, renames, syncs
  // the directory and switches to the new file; *stall_seconds (if not null) gets its duration.
  // The replaced log's descriptor is closed there, unless replaced_fd is given: then, once the
  // snapshot took the name, *replaced_fd gets it (else -1) and the caller closes it later with
  // CloseReplaced, on any thread. Closing the last descriptor of a large unlinked file frees its
  // blocks in the kernel (tens of ms for a 185 MB log), which the writer must not wait for.
  // The store must outlive the job's background part.
  std::unique_ptr<CompactionJob> StartCompaction();
  static void RunCompaction(CompactionJob& job);
  Status FinishCompaction(std::unique_ptr<CompactionJob> job, double* stall_seconds = nullptr,
                          int* replaced_fd = nullptr);
  // Closes a descriptor FinishCompaction handed over (through the store's FileOps); any thread.
  // With release_blocks (only once the compaction succeeded: the snapshot's name is durable and
  // the old inode has none), the file is first truncated kReleaseStepBytes at a time: freeing a
  // 185 MB file's blocks in one close holds the file system's journal for tens of ms, and every
  // fdatasync of the live log waits for it.
  static constexpr uint64_t kReleaseStepBytes = 8 << 20;
  void CloseReplaced(int fd, bool release_blocks = false) const;
  // Completed compactions (the snapshot under the name and the directory synced).
  uint64_t compaction_count() const { return compaction_count_; }
  // The log's size as this store wrote it; and what a snapshot would take: the fences exactly,
  // the keys as of the last snapshot or replay (FORMAT.md "What the store knows").
  uint64_t file_bytes() const { return file_bytes_; }
  uint64_t snapshot_bytes() const { return fence_snapshot_bytes_ + key_snapshot_bytes_; }

 private:
  friend class StateStoreTestPeer;
  StateStore() = default;
  void NoteMaximum(const std::string& fence, uint64_t token);
  void NoteCompactionFailure(const Status& status);
  Status UpgradeToCurrentVersion();

  std::string path_;
  FileOps* ops_ = nullptr;
  CompactionPolicy policy_;
  int fd_ = -1;
  FenceMaxima maxima_;
  FenceKeyMaxima key_maxima_;
  bool keys_taken_ = false;
  uint32_t version_ = 0;
  uint64_t torn_tail_bytes_ = 0;
  bool failed_ = false;
  bool read_only_ = false;
  bool locked_ = false;
  uint64_t sync_count_ = 0;
  uint64_t compaction_count_ = 0;
  uint64_t file_bytes_ = 0;
  static constexpr size_t kKeepAppendBuffer = 64 * 1024;
  std::string append_buffer_;  // AppendAndSync's, reused
  uint64_t fence_snapshot_bytes_ = 0;
  uint64_t key_snapshot_bytes_ = 0;
  bool compaction_in_flight_ = false;
  uint64_t compaction_retry_at_ = 0;  // after a failed compaction: the size to grow to first
};

}  // namespace fencing
