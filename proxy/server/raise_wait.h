#pragma once
// How a request waiting on a pending raise learns the result. The fence resolves its waiters on
// whatever thread made the raise durable (the state writer, the etcd store's thread), and the
// request's coroutine must resume on its worker's thread. Each worker has one RaiseInbox: the
// resolving thread appends to it and wakes the worker with one eventfd write when the inbox was
// empty, so a group commit that resolves many waiters on one worker wakes it once, and the
// resolving thread never takes the io_context's lock (asio::post does, and interrupts epoll
// while holding it: the woken worker then blocks on that lock, three futex calls per post).
// A waiter resolved on its own worker's thread is resolved there and then.

#include "common/io.h"
#include "fence/fence.h"

#include <boost/asio/posix/basic_stream_descriptor.hpp>

#include <atomic>
#include <cstdint>
#include <memory>
#include <mutex>
#include <vector>

namespace fencing {

class RaiseInbox;

// One request's wait. The coroutine waits on the timer (its deadline); a resolution cancels it.
class RaiseWait final : public RaiseWaiter, public std::enable_shared_from_this<RaiseWait> {
 public:
  RaiseWait(io::Executor executor, RaiseInbox& inbox) : timer_(std::move(executor)), inbox_(inbox) {}

  void Resolve(Admission admission, uint64_t max_token) override;  // any thread

  io::Timer& timer() { return timer_; }
  bool resolved() const { return resolved_; }
  Admission admission() const { return admission_; }
  uint64_t max_token() const { return max_token_; }

 private:
  friend class RaiseInbox;
  void Deliver(Admission admission, uint64_t max_token);  // on the worker's thread

  io::Timer timer_;
  RaiseInbox& inbox_;
  bool resolved_ = false;
  Admission admission_ = Admission::kFailed;
  uint64_t max_token_ = 0;
};

class RaiseInbox {
 public:
  // Arms the wake read on io (which must not run yet, or run on this thread).
  explicit RaiseInbox(boost::asio::io_context& io);
  ~RaiseInbox();  // with io no longer running; drops undelivered resolutions
  RaiseInbox(const RaiseInbox&) = delete;
  RaiseInbox& operator=(const RaiseInbox&) = delete;

  // From any thread: delivers on the worker's thread (at once if this is it).
  void Push(std::shared_ptr<RaiseWait> wait, Admission admission, uint64_t max_token);

  // Wake-ups written so far: one per batch of resolutions from other threads (tests).
  uint64_t wakes() const { return wakes_.load(std::memory_order_relaxed); }

 private:
  struct Item {
    std::shared_ptr<RaiseWait> wait;
    Admission admission;
    uint64_t max_token;
  };
  void Arm();
  void DeliverAll();

  io::Executor executor_;
  boost::asio::posix::basic_stream_descriptor<io::Executor> wake_;  // an eventfd
  uint64_t wake_count_ = 0;
  std::mutex mu_;
  std::vector<Item> items_;      // guarded by mu_
  bool signalled_ = false;       // a wake-up is due or written and not yet drained (mu_)
  std::vector<Item> delivering_;  // the worker's thread only
  std::atomic<uint64_t> wakes_{0};
};

}  // namespace fencing
