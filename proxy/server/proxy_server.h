#pragma once
// The data plane: resolves the backend, starts one Worker per thread (server/worker.h), swaps
// route tables on reload, and drains on shutdown.

#include "common/status.h"
#include "server/runtime.h"
#include "server/worker.h"

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

class ProxyServer {
 public:
  // lock_services: the clients the routes' verify: names (built once; outlive the server).
  // tls: listen's TLS context, kept current (set when the config has tls; outlives the server).
  ProxyServer(std::shared_ptr<const ProxyConfig> config, FenceRegistry& registry, Metrics& metrics,
              LockServiceSet& lock_services, tls::ServerTlsReloader* tls = nullptr);
  ~ProxyServer();

  // Resolves the backend, binds every worker's listeners (listen, and plain_listen) and starts
  // the threads.
  Status Start();
  // Swaps in a new route table (listen, backend, state file and threads need a restart) and, for
  // an https backend, TLS settings made from the files as they are now. A file that does not
  // load leaves everything as it was and says why.
  Status Reload(std::shared_ptr<const ProxyConfig> config);
  // SIGTERM: stop accepting, let in-flight requests finish.
  void BeginShutdown();
  // True if every client connection closed before the timeout.
  bool WaitDrained(std::chrono::milliseconds timeout);
  void Stop();

  bool draining() const { return shared_.draining.load(); }
  uint64_t connections() const { return shared_.connections.count(); }

 private:
  std::shared_ptr<const Runtime> BuildRuntime(std::shared_ptr<const ProxyConfig> config,
                                              std::shared_ptr<TlsClientContext> backend_tls);

  std::shared_ptr<const ProxyConfig> config_;
  FenceRegistry& registry_;
  Metrics& metrics_;
  LockServiceSet& lock_services_;
  ServerShared shared_;
  std::vector<std::unique_ptr<Worker>> workers_;
};

}  // namespace fencing
