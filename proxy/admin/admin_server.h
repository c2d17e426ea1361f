#pragma once
// The admin listener: /metrics, /healthz, /readyz, /fences. Its own thread and io_context, so
// a flood of proxied traffic never starves the probes that decide whether the pod gets traffic.
// Read-only: nothing here changes a fence.

#include "common/status.h"
#include "config/config.h"

#include <boost/asio/io_context.hpp>
#include <boost/asio/ip/tcp.hpp>
#include <boost/beast/http/status.hpp>

#include <functional>
#include <string>
#include <thread>

namespace fencing {

class EtcdFenceStore;
class FenceRegistry;
class LockServiceSet;
class Metrics;

class AdminServer {
 public:
  // ready() tells /readyz whether the proxy accepts requests (not draining, state healthy).
  // lock_services (may be null) are listed in /fences with their last errors; so is the shared
  // fence store (null with the state file), whose closed gate also explains a failing /readyz.
  AdminServer(const HostPort& listen, Metrics& metrics, FenceRegistry& registry, std::function<bool()> ready,
              const LockServiceSet* lock_services = nullptr, const EtcdFenceStore* fence_store = nullptr);
  ~AdminServer();

  Status Start();
  void Stop();

 private:
  boost::asio::io_context ioc_{1};
  HostPort listen_;
  Metrics& metrics_;
  FenceRegistry& registry_;
  const LockServiceSet* lock_services_;
  const EtcdFenceStore* fence_store_;
  std::function<bool()> ready_;
  boost::asio::ip::tcp::acceptor acceptor_;
  std::thread thread_;
};

// The /fences document: {"fences": {"NAME": {"max_token", "pending", "inflight", "waiting"}},
// "state_healthy", "lock_services": [{"name", "kind", "last_error", ...}], and with the shared
// store "fence_store": {"kind", "endpoints", "prefix", "member_id", "members", "gate_open", ...}}.
std::string FencesJson(const FenceRegistry& registry, const LockServiceSet* lock_services = nullptr,
                       const EtcdFenceStore* fence_store = nullptr);
// /fences/NAME and /fences/NAME?key=KEY: one fence, or one key of a keyed fence (404 with the
// floor for a key it does not hold). *status: 200, 400 (bad query) or 404.
std::string FenceJson(const FenceRegistry& registry, std::string_view name, std::string_view query,
                      boost::beast::http::status* status);

}  // namespace fencing
