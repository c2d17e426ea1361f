#pragma once
// A TLS handshake in memory, for the TLS unit tests: a client SSL (configured by the test) and a
// server SSL from a ServerContext, joined by an OpenSSL BIO pair and driven in turns until both
// sides are done or one fails. No socket, no thread, no clock.

#include "tls/server_context.h"

#include <openssl/err.h>
#include <openssl/ssl.h>

#include <string>
#include <vector>

namespace fencing::test_handshake {

struct Client {
  int min_version = TLS1_2_VERSION;
  int max_version = TLS1_3_VERSION;
  std::string tls12_ciphers;             // empty: OpenSSL's default
  std::vector<std::string> alpn;         // offered, in order; empty: no ALPN
  std::string cert_pem, key_pem;         // a client certificate, or none
};

struct Outcome {
  bool server_ok = false;  // the server's handshake finished
  bool client_ok = false;
  int version = 0;              // the version the server speaks (SSL_version)
  std::string cipher;           // the suite negotiated
  std::string alpn;             // what the server selected; empty: none
  SSL* server = nullptr;        // kept for the test (identity, options); freed by the Outcome
  ~Outcome() { SSL_free(server); }
};

inline void UsePem(SSL_CTX* ctx, const std::string& cert_pem, const std::string& key_pem) {
  BIO* cert_bio = BIO_new_mem_buf(cert_pem.data(), static_cast<int>(cert_pem.size()));
  X509* cert = PEM_read_bio_X509(cert_bio, nullptr, nullptr, nullptr);
  BIO_free(cert_bio);
  BIO* key_bio = BIO_new_mem_buf(key_pem.data(), static_cast<int>(key_pem.size()));
  EVP_PKEY* key = PEM_read_bio_PrivateKey(key_bio, nullptr, nullptr, nullptr);
  BIO_free(key_bio);
  SSL_CTX_use_certificate(ctx, cert);
  SSL_CTX_use_PrivateKey(ctx, key);
  X509_free(cert);
  EVP_PKEY_free(key);
}

// The client does not check the server's certificate here (the server side is under test).
inline void Handshake(const tls::ServerContext& server_context, const Client& spec, Outcome* out) {
  SSL_CTX* client_ctx = SSL_CTX_new(TLS_client_method());
  SSL_CTX_set_security_level(client_ctx, 0);  // let a test offer what the server must refuse
  SSL_CTX_set_min_proto_version(client_ctx, spec.min_version);
  SSL_CTX_set_max_proto_version(client_ctx, spec.max_version);
  if (!spec.tls12_ciphers.empty()) SSL_CTX_set_cipher_list(client_ctx, spec.tls12_ciphers.c_str());
  if (!spec.alpn.empty()) {
    std::string wire;
    for (const std::string& p : spec.alpn) wire += static_cast<char>(p.size()) + p;
    SSL_CTX_set_alpn_protos(client_ctx, reinterpret_cast<const unsigned char*>(wire.data()),
                            static_cast<unsigned>(wire.size()));
  }
  if (!spec.cert_pem.empty()) UsePem(client_ctx, spec.cert_pem, spec.key_pem);
  SSL* client = SSL_new(client_ctx);
  SSL_CTX_free(client_ctx);  // the SSL holds it
  SSL* server = server_context.NewConnection();
  BIO *client_bio = nullptr, *server_bio = nullptr;
  BIO_new_bio_pair(&client_bio, 0, &server_bio, 0);
  SSL_set_bio(client, client_bio, client_bio);
  SSL_set_bio(server, server_bio, server_bio);
  SSL_set_connect_state(client);
  SSL_set_accept_state(server);

  bool client_failed = false, server_failed = false;
  for (int turn = 0; turn < 50 && !client_failed && !server_failed && !(out->client_ok && out->server_ok); ++turn) {
    if (!out->client_ok) {
      const int r = SSL_do_handshake(client);
      if (r == 1) out->client_ok = true;
      else if (SSL_get_error(client, r) != SSL_ERROR_WANT_READ) client_failed = true;
    }
    if (!out->server_ok) {
      const int r = SSL_do_handshake(server);
      if (r == 1) out->server_ok = true;
      else if (SSL_get_error(server, r) != SSL_ERROR_WANT_READ) server_failed = true;
    }
  }
  // TLS 1.3: the client is done before the server has judged its certificate; a refusal shows on
  // the server's side (and reaches the client as an alert on its first read).
  ERR_clear_error();
  if (out->server_ok) {
    out->version = SSL_version(server);
    out->cipher = SSL_get_cipher_name(server);
    const unsigned char* selected = nullptr;
    unsigned length = 0;
    SSL_get0_alpn_selected(server, &selected, &length);
    out->alpn.assign(reinterpret_cast<const char*>(selected), length);
  }
  SSL_free(client);
  out->server = server;
}

}  // namespace fencing::test_handshake
