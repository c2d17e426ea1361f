// TLS to the backend in the route file: an https:// backend, and backend_tls (CA file, server
// name, client certificate), only with one. Every mistake is reported at its line:column,
// defaults hold, every option loads, and where a key was written is kept for the errors found
// later (a file that does not load, ErrorAt).

#include <gtest/gtest.h>

#include <string>

#include "config/config.h"
#include "config/config_cases.h"

namespace fencing {
namespace {

using namespace config_cases;  // NOLINT(google-build-using-namespace): the shared test table

const std::string kState = "state_file: s\n";
// An https backend on line 2; backend_tls on line 3, its keys from line 4, column 3.
const std::string kHttps = kState + "backend: https://orders-db.internal:8443\n";
std::string Tls(const std::string& body) { return kHttps + "backend_tls:\n" + body; }

TEST(BackendTlsConfigTest, AnHttpsBackendWithTheDefaults) {
  const ConfigResult r = ParseConfig(kState + "backend: https://orders-db.internal\n", "routes.yaml");
  ASSERT_TRUE(r.ok()) << DumpErrors(r);
  const ProxyConfig& c = *r.config;
  EXPECT_TRUE(c.backend_https);
  EXPECT_EQ(c.backend.host, "orders-db.internal");
  EXPECT_EQ(c.backend.port, 443);  // https's port when none is written
  EXPECT_EQ(c.backend_url, "https://orders-db.internal");
  EXPECT_EQ(c.backend_tls, TlsSettings{});  // the system's trust store, the host as the name
}

TEST(BackendTlsConfigTest, EveryKeyLoads) {
  const ConfigResult r = ParseConfig(Tls("  ca_file: /etc/fp/ca.crt\n"
                                         "  server_name: db.example\n"
                                         "  cert_file: /etc/fp/client.crt\n"
                                         "  key_file: /etc/fp/client.key\n"),
                                     "routes.yaml");
  ASSERT_TRUE(r.ok()) << DumpErrors(r);
  const ProxyConfig& c = *r.config;
  EXPECT_TRUE(c.backend_https);
  EXPECT_EQ(c.backend.port, 8443);
  EXPECT_EQ(c.backend_tls.ca_file, "/etc/fp/ca.crt");
  EXPECT_EQ(c.backend_tls.server_name, "db.example");
  EXPECT_EQ(c.backend_tls.cert_file, "/etc/fp/client.crt");
  EXPECT_EQ(c.backend_tls.key_file, "/etc/fp/client.key");
}

TEST(BackendTlsConfigTest, AnEmptyBlockIsEveryDefault) {
  for (const std::string& text : {Tls(""), kHttps + "backend_tls: {}\n"}) {
    const ConfigResult r = ParseConfig(text, "routes.yaml");
    ASSERT_TRUE(r.ok()) << text << DumpErrors(r);
    EXPECT_EQ(r.config->backend_tls, TlsSettings{});
  }
}

TEST(BackendTlsConfigTest, AnIpv6BackendKeepsItsAddressAsTheName) {
  const ConfigResult r = ParseConfig(kState + "backend: https://[::1]:8443/\n", "routes.yaml");
  ASSERT_TRUE(r.ok()) << DumpErrors(r);
  EXPECT_TRUE(r.config->backend_https);
  EXPECT_EQ(r.config->backend.host, "::1");
}

// Where each key was written, for the errors found after loading (a file that does not load).
TEST(BackendTlsConfigTest, ErrorsFoundLaterArePositionedAtTheirKey) {
  const ConfigResult r = ParseConfig(Tls("  server_name: db.example\n  ca_file: /etc/fp/ca.crt\n"), "routes.yaml");
  ASSERT_TRUE(r.ok()) << DumpErrors(r);
  EXPECT_EQ(ErrorAt(*r.config, "backend_tls.ca_file", "cannot read it").ToString(),
            "routes.yaml:5:3: backend_tls.ca_file: cannot read it");
  EXPECT_EQ(ErrorAt(*r.config, "backend_tls", "x").ToString(), "routes.yaml:3:1: backend_tls: x");
  EXPECT_EQ(ErrorAt(*r.config, "backend", "x").ToString(), "routes.yaml:2:1: backend: x");
  // A key that is not written is reported at the file.
  EXPECT_EQ(ErrorAt(*r.config, "backend_tls.cert_file", "x").ToString(), "routes.yaml:0:0: backend_tls.cert_file: x");
}

class BackendTlsErrorTest : public testing::TestWithParam<ErrorCase> {};

TEST_P(BackendTlsErrorTest, ReportsOneErrorAtItsPosition) { ExpectOneErrorAt(GetParam()); }

const ErrorCase kBackendTlsErrors[] = {
    // backend_tls only with an https backend: with http:// it would be silently ignored.
    {"with an http backend", kState + "backend: http://127.0.0.1:8081\nbackend_tls:\n  ca_file: /ca\n", 3, 1,
     "backend_tls: the backend is http://; TLS settings need an https:// backend"},
    {"before an http backend", kState + "backend_tls: {}\nbackend: http://127.0.0.1:8081\n", 2, 1,
     "backend_tls: the backend is http://"},
    {"empty, with an http backend", kState + "backend: http://127.0.0.1:8081\nbackend_tls:\n", 3, 1,
     "backend_tls: the backend is http://"},
    {"not a mapping", kHttps + "backend_tls: /etc/ca.crt\n", 3, 14,
     "backend_tls: expected a mapping, got '/etc/ca.crt'"},
    {"a list", kHttps + "backend_tls: [a]\n", 3, 14, "backend_tls: expected a mapping, got a list"},
    {"misspelt key", Tls("  ca_fil: /ca\n"), 4, 3, "backend_tls: unknown key 'ca_fil'; did you mean 'ca_file'?"},
    {"unknown key", Tls("  min_version: '1.3'\n"), 4, 3,
     "backend_tls: unknown key 'min_version' (known keys: ca_file, cert_file, key_file, server_name)"},
    {"duplicate key", Tls("  ca_file: /a\n  ca_file: /b\n"), 5, 3, "backend_tls: duplicate key 'ca_file' (first at line 4)"},
    {"ca_file empty", Tls("  ca_file: ''\n"), 4, 12, "backend_tls.ca_file: must not be empty"},
    {"ca_file a list", Tls("  ca_file: [a]\n"), 4, 12, "backend_tls.ca_file: expected a string, got a list"},
    {"cert without key", Tls("  cert_file: /c\n"), 4, 14, "backend_tls.cert_file: needs key_file"},
    {"key without cert", Tls("  key_file: /k\n"), 4, 13, "backend_tls.key_file: needs cert_file"},
    {"bad server_name", Tls("  server_name: 'a b'\n"), 4, 16, "backend_tls.server_name: "},
    {"server_name with a port", Tls("  server_name: 'db:443'\n"), 4, 16, "backend_tls.server_name: "},
    {"a misspelt top-level key", kHttps + "backend_tsl: {}\n", 3, 1, "did you mean 'backend_tls'?"},
};
INSTANTIATE_TEST_SUITE_P(BackendTls, BackendTlsErrorTest, testing::ValuesIn(kBackendTlsErrors));

const ErrorCase kHttpsBackendErrors[] = {
    {"scheme in another case is not https", kState + "backend: ftps://a\n", 2, 10, "unsupported scheme 'ftps'"},
    {"https with a path", kState + "backend: https://a:1/api\n", 2, 10, "must not have a path"},
    {"https with userinfo", kState + "backend: https://u:p@a\n", 2, 10, "user information"},
    {"https with a bad port", kState + "backend: https://a:0\n", 2, 10, "port must be from 1 to 65535"},
    {"https looping to listen", kState + "backend: https://127.0.0.1:8080\n", 2, 10,
     "is the proxy's own listen address"},
};
INSTANTIATE_TEST_SUITE_P(HttpsBackend, BackendTlsErrorTest, testing::ValuesIn(kHttpsBackendErrors));

}  // namespace
}  // namespace fencing

namespace fencing {
namespace {

// backend_protocol: the scheme of backend decides between the HTTP/2 forms (h2c in the clear to
// http://, h2 over TLS to https://); with either a TLS listener offers h2 by ALPN.
TEST(BackendProtocolConfigTest, EachValueAndItsBackend) {
  const std::string state = "state_file: s\n";
  auto load = [&](const std::string& text) { return ParseConfig(state + text, "routes.yaml"); };
  const ConfigResult http1 = load("backend: http://db:80\n");
  ASSERT_TRUE(http1.ok()) << DumpErrors(http1);
  EXPECT_EQ(http1.config->backend_protocol, BackendProtocol::kHttp1);

  const ConfigResult h2c = load("backend: http://db:80\nbackend_protocol: h2c\n");
  ASSERT_TRUE(h2c.ok()) << DumpErrors(h2c);
  EXPECT_EQ(h2c.config->backend_protocol, BackendProtocol::kH2c);

  const ConfigResult h2c_tls = load("backend: https://db:443\nbackend_protocol: h2c\n");
  ASSERT_FALSE(h2c_tls.ok());
  EXPECT_NE(DumpErrors(h2c_tls).find("routes.yaml:3:19: backend_protocol: h2c is HTTP/2 in the clear"),
            std::string::npos)
      << DumpErrors(h2c_tls);

  const ConfigResult h2 = load("backend: https://db:443\nbackend_protocol: h2\n");
  ASSERT_TRUE(h2.ok()) << DumpErrors(h2);
  EXPECT_EQ(h2.config->backend_protocol, BackendProtocol::kH2);
  EXPECT_TRUE(h2.config->backend_https);

  // backend_tls applies to h2 as to an HTTP/1.1 https backend.
  const ConfigResult h2_tls = load(
      "backend: https://db:443\nbackend_protocol: h2\nbackend_tls:\n  ca_file: /ca.pem\n  server_name: db.internal\n"
      "  cert_file: /c.pem\n  key_file: /k.pem\n");
  ASSERT_TRUE(h2_tls.ok()) << DumpErrors(h2_tls);
  EXPECT_EQ(h2_tls.config->backend_tls.ca_file, "/ca.pem");
  EXPECT_EQ(h2_tls.config->backend_tls.server_name, "db.internal");
  EXPECT_EQ(h2_tls.config->backend_tls.cert_file, "/c.pem");

  // h2 to an http:// backend: an error at the value, naming h2c (in either order of the keys).
  const ConfigResult h2_plain = load("backend: http://db:80\nbackend_protocol: h2\n");
  ASSERT_FALSE(h2_plain.ok());
  EXPECT_NE(DumpErrors(h2_plain).find("routes.yaml:3:19: backend_protocol: h2 is HTTP/2 over TLS and the backend "
                                      "is http://; write h2c"),
            std::string::npos)
      << DumpErrors(h2_plain);
  const ConfigResult h2_plain_first = load("backend_protocol: h2\nbackend: http://db:80\n");
  ASSERT_FALSE(h2_plain_first.ok());
  EXPECT_NE(DumpErrors(h2_plain_first).find("routes.yaml:2:19: backend_protocol: h2 is HTTP/2 over TLS"),
            std::string::npos)
      << DumpErrors(h2_plain_first);
  EXPECT_EQ(h2_plain_first.errors.size(), 1u) << DumpErrors(h2_plain_first);

  const ConfigResult other = load("backend: http://db:80\nbackend_protocol: http2\n");
  ASSERT_FALSE(other.ok());
  EXPECT_NE(DumpErrors(other).find("routes.yaml:3:19"), std::string::npos) << DumpErrors(other);
}

TEST(BackendProtocolConfigTest, EveryTlsListenerOffersH2) {
  const std::string tls = "tls:\n  cert_file: /c.pem\n  key_file: /k.pem\n";
  const ConfigResult plain = ParseConfig("state_file: s\nbackend: http://db:80\n" + tls, "routes.yaml");
  ASSERT_TRUE(plain.ok()) << DumpErrors(plain);
  EXPECT_TRUE(plain.config->tls->offer_h2) << "h2 is offered whatever the backend speaks";
  const ConfigResult h2c =
      ParseConfig("state_file: s\nbackend: http://db:80\nbackend_protocol: h2c\n" + tls, "routes.yaml");
  ASSERT_TRUE(h2c.ok()) << DumpErrors(h2c);
  EXPECT_TRUE(h2c.config->tls->offer_h2);
  const ConfigResult h2 =
      ParseConfig("state_file: s\nbackend: https://db:443\nbackend_protocol: h2\n" + tls, "routes.yaml");
  ASSERT_TRUE(h2.ok()) << DumpErrors(h2);
  EXPECT_TRUE(h2.config->tls->offer_h2);
}

}  // namespace
}  // namespace fencing
