#include "tls/server_context.h"

#include "tls/pem.h"

#include <openssl/err.h>
#include <openssl/x509_vfy.h>

#include <algorithm>

namespace fencing::tls {
namespace {

// TLS 1.2's suites: ECDHE (forward secrecy) with an AEAD, ECDSA and RSA certificates alike.
constexpr const char* kTls12Ciphers =
    "ECDHE-ECDSA-AES128-GCM-SHA256:ECDHE-RSA-AES128-GCM-SHA256:"
    "ECDHE-ECDSA-AES256-GCM-SHA384:ECDHE-RSA-AES256-GCM-SHA384:"
    "ECDHE-ECDSA-CHACHA20-POLY1305:ECDHE-RSA-CHACHA20-POLY1305";
constexpr long kSessionLifetimeSeconds = 300;  // nginx's ssl_session_timeout
// Tells resumed sessions of this proxy's contexts from other servers' (OpenSSL refuses to
// resume a session with a client certificate without one).
constexpr unsigned char kSessionIdContext[] = "fencing-proxy";

// ALPN: the server's protocols in its order of preference (h2 first when offer_h2, which the
// loader sets for every listener), each length-prefixed as the wire writes them; `arg` is one of
// these two lists. Neither offered: a fatal no_application_protocol alert (see the header).
const unsigned char kHttp11Only[] = {8, 'h', 't', 't', 'p', '/', '1', '.', '1'};
const unsigned char kH2ThenHttp11[] = {2, 'h', '2', 8, 'h', 't', 't', 'p', '/', '1', '.', '1'};

int SelectAlpn(SSL*, const unsigned char** out, unsigned char* out_length, const unsigned char* offered,
               unsigned int offered_length, void* arg) {
  const bool h2 = arg == kH2ThenHttp11;
  const unsigned char* ours = h2 ? kH2ThenHttp11 : kHttp11Only;
  const unsigned int ours_length = h2 ? sizeof kH2ThenHttp11 : sizeof kHttp11Only;
  unsigned char* selected = nullptr;
  if (SSL_select_next_proto(&selected, out_length, ours, ours_length, offered, offered_length) !=
      OPENSSL_NPN_NEGOTIATED) {
    return SSL_TLSEXT_ERR_ALERT_FATAL;
  }
  *out = selected;
  return SSL_TLSEXT_ERR_OK;
}

const std::string& PathOf(const ListenTlsConfig& config, ServerFile file) {
  switch (file) {
    case ServerFile::kCert: return config.cert_file;
    case ServerFile::kKey: return config.key_file;
    case ServerFile::kClientCa: return config.client_ca_file;
  }
  return config.cert_file;
}

LoadError Fail(const ListenTlsConfig& config, ServerFile file, const std::string& what) {
  return LoadError{file, std::string(ServerFileKey(file)) + " " + PathOf(config, file) + ": " + what};
}

}  // namespace

const char* ServerFileKey(ServerFile file) {
  switch (file) {
    case ServerFile::kCert: return "tls.cert_file";
    case ServerFile::kKey: return "tls.key_file";
    case ServerFile::kClientCa: return "tls.client_ca_file";
  }
  return "tls";
}

std::optional<ServerFiles> ReadServerFiles(const ListenTlsConfig& config, LoadError* error) {
  ServerFiles files;
  const std::pair<ServerFile, std::string*> wanted[] = {
      {ServerFile::kCert, &files.cert}, {ServerFile::kKey, &files.key}, {ServerFile::kClientCa, &files.client_ca}};
  for (const auto& [file, out] : wanted) {
    if (file == ServerFile::kClientCa && !config.asks_client_certificate()) continue;
    std::string why;
    std::optional<std::string> bytes = ReadPemFile(PathOf(config, file), &why);
    if (!bytes) {
      *error = Fail(config, file, why);
      return std::nullopt;
    }
    *out = std::move(*bytes);
  }
  return files;
}

ConfigError ToConfigError(const ProxyConfig& config, const LoadError& error) {
  ConfigPosition at;
  if (config.tls) {
    at = error.file == ServerFile::kCert  ? config.tls->cert_file_at
         : error.file == ServerFile::kKey ? config.tls->key_file_at
                                          : config.tls->client_ca_file_at;
  }
  return ConfigError{config.source_path, at.line, at.column, error.message};
}

ServerContext::~ServerContext() { SSL_CTX_free(ctx_); }

SSL* ServerContext::NewConnection() const { return SSL_new(ctx_); }

std::shared_ptr<const ServerContext> ServerContext::Build(const ListenTlsConfig& config, const ServerFiles& files,
                                                          LoadError* error) {
  std::string why;
  std::vector<X509Ptr> chain = ParseCertificates(files.cert, &why);
  if (chain.empty()) {
    *error = Fail(config, ServerFile::kCert, why);
    return nullptr;
  }
  PrivateKeyPtr key = ParsePrivateKey(files.key, &why);
  if (!key) {
    *error = Fail(config, ServerFile::kKey, why);
    return nullptr;
  }
  if (X509_check_private_key(chain.front().get(), key.get()) != 1) {
    ERR_clear_error();
    *error = Fail(config, ServerFile::kKey, "does not belong to the certificate in tls.cert_file " + config.cert_file);
    return nullptr;
  }
  std::vector<X509Ptr> client_cas;
  if (config.asks_client_certificate()) {
    client_cas = ParseCertificates(files.client_ca, &why);
    if (client_cas.empty()) {
      *error = Fail(config, ServerFile::kClientCa, why);
      return nullptr;
    }
  }

  std::shared_ptr<ServerContext> context(new ServerContext());
  ERR_clear_error();
  SSL_CTX* ctx = context->ctx_ = SSL_CTX_new(TLS_server_method());
  if (!ctx) {
    *error = Fail(config, ServerFile::kCert, "OpenSSL cannot make a context: " + TakeOpenSslErrors());
    return nullptr;
  }
  const int min_version = config.min_version == ListenTlsConfig::Version::k1_3 ? TLS1_3_VERSION : TLS1_2_VERSION;
  bool ok = SSL_CTX_set_min_proto_version(ctx, min_version) == 1 &&
            SSL_CTX_set_max_proto_version(ctx, TLS1_3_VERSION) == 1 &&
            SSL_CTX_set_cipher_list(ctx, kTls12Ciphers) == 1;
  SSL_CTX_set_options(ctx, SSL_OP_NO_RENEGOTIATION | SSL_OP_NO_COMPRESSION);
  // The chain sent is cert_file's, as written: without this, OpenSSL builds one at every
  // handshake from the context's store (a verification of the chain per handshake, and with
  // client_ca_file it would search the client CAs too).
  SSL_CTX_set_mode(ctx, SSL_MODE_NO_AUTO_CHAIN);
  // One TLS 1.3 session ticket after a handshake, as nginx sends (OpenSSL's default is two): a
  // client resumes with one, and each costs the server an encryption at every full handshake.
  SSL_CTX_set_num_tickets(ctx, 1);
  SSL_CTX_set_alpn_select_cb(ctx, SelectAlpn,
                             const_cast<unsigned char*>(config.offer_h2 ? kH2ThenHttp11 : kHttp11Only));
  SSL_CTX_set_session_cache_mode(ctx, SSL_SESS_CACHE_SERVER | SSL_SESS_CACHE_NO_INTERNAL);
  SSL_CTX_set_timeout(ctx, kSessionLifetimeSeconds);
  ok = ok && SSL_CTX_set_session_id_context(ctx, kSessionIdContext, sizeof kSessionIdContext - 1) == 1;
  if (!ok) {
    *error = Fail(config, ServerFile::kCert, "OpenSSL refuses the protocol settings: " + TakeOpenSslErrors());
    return nullptr;
  }

  // The chain: the leaf, then the intermediates sent with it.
  if (SSL_CTX_use_certificate(ctx, chain.front().get()) != 1) {
    *error = Fail(config, ServerFile::kCert, "OpenSSL refuses the certificate: " + TakeOpenSslErrors());
    return nullptr;
  }
  for (size_t i = 1; i < chain.size(); ++i) {
    if (SSL_CTX_add1_chain_cert(ctx, chain[i].get()) != 1) {
      *error = Fail(config, ServerFile::kCert,
                    "OpenSSL refuses intermediate " + std::to_string(i) + ": " + TakeOpenSslErrors());
      return nullptr;
    }
  }
  if (SSL_CTX_use_PrivateKey(ctx, key.get()) != 1) {
    *error = Fail(config, ServerFile::kKey, "OpenSSL refuses the key: " + TakeOpenSslErrors());
    return nullptr;
  }

  if (config.asks_client_certificate()) {
    X509_STORE* store = SSL_CTX_get_cert_store(ctx);
    for (const X509Ptr& ca : client_cas) {
      if (X509_STORE_add_cert(store, ca.get()) != 1 || SSL_CTX_add_client_CA(ctx, ca.get()) != 1) {
        *error = Fail(config, ServerFile::kClientCa, "OpenSSL refuses a CA: " + TakeOpenSslErrors());
        return nullptr;
      }
    }
    const bool require = config.client_certificate == ListenTlsConfig::ClientCertificate::kRequire;
    SSL_CTX_set_verify(ctx, SSL_VERIFY_PEER | (require ? SSL_VERIFY_FAIL_IF_NO_PEER_CERT : 0), nullptr);
    int64_t first_expiry = INT64_MAX;
    for (const X509Ptr& ca : client_cas) first_expiry = std::min(first_expiry, NotAfterUnixSeconds(ca.get()).value_or(0));
    context->client_ca_not_after_ = first_expiry;
  }
  context->serial_ = SerialHex(chain.front().get());
  context->not_after_ = NotAfterUnixSeconds(chain.front().get()).value_or(0);
  return context;
}

}  // namespace fencing::tls
