#include "tls/server_stream.h"

#include <boost/asio/ssl/stream.hpp>

namespace fencing::tls {

struct ServerStream::Tls {
  Tls(io::Socket& socket, SSL* ssl) : stream(socket, ssl) {}
  boost::asio::ssl::stream<io::Socket&> stream;
  ClientIdentity identity;
};

ServerStream::ServerStream(io::Socket socket) : socket_(std::move(socket)) {}

ServerStream::~ServerStream() = default;

void ServerStream::StartTls(const ServerContext& context) {
  tls_ = std::make_unique<Tls>(socket_, context.NewConnection());
}

void ServerStream::TakeIdentity() {
  tls_->identity = VerifiedIdentity(tls_->stream.native_handle());
  identity_ = &tls_->identity;
}

void ServerStream::TlsHandshake(Handler handler) {
  tls_->stream.async_handshake(boost::asio::ssl::stream_base::server, std::move(handler));
}

void ServerStream::TlsCloseNotify(Handler handler) {
  // SSL_shutdown would wait for the client's close_notify; told it has come, it only sends ours.
  SSL* ssl = tls_->stream.native_handle();
  SSL_set_shutdown(ssl, SSL_get_shutdown(ssl) | SSL_RECEIVED_SHUTDOWN);
  tls_->stream.async_shutdown(std::move(handler));
}

void ServerStream::TlsReadSome(boost::asio::mutable_buffer buffer, IoHandler handler) {
  tls_->stream.async_read_some(buffer, std::move(handler));
}

void ServerStream::TlsWriteSome(boost::asio::const_buffer buffer, IoHandler handler) {
  tls_->stream.async_write_some(buffer, std::move(handler));
}

}  // namespace fencing::tls
