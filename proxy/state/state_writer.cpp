#include "state/state_writer.h"

#include "common/log.h"
#include "common/memory.h"

#include <linux/futex.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <map>
#include <utility>
#include <vector>

namespace fencing {

// The writer sleeps on a std::atomic's word with the futex call itself.
static_assert(sizeof(std::atomic<uint32_t>) == sizeof(uint32_t) && std::atomic<uint32_t>::is_always_lock_free);

StateWriter::StateWriter(StateStore& store, SyncObserver observe_sync, CompactionObserver observe_compaction)
    : store_(store),
      observe_sync_(std::move(observe_sync)),
      observe_compaction_(std::move(observe_compaction)),
      compactions_(store.compaction_count()),
      failed_(store.failed()) {
  housekeeper_ = std::thread([this] { RunHousekeeping(); });
  thread_ = std::thread([this] { Run(); });
}

StateWriter::~StateWriter() {
  bool wake;
  {
    std::lock_guard<std::mutex> lock(mu_);
    stopping_ = true;
    wake = NeedsWakeLocked();
  }
  if (wake) Wake();
  thread_.join();  // after it has handed over any compaction in flight
  if (compactor_.joinable()) compactor_.join();
  {
    std::lock_guard<std::mutex> lock(house_mu_);
    house_stopping_ = true;
  }
  house_cv_.notify_one();
  housekeeper_.join();  // after the work deferred so far (a replaced log is closed before the store goes)
}

void StateWriter::Defer(std::function<void()> work) {
  {
    std::lock_guard<std::mutex> lock(house_mu_);
    house_queue_.push_back(std::move(work));
  }
  house_cv_.notify_one();
}

void StateWriter::RunHousekeeping() {
  std::unique_lock<std::mutex> lock(house_mu_);
  for (;;) {
    house_cv_.wait(lock, [this] { return house_stopping_ || !house_queue_.empty(); });
    if (house_queue_.empty()) return;  // stopping, and nothing left
    std::function<void()> work = std::move(house_queue_.front());
    house_queue_.pop_front();
    lock.unlock();
    work();
    work = nullptr;  // whatever it held goes here too, not on the writer thread
    deferred_done_.fetch_add(1, std::memory_order_release);
    lock.lock();
  }
}

void StateWriter::Submit(std::string fence, uint64_t token, Done done) {
  Submit(FenceRecord{std::move(fence), token}, std::move(done));
}

void StateWriter::Submit(FenceRecord record, Done done) {
  bool wake = false;
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (!exited_) {
      queue_.push_back(Pending{std::move(record), std::move(done)});
      wake = NeedsWakeLocked();
      done = nullptr;
    }
  }
  if (wake) Wake();
  // Only after the destructor has run its course (a caller bug): nobody else would answer.
  if (done) done(false);
}

bool StateWriter::NeedsWakeLocked() {
  const bool asleep = sleeping_;
  sleeping_ = false;
  return asleep;
}

void StateWriter::Wake() {
  // The writer read the word before it released mu_; any change makes its wait return.
  wake_word_.fetch_add(1, std::memory_order_release);
  syscall(SYS_futex, reinterpret_cast<uint32_t*>(&wake_word_), FUTEX_WAKE_PRIVATE, 1, nullptr, nullptr, 0);
}

bool StateWriter::failed() const {
  std::lock_guard<std::mutex> lock(mu_);
  return failed_;
}

double StateWriter::longest_compaction_stall_seconds() const {
  return static_cast<double>(longest_stall_ns_.load(std::memory_order_relaxed)) / 1e9;
}

double StateWriter::last_compaction_stall_seconds() const {
  return static_cast<double>(last_stall_ns_.load(std::memory_order_relaxed)) / 1e9;
}

// One batch as few records as replay needs (FORMAT.md "Appends"): a fence's max and floor is
// a max over the whole batch; a key's max is a max only between two forgets of that key, so a
// forget ends the key's stretch and a later raise of it gets a record after the forget.
void StateWriter::Collapse(const std::vector<Pending>& batch, std::vector<FenceRecord>& records) {
  records.clear();
  // A batch of a few records (one raise at a time, or a group commit of tens) is searched
  // backwards, without the maps' allocations; the same rules either way: the latest record of
  // the same fence max (or, for a key, of the same key) takes the max, unless that key's latest
  // record is a forget.
  constexpr size_t kLinearLimit = 64;
  if (batch.size() <= kLinearLimit) {
    for (const auto& p : batch) {
      const FenceRecord& r = p.record;
      FenceRecord* same = nullptr;
      if (r.kind != FenceRecord::Kind::kForgetKey) {
        for (size_t i = records.size(); i-- > 0;) {
          FenceRecord& q = records[i];
          if (q.fence != r.fence || q.key != r.key) continue;
          if (q.kind != FenceRecord::Kind::kForgetKey) same = &q;
          break;
        }
      }
      if (same == nullptr) {
        records.push_back(r);
      } else {
        same->token = std::max(same->token, r.token);
      }
    }
    return;
  }
  std::map<std::string, size_t, std::less<>> fence_at;                 // fence -> its SET_MAX
  std::map<std::pair<std::string, std::string>, size_t> key_at;        // (fence, key) -> its KEY_MAX
  for (const auto& p : batch) {
    const FenceRecord& r = p.record;
    if (r.kind == FenceRecord::Kind::kForgetKey) {
      key_at.erase({r.fence, r.key});
      records.push_back(r);
      continue;
    }
    size_t* at = nullptr;
    if (r.key.empty()) {
      auto [it, inserted] = fence_at.try_emplace(r.fence, records.size());
      if (!inserted) at = &it->second;
    } else {
      auto [it, inserted] = key_at.try_emplace({r.fence, r.key}, records.size());
      if (!inserted) at = &it->second;
    }
    if (at == nullptr) {
      records.push_back(r);
    } else {
      records[*at].token = std::max(records[*at].token, r.token);
    }
  }
}

void StateWriter::Run() {
  for (;;) {
    bool failed;
    bool hand_over = false;
    {
      std::unique_lock<std::mutex> lock(mu_);
      while (!job_done_ && queue_.empty() && !(stopping_ && !job_running_)) {
        // Asleep until a Submit, the compactor or the destructor changes the word (a return
        // for any other reason only tests again).
        const uint32_t seen = wake_word_.load(std::memory_order_acquire);
        sleeping_ = true;
        lock.unlock();
        syscall(SYS_futex, reinterpret_cast<uint32_t*>(&wake_word_), FUTEX_WAIT_PRIVATE, seen, nullptr, nullptr, 0);
        lock.lock();
        sleeping_ = false;
      }
      if (job_done_) {
        // Between two batches: the hand-over goes first, so it delays one batch at most.
        job_done_ = false;
        job_running_ = false;
        hand_over = true;
      } else if (queue_.empty()) {  // stopping, everything submitted is answered, no compaction left
        exited_ = true;
        return;
      } else {
        batch_.swap(queue_);
        failed = failed_;
      }
    }
    if (hand_over) {
      FinishCompaction();
      continue;
    }
    CommitBatch(failed);
  }
}

void StateWriter::CommitBatch(bool failed) {
  std::vector<Pending>& batch = batch_;
  bool ok = false;
  if (!failed) {
    Collapse(batch, records_);
    const std::vector<FenceRecord>& records = records_;
    const auto start = std::chrono::steady_clock::now();
    Status status = store_.AppendAndSync(records);
    const std::chrono::duration<double> took = std::chrono::steady_clock::now() - start;
    if (observe_sync_) observe_sync_(took.count());
    ok = status.ok();
    if (!ok) {
      LogError("state writer: raise not durable; failing it and every later one",
               {{"error", status.message()}, {"raises", batch.size()}});
      // Set before the callbacks run, so a callback that asks failed() sees the truth.
      std::lock_guard<std::mutex> lock(mu_);
      failed_ = true;
    }
  }
  // Outside the mutex: a callback may Submit again.
  for (Pending& p : batch) {
    if (p.done) p.done(ok);
  }
  batch.clear();
  // Only after a good sync, and after answering: compaction never delays an acknowledgement.
  if (ok) StartCompactionIfDue();
}

void StateWriter::StartCompactionIfDue() {
  if (job_ || !store_.CompactionDue()) return;
  job_ = store_.StartCompaction();
  if (!job_) return;
  job_start_ = std::chrono::steady_clock::now();
  if (!job_->background()) {
    // A small log: the whole compaction costs about what a hand-over would.
    StateStore::RunCompaction(*job_);
    FinishCompaction();
    return;
  }
  {
    std::lock_guard<std::mutex> lock(mu_);
    job_running_ = true;
  }
  if (compactor_.joinable()) compactor_.join();  // the previous one, long finished
  compactor_ = std::thread([this, job = job_.get()] {
    StateStore::RunCompaction(*job);
    // Its replay of the log (a second copy of every key) is freed by now: the thread's cache
    // goes back to the allocator, which returns the free pages later, after the hand-over (H7).
    MarkThreadMemoryIdle();
    bool wake;
    {
      std::lock_guard<std::mutex> lock(mu_);
      job_done_ = true;
      wake = NeedsWakeLocked();
    }
    if (wake) Wake();
  });
}

void StateWriter::FinishCompaction() {
  const bool background = job_->background();
  double hand_over = 0;
  int replaced_fd = -1;
  // Logs its own outcome. The job is freed here: what it holds is small (the large part, the
  // replayed prefix, went with the background part).
  Status status = store_.FinishCompaction(std::move(job_), &hand_over, &replaced_fd);
  const auto now = std::chrono::steady_clock::now();
  // H7, off this thread: the old log's close (its blocks are freed as its last descriptor goes),
  // then the memory the compaction freed goes back to the kernel.
  if (replaced_fd >= 0 || background) {
    // Its blocks are released step by step only when the snapshot's name is durable: after a
    // failed directory sync the old inode may still be what the name holds after a crash.
    const bool release_blocks = status.ok();
    Defer([this, replaced_fd, background, release_blocks] {
      store_.CloseReplaced(replaced_fd, release_blocks);
      if (background) ReleaseFreeMemoryGradually();  // a large log's compaction: megabytes freed
    });
  }
  // Inline, the writer was busy with all of it; in the background case only with the hand-over.
  const double stall = background ? hand_over : std::chrono::duration<double>(now - job_start_).count();
  const auto stall_ns = static_cast<uint64_t>(stall * 1e9);
  last_stall_ns_.store(stall_ns, std::memory_order_relaxed);
  if (stall_ns > longest_stall_ns_.load(std::memory_order_relaxed)) {
    longest_stall_ns_.store(stall_ns, std::memory_order_relaxed);
  }
  compactions_.store(store_.compaction_count(), std::memory_order_relaxed);
  if (store_.failed()) {  // a failed directory sync after the rename: terminal
    std::lock_guard<std::mutex> lock(mu_);
    failed_ = true;
  }
  // After failed_ is set, so that an observer asking failed() hears a terminal failure.
  const std::chrono::duration<double> took = now - job_start_;
  if (observe_compaction_) observe_compaction_(status.ok(), took.count());
}

}  // namespace fencing
