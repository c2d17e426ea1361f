#include "admin/admin_server.h"

#include "admin/metrics.h"
#include "common/log.h"
#include "fence/fence_registry.h"

#include <boost/asio/as_tuple.hpp>
#include <boost/asio/co_spawn.hpp>
#include <boost/asio/detached.hpp>
#include <boost/asio/use_awaitable.hpp>
#include <boost/beast/core/flat_buffer.hpp>
#include <boost/beast/core/tcp_stream.hpp>
#include <boost/beast/http/read.hpp>
#include <boost/beast/http/string_body.hpp>
#include <boost/beast/http/write.hpp>
#include <boost/json/object.hpp>
#include <boost/json/serialize.hpp>

namespace fencing {

namespace asio = boost::asio;
namespace beast = boost::beast;
namespace http = beast::http;
using tcp = asio::ip::tcp;

namespace {

constexpr auto kTuple = asio::as_tuple(asio::use_awaitable);
constexpr auto kAdminTimeout = std::chrono::seconds(10);

http::response<http::string_body> Answer(const http::request<http::string_body>& req, Metrics& metrics,
                                         FenceRegistry& registry, const std::function<bool()>& ready) {
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
      res.body() = registry.healthy() ? "not ready: shutting down\n"
                                      : "not ready: the state file failed; restart the proxy\n";
    }
  } else if (path == "/fences") {
    res.set(http::field::content_type, "application/json");
    res.body() = FencesJson(registry);
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
    auto res = Answer(parser.get(), metrics, registry, ready);
    bool keep_alive = res.keep_alive();
    auto [wec, wn] = co_await http::async_write(stream, res, kTuple);
    if (wec || !keep_alive) break;
  }
  boost::system::error_code ignored;
  stream.socket().shutdown(tcp::socket::shutdown_both, ignored);
}

asio::awaitable<void> AcceptAdmin(tcp::acceptor& acceptor, Metrics& metrics, FenceRegistry& registry,
                                  std::function<bool()> ready) {
  for (;;) {
    auto [ec, socket] = co_await acceptor.async_accept(kTuple);
    if (ec == asio::error::operation_aborted || !acceptor.is_open()) co_return;
    if (ec) continue;
    asio::co_spawn(acceptor.get_executor(), ServeAdmin(std::move(socket), metrics, registry, ready), asio::detached);
  }
}

}  // namespace

std::string FencesJson(const FenceRegistry& registry) {
  boost::json::object fences;
  for (const auto& entry : registry.Snapshot()) {
    boost::json::object fence;
    fence["max_token"] = entry.snapshot.max_token;
    if (entry.snapshot.pending) {
      fence["pending"] = entry.snapshot.pending;
    } else {
      fence["pending"] = nullptr;
    }
    fence["inflight"] = entry.snapshot.inflight;
    fence["waiting"] = entry.snapshot.waiting;
    fences[entry.name] = std::move(fence);
  }
  boost::json::object doc;
  doc["fences"] = std::move(fences);
  doc["state_healthy"] = registry.healthy();
  return boost::json::serialize(doc) + "\n";
}

AdminServer::AdminServer(const HostPort& listen, Metrics& metrics, FenceRegistry& registry,
                         std::function<bool()> ready)
    : listen_(listen), metrics_(metrics), registry_(registry), ready_(std::move(ready)), acceptor_(ioc_) {}

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
  asio::co_spawn(ioc_, AcceptAdmin(acceptor_, metrics_, registry_, ready_), asio::detached);
  thread_ = std::thread([this] { ioc_.run(); });
  LogInfo("admin listening", {{"admin_listen", listen_.ToString()}});
  return Status::Ok();
}

void AdminServer::Stop() {
  ioc_.stop();
  if (thread_.joinable()) thread_.join();
}

}  // namespace fencing
