#include "upstream/upstream_connection.h"

#include <openssl/bio.h>
#include <openssl/ssl.h>

namespace fencing {

io::Awaitable<IoResult> TlsReadSome(TlsStream& tls, boost::asio::mutable_buffer into) {
  return tls.async_read_some(into, io::kTuple);
}

io::Awaitable<IoResult> TlsWrite(TlsStream& tls, const GatherBuffers& buffers) {
  return boost::asio::async_write(tls, buffers, io::kTuple);
}

bool UpstreamConnection::TlsQuiet() const {
  SSL* ssl = tls->native_handle();
  return SSL_has_pending(ssl) == 0 && BIO_ctrl_pending(SSL_get_rbio(ssl)) == 0 &&
         (SSL_get_shutdown(ssl) & SSL_RECEIVED_SHUTDOWN) == 0;
}

}  // namespace fencing
