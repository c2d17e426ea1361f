#pragma once
// The one thread that touches the state file after start-up. I/O threads submit raises; the
// writer takes every raise queued so far, appends them with one write and one fdatasync
// (group commit), then completes each raise. No I/O thread ever waits on the disk. After a
// successful batch it also compacts the log when the store says it is due, off the I/O threads
// and after the batch's raises have been answered.

#include "state/state_store.h"

#include <atomic>
#include <condition_variable>
#include <cstdint>
#include <deque>
#include <functional>
#include <mutex>
#include <string>
#include <thread>

namespace fencing {

class StateWriter {
 public:
  // Called on the writer thread once the raise is durable (ok) or has failed (!ok).
  using Done = std::function<void(bool ok)>;
  // Observes the seconds one write+sync took (state_sync_seconds); may be empty.
  using SyncObserver = std::function<void(double seconds)>;
  // Observes each compaction attempt: whether it succeeded and the seconds it took; may be empty.
  using CompactionObserver = std::function<void(bool ok, double seconds)>;

  StateWriter(StateStore& store, SyncObserver observe_sync, CompactionObserver observe_compaction = {});
  ~StateWriter();  // stops the thread after completing everything already submitted

  void Submit(std::string fence, uint64_t token, Done done);
  void Submit(FenceRecord record, Done done);  // a key's max, or a key forgotten
  bool failed() const;
  // Completed compactions; safe from any thread.
  uint64_t compaction_count() const { return compactions_.load(std::memory_order_relaxed); }

 private:
  struct Pending {
    FenceRecord record;
    Done done;
  };
  void Run();
  void CompactIfDue();

  StateStore& store_;
  SyncObserver observe_sync_;
  CompactionObserver observe_compaction_;
  std::atomic<uint64_t> compactions_{0};
  mutable std::mutex mu_;
  std::condition_variable cv_;
  std::deque<Pending> queue_;
  bool stopping_ = false;
  bool failed_ = false;
  bool exited_ = false;  // Run() has returned: a late Submit is answered by the caller's thread
  std::thread thread_;
};

}  // namespace fencing
