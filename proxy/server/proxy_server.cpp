#include "server/proxy_server.h"

#include "metrics/metrics.h"
#include "common/log.h"
#include "fence/fence_registry.h"

#include <algorithm>
#include <stdexcept>
#include <thread>

namespace fencing {

namespace asio = boost::asio;
using tcp = asio::ip::tcp;

ProxyServer::ProxyServer(std::shared_ptr<const ProxyConfig> config, FenceRegistry& registry, Metrics& metrics,
                         LockServiceSet& lock_services, tls::ServerTlsReloader* tls)
    : config_(std::move(config)), registry_(registry), metrics_(metrics), lock_services_(lock_services), shared_(metrics) {
  if (config_->tls.has_value() != (tls != nullptr)) {
    throw std::logic_error("ProxyServer: a TLS context source is given exactly when the route file has tls");
  }
  shared_.tls = tls;
  shared_.max_connections = config_->limits.max_connections;
  const uint16_t default_port = config_->backend_https ? 443 : 80;
  shared_.backend_host = config_->backend.port == default_port
                             ? config_->backend.host
                             : config_->backend.host + ":" + std::to_string(config_->backend.port);
}

ProxyServer::~ProxyServer() { Stop(); }

std::shared_ptr<const Runtime> ProxyServer::BuildRuntime(std::shared_ptr<const ProxyConfig> config,
                                                         std::shared_ptr<TlsClientContext> backend_tls) {
  std::vector<RouteRuntime> routes;
  routes.reserve(config->routes.size());
  for (const RouteConfig& route : config->routes) {
    // The loader checked that the service exists; lock services are restart-only, so a reload
    // names only services built at start.
    LockServiceEntry* verifier = route.verify.enabled() ? lock_services_.Find(route.verify.service) : nullptr;
    if (route.verify.enabled() && !verifier) {
      throw std::logic_error("route " + route.name + " verifies with unknown lock service " + route.verify.service);
    }
    if (route.fence_key.keyed()) {
      KeySettings settings{route.max_keys, route.forget_idle_keys_after};
      routes.push_back(RouteRuntime{&route, nullptr, &metrics_.ForRoute(route.name),
                                    &registry_.GetOrCreateKeyed(route.fence, settings), verifier});
    } else {
      routes.push_back(
          RouteRuntime{&route, &registry_.GetOrCreate(route.fence), &metrics_.ForRoute(route.name), nullptr, verifier});
    }
  }
  return std::make_shared<Runtime>(std::move(config), std::move(routes), &metrics_.ForRoute(kNoRouteLabel),
                                   std::move(backend_tls));
}

Status ProxyServer::Start() {
  boost::system::error_code ec;
  asio::io_context resolver_context;
  tcp::resolver resolver(resolver_context);
  auto resolve_listener = [&](const HostPort& address, tcp::endpoint* out) {
    auto found = resolver.resolve(address.host, std::to_string(address.port),
                                  tcp::resolver::passive | tcp::resolver::numeric_service, ec);
    if (ec || found.empty()) {
      return Status::Error("cannot resolve listen address " + address.ToString() + ": " + ec.message());
    }
    *out = found.begin()->endpoint();
    return Status::Ok();
  };
  tcp::endpoint listen, plain_listen;
  if (Status s = resolve_listener(config_->listen, &listen); !s.ok()) return s;
  if (config_->plain_listen) {
    if (Status s = resolve_listener(*config_->plain_listen, &plain_listen); !s.ok()) return s;
  }
  auto backend = resolver.resolve(config_->backend.host, std::to_string(config_->backend.port), ec);
  if (ec || backend.empty()) {
    return Status::Error("cannot resolve backend " + config_->backend_url + ": " + ec.message());
  }
  std::vector<tcp::endpoint> backend_endpoints;
  for (const auto& entry : backend) backend_endpoints.push_back(entry.endpoint());

  std::shared_ptr<TlsClientContext> backend_tls;
  if (ConfigError error; !MakeBackendTls(*config_, &backend_tls, &error)) return Status::Error(error.ToString());

  unsigned threads = config_->threads;
  if (threads == 0) threads = std::max(1u, std::thread::hardware_concurrency());
  auto runtime = BuildRuntime(config_, std::move(backend_tls));
  for (unsigned i = 0; i < threads; ++i) {
    auto worker = std::make_unique<Worker>(shared_, backend_endpoints, *config_);
    if (Status s = worker->Listen(listen, config_->tls.has_value()); !s.ok()) return s;
    if (config_->plain_listen) {
      if (Status s = worker->Listen(plain_listen, false); !s.ok()) return s;
    }
    workers_.push_back(std::move(worker));
  }
  for (auto& worker : workers_) worker->Start(runtime);
  boost::json::object fields{{"listen", config_->listen.ToString()},
                             {"backend", config_->backend_url},
                             {"threads", threads},
                             {"routes", config_->routes.size()}};
  if (config_->tls) fields["tls"] = true;
  if (config_->plain_listen) fields["plain_listen"] = config_->plain_listen->ToString();
  if (runtime->backend_tls()) fields["backend_server_name"] = runtime->backend_tls()->server_name();
  LogInfo("listening", std::move(fields));
  return Status::Ok();
}

Status ProxyServer::Reload(std::shared_ptr<const ProxyConfig> config) {
  std::shared_ptr<TlsClientContext> backend_tls;
  if (ConfigError error; !MakeBackendTls(*config, &backend_tls, &error)) return Status::Error(error.ToString());
  auto runtime = BuildRuntime(std::move(config), std::move(backend_tls));
  for (auto& worker : workers_) worker->SetRuntime(runtime);
  return Status::Ok();
}

void ProxyServer::BeginShutdown() {
  shared_.draining.store(true);
  for (auto& worker : workers_) worker->BeginDrain();
}

bool ProxyServer::WaitDrained(std::chrono::milliseconds timeout) {
  return shared_.connections.WaitEmpty(timeout);
}

void ProxyServer::Stop() {
  for (auto& worker : workers_) worker->Stop();
}

}  // namespace fencing
