// TLS on the client listener in the route file: tls (certificate, key, client CAs, how client
// certificates are asked for, the lowest version), plain_listen, and a route's writers and
// identity_header. Every mistake is reported at its line:column, defaults hold, and every option
// loads field by field. The files themselves are read by the TLS module (tests/unit/tls).

#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "config/config.h"
#include "config/config_cases.h"

namespace fencing {
namespace {

using namespace config_cases;  // NOLINT(google-build-using-namespace): the shared test table

using ClientCertificate = ListenTlsConfig::ClientCertificate;
using Version = ListenTlsConfig::Version;

// tls on line 3; the keys of its block from line 4, column 3.
std::string Tls(const std::string& body) { return kHead + "tls:\n" + body; }
// The same with a valid cert_file and key_file on lines 4 and 5; body starts on line 6.
std::string TlsAt(const std::string& body) { return Tls("  cert_file: c.pem\n  key_file: k.pem\n" + body); }

const std::string kTlsLine = "tls: {cert_file: c.pem, key_file: k.pem}\n";
const std::string kMtlsLine = "tls: {cert_file: c.pem, key_file: k.pem, client_ca_file: ca.pem}\n";
// A route on lines 5-7 after a tls line on line 3 ("routes:" on line 4): its last key on line 7,
// the value at column 14 for writers, 22 for identity_header.
std::string Route(const std::string& tls_line, const std::string& last) {
  return kHead + tls_line + "routes:\n  - name: r\n    prefix: /r\n" + last;
}

class ListenTlsErrorTest : public testing::TestWithParam<ErrorCase> {};

TEST_P(ListenTlsErrorTest, ReportsOneErrorAtItsPosition) { ExpectOneErrorAt(GetParam()); }

const ErrorCase kTlsErrors[] = {
    {"not a mapping", kHead + "tls: on\n", 3, 6,
     "tls: expected a mapping with cert_file and key_file (TLS on listen), got 'on'"},
    {"empty", kHead + "tls:\n", 3, 1, "tls: expected a mapping with cert_file and key_file"},
    {"no cert_file", Tls("  key_file: k.pem\n"), 4, 3,
     "tls: missing required key 'cert_file' (the listener's certificate, PEM, followed by its intermediates)"},
    {"no key_file", Tls("  cert_file: c.pem\n"), 4, 3, "tls: missing required key 'key_file'"},
    {"empty cert_file", Tls("  cert_file: \"\"\n  key_file: k.pem\n"), 4, 14, "tls.cert_file: must not be empty"},
    {"cert_file a list", Tls("  cert_file: [a, b]\n  key_file: k.pem\n"), 4, 14,
     "tls.cert_file: expected a string, got a list"},
    {"unknown key", TlsAt("  ca_file: ca.pem\n"), 6, 3, "tls: unknown key 'ca_file' (known keys: cert_file"},
    {"misspelt key", TlsAt("  min_verison: \"1.3\"\n"), 6, 3,
     "tls: unknown key 'min_verison'; did you mean 'min_version'?"},
    {"tls key at the top", kHead + "cert_file: c.pem\n", 3, 1,
     "unknown key 'cert_file'; it belongs in tls (check the indentation)"},
    {"bad client_certificate", TlsAt("  client_ca_file: ca.pem\n  client_certificate: maybe\n"), 7, 23,
     "tls.client_certificate: expected 'require' or 'optional', got 'maybe'"},
    {"client_certificate without client_ca_file", TlsAt("  client_certificate: optional\n"), 6, 23,
     "tls.client_certificate: needs tls.client_ca_file, the CAs that sign the client certificates"},
    {"min_version 1.1", TlsAt("  min_version: \"1.1\"\n"), 6, 16,
     "tls.min_version: expected '1.2' or '1.3', got '1.1'"},
    {"min_version 1.0 unquoted", TlsAt("  min_version: 1.0\n"), 6, 16,
     "tls.min_version: expected '1.2' or '1.3', got '1.0'"},
};

const ErrorCase kPlainListenErrors[] = {
    {"without tls", kHead + "plain_listen: \"127.0.0.1:8443\"\n", 3, 15,
     "plain_listen: is the plain-HTTP listener beside a TLS listen; without tls, listen is plain HTTP already"},
    {"a port alone", kHead + kTlsLine + "plain_listen: 8080\n", 4, 15,
     "plain_listen: a port alone is not an address"},
    {"collides with listen", kHead + "listen: \"0.0.0.0:8443\"\n" + kTlsLine + "plain_listen: \"127.0.0.1:8443\"\n", 5,
     15, "plain_listen 127.0.0.1:8443 collides with listen 0.0.0.0:8443; they must be different addresses"},
    {"collides with admin_listen", kHead + kTlsLine + "plain_listen: \"127.0.0.1:9901\"\n", 4, 15,
     "plain_listen 127.0.0.1:9901 collides with admin_listen 127.0.0.1:9901"},
    {"is the backend", "backend: http://127.0.0.1:8081\nstate_file: f\n" + kTlsLine + "plain_listen: \"0.0.0.0:8081\"\n",
     1, 10, "backend 127.0.0.1:8081 is the proxy's own plain_listen address"},
};

const ErrorCase kWritersErrors[] = {
    {"without tls", kHead + "routes:\n  - name: r\n    prefix: /r\n    writers: [\"spiffe://td/w\"]\n", 6, 14,
     "routes[0].writers: needs tls.client_ca_file: writers are identities from verified client certificates"},
    {"without client_ca_file", Route(kTlsLine, "    writers: [\"spiffe://td/w\"]\n"), 7, 14,
     "routes[0].writers: needs tls.client_ca_file"},
    {"not a list", Route(kMtlsLine, "    writers: spiffe://td/w\n"), 7, 14,
     "routes[0].writers: expected a list of identities such as"},
    {"empty", Route(kMtlsLine, "    writers: []\n"), 7, 14,
     "routes[0].writers: must list at least one identity (leave writers out to let any client write)"},
    {"a mapping in the list", Route(kMtlsLine, "    writers: [{a: b}]\n"), 7, 15,
     "routes[0].writers: expected an identity, got a mapping"},
    {"'*' inside", Route(kMtlsLine, "    writers: [\"spiffe://td/*/w\"]\n"), 7, 15,
     "routes[0].writers: '*' may only end an entry"},
    {"no scheme", Route(kMtlsLine, "    writers: [order-writer]\n"), 7, 15,
     "routes[0].writers: an identity is a URI SAN as written (\"spiffe://cluster.local/ns/shop/sa/writer\") or "
     "\"dns:NAME\" for a DNS SAN (got 'order-writer')"},
    {"a comma", Route(kMtlsLine, "    writers: [\"spiffe://td/a,b\"]\n"), 7, 15,
     "an identity is visible ASCII without spaces or commas"},
    {"a space", Route(kMtlsLine, "    writers: [\"spiffe://td/a b\"]\n"), 7, 15,
     "an identity is visible ASCII without spaces or commas"},
    {"a DNS name in upper case", Route(kMtlsLine, "    writers: [\"dns:Batch.shop.svc\"]\n"), 7, 15,
     "a DNS identity is \"dns:\" and the name in lower case"},
    {"dns: alone", Route(kMtlsLine, "    writers: [\"dns:\"]\n"), 7, 15, "\"dns:\" needs a name after it"},
    {"duplicate", Route(kMtlsLine, "    writers: [\"dns:a.svc\", \"dns:a.svc\"]\n"), 7, 28,
     "routes[0].writers: duplicate identity 'dns:a.svc'"},
};

const ErrorCase kIdentityHeaderErrors[] = {
    {"underscore", Route(kMtlsLine, "    identity_header: X_Client_Identity\n"), 7, 22,
     "routes[0].identity_header: must not contain '_'"},
    {"hop-by-hop", Route(kMtlsLine, "    identity_header: Connection\n"), 7, 22,
     "'Connection' is a hop-by-hop or framing header the proxy handles itself"},
    {"not a field name", Route(kMtlsLine, "    identity_header: \"X Client\"\n"), 7, 22,
     "is not a valid HTTP header name"},
    {"the token header", Route(kMtlsLine, "    identity_header: x-fencing-token\n"), 7, 22,
     "routes[0].identity_header: 'x-fencing-token' is the token_header; the identity and the token must be "
     "different fields"},
    {"a fence key header",
     kHead + kMtlsLine +
         "routes:\n  - name: k\n    prefix: /k\n    fence_key: {header: X-Key}\n  - name: r\n    prefix: /r\n"
         "    identity_header: x-key\n",
     10, 22, "routes[1].identity_header: 'x-key' is route 'k' fence_key header"},
};

INSTANTIATE_TEST_SUITE_P(Tls, ListenTlsErrorTest, testing::ValuesIn(kTlsErrors));
INSTANTIATE_TEST_SUITE_P(PlainListen, ListenTlsErrorTest, testing::ValuesIn(kPlainListenErrors));
INSTANTIATE_TEST_SUITE_P(Writers, ListenTlsErrorTest, testing::ValuesIn(kWritersErrors));
INSTANTIATE_TEST_SUITE_P(IdentityHeader, ListenTlsErrorTest, testing::ValuesIn(kIdentityHeaderErrors));

// ---------------------------------------------------------------------------------------------
// Valid files

TEST(ListenTlsTest, NoneByDefault) {
  const ConfigResult r = ParseConfig(kHead + "routes:\n  - name: r\n    prefix: /r\n", "f.yaml");
  ASSERT_TRUE(r.ok()) << DumpErrors(r);
  EXPECT_FALSE(r.config->tls.has_value());
  EXPECT_FALSE(r.config->plain_listen.has_value());
  EXPECT_TRUE(r.config->routes[0].writers.empty());
  EXPECT_TRUE(r.config->routes[0].identity_header.empty());
}

TEST(ListenTlsTest, Defaults) {
  const ConfigResult r = ParseConfig(TlsAt(""), "f.yaml");
  ASSERT_TRUE(r.ok()) << DumpErrors(r);
  ASSERT_TRUE(r.config->tls.has_value());
  const ListenTlsConfig& tls = *r.config->tls;
  EXPECT_EQ(tls.cert_file, "c.pem");
  EXPECT_EQ(tls.key_file, "k.pem");
  EXPECT_TRUE(tls.client_ca_file.empty());
  EXPECT_FALSE(tls.asks_client_certificate());
  EXPECT_EQ(tls.client_certificate, ClientCertificate::kRequire);
  EXPECT_EQ(tls.min_version, Version::k1_2);
  // Where the files are named, for the errors of loading them later.
  EXPECT_EQ(tls.cert_file_at.line, 4);
  EXPECT_EQ(tls.cert_file_at.column, 14);
  EXPECT_EQ(tls.key_file_at.line, 5);
  EXPECT_EQ(tls.key_file_at.column, 13);
  EXPECT_EQ(tls.client_ca_file_at.line, 0);
}

TEST(ListenTlsTest, EveryOption) {
  const std::string text = kHead + R"(listen: "0.0.0.0:8443"
plain_listen: "127.0.0.1:8080"
tls:
  cert_file: /etc/fp/tls/tls.crt
  key_file: /etc/fp/tls/tls.key
  client_ca_file: /etc/fp/tls/ca.crt
  client_certificate: optional
  min_version: "1.3"
routes:
  - name: orders
    prefix: /orders
    writers: ["spiffe://cluster.local/ns/shop/sa/order-writer", "dns:batch.shop.svc", "spiffe://cluster.local/ns/ops/*"]
    identity_header: X-Client-Identity
  - name: any
    prefix: /any
    writers: ["*"]
)";
  const ConfigResult r = ParseConfig(text, "f.yaml");
  ASSERT_TRUE(r.ok()) << DumpErrors(r);
  const ProxyConfig& c = *r.config;
  ASSERT_TRUE(c.plain_listen.has_value());
  EXPECT_EQ(c.plain_listen->ToString(), "127.0.0.1:8080");
  ASSERT_TRUE(c.tls.has_value());
  EXPECT_EQ(c.tls->cert_file, "/etc/fp/tls/tls.crt");
  EXPECT_EQ(c.tls->key_file, "/etc/fp/tls/tls.key");
  EXPECT_EQ(c.tls->client_ca_file, "/etc/fp/tls/ca.crt");
  EXPECT_TRUE(c.tls->asks_client_certificate());
  EXPECT_EQ(c.tls->client_certificate, ClientCertificate::kOptional);
  EXPECT_EQ(c.tls->min_version, Version::k1_3);
  EXPECT_EQ(c.tls->client_ca_file_at.line, 8);
  EXPECT_EQ(c.tls->client_ca_file_at.column, 19);
  ASSERT_EQ(c.routes.size(), 2u);
  EXPECT_EQ(c.routes[0].writers, (std::vector<std::string>{"spiffe://cluster.local/ns/shop/sa/order-writer",
                                                           "dns:batch.shop.svc", "spiffe://cluster.local/ns/ops/*"}));
  EXPECT_EQ(c.routes[0].identity_header, "X-Client-Identity");
  EXPECT_EQ(c.routes[1].writers, std::vector<std::string>{"*"});
}

TEST(ListenTlsTest, VersionsQuotedOrNot) {
  for (const char* value : {"\"1.2\"", "1.2", "'1.3'", "1.3"}) {
    const ConfigResult r = ParseConfig(TlsAt(std::string("  min_version: ") + value + "\n"), "f.yaml");
    ASSERT_TRUE(r.ok()) << value << DumpErrors(r);
    EXPECT_EQ(r.config->tls->min_version, std::string(value).find("1.3") != std::string::npos ? Version::k1_3 : Version::k1_2);
  }
}

// identity_header needs no client certificates: without them it only drops what clients send.
TEST(ListenTlsTest, IdentityHeaderWithoutTls) {
  const ConfigResult r =
      ParseConfig(kHead + "routes:\n  - name: r\n    prefix: /r\n    identity_header: X-Client-Identity\n", "f.yaml");
  ASSERT_TRUE(r.ok()) << DumpErrors(r);
  EXPECT_EQ(r.config->routes[0].identity_header, "X-Client-Identity");
}

TEST(ListenTlsTest, WriterPrefixesThatPass) {
  for (const char* writer : {"*", "spiffe://td/*", "spiffe:*", "dns:*", "dns:batch-1.shop.svc", "dns:*",
                             "urn:example:writer", "https://id.example/writer?x=1"}) {
    const ConfigResult r = ParseConfig(Route(kMtlsLine, std::string("    writers: [\"") + writer + "\"]\n"), "f.yaml");
    EXPECT_TRUE(r.ok()) << writer << DumpErrors(r);
  }
}

// A broken tls block is one error: the keys that need it say nothing more.
TEST(ListenTlsTest, ABrokenBlockIsOneError) {
  const ConfigResult r = ParseConfig(
      kHead + "tls: x\nplain_listen: \"127.0.0.1:1\"\nroutes:\n  - name: r\n    prefix: /r\n    writers: [\"dns:a\"]\n",
      "f.yaml");
  ASSERT_EQ(r.errors.size(), 1u) << DumpErrors(r);
  EXPECT_EQ(r.errors[0].line, 3);
  // An empty client_ca_file is its own error, not also the writers'.
  const ConfigResult empty_ca =
      ParseConfig(Route("tls: {cert_file: c, key_file: k, client_ca_file: \"\"}\n", "    writers: [\"dns:a\"]\n"), "f.yaml");
  ASSERT_EQ(empty_ca.errors.size(), 1u) << DumpErrors(empty_ca);
  EXPECT_NE(empty_ca.errors[0].message.find("tls.client_ca_file: must not be empty"), std::string::npos);
}

}  // namespace
}  // namespace fencing
