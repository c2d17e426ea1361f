#include "sim_scheduler.h"

#include <algorithm>

namespace fencing::sim {

class SimScheduler::SimTimer final : public Timer {
 public:
  SimTimer(std::weak_ptr<Queue> queue, Key key) : queue_(std::move(queue)), key_(key) {}
  ~SimTimer() override { Cancel(); }
  void Cancel() override {
    // A timer that has run (or is running) is no longer in the queue: nothing to erase.
    if (auto queue = queue_.lock()) {
      auto it = queue->events.find(key_);
      if (it != queue->events.end()) {
        // Destroyed once the map is whole again: what it owns may cancel other timers.
        std::function<void()> f;
        f.swap(it->second);
        queue->events.erase(it);
      }
    }
    queue_.reset();
  }

 private:
  std::weak_ptr<Queue> queue_;
  Key key_;
};

SimScheduler::SimScheduler(int64_t start_ns) : queue_(std::make_shared<Queue>()) { queue_->now = start_ns; }

// The queued functions may own objects whose destructors drop timers: clear before the queue
// itself goes (the timers hold it weakly, so they see it gone or whole).
SimScheduler::~SimScheduler() {
  auto events = std::move(queue_->events);  // leaves the queue's map empty
  events.clear();
}

SimScheduler::Key SimScheduler::Enqueue(int64_t at_ns, std::function<void()> f) {
  const Key key{std::max(at_ns, queue_->now), queue_->sequence++};
  queue_->events.emplace(key, std::move(f));
  return key;
}

void SimScheduler::Post(std::function<void()> f) { Enqueue(queue_->now, std::move(f)); }

std::unique_ptr<store::Scheduler::Timer> SimScheduler::At(int64_t at_ns, std::function<void()> f) {
  return std::make_unique<SimTimer>(queue_, Enqueue(at_ns, std::move(f)));
}

bool SimScheduler::Step() {
  if (queue_->events.empty()) return false;
  auto first = queue_->events.begin();
  queue_->now = std::max(queue_->now, first->first.first);
  std::function<void()> f;
  f.swap(first->second);
  queue_->events.erase(first);
  ++executed_;
  f();
  return true;
}

void SimScheduler::RunUntil(int64_t t_ns) {
  while (!queue_->events.empty() && queue_->events.begin()->first.first <= t_ns) Step();
  queue_->now = std::max(queue_->now, t_ns);
}

bool SimScheduler::NextTime(int64_t* at_ns) const {
  if (queue_->events.empty()) return false;
  *at_ns = queue_->events.begin()->first.first;
  return true;
}

}  // namespace fencing::sim
