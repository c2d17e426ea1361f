// The listener's TLS context (tls/server_context.h): what it is built from and which file is to
// blame when it cannot be, and what it offers, each checked by a handshake in memory
// (handshake.h): versions, TLS 1.2's suites, ALPN, renegotiation and compression off, and client
// certificates (require, optional, another CA, expired, the wrong purpose) with the identity
// they give.

#include <gtest/gtest.h>

#include "tls/memory_handshake.h"
#include "tls/server_context.h"
#include "tls/server_identity.h"
#include "tls/test_certs.h"

#include <memory>
#include <string>

namespace fencing {
namespace {

using tls::LoadError;
using tls::ServerContext;
using tls::ServerFile;
using tls::ServerFiles;
using namespace test_certs;      // NOLINT(google-build-using-namespace)
using namespace test_handshake;  // NOLINT(google-build-using-namespace)

class ServerContextTest : public testing::Test {
 protected:
  void SetUp() override {
    ca_ = Ca();
    LeafSpec server;
    server.cn = "proxy";
    server.sans = {"DNS:localhost", "IP:127.0.0.1"};
    server.serial = 0x1A01;
    server_ = Leaf(ca_, server);
    LeafSpec writer;
    writer.cn = "writer";
    writer.sans = {"URI:spiffe://cluster.local/ns/shop/sa/order-writer", "DNS:Batch.Shop.svc"};
    writer.purpose = "clientAuth";
    writer_ = Leaf(ca_, writer);
    config_.cert_file = "/tls/tls.crt";
    config_.key_file = "/tls/tls.key";
  }

  ServerFiles Files() const { return ServerFiles{server_.cert_pem(), server_.key_pem(), ""}; }
  ServerFiles MutualFiles() {
    config_.client_ca_file = "/tls/ca.crt";
    return ServerFiles{server_.cert_pem(), server_.key_pem(), ca_.cert_pem()};
  }
  std::shared_ptr<const ServerContext> Build(const ServerFiles& files) {
    LoadError error;
    auto context = ServerContext::Build(config_, files, &error);
    EXPECT_NE(context, nullptr) << error.message;
    return context;
  }
  Client WithCert(const Issued& cert) const {
    Client client;
    client.cert_pem = cert.cert_pem();
    client.key_pem = cert.key_pem();
    return client;
  }

  Issued ca_, server_, writer_;
  ListenTlsConfig config_;
};

TEST_F(ServerContextTest, BuildsFromTheCertificateAndItsKey) {
  auto context = Build(Files());
  ASSERT_NE(context, nullptr);
  EXPECT_EQ(context->serial(), "1A01");
  EXPECT_GT(context->not_after(), 0);
  EXPECT_FALSE(context->client_ca_not_after().has_value());
  auto mutual = Build(MutualFiles());
  ASSERT_TRUE(mutual->client_ca_not_after().has_value());
  EXPECT_GT(*mutual->client_ca_not_after(), 0);
}

TEST_F(ServerContextTest, SaysWhichFileIsToBlame) {
  struct Case {
    const char* what;
    ServerFiles files;
    ServerFile blamed;
    const char* message;
  };
  const Issued other = Leaf(ca_, LeafSpec{});
  const std::string cert = server_.cert_pem();
  const Case cases[] = {
      {"no certificate", {"", server_.key_pem(), ca_.cert_pem()}, ServerFile::kCert, "holds no PEM certificate"},
      {"half a certificate", {cert.substr(0, cert.size() / 2), server_.key_pem(), ca_.cert_pem()}, ServerFile::kCert,
       "not a PEM certificate"},
      {"a key for a certificate", {server_.key_pem(), server_.key_pem(), ca_.cert_pem()}, ServerFile::kCert,
       "holds no PEM certificate"},
      {"no key", {cert, "", ca_.cert_pem()}, ServerFile::kKey, "holds no PEM private key"},
      {"another certificate's key", {cert, other.key_pem(), ca_.cert_pem()}, ServerFile::kKey,
       "does not belong to the certificate in tls.cert_file /tls/tls.crt"},
      {"no CA", {cert, server_.key_pem(), "junk\n"}, ServerFile::kClientCa, "holds no PEM certificate"},
  };
  config_.client_ca_file = "/tls/ca.crt";
  for (const Case& c : cases) {
    SCOPED_TRACE(c.what);
    LoadError error;
    EXPECT_EQ(ServerContext::Build(config_, c.files, &error), nullptr);
    EXPECT_EQ(error.file, c.blamed);
    EXPECT_NE(error.message.find(c.message), std::string::npos) << error.message;
    const std::string key = tls::ServerFileKey(c.blamed);
    EXPECT_EQ(error.message.rfind(key + " /tls/", 0), 0u) << "names the key and the path: " << error.message;
  }
}

TEST_F(ServerContextTest, SpeaksTls12And13AndNothingOlder) {
  auto context = Build(Files());
  for (int version : {TLS1_2_VERSION, TLS1_3_VERSION}) {
    Client client;
    client.min_version = client.max_version = version;
    Outcome out;
    Handshake(*context, client, &out);
    EXPECT_TRUE(out.server_ok) << version;
    EXPECT_EQ(out.version, version);
  }
  for (int version : {TLS1_VERSION, TLS1_1_VERSION}) {
    Client client;
    client.min_version = client.max_version = version;
    Outcome out;
    Handshake(*context, client, &out);
    EXPECT_FALSE(out.server_ok) << version;
  }
}

TEST_F(ServerContextTest, MinVersion13RefusesTls12) {
  config_.min_version = ListenTlsConfig::Version::k1_3;
  auto context = Build(Files());
  Client tls12;
  tls12.max_version = TLS1_2_VERSION;
  Outcome refused;
  Handshake(*context, tls12, &refused);
  EXPECT_FALSE(refused.server_ok);
  Outcome ok;
  Handshake(*context, Client{}, &ok);
  EXPECT_TRUE(ok.server_ok);
  EXPECT_EQ(ok.version, TLS1_3_VERSION);
}

TEST_F(ServerContextTest, Tls12OffersEcdheWithAeadOnly) {
  auto context = Build(Files());
  const std::pair<const char*, bool> suites[] = {
      {"ECDHE-ECDSA-AES128-GCM-SHA256", true},
      {"ECDHE-ECDSA-AES256-GCM-SHA384", true},
      {"ECDHE-ECDSA-CHACHA20-POLY1305", true},
      {"ECDHE-ECDSA-AES128-SHA", false},     // CBC
      {"ECDHE-ECDSA-AES128-SHA256", false},  // CBC
      {"AES128-GCM-SHA256", false},          // no forward secrecy (and no ECDSA)
  };
  for (const auto& [suite, accepted] : suites) {
    Client client;
    client.max_version = TLS1_2_VERSION;
    client.tls12_ciphers = suite;
    Outcome out;
    Handshake(*context, client, &out);
    EXPECT_EQ(out.server_ok, accepted) << suite;
    if (accepted) {
      EXPECT_EQ(out.cipher, suite);
    }
  }
}

TEST_F(ServerContextTest, AlpnIsHttp11OrNothing) {
  auto context = Build(Files());
  Client both;
  both.alpn = {"h2", "http/1.1"};
  Outcome chosen;
  Handshake(*context, both, &chosen);
  ASSERT_TRUE(chosen.server_ok);
  EXPECT_EQ(chosen.alpn, "http/1.1");

  Client h2_only;
  h2_only.alpn = {"h2"};
  Outcome refused;
  Handshake(*context, h2_only, &refused);
  EXPECT_FALSE(refused.server_ok) << "no_application_protocol (RFC 7301)";

  Outcome none;
  Handshake(*context, Client{}, &none);
  EXPECT_TRUE(none.server_ok) << "a client without ALPN is served HTTP/1.1";
  EXPECT_EQ(none.alpn, "");
}

TEST_F(ServerContextTest, NoRenegotiationNoCompression) {
  auto context = Build(Files());
  Outcome out;
  Handshake(*context, Client{}, &out);
  ASSERT_TRUE(out.server_ok);
  const uint64_t options = SSL_get_options(out.server);
  EXPECT_TRUE(options & SSL_OP_NO_RENEGOTIATION);
  EXPECT_TRUE(options & SSL_OP_NO_COMPRESSION);
}

TEST_F(ServerContextTest, WithoutClientCaNoCertificateIsAskedFor) {
  auto context = Build(Files());
  Outcome out;
  Handshake(*context, WithCert(writer_), &out);
  ASSERT_TRUE(out.server_ok);
  EXPECT_EQ(SSL_get0_peer_certificate(out.server), nullptr);
  EXPECT_TRUE(VerifiedIdentity(out.server).empty());
}

TEST_F(ServerContextTest, RequireVerifiesAndRefuses) {
  auto context = Build(MutualFiles());
  for (int version : {TLS1_2_VERSION, TLS1_3_VERSION}) {
    SCOPED_TRACE(version);
    Client writer = WithCert(writer_);
    writer.max_version = version;
    Outcome ok;
    Handshake(*context, writer, &ok);
    ASSERT_TRUE(ok.server_ok);
    const ClientIdentity identity = VerifiedIdentity(ok.server);
    EXPECT_EQ(identity.names,
              (std::vector<std::string>{"spiffe://cluster.local/ns/shop/sa/order-writer", "dns:batch.shop.svc"}));
    EXPECT_EQ(identity.joined, "spiffe://cluster.local/ns/shop/sa/order-writer, dns:batch.shop.svc");

    Client anonymous;
    anonymous.max_version = version;
    Outcome none;
    Handshake(*context, anonymous, &none);
    EXPECT_FALSE(none.server_ok) << "no certificate";

    const Issued other_ca = Ca("another CA", 7);
    LeafSpec stranger;
    stranger.sans = {"URI:spiffe://cluster.local/ns/shop/sa/order-writer"};
    stranger.purpose = "clientAuth";
    Client from_other = WithCert(Leaf(other_ca, stranger));
    from_other.max_version = version;
    Outcome other;
    Handshake(*context, from_other, &other);
    EXPECT_FALSE(other.server_ok) << "signed by another CA";

    LeafSpec expired = stranger;
    expired.not_before_offset = -7200;
    expired.not_after_offset = -3600;
    Client late = WithCert(Leaf(ca_, expired));
    late.max_version = version;
    Outcome old;
    Handshake(*context, late, &old);
    EXPECT_FALSE(old.server_ok) << "expired";

    LeafSpec server_only = stranger;
    server_only.purpose = "serverAuth";
    Client wrong = WithCert(Leaf(ca_, server_only));
    wrong.max_version = version;
    Outcome purpose;
    Handshake(*context, wrong, &purpose);
    EXPECT_FALSE(purpose.server_ok) << "a certificate for servers only";
  }
}

TEST_F(ServerContextTest, OptionalServesWithoutACertificateButVerifiesOne) {
  config_.client_certificate = ListenTlsConfig::ClientCertificate::kOptional;
  auto context = Build(MutualFiles());
  Outcome none;
  Handshake(*context, Client{}, &none);
  ASSERT_TRUE(none.server_ok);
  EXPECT_TRUE(VerifiedIdentity(none.server).empty());

  Outcome writer;
  Handshake(*context, WithCert(writer_), &writer);
  ASSERT_TRUE(writer.server_ok);
  EXPECT_FALSE(VerifiedIdentity(writer.server).empty());

  LeafSpec stranger;
  stranger.purpose = "clientAuth";
  stranger.sans = {"URI:spiffe://x/y"};
  Outcome other;
  Handshake(*context, WithCert(Leaf(Ca("another CA", 7), stranger)), &other);
  EXPECT_FALSE(other.server_ok) << "a certificate that is sent is verified";
}

// An SSL made before a new context replaced the old one keeps working on the old one.
TEST_F(ServerContextTest, AConnectionKeepsItsContext) {
  auto context = Build(Files());
  SSL* ssl = context->NewConnection();
  context.reset();
  EXPECT_NE(SSL_get_SSL_CTX(ssl), nullptr);
  EXPECT_NE(SSL_get_certificate(ssl), nullptr);
  SSL_free(ssl);
}

}  // namespace
}  // namespace fencing
