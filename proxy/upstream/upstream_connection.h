#pragma once
// One backend connection: a TCP socket and, for an https backend, the TLS stream over it.
//
// The exchange reads and writes through ReadSome and Write, which go through TLS when there is
// one. A plain connection pays one branch for that and nothing else: behind it are the very
// socket operations the exchange made before TLS existed (the same template instantiations as the
// client side's), with no coroutine frame, no type erasure and no TLS code inlined beside them
// (the TLS operations are out of line, in upstream_connection.cpp).

#include "common/io.h"
#include "tls/client_context.h"

#include <boost/asio/ssl/stream.hpp>
#include <boost/asio/write.hpp>
#include <boost/beast/core/flat_buffer.hpp>

#include <array>
#include <cstddef>
#include <memory>
#include <tuple>

namespace fencing {

using TlsStream = boost::asio::ssl::stream<io::Socket&>;
// What an operation on a connection completes with: its error and the bytes it moved.
using IoResult = std::tuple<boost::system::error_code, size_t>;
// A gather write: a head, chunk framing and body bytes (the exchange's GatherWrite).
using GatherBuffers = std::array<boost::asio::const_buffer, 5>;

io::Awaitable<IoResult> TlsReadSome(TlsStream& tls, boost::asio::mutable_buffer into);
io::Awaitable<IoResult> TlsWrite(TlsStream& tls, const GatherBuffers& buffers);

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

  // Reads what is there (at least a byte) into `into`.
  io::Awaitable<IoResult> ReadSome(boost::asio::mutable_buffer into) {
    if (tls) [[unlikely]] return TlsReadSome(*tls, into);
    return socket.async_read_some(into, io::kTuple);
  }
  // Writes all of buffers.
  io::Awaitable<IoResult> Write(const GatherBuffers& buffers) {
    if (tls) [[unlikely]] return TlsWrite(*tls, buffers);
    return boost::asio::async_write(socket, buffers, io::kTuple);
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
