#pragma once
// The client side of TLS, for every peer the proxy connects to over https: the backend
// (backend_tls) and etcd (a lock service's or the fence store's tls). One rule for both.
//
// A context (MakeClientSslContext): TLS 1.2 or newer; the peer's chain verified against ca_file,
// or the system's trust store when there is none; an optional client certificate (mutual TLS);
// no renegotiation (a server may not restart the handshake mid-connection) and no compression
// (CRIME); ALPN offers http/1.1 only. The files are read when the context is made.
//
// A connection (PrepareClientConnection, before its handshake): SNI is the server name unless
// that is an IP address (RFC 6066 sends none), and the peer's certificate must carry the name
// (a DNS SAN, no partial wildcards) or the address (an IP SAN). A chain or name that does not
// verify fails the handshake, so nothing is ever written to an unverified peer.
//
// TlsClientContext is the backend's: a context and the one server name its connections check,
// made at start, by --check and at every reload (so a SIGHUP picks up renewed files).

#include "config/config.h"

#include <boost/asio/ssl/context.hpp>

#include <memory>
#include <string>
#include <string_view>

namespace fencing {

// What did not load: key is the TlsSettings key naming the file ("ca_file", "cert_file",
// "key_file"), or "" for the system's trust store; message says why, naming the file.
struct TlsLoadError {
  std::string key;
  std::string message;
};

// The context for settings (see above). Null with *error set when a file does not load, or the
// certificate and key do not belong together.
std::unique_ptr<boost::asio::ssl::context> MakeClientSslContext(const TlsSettings& settings, TlsLoadError* error);

// SNI and the verified name for one connection made from such a context. False only when
// OpenSSL cannot take them (then the handshake must not start).
bool PrepareClientConnection(SSL* ssl, const std::string& server_name);

class TlsClientContext {
 public:
  // server_name: settings.server_name, else default_name (the backend's host as written).
  static std::shared_ptr<TlsClientContext> Make(const TlsSettings& settings, std::string_view default_name,
                                                TlsLoadError* error);

  boost::asio::ssl::context& context() { return *context_; }
  const std::string& server_name() const { return server_name_; }
  bool Prepare(SSL* ssl) const { return PrepareClientConnection(ssl, server_name_); }

 private:
  TlsClientContext(std::unique_ptr<boost::asio::ssl::context> context, std::string server_name)
      : context_(std::move(context)), server_name_(std::move(server_name)) {}

  std::unique_ptr<boost::asio::ssl::context> context_;
  std::string server_name_;
};

// The backend's TLS client for config into *out: null for an http:// backend. False when a file
// does not load, with *error positioned at the key that names it ("backend_tls.ca_file").
bool MakeBackendTls(const ProxyConfig& config, std::shared_ptr<TlsClientContext>* out, ConfigError* error);

}  // namespace fencing
