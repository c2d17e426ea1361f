#include "tls/client_context.h"

#include <boost/asio/ip/address.hpp>

#include <openssl/ssl.h>
#include <openssl/x509v3.h>

#include <fcntl.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

namespace fencing {

namespace ssl = boost::asio::ssl;

namespace {

// ALPN protocol list, wire format: one length-prefixed name.
constexpr unsigned char kAlpnHttp11[] = {8, 'h', 't', 't', 'p', '/', '1', '.', '1'};

bool Fail(TlsLoadError* error, std::string key, std::string message) {
  *error = TlsLoadError{std::move(key), std::move(message)};
  return false;
}

// A file that cannot be opened is named with errno's reason ("No such file or directory",
// "Permission denied"): OpenSSL's own message for it is a bare "system lib".
bool Readable(const std::string& path, const std::string& key, TlsLoadError* error) {
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) return Fail(error, key, "cannot read " + path + ": " + std::strerror(errno));
  ::close(fd);
  return true;
}

bool Load(ssl::context& context, const TlsSettings& t, TlsLoadError* error) {
  boost::system::error_code ec;
  if (!t.ca_file.empty()) {
    if (!Readable(t.ca_file, "ca_file", error)) return false;
    context.load_verify_file(t.ca_file, ec);
    if (ec) return Fail(error, "ca_file", "cannot load " + t.ca_file + " (PEM CA certificates): " + ec.message());
  } else {
    context.set_default_verify_paths(ec);
    if (ec) return Fail(error, "", "cannot load the system's trust store: " + ec.message());
  }
  if (t.cert_file.empty() != t.key_file.empty()) {
    return Fail(error, t.cert_file.empty() ? "key_file" : "cert_file",
                "cert_file and key_file go together (a client certificate and its key)");
  }
  if (!t.cert_file.empty()) {
    if (!Readable(t.cert_file, "cert_file", error) || !Readable(t.key_file, "key_file", error)) return false;
    context.use_certificate_chain_file(t.cert_file, ec);
    if (ec) return Fail(error, "cert_file", "cannot load " + t.cert_file + " (a PEM certificate chain): " + ec.message());
    context.use_private_key_file(t.key_file, ssl::context::pem, ec);
    // OpenSSL checks here that the key is the certificate's ("key values mismatch").
    if (ec) return Fail(error, "key_file", "cannot load " + t.key_file + " (a PEM private key): " + ec.message());
  }
  return true;
}

}  // namespace

std::unique_ptr<ssl::context> MakeClientSslContext(const TlsSettings& settings, TlsLoadError* error) {
  auto context = std::make_unique<ssl::context>(ssl::context::tls_client);
  SSL_CTX* native = context->native_handle();
  if (SSL_CTX_set_min_proto_version(native, TLS1_2_VERSION) != 1) {
    Fail(error, "", "OpenSSL refused TLS 1.2 as the lowest version");
    return nullptr;
  }
  SSL_CTX_set_options(native, SSL_OP_NO_RENEGOTIATION | SSL_OP_NO_COMPRESSION);
  SSL_CTX_set_verify(native, SSL_VERIFY_PEER, nullptr);
  // 0 is success here, unlike the rest of OpenSSL.
  if (SSL_CTX_set_alpn_protos(native, kAlpnHttp11, sizeof kAlpnHttp11) != 0) {
    Fail(error, "", "OpenSSL refused the ALPN list");
    return nullptr;
  }
  if (!Load(*context, settings, error)) return nullptr;
  return context;
}

bool PrepareClientConnection(SSL* ssl, const std::string& server_name) {
  boost::system::error_code ec;
  boost::asio::ip::make_address(server_name, ec);
  if (!ec) {
    // An address: no SNI, and the certificate must carry it as an IP SAN.
    return X509_VERIFY_PARAM_set1_ip_asc(SSL_get0_param(ssl), server_name.c_str()) == 1;
  }
  if (SSL_set_tlsext_host_name(ssl, server_name.c_str()) != 1) return false;
  SSL_set_hostflags(ssl, X509_CHECK_FLAG_NO_PARTIAL_WILDCARDS);
  return SSL_set1_host(ssl, server_name.c_str()) == 1;
}

std::shared_ptr<TlsClientContext> TlsClientContext::Make(const TlsSettings& settings, std::string_view default_name,
                                                         TlsLoadError* error) {
  std::unique_ptr<ssl::context> context = MakeClientSslContext(settings, error);
  if (!context) return nullptr;
  std::string name = settings.server_name.empty() ? std::string(default_name) : settings.server_name;
  return std::shared_ptr<TlsClientContext>(new TlsClientContext(std::move(context), std::move(name)));
}

bool MakeBackendTls(const ProxyConfig& config, std::shared_ptr<TlsClientContext>* out, ConfigError* error) {
  out->reset();
  if (!config.backend_https) return true;
  TlsLoadError load_error;
  *out = TlsClientContext::Make(config.backend_tls, config.backend.host, &load_error);
  if (*out) return true;
  // A key that is not written (the system's trust store) is reported at backend_tls, or at
  // backend when there is no backend_tls either.
  std::string path = "backend_tls" + (load_error.key.empty() ? "" : "." + load_error.key);
  if (!config.written_at.contains(path)) path = config.written_at.contains("backend_tls") ? "backend_tls" : "backend";
  *error = ErrorAt(config, path, load_error.message);
  return false;
}

}  // namespace fencing
