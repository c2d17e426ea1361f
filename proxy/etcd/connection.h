#pragma once
// One connection to one etcd endpoint, plain TCP or TLS (OpenSSL through Boost.Asio's
// ssl::stream), and the few reads and writes made on it. The connection pool (connection_pool.h)
// makes and keeps them and sends the transport's requests (transport.h) on them; a watch
// (watch_stream.h) reads its own one as the body comes.
//
// https: the CA file (else the system's trust store), an optional client certificate (mutual
// TLS), and server_name for SNI and the certificate's name check (the endpoint's host otherwise),
// as tls/client_context.h does them for every https peer.

#include "config/config.h"
#include "etcd/codec.h"

#include <boost/asio/awaitable.hpp>
#include <boost/asio/io_context.hpp>
#include <boost/asio/ssl/context.hpp>
#include <boost/beast/core/error.hpp>
#include <boost/beast/core/flat_buffer.hpp>
#include <boost/beast/core/tcp_stream.hpp>
#include <boost/beast/http/buffer_body.hpp>
#include <boost/beast/http/message.hpp>
#include <boost/beast/http/parser.hpp>
#include <boost/beast/http/string_body.hpp>
#include <boost/beast/ssl/ssl_stream.hpp>

#include <chrono>
#include <memory>
#include <string>
#include <string_view>

namespace fencing::etcd {

using Clock = std::chrono::steady_clock;

// The TLS client context for settings, into *out. False with a readable error (a file that cannot
// be loaded, a certificate without its key).
bool MakeTlsContext(const TlsSettings& settings, std::unique_ptr<boost::asio::ssl::context>* out, std::string* error);

// "timed out" for Beast's timeout, else the error's message.
std::string Describe(const boost::beast::error_code& ec);
// The peer closed the connection (EOF, reset, a TLS stream cut short).
bool ClosedByPeer(const boost::beast::error_code& ec);

class Connection {
 public:
  // tls: null for http://. Not connected yet: Connect does that.
  Connection(boost::asio::io_context& ioc, size_t endpoint, boost::asio::ssl::context* tls);
  Connection(const Connection&) = delete;
  Connection& operator=(const Connection&) = delete;

  size_t endpoint() const { return endpoint_; }  // its index in the pool's endpoints
  bool reused = false;                           // taken from the idle pool

  // Resolves (a host name), connects and, for https, shakes hands, all by deadline. Empty, or why
  // not ("connect: Connection refused", "TLS handshake: certificate verify failed", ...).
  boost::asio::awaitable<std::string> Connect(const Endpoint& endpoint, std::string_view tls_server_name,
                                              Clock::time_point deadline);

  // The deadline of every read and write from now on.
  void ExpiresAt(Clock::time_point deadline);
  void ExpiresNever();
  // Drops bytes read past the last response (before the connection goes back to the pool).
  void DropBuffered() { buffer_.clear(); }
  // TCP keep-alive probes after 10 s of silence, every 5 s, 3 of them: a peer that vanished without
  // a FIN or RST (power off, a partition) is noticed within about 25 s. For a watch, quiet for as
  // long as nothing changes.
  void SetKeepAliveProbes();
  // Ends every wait on the connection (they complete with an error). Idempotent.
  void Close();

  boost::asio::awaitable<boost::beast::error_code> Write(boost::beast::http::request<boost::beast::http::string_body>& request);
  // A whole response.
  boost::asio::awaitable<boost::beast::error_code> Read(boost::beast::http::response_parser<boost::beast::http::string_body>& parser);
  // A response read as it comes: its head, then what is there of its body.
  boost::asio::awaitable<boost::beast::error_code> ReadHeader(
      boost::beast::http::response_parser<boost::beast::http::buffer_body>& parser);
  boost::asio::awaitable<boost::beast::error_code> ReadSome(
      boost::beast::http::response_parser<boost::beast::http::buffer_body>& parser);

 private:
  boost::beast::tcp_stream& tcp();

  const size_t endpoint_;
  std::unique_ptr<boost::beast::tcp_stream> plain_;
  std::unique_ptr<boost::beast::ssl_stream<boost::beast::tcp_stream>> tls_;
  boost::beast::flat_buffer buffer_;
};

}  // namespace fencing::etcd
