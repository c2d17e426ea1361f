#pragma once
// Time and the order of work for the shared fence store's protocol (membership, raises): the
// real clock and the store's io_context in production (etcd_fence_store.cpp), a virtual clock
// and a seeded event queue in the simulation (tests/unit/store/), so that every interleaving a
// simulation finds can be replayed from its seed. Code under proxy/store/ reads time only here.

#include <cstdint>
#include <functional>
#include <memory>

namespace fencing::store {

class Scheduler {
 public:
  virtual ~Scheduler() = default;

  // Monotonic nanoseconds that keep counting while the machine sleeps or the VM is frozen
  // (CLOCK_BOOTTIME in production): the membership gate is measured on it.
  virtual int64_t NowNanos() const = 0;

  // Runs f later on the protocol's thread, never inside Post.
  virtual void Post(std::function<void()> f) = 0;

  class Timer {
   public:
    virtual ~Timer() = default;
    // f will not run after this returns (unless it is running now). Idempotent.
    virtual void Cancel() = 0;
  };
  // Runs f on the protocol's thread once NowNanos() >= at_ns, unless cancelled first. Dropping
  // the handle cancels.
  virtual std::unique_ptr<Timer> At(int64_t at_ns, std::function<void()> f) = 0;
  std::unique_ptr<Timer> After(int64_t delay_ns, std::function<void()> f) {
    return At(NowNanos() + delay_ns, std::move(f));
  }
};

}  // namespace fencing::store
