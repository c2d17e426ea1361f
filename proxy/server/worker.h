#pragma once
// A worker: one io_context and one thread, with its own SO_REUSEPORT listener, its own upstream
// pool and its own relay buffers, so a connection lives on one thread from accept to close and
// the hot path shares nothing but the fences and the metrics. Its periodic sweep enforces the
// connections' timeouts and takes back the buffers of idle ones.

#include "common/access_log.h"
#include "common/intrusive_list.h"
#include "common/io.h"
#include "common/status.h"
#include "server/raise_wait.h"
#include "server/runtime.h"
#include "upstream/h2_upstream.h"
#include "upstream/upstream_pool.h"

#include <boost/asio/awaitable.hpp>
#include <boost/asio/io_context.hpp>
#include <boost/asio/ip/tcp.hpp>

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <thread>
#include <vector>

namespace fencing {

class Metrics;
class Session;
namespace tls {
class ServerTlsReloader;
}

// Counts open client connections, across workers; shutdown waits on it for the count to reach
// zero (Seastar's gate): Enter on accept, Leave when the connection is gone.
class DrainGate {
 public:
  uint64_t Enter();  // the count with this one
  void Leave();
  uint64_t count() const { return count_.load(std::memory_order_relaxed); }
  // True if the count reached zero before the timeout.
  bool WaitEmpty(std::chrono::milliseconds timeout);

 private:
  std::atomic<uint64_t> count_{0};
  std::mutex mu_;
  std::condition_variable empty_;
};

// What every worker shares. Fields are set before the workers start and never reassigned,
// except the atomics.
struct ServerShared {
  explicit ServerShared(Metrics& m) : metrics(m) {}
  Metrics& metrics;
  std::string backend_host;  // Host header for requests that came without one
  tls::ServerTlsReloader* tls = nullptr;  // listen's TLS context, current; null: listen is plain
  std::atomic<bool> draining{false};
  DrainGate connections;  // open client connections
  uint64_t max_connections = 0;
};

// Relay buffers for the requests a worker is forwarding, reused instead of allocated per request.
// Only the worker's thread touches it; idle connections hold none.
class RelayBuffers {
 public:
  static constexpr size_t kSize = 16 * 1024;
  static constexpr size_t kKeep = 64;  // spares kept; more concurrent requests allocate and free

  struct Lease {
    RelayBuffers* owner;
    std::unique_ptr<char[]> buffer;
    Lease(RelayBuffers* o, std::unique_ptr<char[]> b) : owner(o), buffer(std::move(b)) {}
    Lease(Lease&&) = default;
    ~Lease() {
      if (buffer && owner->spare_.size() < kKeep) owner->spare_.push_back(std::move(buffer));
    }
    char* data() const { return buffer.get(); }
  };

  Lease Take() {
    if (spare_.empty()) return Lease(this, std::unique_ptr<char[]>(new char[kSize]));  // not zeroed
    Lease lease(this, std::move(spare_.back()));
    spare_.pop_back();
    return lease;
  }

 private:
  std::vector<std::unique_ptr<char[]>> spare_;
};

// Completion handler for a worker's coroutines: logs the exception that ended one.
void LogCoroutineFailure(std::exception_ptr failure);

class Worker {
 public:
  Worker(ServerShared& shared, std::vector<boost::asio::ip::tcp::endpoint> backend,
         const ProxyConfig& config);

  ~Worker();  // stops the thread, then destroys connections before the io_context they use

  boost::asio::io_context& io() { return *ioc_; }
  UpstreamPool& pool() { return *pool_; }
  // backend_protocol h2c or h2: the HTTP/2 connections to the backend (null for an HTTP/1.1
  // backend).
  H2Upstream* h2_upstream() { return h2_upstream_ ? &*h2_upstream_ : nullptr; }
  RelayBuffers& relay_buffers() { return relay_buffers_; }
  RaiseInbox& raise_inbox() { return *raise_inbox_; }
  ServerShared& shared() { return shared_; }
  // The current config, as seen by this worker (only touched on its thread).
  const std::shared_ptr<const Runtime>& runtime() const { return runtime_; }

  // Binds a listener (every worker binds the same port: SO_REUSEPORT). tls: its connections begin
  // with a TLS handshake on ServerShared::tls's current context.
  Status Listen(const boost::asio::ip::tcp::endpoint& endpoint, bool tls);
  void Start(std::shared_ptr<const Runtime> runtime);  // spawns the accept loop and the thread
  // Posted to the worker's thread; the pool (and the HTTP/2 connections) take its backend TLS
  // settings.
  void SetRuntime(std::shared_ptr<const Runtime> runtime);
  void BeginDrain();  // stop accepting; close idle connections; busy ones close after their response
  void Stop();        // stops the io_context and joins the thread

  // Buffers the request's access line (common/access_log.h); it reaches stderr at the next
  // sweep tick, or sooner once 32 KiB have gathered.
  void LogAccess(const AccessEntry& entry);

  // A session registers as it is made and unregisters as it is destroyed (Session's own
  // constructor and destructor): the sweep, eviction and shutdown reach every open connection.
  void Register(Session* session);
  void Unregister(Session* session);

 private:
  struct Listener {
    io::Acceptor acceptor;
    bool tls;
  };
  io::Awaitable<void> AcceptLoop(Listener& listener);
  // At max_connections: closes this worker's longest-idle connection. False if none is idle.
  bool EvictLongestIdle();
  // Once per period: closes connections idle past timeouts.idle, takes back the read buffers of
  // idle ones, and enforces busy ones' deadlines (header_read, request).
  io::Awaitable<void> SweepIdle();
  void FlushAccessLines();  // hands the buffered access lines over, counting any dropped
  void CountDroppedLines(uint64_t dropped);

  ServerShared& shared_;
  IntrusiveList<Session> sessions_;  // outlives the io_context: sessions unregister as it destroys them
  RelayBuffers relay_buffers_;   // likewise outlives the sessions that lease from it
  AccessLogBuffer access_log_;   // this worker's access lines not yet handed to the log thread
  std::shared_ptr<const Runtime> runtime_;
  std::unique_ptr<boost::asio::io_context> ioc_;
  std::optional<UpstreamPool> pool_;
  std::optional<H2Upstream> h2_upstream_;
  std::optional<RaiseInbox> raise_inbox_;  // resolutions of this worker's raise waits
  std::vector<std::unique_ptr<Listener>> listeners_;  // listen, then plain_listen
  std::thread thread_;
};

}  // namespace fencing
