#pragma once
// The simulation's store::Scheduler: a virtual clock and one queue of events ordered by
// (time, sequence). Nothing runs until the test steps the queue, and everything runs on the
// test's thread, so a run is a pure function of its inputs (and of the seeds its callers draw
// from): no real clock, no threads, no container whose iteration order is unspecified.
//
//   Post(f)        runs f at the current time, after the work already queued for that time
//   At(t, f)       runs f at max(t, now); the returned Timer cancels it (as does dropping it)
//   Step()         runs the first event (the clock jumps to its time); false when none is left
//   RunUntil(t)    runs every event due at or before t, then sets the clock to t
//
// Jitter, latency and faults are the callers' (fake_etcd.h draws them from its own seed).

#include "store/scheduler.h"

#include <cstddef>
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <utility>

namespace fencing::sim {

class SimScheduler final : public store::Scheduler {
 public:
  // Far from zero, so that "0" never passes for a time and differences never go negative.
  static constexpr int64_t kStartNanos = 1'000'000'000'000;  // 1000 s

  explicit SimScheduler(int64_t start_ns = kStartNanos);
  ~SimScheduler() override;
  SimScheduler(const SimScheduler&) = delete;
  SimScheduler& operator=(const SimScheduler&) = delete;

  int64_t NowNanos() const override { return queue_->now; }
  void Post(std::function<void()> f) override;
  std::unique_ptr<Timer> At(int64_t at_ns, std::function<void()> f) override;

  // Runs the first event. False (and nothing changes) when the queue is empty.
  bool Step();
  // Runs every event due at or before t (those they queue too, if due by then), then advances
  // the clock to t (it never goes back).
  void RunUntil(int64_t t_ns);
  void RunFor(int64_t duration_ns) { RunUntil(NowNanos() + duration_ns); }
  // Events queued and not cancelled.
  size_t Pending() const { return queue_->events.size(); }
  // The time of the next event; false when there is none.
  bool NextTime(int64_t* at_ns) const;
  // Events run so far.
  uint64_t Executed() const { return executed_; }

 private:
  using Key = std::pair<int64_t, uint64_t>;  // (time, sequence)
  // Shared with the timers, which may outlive the scheduler.
  struct Queue {
    int64_t now = 0;
    uint64_t sequence = 0;
    std::map<Key, std::function<void()>> events;
  };
  class SimTimer;

  Key Enqueue(int64_t at_ns, std::function<void()> f);

  std::shared_ptr<Queue> queue_;
  uint64_t executed_ = 0;
};

}  // namespace fencing::sim
