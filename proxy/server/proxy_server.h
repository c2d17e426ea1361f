#pragma once
// The data plane: one io_context and one thread per worker, each with its own SO_REUSEPORT
// listener and its own upstream pool, so a connection lives on one thread from accept to close
// and the hot path shares nothing but the fences and the metrics.

#include "common/status.h"
#include "server/runtime.h"
#include "upstream/upstream_pool.h"

#include <boost/asio/awaitable.hpp>
#include <boost/asio/io_context.hpp>
#include <boost/asio/ip/tcp.hpp>

#include <atomic>
#include <chrono>
#include <memory>
#include <optional>
#include <set>
#include <string>
#include <thread>
#include <vector>

namespace fencing {

class FenceRegistry;
class Metrics;
class Session;

// What every worker shares. Fields are set before the workers start and never reassigned,
// except the atomics.
struct ServerShared {
  explicit ServerShared(Metrics& m) : metrics(m) {}
  Metrics& metrics;
  std::string backend_host;  // Host header for requests that came without one
  std::atomic<bool> draining{false};
  std::atomic<uint64_t> connections{0};
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
  RelayBuffers& relay_buffers() { return relay_buffers_; }
  ServerShared& shared() { return shared_; }
  // The current config, as seen by this worker (only touched on its thread).
  const std::shared_ptr<const Runtime>& runtime() const { return runtime_; }

  Status Listen(const boost::asio::ip::tcp::endpoint& endpoint);
  void Start(std::shared_ptr<const Runtime> runtime);  // spawns the accept loop and the thread
  void SetRuntime(std::shared_ptr<const Runtime> runtime);  // posted to the worker's thread
  void BeginDrain();  // stop accepting; close idle connections; busy ones close after their response
  void Stop();        // stops the io_context and joins the thread

  void Register(Session* session) { sessions_.insert(session); }
  void Unregister(Session* session) { sessions_.erase(session); }

 private:
  io::Awaitable<void> AcceptLoop();
  // At max_connections: closes this worker's longest-idle connection. False if none is idle.
  bool EvictLongestIdle();
  // Once per period: closes connections idle past timeouts.idle, takes back the read buffers of
  // idle ones, and enforces busy ones' deadlines (header_read, request).
  io::Awaitable<void> SweepIdle();

  ServerShared& shared_;
  std::set<Session*> sessions_;  // outlives the io_context: sessions unregister as it destroys them
  RelayBuffers relay_buffers_;   // likewise outlives the sessions that lease from it
  std::shared_ptr<const Runtime> runtime_;
  std::unique_ptr<boost::asio::io_context> ioc_;
  std::optional<UpstreamPool> pool_;
  std::optional<io::Acceptor> acceptor_;
  std::thread thread_;
};

class ProxyServer {
 public:
  ProxyServer(std::shared_ptr<const ProxyConfig> config, FenceRegistry& registry, Metrics& metrics);
  ~ProxyServer();

  // Resolves the backend, binds every worker's listener and starts the threads.
  Status Start();
  // Swaps in a new route table (listen, backend, state file and threads need a restart).
  void Reload(std::shared_ptr<const ProxyConfig> config);
  // SIGTERM: stop accepting, let in-flight requests finish.
  void BeginShutdown();
  // True if every client connection closed before the timeout.
  bool WaitDrained(std::chrono::milliseconds timeout);
  void Stop();

  bool draining() const { return shared_.draining.load(); }
  uint64_t connections() const { return shared_.connections.load(); }

 private:
  std::shared_ptr<const Runtime> BuildRuntime(std::shared_ptr<const ProxyConfig> config);

  std::shared_ptr<const ProxyConfig> config_;
  FenceRegistry& registry_;
  Metrics& metrics_;
  ServerShared shared_;
  std::vector<std::unique_ptr<Worker>> workers_;
};

}  // namespace fencing
