#pragma once
// The stream a session reads requests from and writes answers to: a client's TCP connection,
// plain or with TLS over it. Sessions, request bodies and exchanges are written against it once;
// each read and write picks the layer with one branch.
//
// The plain path is the socket's own call behind that branch: no coroutine, no type erasure, no
// handler wrapped or moved once more, no buffer of its own (what that costs, by callgrind:
// docs/design-notes.md). The TLS path type-erases its handler (any_completion_handler) and runs
// in server_stream.cpp, where OpenSSL reads and writes the socket itself and each operation waits
// for the readiness OpenSSL asks for (as nginx drives it; why, there). The TLS state (OpenSSL's
// SSL and the client's identity) is allocated only for a TLS connection.
//
// The TCP socket stays reachable (socket()) for what is not a read or a write of the protocol:
// the sweep's cancel, the cold idle wait for readability, the lingering close, close itself.

#include "common/io.h"
#include "tls/server_context.h"
#include "tls/server_identity.h"

#include <boost/asio/any_completion_handler.hpp>
#include <boost/asio/async_result.hpp>
#include <boost/asio/buffer.hpp>
#include <boost/system/error_code.hpp>

#include <cstddef>
#include <memory>
#include <string_view>
#include <utility>

namespace fencing::tls {

class ServerStream {
 public:
  using executor_type = io::Executor;
  using IoHandler = boost::asio::any_completion_handler<void(boost::system::error_code, std::size_t)>;
  using Handler = boost::asio::any_completion_handler<void(boost::system::error_code)>;

  explicit ServerStream(io::Socket socket);
  ~ServerStream();
  ServerStream(const ServerStream&) = delete;
  ServerStream& operator=(const ServerStream&) = delete;

  // TLS over the connection from now on, with a new SSL of `context`: the server side of a
  // handshake (async_handshake) comes next.
  void StartTls(const ServerContext& context);
  bool tls() const { return tls_ != nullptr; }

  // TLS only: the server side of the handshake; then TakeIdentity.
  template <typename Token>
  auto async_handshake(Token&& token) {
    return boost::asio::async_initiate<Token, void(boost::system::error_code)>(
        [this](auto handler) { TlsHandshake(Handler(std::move(handler))); }, token);
  }
  // TLS only: sends close_notify without waiting for the client's (a one-way close, as nginx's).
  template <typename Token>
  auto async_close_notify(Token&& token) {
    return boost::asio::async_initiate<Token, void(boost::system::error_code)>(
        [this](auto handler) { TlsCloseNotify(Handler(std::move(handler))); }, token);
  }

  // After the handshake: who the client is, from the certificate it verified (none without one).
  void TakeIdentity();
  // TLS only: OpenSSL holds input already read from the socket (a record, or part of one), so a
  // wait for the socket's readiness alone could wait for what has come.
  bool HasBufferedInput() const;
  const ClientIdentity& identity() const { return *identity_; }
  // After the handshake: the protocol ALPN chose ("h2", "http/1.1"); empty without TLS or ALPN.
  std::string_view alpn() const;

  io::Socket& socket() { return socket_; }
  executor_type get_executor() { return socket_.get_executor(); }

  // A conditional of two prvalues of one type (an awaitable for a coroutine, nothing for a
  // handler): made in place, whichever layer runs.
  template <typename MutableBuffers, typename Token>
  [[gnu::always_inline]] auto async_read_some(const MutableBuffers& buffers, Token&& token) {
    return tls_ ? boost::asio::async_initiate<Token, void(boost::system::error_code, std::size_t)>(
                      [this](auto handler, const MutableBuffers& b) {
                        TlsReadSome(First<boost::asio::mutable_buffer>(b), IoHandler(std::move(handler)));
                      },
                      token, buffers)
                : socket_.async_read_some(buffers, std::forward<Token>(token));
  }

  template <typename ConstBuffers, typename Token>
  [[gnu::always_inline]] auto async_write_some(const ConstBuffers& buffers, Token&& token) {
    return tls_ ? boost::asio::async_initiate<Token, void(boost::system::error_code, std::size_t)>(
                      [this](auto handler, const ConstBuffers& b) {
                        TlsWriteSome(Gather(b), IoHandler(std::move(handler)));
                      },
                      token, buffers)
                : socket_.async_write_some(buffers, std::forward<Token>(token));
  }

 private:
  struct Tls;  // server_stream.cpp

  // The first non-empty buffer of a sequence (or an empty one): what a TLS record carries at a
  // time, as Asio's SSL stream itself takes it.
  template <typename Buffer, typename Buffers>
  static Buffer First(const Buffers& buffers) {
    for (auto it = boost::asio::buffer_sequence_begin(buffers); it != boost::asio::buffer_sequence_end(buffers); ++it) {
      Buffer buffer(*it);
      if (buffer.size() != 0) return buffer;
    }
    return Buffer();
  }

  template <typename OpHandler, typename AttemptFn>
  void Drive(OpHandler handler, AttemptFn attempt, bool waited = false);
  static void Complete(IoHandler handler, boost::system::error_code ec, std::size_t n);
  static void Complete(Handler handler, boost::system::error_code ec, std::size_t n);

  // The first non-empty buffers of a write (up to kMaxParts): a response's head, chunk framing
  // and body go out in one TLS record where they fit in one, not a record (and a write) each.
  struct WriteParts {
    static constexpr std::size_t kMaxParts = 8;
    boost::asio::const_buffer parts[kMaxParts];
    std::size_t count = 0;
  };
  template <typename ConstBuffers>
  static WriteParts Gather(const ConstBuffers& buffers) {
    WriteParts gathered;
    for (auto it = boost::asio::buffer_sequence_begin(buffers);
         it != boost::asio::buffer_sequence_end(buffers) && gathered.count < WriteParts::kMaxParts; ++it) {
      boost::asio::const_buffer buffer(*it);
      if (buffer.size() != 0) gathered.parts[gathered.count++] = buffer;
    }
    return gathered;
  }

  void TlsHandshake(Handler handler);
  void TlsCloseNotify(Handler handler);
  void TlsReadSome(boost::asio::mutable_buffer buffer, IoHandler handler);
  void TlsWriteSome(const WriteParts& buffers, IoHandler handler);

  io::Socket socket_;
  std::unique_ptr<Tls> tls_;
  const ClientIdentity* identity_ = &kNoIdentity;
};

}  // namespace fencing::tls
