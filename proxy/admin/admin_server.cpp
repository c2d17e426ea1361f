#include "admin/admin_server.h"

#include "metrics/metrics.h"
#include "common/log.h"
#include "fence/fence_registry.h"
#include "http/rules.h"
#include "lockservice/lock_services.h"
#include "store/etcd_fence_store.h"

#include <boost/asio/as_tuple.hpp>
#include <boost/asio/co_spawn.hpp>
#include <boost/asio/detached.hpp>
#include <boost/asio/use_awaitable.hpp>
#include <boost/beast/core/flat_buffer.hpp>
#include <boost/beast/core/tcp_stream.hpp>
#include <boost/beast/http/read.hpp>
#include <boost/beast/http/string_body.hpp>
#include <boost/beast/http/write.hpp>
#include <boost/json/array.hpp>
#include <boost/json/object.hpp>
#include <boost/json/serialize.hpp>

#include <optional>

namespace fencing {

namespace asio = boost::asio;
namespace beast = boost::beast;
namespace http = beast::http;
using tcp = asio::ip::tcp;

namespace {

constexpr auto kTuple = asio::as_tuple(asio::use_awaitable);
constexpr auto kAdminTimeout = std::chrono::seconds(10);

http::response<http::string_body> Answer(const http::request<http::string_body>& req, Metrics& metrics,
                                         FenceRegistry& registry, const LockServiceSet* lock_services,
                                         const EtcdFenceStore* fence_store, const std::function<bool()>& ready) {
  http::response<http::string_body> res{http::status::ok, req.version()};
  std::string_view path = req.target();
  path = path.substr(0, path.find('?'));
  if (req.method() != http::verb::get && req.method() != http::verb::head) {
    res.result(http::status::method_not_allowed);
    res.set(http::field::allow, "GET, HEAD");
    res.set(http::field::content_type, "text/plain");
    res.body() = "the admin listener is read-only\n";
  } else if (path == "/metrics") {
    res.set(http::field::content_type, "text/plain; version=0.0.4; charset=utf-8");
    res.body() = metrics.Serialize();
  } else if (path == "/healthz") {
    res.set(http::field::content_type, "text/plain");
    res.body() = "ok\n";
  } else if (path == "/readyz") {
    res.set(http::field::content_type, "text/plain");
    if (ready()) {
      res.body() = "ready\n";
    } else {
      res.result(http::status::service_unavailable);
      res.body() = !registry.healthy() ? "not ready: the state file failed; restart the proxy\n"
                   : fence_store && !fence_store->gate()->Open()
                       ? "not ready: not a member of the shared fence store (etcd unreachable, or registering)\n"
                       : "not ready: shutting down\n";
    }
  } else if (path == "/fences") {
    res.set(http::field::content_type, "application/json");
    res.body() = FencesJson(registry, lock_services, fence_store);
  } else if (path.starts_with("/fences/")) {
    res.set(http::field::content_type, "application/json");
    std::string_view target = req.target();
    size_t question = target.find('?');
    std::string_view query = question == std::string_view::npos ? std::string_view() : target.substr(question + 1);
    http::status status = http::status::ok;
    res.body() = FenceJson(registry, path.substr(std::string_view("/fences/").size()), query, &status);
    res.result(status);
  } else {
    res.result(http::status::not_found);
    res.set(http::field::content_type, "text/plain");
    res.body() = "not found; try /metrics, /healthz, /readyz or /fences\n";
  }
  res.set(http::field::cache_control, "no-store");
  res.keep_alive(req.keep_alive());
  res.prepare_payload();
  if (req.method() == http::verb::head) res.body().clear();
  return res;
}

asio::awaitable<void> ServeAdmin(tcp::socket socket, Metrics& metrics, FenceRegistry& registry,
                                 const LockServiceSet* lock_services, const EtcdFenceStore* fence_store,
                                 std::function<bool()> ready) {
  beast::tcp_stream stream(std::move(socket));
  beast::flat_buffer buffer;
  for (;;) {
    http::request_parser<http::string_body> parser;
    parser.header_limit(8 * 1024);
    parser.body_limit(8 * 1024);
    stream.expires_after(kAdminTimeout);
    auto [ec, n] = co_await http::async_read(stream, buffer, parser, kTuple);
    if (ec) break;
    auto res = Answer(parser.get(), metrics, registry, lock_services, fence_store, ready);
    bool keep_alive = res.keep_alive();
    auto [wec, wn] = co_await http::async_write(stream, res, kTuple);
    if (wec || !keep_alive) break;
  }
  boost::system::error_code ignored;
  stream.socket().shutdown(tcp::socket::shutdown_both, ignored);
}

asio::awaitable<void> AcceptAdmin(tcp::acceptor& acceptor, Metrics& metrics, FenceRegistry& registry,
                                  const LockServiceSet* lock_services, const EtcdFenceStore* fence_store,
                                  std::function<bool()> ready) {
  for (;;) {
    auto [ec, socket] = co_await acceptor.async_accept(kTuple);
    if (ec == asio::error::operation_aborted || !acceptor.is_open()) co_return;
    if (ec) continue;
    asio::co_spawn(acceptor.get_executor(), ServeAdmin(std::move(socket), metrics, registry, lock_services, fence_store, ready),
                   asio::detached);
  }
}

}  // namespace

namespace {

// One fence (or one key of a keyed fence) as /fences shows it.
void PutSnapshot(const FenceSnapshot& snapshot, boost::json::object& out) {
  out["max_token"] = snapshot.max_token;
  if (snapshot.pending) {
    out["pending"] = snapshot.pending;
  } else {
    out["pending"] = nullptr;
  }
  out["inflight"] = snapshot.inflight;
  out["waiting"] = snapshot.waiting;
}

// A keyed fence: its counts and floor, never its keys (a million of them).
void PutKeyed(const KeyedFenceSnapshot& keys, boost::json::object& out) {
  out["keyed"] = true;
  out["keys"] = keys.keys;
  out["active_keys"] = keys.active;
  out["floor"] = keys.floor;
  out["max_keys"] = keys.max_keys;
  out["keys_forgotten"] = keys.forgotten;
}

std::string Error(std::string_view message) {
  boost::json::object doc;
  doc["error"] = message;
  return boost::json::serialize(doc) + "\n";
}

}  // namespace

std::string FenceJson(const FenceRegistry& registry, std::string_view name, std::string_view query,
                      http::status* status) {
  std::optional<std::string_view> key;
  if (!query.empty()) {
    if (!query.starts_with("key=") || query.find('&') != std::string_view::npos) {
      *status = http::status::bad_request;
      return Error("the only query is key=KEY");
    }
    key = query.substr(4);
    if (!IsValidFenceKey(*key)) {
      *status = http::status::bad_request;
      return Error("a fence key is 1-128 bytes of A-Z a-z 0-9 - . _ ~");
    }
  }
  for (const auto& entry : registry.Snapshot()) {
    if (entry.name != name) continue;
    boost::json::object doc;
    doc["fence"] = entry.name;
    if (!key) {
      if (entry.keys) {
        PutKeyed(*entry.keys, doc);
      } else {
        doc["keyed"] = false;
        PutSnapshot(entry.snapshot, doc);
      }
      return boost::json::serialize(doc) + "\n";
    }
    doc["key"] = *key;
    const FenceKeys* keyed = registry.FindKeyed(name);
    if (!keyed) {
      *status = http::status::not_found;
      doc["error"] = entry.keys ? "no route uses this keyed fence since the start" : "this fence has no keys";
      return boost::json::serialize(doc) + "\n";
    }
    if (std::optional<FenceSnapshot> snapshot = keyed->Find(*key)) {
      PutSnapshot(*snapshot, doc);
      return boost::json::serialize(doc) + "\n";
    }
    // Unknown: it would start at the floor.
    *status = http::status::not_found;
    doc["known"] = false;
    doc["floor"] = keyed->floor();
    return boost::json::serialize(doc) + "\n";
  }
  *status = http::status::not_found;
  return Error("no such fence");
}

std::string FencesJson(const FenceRegistry& registry, const LockServiceSet* lock_services,
                       const EtcdFenceStore* fence_store) {
  boost::json::object fences;
  for (const auto& entry : registry.Snapshot()) {
    boost::json::object fence;
    if (entry.keys) {
      PutKeyed(*entry.keys, fence);
    } else {
      PutSnapshot(entry.snapshot, fence);
    }
    fences[entry.name] = std::move(fence);
  }
  boost::json::object doc;
  doc["fences"] = std::move(fences);
  doc["state_healthy"] = registry.healthy();
  // Each lock service with its last error: an outage shows here (and in the metrics), not in
  // /readyz, since equal tokens are still served without it.
  boost::json::array services;
  if (lock_services) {
    for (const LockServiceEntry::Status& status : lock_services->Statuses()) {
      boost::json::object service;
      service["name"] = status.name;
      service["kind"] = status.kind;
      if (status.last_error.empty()) {
        service["last_error"] = nullptr;
      } else {
        service["last_error"] = status.last_error;
        service["last_error_seconds_ago"] = status.last_error_age_seconds;
      }
      service["verified"] = status.verified;
      service["rejected"] = status.rejected;
      service["unavailable"] = status.unavailable;
      services.push_back(std::move(service));
    }
  }
  doc["lock_services"] = std::move(services);
  if (fence_store) {
    const EtcdFenceStore::Status status = fence_store->status();
    boost::json::object store;
    store["kind"] = "etcd";
    store["endpoints"] = status.endpoints;
    store["prefix"] = status.prefix;
    store["member_id"] = status.member_id;
    store["members"] = status.members;
    store["gate_open"] = status.gate_open;
    store["gate_seconds_left"] = status.gate_seconds_left;
    store["raises"] = status.raises;
    store["acks"] = status.acks;
    store["raises_refused"] = status.raises_refused;
    if (status.last_error.empty()) {
      store["last_error"] = nullptr;
    } else {
      store["last_error"] = status.last_error;
      store["last_error_seconds_ago"] = status.last_error_seconds_ago;
    }
    doc["fence_store"] = std::move(store);
  }
  return boost::json::serialize(doc) + "\n";
}

AdminServer::AdminServer(const HostPort& listen, Metrics& metrics, FenceRegistry& registry,
                         std::function<bool()> ready, const LockServiceSet* lock_services,
                         const EtcdFenceStore* fence_store)
    : listen_(listen),
      metrics_(metrics),
      registry_(registry),
      lock_services_(lock_services),
      fence_store_(fence_store),
      ready_(std::move(ready)),
      acceptor_(ioc_) {}

AdminServer::~AdminServer() { Stop(); }

Status AdminServer::Start() {
  boost::system::error_code ec;
  tcp::resolver resolver(ioc_);
  auto results = resolver.resolve(listen_.host, std::to_string(listen_.port),
                                  tcp::resolver::passive | tcp::resolver::numeric_service, ec);
  if (!ec && results.empty()) ec = asio::error::host_not_found;
  tcp::endpoint endpoint;
  if (!ec) endpoint = results.begin()->endpoint();
  if (!ec) acceptor_.open(endpoint.protocol(), ec);
  if (!ec) acceptor_.set_option(tcp::acceptor::reuse_address(true), ec);
  if (!ec) acceptor_.bind(endpoint, ec);
  if (!ec) acceptor_.listen(asio::socket_base::max_listen_connections, ec);
  if (ec) return Status::Error("cannot listen on admin address " + listen_.ToString() + ": " + ec.message());
  asio::co_spawn(ioc_, AcceptAdmin(acceptor_, metrics_, registry_, lock_services_, fence_store_, ready_), asio::detached);
  thread_ = std::thread([this] { ioc_.run(); });
  LogInfo("admin listening", {{"admin_listen", listen_.ToString()}});
  return Status::Ok();
}

void AdminServer::Stop() {
  ioc_.stop();
  if (thread_.joinable()) thread_.join();
}

}  // namespace fencing
