#pragma once
// The client listener's TLS context (an OpenSSL SSL_CTX), built from the route file's `tls`
// block and the bytes of its files. What it offers (contract "Transport security"):
//
//   versions      TLS 1.2 and 1.3 only; min_version "1.3" drops 1.2
//   TLS 1.2       ECDHE key exchange with AES-GCM or CHACHA20-POLY1305 only (TLS 1.3's suites
//                 are all of that kind: OpenSSL's defaults)
//   options       no renegotiation, no compression
//   ALPN          "h2" then "http/1.1" (offer_h2, set for every listener: HTTP/2 clients are
//                 served whatever the backend speaks). A client that offers ALPN with neither is
//                 refused with the no_application_protocol alert (RFC 7301 section 3.2, as nginx
//                 does since 1.21.4). A client that offers no ALPN at all is served HTTP/1.1.
//   sessions      as nginx's defaults: tickets on (their keys are the context's own, so a new
//                 context after a reload starts new ones), no server-side session cache, sessions
//                 live 5 minutes
//   client certs  with client_ca_file: asked for, verified against it (chain, validity, the
//                 clientAuth purpose); `require` refuses a client without one, `optional` serves it
//                 without an identity. A certificate that is sent and does not verify fails the
//                 handshake either way.
//
// A context is immutable once built. A reload builds another (tls/reloader.h); each connection's
// SSL holds a reference to the SSL_CTX it began with, so open connections never see a swap.

#include "config/config.h"

#include <openssl/ssl.h>

#include <cstdint>
#include <memory>
#include <optional>
#include <string>

namespace fencing::tls {

// The files of the tls block.
enum class ServerFile { kCert, kKey, kClientCa };

// The bytes of the files, as read at one time (client_ca empty without client_ca_file).
struct ServerFiles {
  std::string cert, key, client_ca;
  bool operator==(const ServerFiles&) const = default;
};

// Why a context could not be made, and which file is to blame.
struct LoadError {
  ServerFile file = ServerFile::kCert;
  std::string message;  // names the key and the path: "tls.cert_file /etc/tls/tls.crt: cannot read: ..."
};

// "tls.cert_file", "tls.key_file", "tls.client_ca_file".
const char* ServerFileKey(ServerFile file);

// Reads every file the block names; nullopt and *error at the first that cannot be read.
std::optional<ServerFiles> ReadServerFiles(const ListenTlsConfig& config, LoadError* error);

// The error as the route file's: at the position of the key that names the file.
ConfigError ToConfigError(const ProxyConfig& config, const LoadError& error);

class ServerContext {
 public:
  // Null and *error when a file does not parse, the key does not belong to the certificate, or
  // OpenSSL refuses them (a key too small for its security level, say).
  static std::shared_ptr<const ServerContext> Build(const ListenTlsConfig& config, const ServerFiles& files,
                                                    LoadError* error);
  ~ServerContext();
  ServerContext(const ServerContext&) = delete;
  ServerContext& operator=(const ServerContext&) = delete;

  // A new SSL for one connection, owned by the caller (it holds the SSL_CTX for its lifetime).
  SSL* NewConnection() const;

  const std::string& serial() const { return serial_; }     // the leaf's, hex
  int64_t not_after() const { return not_after_; }           // the leaf's, Unix seconds
  // The first CA of client_ca_file to expire, Unix seconds; nullopt without client_ca_file.
  std::optional<int64_t> client_ca_not_after() const { return client_ca_not_after_; }

 private:
  ServerContext() = default;

  SSL_CTX* ctx_ = nullptr;
  std::string serial_;
  int64_t not_after_ = 0;
  std::optional<int64_t> client_ca_not_after_;
};

}  // namespace fencing::tls
