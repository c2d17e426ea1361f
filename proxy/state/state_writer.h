#pragma once
// The one thread that touches the state file after start-up. I/O threads submit raises; the
// writer takes every raise queued so far, appends them with one write and one fdatasync
// (group commit), then completes each raise. No I/O thread ever waits on the disk. After a
// successful batch it also starts a compaction when the store says it is due, after the batch's
// raises have been answered: a large log's snapshot is written by a compactor thread while the
// writer goes on committing batches, and only the short hand-over (FORMAT.md "Compaction") runs
// on the writer thread, between two batches. What the hand-over replaced (the old log's
// descriptor, whose close frees a large unlinked file's blocks) is closed by a housekeeping
// thread, which then hands the compaction's freed memory back to the kernel (H7).

#include "state/state_store.h"

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <deque>
#include <memory>
#include <cstdint>
#include <functional>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

namespace fencing {

class StateWriter {
 public:
  // Called on the writer thread once the raise is durable (ok) or has failed (!ok).
  using Done = std::function<void(bool ok)>;
  // Observes the seconds one write+sync took (state_sync_seconds); may be empty.
  using SyncObserver = std::function<void(double seconds)>;
  // Observes each compaction attempt: whether it succeeded and the seconds it took from start
  // to hand-over (background part included); may be empty. Called on the writer thread.
  using CompactionObserver = std::function<void(bool ok, double seconds)>;

  StateWriter(StateStore& store, SyncObserver observe_sync, CompactionObserver observe_compaction = {});
  ~StateWriter();  // stops the thread after completing everything already submitted

  void Submit(std::string fence, uint64_t token, Done done);
  void Submit(FenceRecord record, Done done);  // a key's max, or a key forgotten
  bool failed() const;
  // Work for the housekeeping thread, done in submission order after everything before it:
  // what must not delay a batch (closing a replaced log, returning freed memory). Also runs the
  // compaction's own (H7). Safe from any thread.
  void Defer(std::function<void()> work);
  // Deferred work done so far (tests wait for it); safe from any thread.
  uint64_t deferred_done() const { return deferred_done_.load(std::memory_order_acquire); }
  // Completed compactions; safe from any thread.
  uint64_t compaction_count() const { return compactions_.load(std::memory_order_relaxed); }
  // The longest time the writer thread spent on compaction instead of batches (the hand-over,
  // or a whole inline compaction of a small log), and the last one; safe from any thread.
  double longest_compaction_stall_seconds() const;
  double last_compaction_stall_seconds() const;

 private:
  struct Pending {
    FenceRecord record;
    Done done;
  };
  // Into records (cleared first).
  static void Collapse(const std::vector<Pending>& batch, std::vector<FenceRecord>& records);
  void Run();
  void CommitBatch(bool failed);  // batch_
  void StartCompactionIfDue();
  void FinishCompaction();
  // With mu_ held, after changing what the writer waits for: whether it is asleep and must be
  // woken (Wake, once mu_ is released). Only the first caller gets true.
  bool NeedsWakeLocked();
  void Wake();
  void RunHousekeeping();

  StateStore& store_;
  SyncObserver observe_sync_;
  CompactionObserver observe_compaction_;
  std::atomic<uint64_t> compactions_{0};
  std::atomic<uint64_t> longest_stall_ns_{0};
  std::atomic<uint64_t> last_stall_ns_{0};
  // The compaction in flight (writer thread), its start, and its background thread.
  std::unique_ptr<CompactionJob> job_;
  std::chrono::steady_clock::time_point job_start_;
  std::thread compactor_;
  mutable std::mutex mu_;
  // The writer sleeps on this word (a futex) and a submitter wakes it only when sleeping_ says it
  // sleeps, outside mu_. A condition variable would cost a futex call per submit beside the
  // wake: glibc's pthread_cond_wait takes the mutex back as contended, so the writer's next
  // unlock always enters the kernel.
  std::atomic<uint32_t> wake_word_{0};
  bool sleeping_ = false;  // the writer is about to wait on wake_word_ (guarded by mu_)
  std::vector<Pending> queue_;
  // The writer thread's: the batch being committed and its records, kept for their capacity (a
  // batch swapped out of queue_ leaves an empty vector that allocates nothing until used).
  std::vector<Pending> batch_;
  std::vector<FenceRecord> records_;
  bool stopping_ = false;
  bool failed_ = false;
  bool exited_ = false;  // Run() has returned: a late Submit is answered by the caller's thread
  bool job_running_ = false;  // a background part is in flight
  bool job_done_ = false;     // ...and has finished: the writer hands it over next
  std::thread thread_;
  // The housekeeping thread and its queue (Defer). Not on any hot path: a plain condition variable.
  std::mutex house_mu_;
  std::condition_variable house_cv_;
  std::deque<std::function<void()>> house_queue_;
  bool house_stopping_ = false;
  std::atomic<uint64_t> deferred_done_{0};
  std::thread housekeeper_;
};

}  // namespace fencing
