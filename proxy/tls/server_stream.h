#pragma once
// The stream a session reads requests from and writes answers to: a client's TCP connection,
// plain or with TLS over it. Sessions, request bodies and exchanges are written against it once;
// each read and write picks the layer with one branch, so the plain path costs that branch and
// nothing else: no coroutine, no type erasure, no handler wrapped or moved once more, no buffer
// of its own (the TLS state, with OpenSSL's SSL, Asio's record buffers and the client's
// identity, is allocated only for a TLS connection).
//
// The TCP socket stays reachable (socket()) for what is not a read or a write of the protocol:
// the sweep's cancel, the cold idle wait for readability, the lingering close, close itself.

#include "common/io.h"
#include "tls/server_context.h"
#include "tls/server_identity.h"

#include <boost/asio/ssl/stream.hpp>
#include <boost/system/error_code.hpp>

#include <cstddef>
#include <memory>
#include <utility>

namespace fencing::tls {

class ServerStream {
 public:
  using executor_type = io::Executor;
  using SslStream = boost::asio::ssl::stream<io::Socket&>;

  explicit ServerStream(io::Socket socket) : socket_(std::move(socket)) {}
  ServerStream(const ServerStream&) = delete;
  ServerStream& operator=(const ServerStream&) = delete;

  // TLS over the connection from now on, with a new SSL of `context`: the server side of a
  // handshake (ssl().async_handshake) comes next.
  void StartTls(const ServerContext& context) { tls_ = std::make_unique<Tls>(socket_, context.NewConnection()); }
  bool tls() const { return tls_ != nullptr; }
  SslStream& ssl() { return tls_->stream; }

  // After the handshake: who the client is, from the certificate it verified (none without one).
  void TakeIdentity() { tls_->identity = VerifiedIdentity(tls_->stream.native_handle()); }
  const ClientIdentity& identity() const { return tls_ ? tls_->identity : kNoIdentity; }

  io::Socket& socket() { return socket_; }
  executor_type get_executor() { return socket_.get_executor(); }

  // Each layer's own initiating function, the token passed on untouched: with the same token and
  // completion signature both return the same type (an awaitable for a coroutine, nothing for a
  // handler), made in place (a conditional of two prvalues), and inlined: the plain path is the
  // socket's own call behind one branch.
  template <typename MutableBuffers, typename Token>
  [[gnu::always_inline]] auto async_read_some(const MutableBuffers& buffers, Token&& token) {
    return tls_ ? tls_->stream.async_read_some(buffers, std::forward<Token>(token))
                : socket_.async_read_some(buffers, std::forward<Token>(token));
  }

  template <typename ConstBuffers, typename Token>
  [[gnu::always_inline]] auto async_write_some(const ConstBuffers& buffers, Token&& token) {
    return tls_ ? tls_->stream.async_write_some(buffers, std::forward<Token>(token))
                : socket_.async_write_some(buffers, std::forward<Token>(token));
  }

 private:
  struct Tls {
    Tls(io::Socket& socket, SSL* ssl) : stream(socket, ssl) {}
    SslStream stream;
    ClientIdentity identity;
  };

  io::Socket socket_;
  std::unique_ptr<Tls> tls_;
};

}  // namespace fencing::tls
