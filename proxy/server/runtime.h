#pragma once
// The immutable per-config view the request path reads: the route table plus, for each route,
// its fence and metrics, resolved once. A reload builds a new Runtime and swaps a pointer.

#include "metrics/metrics.h"
#include "http/ascii.h"
#include "config/config.h"
#include "fence/fence.h"
#include "fence/fence_keys.h"
#include "lockservice/lock_services.h"
#include "routing/route_table.h"
#include "tls/client_context.h"

#include <algorithm>
#include <memory>
#include <span>
#include <string>
#include <string_view>
#include <vector>

namespace fencing {

struct RouteRuntime {
  const RouteConfig* config;
  Fence* fence;  // unkeyed route: its fence; null for a keyed one
  const RouteMetrics* metrics;
  FenceKeys* keys = nullptr;  // keyed route (config->fence_key): one Fence per key
  LockServiceEntry* verifier = nullptr;  // config->verify: who confirms a raise; null: nobody

  // Compared ignoring case: methods are case-sensitive in HTTP, but a backend that upper-cases
  // them would apply "put" as PUT, so "put" is fenced like PUT.
  bool FencesMethod(std::string_view method) const {
    for (const std::string& m : config->methods) {
      if (EqualsIgnoreCase(m, method)) return true;
    }
    return false;
  }
};

class Runtime {
 public:
  // backend_tls: the TLS of an https backend's new connections (null for http://).
  Runtime(std::shared_ptr<const ProxyConfig> config, std::vector<RouteRuntime> routes,
          const RouteMetrics* unmatched_metrics, std::shared_ptr<TlsClientContext> backend_tls = nullptr)
      : table_(std::move(config)), routes_(std::move(routes)), unmatched_metrics_(unmatched_metrics),
        backend_tls_(std::move(backend_tls)) {
    for (const RouteConfig& route : table_.config().routes) {
      const FenceKeySpec& spec = route.fence_key;
      if (spec.source != FenceKeySpec::Source::kHeader) continue;
      const bool known = std::any_of(key_headers_.begin(), key_headers_.end(),
                                     [&](const std::string& h) { return EqualsIgnoreCase(h, spec.header); });
      if (!known) key_headers_.push_back(spec.header);
    }
  }

  const ProxyConfig& config() const { return table_.config(); }
  const RouteRuntime* Match(std::string_view path) const {
    auto index = table_.Match(path);
    return index ? &routes_[*index] : nullptr;
  }
  const RouteMetrics& unmatched_metrics() const { return *unmatched_metrics_; }
  // The header fields any route takes fence keys from (each once): a Connection header must not
  // name them, as it must not name the token header.
  std::span<const std::string> key_headers() const { return key_headers_; }
  const std::shared_ptr<TlsClientContext>& backend_tls() const { return backend_tls_; }

 private:
  RouteTable table_;
  std::vector<RouteRuntime> routes_;  // same order as config().routes
  const RouteMetrics* unmatched_metrics_;
  std::vector<std::string> key_headers_;
  std::shared_ptr<TlsClientContext> backend_tls_;
};

}  // namespace fencing
