#include "server/raise_wait.h"

#include <boost/asio/buffer.hpp>
#include <boost/asio/post.hpp>

#include <sys/eventfd.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <stdexcept>
#include <string>

namespace fencing {

void RaiseWait::Resolve(Admission admission, uint64_t max_token) {
  inbox_.Push(shared_from_this(), admission, max_token);
}

void RaiseWait::Deliver(Admission admission, uint64_t max_token) {
  resolved_ = true;
  admission_ = admission;
  max_token_ = max_token;
  timer_.cancel();  // the waiting coroutine resumes and finds it resolved
}

namespace {

int MakeEventFd() {
  int fd = ::eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC);
  if (fd < 0) throw std::runtime_error(std::string("eventfd: ") + std::strerror(errno));
  return fd;
}

}  // namespace

RaiseInbox::RaiseInbox(boost::asio::io_context& io) : executor_(io.get_executor()), wake_(io.get_executor(), MakeEventFd()) {
  Arm();
}

RaiseInbox::~RaiseInbox() = default;

void RaiseInbox::Push(std::shared_ptr<RaiseWait> wait, Admission admission, uint64_t max_token) {
  if (executor_.running_in_this_thread()) {
    wait->Deliver(admission, max_token);
    return;
  }
  bool wake;
  {
    std::lock_guard lock(mu_);
    items_.push_back(Item{std::move(wait), admission, max_token});
    wake = !signalled_;
    signalled_ = true;
  }
  if (!wake) return;  // the worker is woken already and has not drained yet: it will see this one
  wakes_.fetch_add(1, std::memory_order_relaxed);
  const uint64_t one = 1;
  if (::write(wake_.native_handle(), &one, sizeof one) != sizeof one) {
    // Not for the counter's sake (it would need 2^64 - 2 writes without a read), but write(2)
    // may be made to fail (the fault-injection tests fail every write of the process): then
    // through the io_context's own wake-up, which is no write.
    boost::asio::post(executor_, [this] { DeliverAll(); });
  }
}

void RaiseInbox::Arm() {
  // The reactor reads the eventfd (clearing it) when epoll reports it, then the handler drains
  // the inbox. Re-armed, the read is tried at once and gets EAGAIN: with Asio that is the
  // cheapest re-arm (a readiness wait would cost an epoll_ctl instead, and a socket pair the
  // same EAGAIN read).
  wake_.async_read_some(boost::asio::buffer(&wake_count_, sizeof wake_count_),
                        [this](boost::system::error_code ec, size_t) {
                          if (ec == boost::asio::error::operation_aborted) return;  // shutting down
                          DeliverAll();
                          Arm();
                        });
}

void RaiseInbox::DeliverAll() {
  {
    std::lock_guard lock(mu_);
    delivering_.swap(items_);
    // From here a Push writes the eventfd again; what came before is in delivering_. (The count
    // was read before: a write after this reaches the next read.)
    signalled_ = false;
  }
  for (Item& item : delivering_) item.wait->Deliver(item.admission, item.max_token);
  delivering_.clear();
}

}  // namespace fencing
