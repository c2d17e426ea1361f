#pragma once
// One backend connection: a TCP socket and, for an https backend, the TLS stream over it.
//
// It is an Asio AsyncReadStream and AsyncWriteStream: asio::async_write and the exchange's reads
// take it as they took the socket, and each operation goes through TLS when there is one. A
// plain connection pays one branch per operation for that, nothing else: the same socket calls
// as before, no coroutine frame and no type erasure in between.

#include "common/io.h"
#include "tls/client_context.h"

#include <boost/asio/ssl/stream.hpp>
#include <boost/beast/core/flat_buffer.hpp>

#include <memory>
#include <utility>

namespace fencing {

using TlsStream = boost::asio::ssl::stream<io::Socket&>;

struct UpstreamConnection {
  explicit UpstreamConnection(boost::asio::io_context& ioc) : socket(ioc.get_executor()) {}

  // The session using it enforces timeouts.request (Session::Sweep) by cancelling the socket,
  // which ends a TLS operation as well.
  io::Socket socket;
  // https: the settings tls was made from (the pool keeps only connections made with its
  // current ones), and the TLS stream over socket (declared after it, so destroyed first).
  std::shared_ptr<TlsClientContext> tls_context;
  std::unique_ptr<TlsStream> tls;
  boost::beast::flat_buffer buffer;
  bool reused = false;  // came from the pool: the backend may have closed it meanwhile

  using executor_type = io::Executor;
  executor_type get_executor() { return socket.get_executor(); }

  template <typename MutableBuffers, typename Token>
  auto async_read_some(const MutableBuffers& buffers, Token&& token) {
    if (tls) return tls->async_read_some(buffers, std::forward<Token>(token));
    return socket.async_read_some(buffers, std::forward<Token>(token));
  }

  template <typename ConstBuffers, typename Token>
  auto async_write_some(const ConstBuffers& buffers, Token&& token) {
    if (tls) return tls->async_write_some(buffers, std::forward<Token>(token));
    return socket.async_write_some(buffers, std::forward<Token>(token));
  }

  // TLS only: whether the TLS layer holds nothing the backend sent after the last response. Bytes
  // already read off the socket do not show in a peek at it: a record the read-ahead brought in
  // with the response's last one (stray data, a close_notify, an alert) waits in the BIO pair
  // between Asio and OpenSSL, or in OpenSSL's record buffer, decrypted or not. (Asio's own input
  // buffer holds nothing between operations: it hands what it reads to the BIO pair at once, and
  // reads only when OpenSSL has drained it, at most the pair's size.)
  bool TlsQuiet() const;
};

}  // namespace fencing
