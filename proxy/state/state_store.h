#pragma once
// The durable record of every fence's max_token: an append-only log (format: FORMAT.md beside
// this file), locked with flock(2) for the life of the process, replayed at open.

#include "common/status.h"

#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <vector>

namespace fencing {

class StateStoreTestPeer;  // tests/unit/state_test.cpp: reaches the fd to inject I/O failures

struct FenceRecord {
  std::string fence;  // [a-z0-9_-]{1,64}
  uint64_t token = 0;
};

using FenceMaxima = std::map<std::string, uint64_t>;

struct OpenOptions {
  bool create_if_missing = true;  // the proxy creates; `state show` does not
  bool lock = true;               // flock(LOCK_EX|LOCK_NB); `state show` reads without it
  bool read_only = false;         // `state show`: never truncates a torn tail or writes
};

class StateStore {
 public:
  // Opens (creating if allowed: header written, file and directory fsync'd), locks, replays.
  // A torn last record is truncated (unless read_only) and reported through torn_tail_bytes().
  // Damage before the tail, a bad header, or a lock held by another process: an error that names
  // the file (and, for damage, the byte offset).
  static Status Open(const std::string& path, const OpenOptions& options,
                     std::unique_ptr<StateStore>* store);

  ~StateStore();
  StateStore(const StateStore&) = delete;
  StateStore& operator=(const StateStore&) = delete;

  const std::string& path() const { return path_; }
  const FenceMaxima& maxima() const { return maxima_; }  // as replayed plus every append since
  // maxima(), failed() and sync_count() are not synchronized: read them before a StateWriter
  // starts or after it is destroyed (StateWriter::failed() is the thread-safe view).
  uint64_t torn_tail_bytes() const { return torn_tail_bytes_; }

  // Appends the records with one write(2) and makes them durable with one fdatasync(2).
  // The first failure is terminal: this and every later call return an error, nothing is
  // retried on the same file (a failed fsync may have dropped the dirty pages).
  Status AppendAndSync(const std::vector<FenceRecord>& records);
  bool failed() const { return failed_; }
  // Successful fdatasyncs by AppendAndSync (group-commit tests and diagnostics).
  uint64_t sync_count() const { return sync_count_; }

 private:
  friend class StateStoreTestPeer;
  StateStore() = default;

  std::string path_;
  int fd_ = -1;
  FenceMaxima maxima_;
  uint64_t torn_tail_bytes_ = 0;
  bool failed_ = false;
  bool read_only_ = false;
  uint64_t sync_count_ = 0;
};

}  // namespace fencing
