#include "server/worker.h"

#include "metrics/metrics.h"
#include "common/log.h"
#include "common/memory.h"
#include "server/session.h"
#include "tls/reloader.h"

#include <boost/asio/co_spawn.hpp>
#include <boost/asio/post.hpp>

#include <sys/socket.h>

#include <algorithm>

namespace fencing {

namespace asio = boost::asio;
using tcp = asio::ip::tcp;

uint64_t DrainGate::Enter() { return count_.fetch_add(1, std::memory_order_relaxed) + 1; }

void DrainGate::Leave() {
  if (count_.fetch_sub(1, std::memory_order_acq_rel) == 1) {
    std::lock_guard lock(mu_);  // a waiter between its check and its wait must not miss this
    empty_.notify_all();
  }
}

bool DrainGate::WaitEmpty(std::chrono::milliseconds timeout) {
  std::unique_lock lock(mu_);
  return empty_.wait_for(lock, timeout, [this] { return count_.load(std::memory_order_acquire) == 0; });
}

namespace {

// Idle backend connections kept per worker; more than the busiest worker's concurrency wastes
// the backend's sockets, fewer makes bursts reconnect.
constexpr size_t kMaxIdleUpstreamPerWorker = 256;
constexpr size_t kTrimAfterCooledSessions = 64;

}  // namespace

void LogCoroutineFailure(std::exception_ptr failure) {
  if (!failure) return;
  try {
    std::rethrow_exception(failure);
  } catch (const std::exception& e) {
    LogError("connection ended by an unexpected error", {{"error", e.what()}});
  }
}

Worker::Worker(ServerShared& shared, std::vector<tcp::endpoint> backend, const ProxyConfig& config)
    : shared_(shared),
      // One thread runs it, and every socket and timer of the worker is touched on that thread
      // only (other threads only post to it): no lock per I/O operation.
      ioc_(std::make_unique<asio::io_context>(BOOST_ASIO_CONCURRENCY_HINT_UNSAFE_IO)) {
  if (config.backend_protocol != BackendProtocol::kHttp1) {  // h2c, or h2 over TLS
    h2_upstream_.emplace(ioc_->get_executor(), backend, config.timeouts.connect, h2::Settings{},
                         config.backend_https ? &shared_.metrics.ForUpstreamTls() : nullptr);
  }
  pool_.emplace(*ioc_, std::move(backend), config.timeouts.connect, kMaxIdleUpstreamPerWorker,
                config.backend_https ? &shared_.metrics.ForUpstreamTls() : nullptr);
  raise_inbox_.emplace(*ioc_);
}

Worker::~Worker() {
  Stop();
  h2_upstream_.reset();
  pool_.reset();
  listeners_.clear();
  raise_inbox_.reset();  // undelivered resolutions hold timers of the io_context
  ioc_.reset();  // destroys suspended sessions, which unregister from sessions_
}

Status Worker::Listen(const tcp::endpoint& endpoint, bool tls) {
  auto listener = std::make_unique<Listener>(Listener{io::Acceptor(ioc_->get_executor()), tls});
  io::Acceptor& acceptor = listener->acceptor;
  boost::system::error_code ec;
  acceptor.open(endpoint.protocol(), ec);
  if (!ec) acceptor.set_option(tcp::acceptor::reuse_address(true), ec);
  if (!ec) {
    // Every worker binds the same port; the kernel spreads new connections across them.
    int one = 1;
    if (::setsockopt(acceptor.native_handle(), SOL_SOCKET, SO_REUSEPORT, &one, sizeof one) != 0) {
      ec.assign(errno, boost::system::system_category());
    }
  }
  if (!ec) acceptor.bind(endpoint, ec);
  if (!ec) acceptor.listen(asio::socket_base::max_listen_connections, ec);
  if (ec) {
    return Status::Error("cannot listen on " + endpoint.address().to_string() + ":" +
                         std::to_string(endpoint.port()) + ": " + ec.message());
  }
  listeners_.push_back(std::move(listener));
  return Status::Ok();
}

void Worker::Start(std::shared_ptr<const Runtime> runtime) {
  runtime_ = std::move(runtime);
  pool_->SetTls(runtime_->backend_tls());
  if (h2_upstream_) h2_upstream_->SetTls(runtime_->backend_tls());
  for (auto& listener : listeners_) asio::co_spawn(ioc_->get_executor(), AcceptLoop(*listener), LogCoroutineFailure);
  asio::co_spawn(ioc_->get_executor(), SweepIdle(), LogCoroutineFailure);
  thread_ = std::thread([this] { ioc_->run(); });
}

void Worker::SetRuntime(std::shared_ptr<const Runtime> runtime) {
  asio::post(*ioc_, [this, runtime = std::move(runtime)]() mutable {
    runtime_ = std::move(runtime);
    pool_->SetTls(runtime_->backend_tls());
    if (h2_upstream_) h2_upstream_->SetTls(runtime_->backend_tls());
  });
}

void Worker::BeginDrain() {
  asio::post(*ioc_, [this] {
    boost::system::error_code ec;
    for (auto& listener : listeners_) listener->acceptor.close(ec);
    sessions_.ForEach([](Session* session) { session->CloseIfIdle(); });
  });
}

void Worker::Stop() {
  if (!ioc_) return;
  ioc_->stop();
  if (thread_.joinable()) thread_.join();
  FlushAccessLines();  // the thread has ended: its buffer is this thread's now
}

void Worker::Register(Session* session) { sessions_.PushBack(session); }

void Worker::Unregister(Session* session) { session->Unlink(); }

void Worker::LogAccess(const AccessEntry& entry) { CountDroppedLines(access_log_.Append(entry)); }

void Worker::FlushAccessLines() { CountDroppedLines(access_log_.Flush()); }

void Worker::CountDroppedLines(uint64_t dropped) {
  if (dropped) shared_.metrics.access_log_dropped_lines().Increment(static_cast<double>(dropped));
}

bool Worker::EvictLongestIdle() {
  Session* longest = nullptr;
  sessions_.ForEach([&longest](Session* session) {
    if (session->idle() && !session->closing() && (!longest || session->idle_since() < longest->idle_since())) {
      longest = session;
    }
  });
  if (!longest) return false;
  longest->CloseIfIdle();
  return true;
}

io::Awaitable<void> Worker::SweepIdle() {
  io::Timer timer(ioc_->get_executor());
  bool trim_due = false;
  // Runs while draining too: in-flight requests are still bounded by their deadlines.
  for (;;) {
    const Timeouts timeouts = runtime_->config().timeouts;  // a copy: a reload may swap runtime_
    // A quarter of the shortest timeout it enforces, at most a second: a timeout fires at most
    // 25% (or 1 s) late, and the sweep costs nothing noticeable at 10k connections.
    const auto shortest = std::min({timeouts.idle, timeouts.header_read, timeouts.request});
    const auto period = std::clamp<std::chrono::milliseconds>(shortest / 4, std::chrono::milliseconds(10),
                                                              std::chrono::seconds(1));
    timer.expires_after(period);
    auto [ec] = co_await timer.async_wait(io::kTuple);
    if (ec) co_return;
    const auto now = std::chrono::steady_clock::now();
    size_t cooled = 0;
    // A connection idle for a whole period gives its read buffer back; a busy one keeps it.
    sessions_.ForEach([&](Session* session) { cooled += session->Sweep(now, timeouts.idle, period); });
    pool_->Sweep(now, period);
    FlushAccessLines();
    // After a burst, freed coroutine frames sit in the allocator's free lists; hand them back so an
    // idle sidecar's RSS falls again (its memory limit counts RSS, not what malloc holds).
    // The sessions told to cool free their coroutines only as their reads complete: trim a
    // period later.
    if (trim_due) ReleaseFreeMemory();
    trim_due = cooled >= kTrimAfterCooledSessions;
  }
}

io::Awaitable<void> Worker::AcceptLoop(Listener& listener) {
  io::Acceptor& acceptor = listener.acceptor;
  for (;;) {
    auto [ec, socket] = co_await acceptor.async_accept(io::kTuple);
    if (ec == asio::error::operation_aborted || !acceptor.is_open()) co_return;
    if (ec) {
      // Out of file descriptors and the like: back off briefly instead of spinning.
      LogWarn("accept failed", {{"error", ec.message()}});
      io::Timer pause(ioc_->get_executor(), std::chrono::milliseconds(50));
      co_await pause.async_wait(io::kTuple);
      continue;
    }
    if (shared_.connections.Enter() > shared_.max_connections) {
      // Full. Like nginx, give the slot of the longest-idle keep-alive connection to the new one
      // (a flood of silent connections cannot lock clients out); refuse only when none is idle.
      if (EvictLongestIdle()) {
        shared_.metrics.connections_evicted().Increment();
      } else {
        shared_.connections.Leave();
        shared_.metrics.connections_refused().Increment();
        boost::system::error_code ignored;
        socket.close(ignored);
        continue;
      }
    }
    if (!listener.tls) {
      SessionPtr(new Session(*this, std::move(socket), nullptr))->Start();
      continue;
    }
    // The context current now: a reload after this leaves the connection on it.
    const std::shared_ptr<const tls::ServerContext> context = shared_.tls->Current();
    SessionPtr(new Session(*this, std::move(socket), context.get()))->Start();
  }
}

}  // namespace fencing
