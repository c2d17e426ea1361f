#include "etcd/connection.h"

#include "tls/client_context.h"

#include <boost/asio/as_tuple.hpp>
#include <boost/asio/ip/tcp.hpp>
#include <boost/asio/ssl/error.hpp>
#include <boost/asio/use_awaitable.hpp>
#include <boost/beast/http/error.hpp>
#include <boost/beast/http/read.hpp>
#include <boost/beast/http/write.hpp>

#include <tuple>
#include <vector>

#include <netinet/in.h>
#include <netinet/tcp.h>
#include <sys/socket.h>

namespace fencing::etcd {

namespace net = boost::asio;
namespace beast = boost::beast;
namespace http = beast::http;
namespace ssl = net::ssl;
using tcp = net::ip::tcp;

namespace {
constexpr auto kTuple = net::as_tuple(net::use_awaitable);

bool Fail(std::string* error, std::string text) {
  *error = std::move(text);
  return false;
}
}  // namespace

bool MakeTlsContext(const TlsSettings& t, std::unique_ptr<ssl::context>* out, std::string* error) {
  TlsLoadError load_error;
  *out = MakeClientSslContext(t, &load_error);
  if (*out) return true;
  return Fail(error, "etcd tls" + (load_error.key.empty() ? "" : " " + load_error.key) + ": " + load_error.message);
}

std::string Describe(const beast::error_code& ec) {
  if (ec == beast::error::timeout) return "timed out";
  return ec.message();
}

bool ClosedByPeer(const beast::error_code& ec) {
  return ec == http::error::end_of_stream || ec == net::error::eof || ec == net::error::connection_reset ||
         ec == ssl::error::stream_truncated;
}

Connection::Connection(net::io_context& ioc, size_t endpoint, ssl::context* tls) : endpoint_(endpoint) {
  if (tls != nullptr) tls_ = std::make_unique<beast::ssl_stream<beast::tcp_stream>>(ioc, *tls);
  else plain_ = std::make_unique<beast::tcp_stream>(ioc);
}

beast::tcp_stream& Connection::tcp() { return plain_ ? *plain_ : beast::get_lowest_layer(*tls_); }

net::awaitable<std::string> Connection::Connect(const Endpoint& ep, std::string_view tls_server_name,
                                                Clock::time_point deadline) {
  std::vector<tcp::endpoint> targets;
  beast::error_code ec;
  net::ip::address address = net::ip::make_address(ep.host, ec);
  if (!ec) {
    targets.emplace_back(address, ep.port);
  } else {
    // A host name. getaddrinfo cannot be cancelled: a slow resolver is bounded by the caller's
    // deadline timer, which completes the call without waiting for this.
    tcp::resolver resolver(tcp().get_executor());
    const std::string port = std::to_string(ep.port);  // named: no temporary in a co_await (GCC 12)
    auto [rec, results] = co_await resolver.async_resolve(ep.host, port, kTuple);
    if (rec) co_return "resolve " + ep.host + ": " + rec.message();
    for (const auto& r : results) targets.push_back(r.endpoint());
  }
  tcp().expires_at(deadline);
  auto [cec, connected] = co_await tcp().async_connect(targets, kTuple);
  if (cec) co_return "connect: " + Describe(cec);
  tcp().socket().set_option(tcp::no_delay(true), ec);
  if (!tls_) co_return "";
  const std::string name(tls_server_name.empty() ? std::string_view(ep.host) : tls_server_name);
  if (!PrepareClientConnection(tls_->native_handle(), name)) co_return "TLS: OpenSSL could not take the name " + name;
  auto [hec] = co_await tls_->async_handshake(ssl::stream_base::client, kTuple);
  if (hec) co_return "TLS handshake: " + Describe(hec);
  co_return "";
}

void Connection::ExpiresAt(Clock::time_point deadline) { tcp().expires_at(deadline); }
void Connection::ExpiresNever() { tcp().expires_never(); }

void Connection::SetKeepAliveProbes() {
  int fd = tcp().socket().native_handle();
  int on = 1, idle = 10, interval = 5, count = 3;
  ::setsockopt(fd, SOL_SOCKET, SO_KEEPALIVE, &on, sizeof on);
  ::setsockopt(fd, IPPROTO_TCP, TCP_KEEPIDLE, &idle, sizeof idle);
  ::setsockopt(fd, IPPROTO_TCP, TCP_KEEPINTVL, &interval, sizeof interval);
  ::setsockopt(fd, IPPROTO_TCP, TCP_KEEPCNT, &count, sizeof count);
}

void Connection::Close() {
  beast::error_code ignored;
  tcp().socket().shutdown(tcp::socket::shutdown_both, ignored);
  tcp().close();
}

// Each picks the stream with if/else, never ?: : GCC 12 miscompiles a co_await inside a
// conditional expression (it resumed into the TLS branch of a plain connection).
net::awaitable<beast::error_code> Connection::Write(http::request<http::string_body>& request) {
  beast::error_code ec;
  if (tls_) std::tie(ec, std::ignore) = co_await http::async_write(*tls_, request, kTuple);
  else std::tie(ec, std::ignore) = co_await http::async_write(*plain_, request, kTuple);
  co_return ec;
}

net::awaitable<beast::error_code> Connection::Read(http::response_parser<http::string_body>& parser) {
  beast::error_code ec;
  if (tls_) std::tie(ec, std::ignore) = co_await http::async_read(*tls_, buffer_, parser, kTuple);
  else std::tie(ec, std::ignore) = co_await http::async_read(*plain_, buffer_, parser, kTuple);
  co_return ec;
}

net::awaitable<beast::error_code> Connection::ReadHeader(http::response_parser<http::buffer_body>& parser) {
  beast::error_code ec;
  if (tls_) std::tie(ec, std::ignore) = co_await http::async_read_header(*tls_, buffer_, parser, kTuple);
  else std::tie(ec, std::ignore) = co_await http::async_read_header(*plain_, buffer_, parser, kTuple);
  co_return ec;
}

net::awaitable<beast::error_code> Connection::ReadSome(http::response_parser<http::buffer_body>& parser) {
  beast::error_code ec;
  if (tls_) std::tie(ec, std::ignore) = co_await http::async_read_some(*tls_, buffer_, parser, kTuple);
  else std::tie(ec, std::ignore) = co_await http::async_read_some(*plain_, buffer_, parser, kTuple);
  co_return ec;
}

}  // namespace fencing::etcd
