#include "state/state_writer.h"

#include "common/log.h"

#include <algorithm>
#include <chrono>
#include <map>
#include <utility>
#include <vector>

namespace fencing {

StateWriter::StateWriter(StateStore& store, SyncObserver observe_sync, CompactionObserver observe_compaction)
    : store_(store),
      observe_sync_(std::move(observe_sync)),
      observe_compaction_(std::move(observe_compaction)),
      compactions_(store.compaction_count()),
      failed_(store.failed()) {
  thread_ = std::thread([this] { Run(); });
}

StateWriter::~StateWriter() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    stopping_ = true;
  }
  cv_.notify_one();
  thread_.join();
}

void StateWriter::Submit(std::string fence, uint64_t token, Done done) {
  Submit(FenceRecord{std::move(fence), token}, std::move(done));
}

void StateWriter::Submit(FenceRecord record, Done done) {
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (!exited_) {
      queue_.push_back(Pending{std::move(record), std::move(done)});
      cv_.notify_one();
      return;
    }
  }
  // Only after the destructor has run its course (a caller bug): nobody else would answer.
  if (done) done(false);
}

bool StateWriter::failed() const {
  std::lock_guard<std::mutex> lock(mu_);
  return failed_;
}

void StateWriter::Run() {
  for (;;) {
    std::deque<Pending> batch;
    bool failed;
    {
      std::unique_lock<std::mutex> lock(mu_);
      cv_.wait(lock, [this] { return stopping_ || !queue_.empty(); });
      if (queue_.empty()) {  // stopping, and everything submitted is answered
        exited_ = true;
        return;
      }
      batch.swap(queue_);
      failed = failed_;
    }

    bool ok = false;
    if (!failed) {
      // Replay keeps the maximum, so one record per fence (its highest) says all the batch says.
      std::map<std::string, uint64_t> highest;
      for (const Pending& p : batch) {
        uint64_t& max = highest[p.record.fence];
        max = std::max(max, p.record.token);
      }
      std::vector<FenceRecord> records;
      records.reserve(highest.size());
      for (auto& [fence, token] : highest) records.push_back(FenceRecord{fence, token});

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
    // Only after a good sync, and after answering: compaction never delays an acknowledgement.
    if (ok) CompactIfDue();
  }
}

void StateWriter::CompactIfDue() {
  if (!store_.CompactionDue()) return;
  const auto start = std::chrono::steady_clock::now();
  Status status = store_.Compact();  // logs its own outcome
  const std::chrono::duration<double> took = std::chrono::steady_clock::now() - start;
  compactions_.store(store_.compaction_count(), std::memory_order_relaxed);
  if (store_.failed()) {  // a failed directory sync after the rename: terminal
    std::lock_guard<std::mutex> lock(mu_);
    failed_ = true;
  }
  // After failed_ is set, so that an observer asking failed() hears a terminal failure.
  if (observe_compaction_) observe_compaction_(status.ok(), took.count());
}

}  // namespace fencing
