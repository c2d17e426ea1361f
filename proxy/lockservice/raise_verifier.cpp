#include "lockservice/raise_verifier.h"

#include <boost/asio/post.hpp>
#include <boost/asio/this_coro.hpp>

#include <chrono>
#include <memory>
#include <utility>

namespace fencing {

namespace asio = boost::asio;

namespace {

constexpr std::chrono::milliseconds kBackstopGrace{200};

// Lives until both the client's answer and the coroutine are done with it: an answer that comes
// after the timeout finds it and changes nothing.
struct PendingVerification {
  explicit PendingVerification(io::Executor executor) : timer(std::move(executor)) {}
  io::Timer timer;
  bool answered = false;  // on the worker's thread only
  HolderAnswer answer;
};

}  // namespace

io::Awaitable<Verification> VerifyRaise(LockServiceEntry& service, std::string lock, uint64_t token) {
  const auto started = std::chrono::steady_clock::now();
  const std::chrono::milliseconds timeout = service.config().timeout();
  auto pending = std::make_shared<PendingVerification>(co_await asio::this_coro::executor);
  // The client's own deadline is `timeout` and its answer says why (not connected, which
  // endpoint failed how); this timer is only the promise's backstop, a little later.
  pending->timer.expires_after(timeout + kBackstopGrace);
  service.client().FindHolder(lock, [pending](HolderAnswer answer) {
    // On a thread of the client: hand the answer to the worker.
    asio::post(pending->timer.get_executor(), [pending, answer = std::move(answer)]() mutable {
      if (pending->answered) return;
      pending->answered = true;
      pending->answer = std::move(answer);
      pending->timer.cancel();
    });
  });
  co_await pending->timer.async_wait(io::kTuple);
  if (!pending->answered) {
    // The client's own deadline should have answered first; this one is what the contract
    // promises either way.
    pending->answered = true;
    pending->answer.status = HolderAnswer::Status::kUnavailable;
    pending->answer.error = "no answer from lock service '" + service.name() + "' within " +
                            MillisecondsText(timeout + kBackstopGrace);
  }
  Verification verification = Judge(pending->answer, token);
  service.Record(verification, std::chrono::duration<double>(std::chrono::steady_clock::now() - started).count());
  co_return verification;
}

}  // namespace fencing
