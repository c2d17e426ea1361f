#include "tls/server_stream.h"

#include <boost/asio/error.hpp>
#include <boost/asio/post.hpp>
#include <boost/asio/ssl/error.hpp>

#include <openssl/err.h>
#include <openssl/ssl.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <utility>

// TLS driven by readiness, as nginx drives it: OpenSSL reads and writes the socket itself
// (SSL_set_fd on the non-blocking descriptor) and, when it cannot go on, says which readiness it
// waits for (SSL_ERROR_WANT_READ / WANT_WRITE); the operation then waits for that readiness with
// the socket's async_wait and tries again. Nothing sits between OpenSSL and the socket: no BIO
// pair, no record buffers of our own, no copy of a record. With SSL_MODE_RELEASE_BUFFERS OpenSSL
// frees its record buffers whenever they are empty, so an idle TLS connection keeps only its SSL
// (what that costs, by the benchmark: bench/RESULTS.md). Asio's ssl::stream, used before, keeps
// two 17 KB buffers of its own and a BIO pair of two more for the connection's whole life.
//
// One read-side operation (a read or the handshake) and one write-side operation (a write or the
// close_notify) may be under way at once, as with a socket; each waits in the socket's own
// readiness wait, so the socket's cancel() ends it with operation_aborted, and the pending
// handler is owned by that wait (nothing is left behind if the io_context is destroyed).

namespace fencing::tls {

namespace asio = boost::asio;
using boost::system::error_code;

// The most plaintext one TLS record carries.
constexpr size_t kRecordText = 16384;

struct ServerStream::Tls {
  explicit Tls(SSL* s) : ssl(s) {}
  ~Tls() { SSL_free(ssl); }
  Tls(const Tls&) = delete;
  Tls& operator=(const Tls&) = delete;

  SSL* ssl;
  ClientIdentity identity;
};

namespace {

// What one attempt of an OpenSSL call came to.
enum class Step { kDone, kWantRead, kWantWrite, kFailed };

struct Attempt {
  Step step;
  error_code ec;  // kFailed: why
};

// After an OpenSSL call returned `ret` (<= 0): what it waits for, or the error it ended in, named
// as Asio's ssl::stream names it (the clean close is eof, a close without close_notify is
// stream_truncated, an alert or a protocol error is in Asio's SSL category).
Attempt Classify(SSL* ssl, int ret) {
  const int error = SSL_get_error(ssl, ret);
  switch (error) {
    case SSL_ERROR_WANT_READ:
      return {Step::kWantRead, {}};
    case SSL_ERROR_WANT_WRITE:
      return {Step::kWantWrite, {}};
    case SSL_ERROR_ZERO_RETURN:
      return {Step::kFailed, asio::error::eof};
    case SSL_ERROR_SYSCALL: {
      const int saved = errno;
      ERR_clear_error();
      if (saved == 0) return {Step::kFailed, asio::ssl::error::stream_truncated};
      return {Step::kFailed, error_code(saved, boost::system::system_category())};
    }
    default: {
      const unsigned long code = ERR_peek_last_error();
      ERR_clear_error();
      if (ERR_GET_REASON(code) == SSL_R_UNEXPECTED_EOF_WHILE_READING) {
        return {Step::kFailed, asio::ssl::error::stream_truncated};
      }
      return {Step::kFailed, error_code(static_cast<int>(code), asio::error::get_ssl_category())};
    }
  }
}

}  // namespace

ServerStream::ServerStream(io::Socket socket) : socket_(std::move(socket)) {}

ServerStream::~ServerStream() = default;

void ServerStream::StartTls(const ServerContext& context) {
  SSL* ssl = context.NewConnection();
  tls_ = std::make_unique<Tls>(ssl);
  // OpenSSL reads and writes the descriptor itself: without blocking, and a write may end after
  // some of its records (a write_some), tried again later from wherever the caller's buffer is.
  error_code ec;
  socket_.non_blocking(true, ec);
  SSL_set_fd(ssl, socket_.native_handle());
  SSL_set_accept_state(ssl);
  SSL_set_mode(ssl, SSL_MODE_ENABLE_PARTIAL_WRITE | SSL_MODE_ACCEPT_MOVING_WRITE_BUFFER | SSL_MODE_RELEASE_BUFFERS);
  // Read what the socket has, up to a record buffer, in one read: otherwise OpenSSL reads each
  // record's 5-byte header and then its body, two reads a record.
  SSL_set_read_ahead(ssl, 1);
}

void ServerStream::TakeIdentity() {
  tls_->identity = VerifiedIdentity(tls_->ssl);
  identity_ = &tls_->identity;
}

std::string_view ServerStream::alpn() const {
  if (!tls_) return {};
  const unsigned char* data = nullptr;
  unsigned int length = 0;
  SSL_get0_alpn_selected(tls_->ssl, &data, &length);
  return std::string_view(reinterpret_cast<const char*>(data), data ? length : 0);
}

bool ServerStream::HasBufferedInput() const { return tls_ && SSL_has_pending(tls_->ssl) == 1; }

// One operation: `attempt` is tried now and after each readiness it asks for, until it is done
// or fails; then `handler` gets the error and `attempt`'s count. The first try's result is posted
// (a handler is never called from inside its initiating function); after a wait it is called
// from the wait's own completion.
template <typename OpHandler, typename AttemptFn>
void ServerStream::Drive(OpHandler handler, AttemptFn attempt, bool waited) {
  size_t n = 0;
  ERR_clear_error();
  const Attempt result = attempt(&n);
  if (result.step == Step::kWantRead || result.step == Step::kWantWrite) {
    socket_.async_wait(result.step == Step::kWantRead ? io::Socket::wait_read : io::Socket::wait_write,
                       [this, handler = std::move(handler), attempt](error_code ec) mutable {
                         if (ec) {
                           Complete(std::move(handler), ec, 0);
                           return;
                         }
                         Drive(std::move(handler), attempt, true);
                       });
    return;
  }
  if (waited) {
    Complete(std::move(handler), result.ec, n);
    return;
  }
  asio::post(socket_.get_executor(), [this, handler = std::move(handler), ec = result.ec, n]() mutable {
    Complete(std::move(handler), ec, n);
  });
}

void ServerStream::Complete(IoHandler handler, error_code ec, size_t n) { std::move(handler)(ec, n); }
void ServerStream::Complete(Handler handler, error_code ec, size_t) { std::move(handler)(ec); }

void ServerStream::TlsHandshake(Handler handler) {
  SSL* ssl = tls_->ssl;
  Drive(std::move(handler), [ssl](size_t*) {
    const int ret = SSL_do_handshake(ssl);
    return ret == 1 ? Attempt{Step::kDone, {}} : Classify(ssl, ret);
  });
}

void ServerStream::TlsCloseNotify(Handler handler) {
  // SSL_shutdown would wait for the client's close_notify; told it has come, it only sends ours.
  SSL* ssl = tls_->ssl;
  SSL_set_shutdown(ssl, SSL_get_shutdown(ssl) | SSL_RECEIVED_SHUTDOWN);
  Drive(std::move(handler), [ssl](size_t*) {
    const int ret = SSL_shutdown(ssl);
    // 1: sent (0, sent but the client's not yet seen, does not come with RECEIVED set).
    return ret >= 0 ? Attempt{Step::kDone, {}} : Classify(ssl, ret);
  });
}

void ServerStream::TlsReadSome(asio::mutable_buffer buffer, IoHandler handler) {
  SSL* ssl = tls_->ssl;
  if (buffer.size() == 0) {
    Drive(std::move(handler), [](size_t*) { return Attempt{Step::kDone, {}}; });
    return;
  }
  Drive(std::move(handler), [ssl, buffer](size_t* n) {
    const int ret = SSL_read_ex(ssl, buffer.data(), buffer.size(), n);
    return ret == 1 ? Attempt{Step::kDone, {}} : Classify(ssl, ret);
  });
}

void ServerStream::TlsWriteSome(const WriteParts& buffers, IoHandler handler) {
  SSL* ssl = tls_->ssl;
  if (buffers.count == 0) {
    Drive(std::move(handler), [](size_t*) { return Attempt{Step::kDone, {}}; });
    return;
  }
  Drive(std::move(handler), [ssl, buffers](size_t* n) {
    // One part, or a first part that fills a record: written from where it is. Otherwise the
    // parts, up to a record, copied into one buffer (each attempt copies again: the caller's
    // buffers stay put until the write completes, and a record OpenSSL holds back after a partial
    // write is already encrypted in its own buffer).
    const void* data = buffers.parts[0].data();
    size_t size = buffers.parts[0].size();
    if (buffers.count > 1 && size < kRecordText) {
      thread_local char gathered[kRecordText];
      size = 0;
      for (size_t i = 0; i < buffers.count && size < kRecordText; ++i) {
        const size_t take = std::min(buffers.parts[i].size(), kRecordText - size);
        std::memcpy(gathered + size, buffers.parts[i].data(), take);
        size += take;
      }
      data = gathered;
    }
    const int ret = SSL_write_ex(ssl, data, size, n);
    return ret == 1 ? Attempt{Step::kDone, {}} : Classify(ssl, ret);
  });
}

}  // namespace fencing::tls
