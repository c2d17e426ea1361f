// Route-file loader: every kind of mistake is reported at its exact line:column, defaults hold,
// and the shipped example files stay valid.

#include <gtest/gtest.h>

#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>
#include <vector>

#include "config/config.h"
#include "config/config_cases.h"
#include "config/keys.h"

namespace fencing {
namespace {

using namespace config_cases;  // NOLINT(google-build-using-namespace): the shared test table

using std::chrono::milliseconds;

std::string ReadFile(const std::string& path) {
  std::ifstream in(path);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

// ---------------------------------------------------------------------------------------------
// Valid files

TEST(ConfigTest, MinimalFileGetsEveryDefault) {
  const ConfigResult r = ParseConfig(kHead, "min.yaml");
  ASSERT_TRUE(r.ok()) << DumpErrors(r);
  ASSERT_TRUE(r.errors.empty());
  const ProxyConfig& c = *r.config;
  EXPECT_EQ(c.source_path, "min.yaml");
  EXPECT_EQ(c.listen.ToString(), "0.0.0.0:8080");
  EXPECT_EQ(c.admin_listen.ToString(), "127.0.0.1:9901");
  EXPECT_EQ(c.backend.host, "127.0.0.1");
  EXPECT_EQ(c.backend.port, 8081);
  EXPECT_EQ(c.backend_url, "http://127.0.0.1:8081");
  EXPECT_EQ(c.state_file, "/var/lib/fp/fences.log");
  EXPECT_EQ(c.token_header, "X-Fencing-Token");
  EXPECT_EQ(c.threads, 0u);
  EXPECT_EQ(c.unmatched, Unmatched::kPass);
  EXPECT_TRUE(c.access_log);
  EXPECT_EQ(c.headers_with_underscores, HeadersWithUnderscores::kDrop);
  EXPECT_EQ(c.timeouts.connect, milliseconds(2000));
  EXPECT_EQ(c.timeouts.request, milliseconds(30000));
  EXPECT_EQ(c.timeouts.idle, milliseconds(60000));
  EXPECT_EQ(c.timeouts.header_read, milliseconds(10000));
  EXPECT_EQ(c.timeouts.shutdown, milliseconds(25000));
  EXPECT_EQ(c.limits.max_header_bytes, 16u * 1024);
  EXPECT_EQ(c.limits.max_body_bytes, 64ull * 1024 * 1024);
  EXPECT_EQ(c.limits.max_connections, 10000u);
  EXPECT_EQ(c.limits.buffered_body_bytes, 1024u * 1024);
  EXPECT_TRUE(c.routes.empty());
}

TEST(ConfigTest, EveryKeySetToANonDefault) {
  const std::string text = R"(# leading comment
listen: "[::]:18080"
admin_listen: "[::1]:19901"
backend: "http://[::1]:8081/"
state_file: ./state/fences.log
token_header: X-Lock-Token
threads: 256
unmatched: reject
access_log: false
headers_with_underscores: reject
timeouts: { connect: 250ms, request: 1m, idle: 1h, header_read: 3s, shutdown: 24h }
limits:
  max_header_bytes: 1KiB
  max_body_bytes: 1048576
  max_connections: 1
  buffered_body_bytes: 4KiB
routes:
  - name: orders
    prefix: /orders
  - name: orders_v2-archive
    prefix: /v2/orders/archive
    fence: orders
    methods:
      - DELETE
      - M-SEARCH
    missing_token: allow
    mode: observe
    forward_token: false
    max_token_jump: 1000000
    path_case_insensitive: true
  - name: all
    prefix: /
    methods: [GET]
)";
  const ConfigResult r = ParseConfig(text, "full.yaml");
  ASSERT_TRUE(r.ok()) << DumpErrors(r);
  const ProxyConfig& c = *r.config;
  EXPECT_EQ(c.listen.host, "::");
  EXPECT_EQ(c.listen.port, 18080);
  EXPECT_EQ(c.listen.ToString(), "[::]:18080");
  EXPECT_EQ(c.admin_listen.ToString(), "[::1]:19901");
  EXPECT_EQ(c.backend.ToString(), "[::1]:8081");
  EXPECT_EQ(c.backend_url, "http://[::1]:8081/");
  EXPECT_EQ(c.state_file, "./state/fences.log");
  EXPECT_EQ(c.token_header, "X-Lock-Token");
  EXPECT_EQ(c.threads, 256u);
  EXPECT_EQ(c.unmatched, Unmatched::kReject);
  EXPECT_FALSE(c.access_log);
  EXPECT_EQ(c.headers_with_underscores, HeadersWithUnderscores::kReject);
  EXPECT_EQ(c.timeouts.connect, milliseconds(250));
  EXPECT_EQ(c.timeouts.request, milliseconds(60000));
  EXPECT_EQ(c.timeouts.idle, milliseconds(3600000));
  EXPECT_EQ(c.timeouts.header_read, milliseconds(3000));
  EXPECT_EQ(c.timeouts.shutdown, milliseconds(24 * 3600000));
  EXPECT_EQ(c.limits.max_header_bytes, 1024u);
  EXPECT_EQ(c.limits.max_body_bytes, 1048576u);
  EXPECT_EQ(c.limits.max_connections, 1u);
  EXPECT_EQ(c.limits.buffered_body_bytes, 4096u);
  ASSERT_EQ(c.routes.size(), 3u);

  const RouteConfig& orders = c.routes[0];
  EXPECT_EQ(orders.name, "orders");
  EXPECT_EQ(orders.prefix, "/orders");
  EXPECT_EQ(orders.fence, "orders");  // defaults to the name
  EXPECT_EQ(orders.methods, (std::vector<std::string>{"POST", "PUT", "PATCH", "DELETE"}));
  EXPECT_EQ(orders.missing_token, MissingToken::kReject);
  EXPECT_EQ(orders.mode, FenceMode::kEnforce);
  EXPECT_TRUE(orders.forward_token);

  const RouteConfig& archive = c.routes[1];
  EXPECT_EQ(archive.name, "orders_v2-archive");
  EXPECT_EQ(archive.prefix, "/v2/orders/archive");
  EXPECT_EQ(archive.fence, "orders");
  EXPECT_EQ(archive.methods, (std::vector<std::string>{"DELETE", "M-SEARCH"}));
  EXPECT_EQ(archive.missing_token, MissingToken::kAllow);
  EXPECT_EQ(archive.mode, FenceMode::kObserve);
  EXPECT_FALSE(archive.forward_token);
  EXPECT_EQ(archive.max_token_jump, 1000000u);
  EXPECT_TRUE(archive.path_case_insensitive);
  EXPECT_EQ(c.routes[0].max_token_jump, 0u) << "no limit by default";
  EXPECT_FALSE(c.routes[0].path_case_insensitive);

  EXPECT_EQ(c.routes[2].prefix, "/");
  EXPECT_EQ(c.routes[2].methods, (std::vector<std::string>{"GET"}));
}

TEST(ConfigTest, PartialTimeoutsAndLimitsKeepOtherDefaults) {
  const ConfigResult r = ParseConfig(kHead +
                                         "timeouts: { connect: 5s }\n"
                                         "limits: { max_body_bytes: 1GiB }\n",
                                     "f.yaml");
  ASSERT_TRUE(r.ok()) << DumpErrors(r);
  EXPECT_EQ(r.config->timeouts.connect, milliseconds(5000));
  EXPECT_EQ(r.config->timeouts.request, milliseconds(30000));
  EXPECT_EQ(r.config->limits.max_body_bytes, 1ull << 30);
  EXPECT_EQ(r.config->limits.max_header_bytes, 16u * 1024);
  EXPECT_EQ(r.config->limits.buffered_body_bytes, 1u << 20);
}

// Inputs that must load; each is a plausible way of writing a valid file.
TEST(ConfigTest, AcceptedVariants) {
  const std::vector<std::string> texts = {
      kHead + "---\n",                                  // a trailing document marker
      "---\n" + kHead,                                  // a leading one
      kHead + "timeouts:\n",                            // every timeout commented out
      kHead + "limits: ~\n",                            //
      kHead + "routes:\n",                              // every route commented out
      kHead + "routes: []\n",                           //
      "backend: HTTP://backend.local\nstate_file: s\n",  // scheme is case-insensitive; port 80
      "backend: http://[fe80::1%eth0]:81\nstate_file: s\n",
      kHead + "listen: localhost:8080\n",
      kHead + "listen: 127.0.0.1:9901\nadmin_listen: 127.0.0.2:9901\n",  // same port, other host
      kHead + "token_header: x-fencing-token\n",
      kHead + "headers_with_underscores: allow\n",
      kHead + "headers_with_underscores: drop\n",
      kHead + "limits: { max_header_bytes: 1MiB, max_body_bytes: 18446744073709551615 }\n",
      kHead + "routes:\n  - name: a\n    prefix: \"/a:b@c/~x/(y)/it's/$1,2;3=4&5+6*7!\"\n",
      kHead + "routes:\n  - name: a\n    prefix: /a/...b/.c/d.\n",  // dots inside segments are fine
      kHead + "routes:\n  - {name: a, prefix: /a}\n  - {name: b, prefix: /a/b, fence: a}\n",
      kHead + "routes:\n  - name: " + std::string(64, 'n') + "\n    prefix: /a\n",
  };
  for (const std::string& text : texts) {
    const ConfigResult r = ParseConfig(text, "f.yaml");
    EXPECT_TRUE(r.ok()) << text << "\n" << DumpErrors(r);
  }
}

// Bodies up to buffered_body_bytes are read whole before forwarding; that can never be more than a
// body may be. Unset, it follows a max_body_bytes below its default; zero means every body streams.
TEST(ConfigTest, BufferedBodyBytesStaysWithinMaxBodyBytes) {
  const ConfigResult small = ParseConfig(kHead + "limits: { max_body_bytes: 1000 }\n", "f.yaml");
  ASSERT_TRUE(small.ok()) << DumpErrors(small);
  EXPECT_EQ(small.config->limits.buffered_body_bytes, 1000u);
  const ConfigResult equal = ParseConfig(kHead + "limits: { max_body_bytes: 2KiB, buffered_body_bytes: 2048 }\n", "f.yaml");
  ASSERT_TRUE(equal.ok()) << DumpErrors(equal);
  EXPECT_EQ(equal.config->limits.buffered_body_bytes, 2048u);
  const ConfigResult zero = ParseConfig(kHead + "limits: { buffered_body_bytes: 0 }\n", "f.yaml");
  ASSERT_TRUE(zero.ok()) << DumpErrors(zero);
  EXPECT_EQ(zero.config->limits.buffered_body_bytes, 0u);
  const ConfigResult order = ParseConfig(kHead + "limits: { buffered_body_bytes: 1KiB, max_body_bytes: 1KiB }\n", "f.yaml");
  EXPECT_TRUE(order.ok()) << "the check does not depend on the key order\n" << DumpErrors(order);
}

TEST(ConfigTest, BackendWithoutPortIsPort80) {
  const ConfigResult r = ParseConfig("backend: http://legacy\nstate_file: s\n", "f.yaml");
  ASSERT_TRUE(r.ok()) << DumpErrors(r);
  EXPECT_EQ(r.config->backend.host, "legacy");
  EXPECT_EQ(r.config->backend.port, 80);
}

// ---------------------------------------------------------------------------------------------
// Mistakes: one error each, at an exact position.

class ConfigErrorTest : public testing::TestWithParam<ErrorCase> {};

TEST_P(ConfigErrorTest, ReportsOneErrorAtItsPosition) { ExpectOneErrorAt(GetParam()); }

const std::string kState = "state_file: s\n";  // backend cases: the backend is on line 2, col 10

const ErrorCase kFileErrors[] = {
    {"empty file", "", 1, 1, "the route file is empty"},
    {"only comments", "# nothing yet\n\n", 1, 1, "the route file is empty"},
    {"top level is a list", "- backend\n", 1, 1, "expected a mapping of settings"},
    {"top level is a scalar", "hello\n", 1, 1, "expected a mapping of settings (key: value) at the top level, got 'hello'"},
    {"second document", kHead + "---\nlisten: 0.0.0.0:1\n", 4, 1, "one YAML document"},
    {"syntax: unclosed flow", kHead + "listen: [1\n", 4, 1, "YAML syntax error"},
    {"syntax: nested plain map", kHead + "unmatched: a: b\n", 3, 13, "YAML syntax error: illegal map value"},
    {"syntax: bad indentation", kHead + "timeouts:\n  connect: 1s\n request: 2s\n", 5, 2, "YAML syntax error"},
    {"missing backend", "state_file: s\n", 1, 1, "missing required key 'backend'"},
    {"missing state_file", "# routes\n\nbackend: http://a:1\n", 3, 1, "missing required key 'state_file'"},
};

const ErrorCase kKeyErrors[] = {
    {"misspelt key", kHead + "lsten: 0.0.0.0:80\n", 3, 1, "unknown key 'lsten'; did you mean 'listen'?"},
    {"misspelt key, case", kHead + "Backend: x\n", 3, 1, "did you mean 'backend'?"},
    {"misspelt key, distance 2", kHead + "treads: 1\n", 3, 1, "did you mean 'threads'?"},
    {"unknown key, far", kHead + "colour: red\n", 3, 1, "unknown key 'colour' (known keys: listen,"},
    {"nested key at top level", kHead + "timeouts:\nconnect: 2s\n", 4, 1, "it belongs in timeouts"},
    {"merge key", kHead + "<<: {threads: 1}\n", 3, 1, "merge keys are not supported"},
    {"duplicate key", kHead + "threads: 1\nthreads: 2\n", 4, 1, "duplicate key 'threads' (first at line 3)"},
    {"duplicate required key", kHead + "backend: http://b:1\n", 3, 1, "duplicate key 'backend' (first at line 1)"},
    {"duplicate key, flow", kHead + "timeouts: { idle: 1s, idle: 2s }\n", 3, 23, "timeouts: duplicate key 'idle'"},
    {"duplicate key, route", kHead + "routes:\n  - name: a\n    prefix: /a\n    name: b\n", 6, 5,
     "routes[0]: duplicate key 'name' (first at line 4)"},
    {"key is a list", kHead + "? [a]\n: 1\n", 3, 3, "expected a key name, got a list"},
};

const ErrorCase kListenErrors[] = {
    {"listen: port alone", kHead + "listen: 8080\n", 3, 9, "a port alone is not an address"},
    {"listen: no port", kHead + "listen: localhost\n", 3, 9, "the port is required"},
    {"listen: v6 no port", kHead + "listen: '[::1]'\n", 3, 9, "the port is required"},
    {"listen: no host", kHead + "listen: ':8080'\n", 3, 9, "missing host"},
    {"listen: bare v6", kHead + "listen: '::1:8080'\n", 3, 9, "must be in brackets"},
    {"listen: unclosed bracket", kHead + "listen: '[::1:8080'\n", 3, 9, "missing ']'"},
    {"listen: junk after bracket", kHead + "listen: '[::1]8080'\n", 3, 9, "expected ':' and a port after ']'"},
    {"listen: not v6", kHead + "listen: '[1.2.3.4]:80'\n", 3, 9, "is not an IPv6 address"},
    {"listen: port 0", kHead + "listen: 0.0.0.0:0\n", 3, 9, "port must be from 1 to 65535"},
    {"listen: port 65536", kHead + "listen: 0.0.0.0:65536\n", 3, 9, "port must be from 1 to 65535"},
    {"listen: port name", kHead + "listen: 0.0.0.0:http\n", 3, 9, "port 'http' is not a number"},
    {"listen: empty port", kHead + "listen: '0.0.0.0:'\n", 3, 9, "missing port"},
    {"listen: bad v4", kHead + "listen: 256.0.0.1:80\n", 3, 9, "not a valid IPv4 address"},
    {"listen: bad name", kHead + "listen: 'a b:80'\n", 3, 9, "not a valid host name"},
    {"listen: mapping", kHead + "listen: {host: a, port: 1}\n", 3, 9, "listen: expected a string, got a mapping"},
    {"listen: list", kHead + "listen: [a, b]\n", 3, 9, "listen: expected a string, got a list"},
    {"listen: empty value", kHead + "listen:\n", 3, 1, "listen: expected a string, got nothing"},
    {"listen: explicit null", kHead + "listen: ~\n", 3, 9, "listen: expected a string, got nothing"},
    {"admin_listen: bad", kHead + "admin_listen: 127.0.0.1\n", 3, 15, "admin_listen: expected host:port"},
    {"listen collides with default admin", kHead + "listen: 0.0.0.0:9901\n", 3, 9,
     "collides with the default admin_listen 127.0.0.1:9901"},
    {"admin collides with wildcard listen", kHead + "admin_listen: 127.0.0.1:8080\n", 3, 15,
     "admin_listen 127.0.0.1:8080 collides with listen 0.0.0.0:8080"},
    {"admin equals listen", kHead + "listen: 127.0.0.1:7000\nadmin_listen: 127.0.0.1:7000\n", 4, 15,
     "must be different"},
    {"admin v6 wildcard", kHead + "listen: 127.0.0.1:7000\nadmin_listen: '[::]:7000'\n", 4, 15, "collides"},
};

const ErrorCase kBackendErrors[] = {
    {"backend: other scheme", kState + "backend: ftp://a\n", 2, 10, "unsupported scheme 'ftp'"},
    {"backend: no scheme", kState + "backend: 127.0.0.1:8081\n", 2, 10, "expected http://host:port"},
    {"backend: path", kState + "backend: http://a:1/api\n", 2, 10, "must not have a path"},
    {"backend: two slashes", kState + "backend: http://a:1//\n", 2, 10, "must not have a path"},
    {"backend: query", kState + "backend: http://a:1/?x=1\n", 2, 10, "must not have a query"},
    {"backend: fragment", kState + "backend: http://a:1#top\n", 2, 10, "must not have a fragment"},
    {"backend: userinfo", kState + "backend: http://user:pw@a:1\n", 2, 10, "user information"},
    {"backend: no host", kState + "backend: http://\n", 2, 10, "missing host"},
    {"backend: bare v6", kState + "backend: http://::1:8081\n", 2, 10, "must be in brackets"},
    {"backend: bad port", kState + "backend: http://a:99999\n", 2, 10, "port must be from 1 to 65535"},
    {"backend: loops to listen", kState + "backend: http://127.0.0.1:8080\n", 2, 10,
     "is the proxy's own listen address"},
    {"backend: loops to admin", kState + "backend: http://127.0.0.1:9901\n", 2, 10,
     "is the proxy's own admin_listen address"},
    {"backend: list", kState + "backend: [http://a]\n", 2, 10, "backend: expected a string, got a list"},
    {"backend: empty value", kState + "backend:\n", 2, 1, "backend: expected a string, got nothing"},
};

const ErrorCase kScalarErrors[] = {
    {"state_file: empty", "backend: http://a:1\nstate_file: ''\n", 2, 13, "state_file: must not be empty"},
    {"state_file: list", "backend: http://a:1\nstate_file: [a]\n", 2, 13, "state_file: expected a string, got a list"},
    {"token_header: hop-by-hop", kHead + "token_header: Transfer-Encoding\n", 3, 15, "hop-by-hop"},
    {"token_header: hop-by-hop, any case", kHead + "token_header: connection\n", 3, 15, "hop-by-hop"},
    {"token_header: host", kHead + "token_header: Host\n", 3, 15, "hop-by-hop or framing header"},
    {"token_header: content-length", kHead + "token_header: Content-Length\n", 3, 15, "framing header"},
    {"token_header: space", kHead + "token_header: 'X Token'\n", 3, 15, "not a valid HTTP header name"},
    {"token_header: colon", kHead + "token_header: 'X-Token:'\n", 3, 15, "not a valid HTTP header name"},
    {"token_header: empty", kHead + "token_header: ''\n", 3, 15, "token_header: must not be empty"},
    {"token_header: underscore", kHead + "token_header: X_Lock_Token\n", 3, 15,
     "token_header: must not contain '_'"},
    {"headers_with_underscores: case", kHead + "headers_with_underscores: Drop\n", 3, 27,
     "headers_with_underscores: expected 'drop' or 'reject' or 'allow', got 'Drop'"},
    {"headers_with_underscores: bool", kHead + "headers_with_underscores: true\n", 3, 27,
     "expected 'drop' or 'reject' or 'allow', got 'true'"},
    {"headers_with_underscores: list", kHead + "headers_with_underscores: [drop]\n", 3, 27,
     "headers_with_underscores: expected a string, got a list"},
    {"threads: too many", kHead + "threads: 257\n", 3, 10, "expected 0 (one per core) to 256, got 257"},
    {"threads: negative", kHead + "threads: -1\n", 3, 10, "expected a non-negative integer"},
    {"threads: fraction", kHead + "threads: 2.5\n", 3, 10, "expected a non-negative integer"},
    {"threads: huge", kHead + "threads: 99999999999999999999999\n", 3, 10, "integer is too large"},
    {"threads: quoted", kHead + "threads: '4'\n", 3, 10, "expected an integer, got a quoted string"},
    {"threads: list", kHead + "threads: [1]\n", 3, 10, "threads: expected an integer, got a list"},
    {"unmatched: case", kHead + "unmatched: Reject\n", 3, 12, "expected 'pass' or 'reject', got 'Reject'"},
    {"unmatched: status", kHead + "unmatched: 404\n", 3, 12, "expected 'pass' or 'reject'"},
    {"unmatched: mapping", kHead + "unmatched: {a: b}\n", 3, 12, "unmatched: expected a string, got a mapping"},
};

const ErrorCase kTimeoutErrors[] = {
    {"timeouts: scalar", kHead + "timeouts: 5s\n", 3, 11, "timeouts: expected a mapping, got '5s'"},
    {"timeouts: list", kHead + "timeouts: [1s]\n", 3, 11, "timeouts: expected a mapping, got a list"},
    {"timeouts: bare number, flow", kHead + "timeouts: { connect: 2 }\n", 3, 22,
     "timeouts.connect: expected a duration such as 250ms, 2s or 1m; a bare number has no unit"},
    {"timeouts: fraction", kHead + "timeouts:\n  request: 1.5s\n", 4, 12, "fractions are not allowed"},
    {"timeouts: zero", kHead + "timeouts:\n  idle: 0s\n", 4, 9, "timeouts.idle: a duration must be greater than zero"},
    {"timeouts: zero ms", kHead + "timeouts:\n  idle: 0ms\n", 4, 9, "greater than zero"},
    {"timeouts: negative", kHead + "timeouts:\n  connect: -1s\n", 4, 12, "must be positive"},
    {"timeouts: unknown unit", kHead + "timeouts:\n  header_read: 2sec\n", 4, 16, "unknown unit 'sec'"},
    {"timeouts: days", kHead + "timeouts:\n  shutdown: 1d\n", 4, 13, "unknown unit 'd'"},
    {"timeouts: upper-case unit", kHead + "timeouts:\n  shutdown: 2S\n", 4, 13, "unknown unit 'S'"},
    {"timeouts: space", kHead + "timeouts:\n  shutdown: 2 s\n", 4, 13, "unknown unit"},
    {"timeouts: no number", kHead + "timeouts:\n  shutdown: ms\n", 4, 13, "expected a duration"},
    {"timeouts: over 24h", kHead + "timeouts:\n  shutdown: 25h\n", 4, 13, "timeouts.shutdown: must be at most 24h"},
    {"timeouts: overflow", kHead + "timeouts:\n  request: 99999999999999999999h\n", 4, 12, "duration is too large"},
    {"timeouts: unknown key", kHead + "timeouts:\n  conect: 1s\n", 4, 3,
     "timeouts: unknown key 'conect'; did you mean 'connect'?"},
    {"timeouts: unknown key, far", kHead + "timeouts:\n  read: 1s\n", 4, 3,
     "known keys: connect, request, idle, header_read, shutdown"},
    {"timeouts: value is a mapping", kHead + "timeouts:\n  connect: {a: 1}\n", 4, 12,
     "timeouts.connect: expected a string, got a mapping"},
    {"timeouts: empty value", kHead + "timeouts:\n  connect:\n", 4, 3, "timeouts.connect: expected a string, got nothing"},
};

const ErrorCase kLimitErrors[] = {
    {"limits: scalar", kHead + "limits: 16KiB\n", 3, 9, "limits: expected a mapping"},
    {"limits: KB", kHead + "limits: { max_header_bytes: 16KB }\n", 3, 29, "use KiB/MiB/GiB"},
    {"limits: mb", kHead + "limits:\n  max_body_bytes: 64mb\n", 4, 19, "use KiB/MiB/GiB"},
    {"limits: K", kHead + "limits:\n  max_body_bytes: 64K\n", 4, 19, "use KiB/MiB/GiB"},
    {"limits: lower-case kib", kHead + "limits:\n  max_body_bytes: 64kib\n", 4, 19, "use KiB/MiB/GiB"},
    {"limits: TiB", kHead + "limits:\n  max_body_bytes: 1TiB\n", 4, 19, "unknown unit 'TiB'"},
    {"limits: space", kHead + "limits:\n  max_body_bytes: 64 MiB\n", 4, 19, "unknown unit"},
    {"limits: fraction", kHead + "limits:\n  max_body_bytes: 1.5MiB\n", 4, 19, "fractions are not allowed"},
    {"limits: negative", kHead + "limits:\n  max_body_bytes: -1\n", 4, 19, "must not be negative"},
    {"limits: overflow bytes", kHead + "limits:\n  max_body_bytes: 18446744073709551616\n", 4, 19,
     "size is too large"},
    {"limits: overflow GiB", kHead + "limits:\n  max_body_bytes: 17179869184GiB\n", 4, 19, "size is too large"},
    {"limits: body zero", kHead + "limits:\n  max_body_bytes: 0\n", 4, 19, "there is no 'unlimited'"},
    {"limits: buffered above the body limit", kHead + "limits:\n  max_body_bytes: 1KiB\n  buffered_body_bytes: 2KiB\n",
     5, 24, "limits.buffered_body_bytes: must be at most limits.max_body_bytes (1024 bytes), got 2048 bytes"},
    {"limits: buffered above the default body limit", kHead + "limits: { buffered_body_bytes: 65MiB }\n", 3, 32,
     "must be at most limits.max_body_bytes (67108864 bytes)"},
    {"limits: buffered fraction", kHead + "limits:\n  buffered_body_bytes: 0.5MiB\n", 4, 24,
     "limits.buffered_body_bytes: expected a size"},
    {"limits: header too small", kHead + "limits:\n  max_header_bytes: 1023\n", 4, 21,
     "limits.max_header_bytes: must be from 1KiB to 1MiB, got 1023 bytes"},
    {"limits: header too large", kHead + "limits:\n  max_header_bytes: 2MiB\n", 4, 21, "must be from 1KiB to 1MiB"},
    {"limits: connections zero", kHead + "limits:\n  max_connections: 0\n", 4, 20,
     "limits.max_connections: must be at least 1"},
    {"limits: connections with unit", kHead + "limits:\n  max_connections: 10k\n", 4, 20,
     "expected a non-negative integer"},
    {"limits: connections quoted", kHead + "limits:\n  max_connections: '100'\n", 4, 20, "quoted string"},
    {"limits: unknown key", kHead + "limits:\n  max_conections: 5\n", 4, 3, "did you mean 'max_connections'?"},
};

// Route cases: "routes:" is line 3, the first item starts on line 4.
const std::string kRoutes = kHead + "routes:\n";

const ErrorCase kRouteErrors[] = {
    {"routes: mapping", kHead + "routes: {}\n", 3, 9, "routes: expected a list of routes, got a mapping"},
    {"routes: scalar", kHead + "routes: orders\n", 3, 9, "expected a list of routes"},
    {"route: scalar", kRoutes + "  - orders\n", 4, 5, "routes[0]: expected a route"},
    {"route: empty item", kRoutes + "  -\n  - {name: a, prefix: /a}\n", 4, 3, "routes[0]: expected a route"},
    {"route: missing name", kRoutes + "  - prefix: /a\n", 4, 5, "routes[0]: missing required key 'name'"},
    {"route: missing prefix", kRoutes + "  - name: a\n    fence: b\n", 4, 5, "routes[0]: missing required key 'prefix'"},
    {"route: unknown key", kRoutes + "  - name: a\n    prefix: /a\n    metods: [PUT]\n", 6, 5,
     "routes[0]: unknown key 'metods'; did you mean 'methods'?"},
    {"route: second route's index", kRoutes + "  - {name: a, prefix: /a}\n  - {name: b}\n", 5, 5,
     "routes[1]: missing required key 'prefix'"},
    {"name: upper-case", kRoutes + "  - name: Orders\n    prefix: /a\n", 4, 11,
     "routes[0].name: may contain only a-z, 0-9, '_' and '-' (got 'Orders')"},
    {"name: space", kRoutes + "  - name: 'a b'\n    prefix: /a\n", 4, 11, "may contain only"},
    {"name: dot", kRoutes + "  - name: a.b\n    prefix: /a\n", 4, 11, "may contain only"},
    {"name: empty", kRoutes + "  - name: ''\n    prefix: /a\n", 4, 11, "routes[0].name: must not be empty"},
    {"name: 65 chars", kRoutes + "  - name: " + std::string(65, 'n') + "\n    prefix: /a\n", 4, 11,
     "is longer than 64 characters"},
    {"name: list", kRoutes + "  - name: [a]\n    prefix: /a\n", 4, 11, "routes[0].name: expected a string, got a list"},
    {"fence: bad", kRoutes + "  - name: a\n    prefix: /a\n    fence: Orders\n", 6, 12,
     "routes[0].fence: may contain only"},
    {"fence: 65 chars", kRoutes + "  - name: a\n    prefix: /a\n    fence: " + std::string(65, 'f') + "\n", 6, 12,
     "longer than 64"},
    {"duplicate name", kRoutes + "  - name: a\n    prefix: /a\n  - name: a\n    prefix: /b\n", 6, 11,
     "routes[1].name: duplicate route name 'a' (first at line 4)"},
    {"duplicate prefix", kRoutes + "  - name: a\n    prefix: /x\n  - name: b\n    prefix: /x\n", 7, 13,
     "routes[1].prefix: duplicate prefix '/x' (first at line 5)"},
    {"duplicate prefix, flow", kRoutes + "  - {name: a, prefix: /}\n  - {name: b, prefix: /}\n", 5, 23,
     "duplicate prefix '/' (first at line 4)"},
    {"prefix: relative", kRoutes + "  - name: a\n    prefix: orders\n", 5, 13, "must start with '/'"},
    {"prefix: empty", kRoutes + "  - name: a\n    prefix: ''\n", 5, 13, "must start with '/'"},
    {"prefix: trailing slash", kRoutes + "  - name: a\n    prefix: /orders/\n", 5, 13, "must not end with '/'"},
    {"prefix: empty segment", kRoutes + "  - name: a\n    prefix: /a//b\n", 5, 13, "empty segments"},
    {"prefix: double slash", kRoutes + "  - name: a\n    prefix: //\n", 5, 13, "must not end with '/'"},
    {"prefix: dot", kRoutes + "  - name: a\n    prefix: /a/./b\n", 5, 13, "'.' or '..' segments"},
    {"prefix: dot-dot last", kRoutes + "  - name: a\n    prefix: /a/..\n", 5, 13, "'.' or '..' segments"},
    {"prefix: dot first", kRoutes + "  - name: a\n    prefix: /.\n", 5, 13, "'.' or '..' segments"},
    {"prefix: percent", kRoutes + "  - name: a\n    prefix: /a%2fb\n", 5, 13, "must not contain '%'"},
    {"prefix: query", kRoutes + "  - name: a\n    prefix: /a?x=1\n", 5, 13, "must not contain '?'"},
    {"prefix: fragment", kRoutes + "  - name: a\n    prefix: /a#x\n", 5, 13, "must not contain '#'"},
    {"prefix: backslash", kRoutes + "  - name: a\n    prefix: /a\\b\n", 5, 13, "must not contain '\\'"},
    {"prefix: space", kRoutes + "  - name: a\n    prefix: '/a b'\n", 5, 13, "whitespace or control characters"},
    {"prefix: tab", kRoutes + "  - name: a\n    prefix: \"/a\\tb\"\n", 5, 13, "(got '/a\\tb')"},
    {"prefix: non-ASCII", kRoutes + "  - name: a\n    prefix: /caf\xc3\xa9\n", 5, 13, "must be ASCII"},
    {"prefix: angle bracket", kRoutes + "  - name: a\n    prefix: /a<b\n", 5, 13, "must not contain '<'"},
    {"prefix: mapping", kRoutes + "  - name: a\n    prefix: {path: /a}\n", 5, 13, "expected a string, got a mapping"},
    {"methods: scalar", kRoutes + "  - name: a\n    prefix: /a\n    methods: POST\n", 6, 14,
     "routes[0].methods: expected a list of methods"},
    {"methods: empty", kRoutes + "  - name: a\n    prefix: /a\n    methods: []\n", 6, 14, "at least one method"},
    {"methods: lower-case", kRoutes + "  - name: a\n    prefix: /a\n    methods: [PUT, post]\n", 6, 20,
     "write 'POST', not 'post'"},
    {"methods: duplicate", kRoutes + "  - name: a\n    prefix: /a\n    methods: [PUT, POST, PUT]\n", 6, 26,
     "routes[0].methods: duplicate method 'PUT'"},
    {"methods: duplicate, block", kRoutes + "  - name: a\n    prefix: /a\n    methods:\n      - PUT\n      - PUT\n", 8,
     9, "duplicate method 'PUT'"},
    {"methods: not a token", kRoutes + "  - name: a\n    prefix: /a\n    methods: ['GE T']\n", 6, 15,
     "'GE T' is not an HTTP method"},
    {"methods: nested list", kRoutes + "  - name: a\n    prefix: /a\n    methods: [[POST]]\n", 6, 15,
     "expected a method name, got a list"},
    {"missing_token: bad", kRoutes + "  - name: a\n    prefix: /a\n    missing_token: deny\n", 6, 20,
     "expected 'reject' or 'allow', got 'deny'"},
    {"mode: bad", kRoutes + "  - name: a\n    prefix: /a\n    mode: dry-run\n", 6, 11,
     "expected 'enforce' or 'observe'"},
    {"forward_token: yes", kRoutes + "  - name: a\n    prefix: /a\n    forward_token: yes\n", 6, 20,
     "expected true or false, got 'yes'"},
    {"forward_token: quoted", kRoutes + "  - name: a\n    prefix: /a\n    forward_token: 'true'\n", 6, 20,
     "expected true or false"},
    {"max_token_jump: negative", kRoutes + "  - name: a\n    prefix: /a\n    max_token_jump: -5\n", 6, 21,
     "max_token_jump"},
    {"path_case_insensitive: yes", kRoutes + "  - name: a\n    prefix: /a\n    path_case_insensitive: yes\n", 6,
     28, "expected true or false"},
    {"forward_token: True", kRoutes + "  - name: a\n    prefix: /a\n    forward_token: True\n", 6, 20,
     "expected true or false"},
    {"forward_token: empty", kRoutes + "  - name: a\n    prefix: /a\n    forward_token:\n", 6, 5,
     "expected true or false, got nothing"},
};

// Fence keys: line 6 is the route's first key after name and prefix.
const std::string kKeyed = kRoutes + "  - name: a\n    prefix: /a\n";
const std::string kKeyedA = kKeyed + "    fence_key: {path_segment: 1}\n";

const ErrorCase kFenceKeyErrors[] = {
    {"fence_key: misspelt source", kKeyed + "    fence_key: {path_segmnt: 1}\n", 6, 17,
     "routes[0].fence_key: unknown key 'path_segmnt'; did you mean 'path_segment'?"},
    {"fence_key: segment 0", kKeyed + "    fence_key: {path_segment: 0}\n", 6, 31,
     "routes[0].fence_key.path_segment: must be from 1 (the first segment after the prefix) to 64, got 0"},
    {"fence_key: segment too deep", kKeyed + "    fence_key: {path_segment: 65}\n", 6, 31, "to 64, got 65"},
    {"fence_key: segment quoted", kKeyed + "    fence_key: {path_segment: '1'}\n", 6, 31, "expected an integer"},
    {"fence_key: both", kKeyed + "    fence_key: {path_segment: 1, header: X-Key}\n", 6, 34,
     "give exactly one of path_segment and header"},
    {"fence_key: empty mapping", kKeyed + "    fence_key: {}\n", 6, 16, "give path_segment"},
    {"fence_key: scalar", kKeyed + "    fence_key: 1\n", 6, 16, "expected a mapping, {path_segment: N} or {header: NAME}"},
    {"fence_key: nothing", kKeyed + "    fence_key:\n", 6, 5, "expected a mapping"},
    {"fence_key: header Host", kKeyed + "    fence_key: {header: Host}\n", 6, 25, "hop-by-hop or framing header"},
    {"fence_key: header Connection", kKeyed + "    fence_key: {header: connection}\n", 6, 25, "hop-by-hop"},
    {"fence_key: header Content-Length", kKeyed + "    fence_key: {header: Content-Length}\n", 6, 25, "framing"},
    {"fence_key: header Transfer-Encoding", kKeyed + "    fence_key: {header: Transfer-Encoding}\n", 6, 25,
     "framing"},
    {"fence_key: header TE", kKeyed + "    fence_key: {header: TE}\n", 6, 25, "hop-by-hop"},
    {"fence_key: header not a token", kKeyed + "    fence_key: {header: 'X Key'}\n", 6, 25,
     "not a valid HTTP header name"},
    {"fence_key: header is the token header", kKeyed + "    fence_key: {header: x-fencing-TOKEN}\n", 6, 25,
     "routes[0].fence_key.header: 'x-fencing-TOKEN' is the token_header"},
    // token_header written after the routes: the check waits for the whole file.
    {"fence_key: header is a later token_header", kKeyed + "    fence_key: {header: X-Lock}\ntoken_header: X-Lock\n",
     6, 25, "is the token_header"},
    {"fence_key: header with '_'", kKeyed + "    fence_key: {header: X_Key}\n", 6, 25,
     "must not contain '_' unless headers_with_underscores is allow"},
    {"fence_key: header with '_', reject", kKeyed + "    fence_key: {header: X_Key}\nheaders_with_underscores: reject\n",
     6, 25, "CGI-style backends"},
    {"max_keys: zero", kKeyedA + "    max_keys: 0\n", 7, 15, "routes[0].max_keys: must be at least 1"},
    {"max_keys: text", kKeyedA + "    max_keys: many\n", 7, 15, "routes[0].max_keys"},
    {"token_order: bad", kKeyedA + "    token_order: lock\n", 7, 18, "expected 'per_lock' or 'global', got 'lock'"},
    {"token_order: misspelt key", kKeyedA + "    token_ordr: global\n", 7, 5, "did you mean 'token_order'?"},
    {"max_keys: misspelt key", kKeyedA + "    max_key: 5\n", 7, 5, "did you mean 'max_keys'?"},
    {"forget: zero", kKeyedA + "    token_order: global\n    forget_idle_keys_after: 0s\n", 8, 29,
     "greater than zero"},
    {"forget: per_lock", kKeyedA + "    forget_idle_keys_after: 720h\n", 7, 29,
     "routes[0].forget_idle_keys_after: needs token_order: global"},
    {"forget: explicit per_lock", kKeyedA + "    token_order: per_lock\n    forget_idle_keys_after: 1h\n", 8, 29,
     "Consul's LockIndex a forgotten lock's next token can be lower"},
    {"max_keys without fence_key", kKeyed + "    max_keys: 10\n", 6, 15,
     "routes[0].max_keys: only for a keyed route; add fence_key"},
    {"token_order without fence_key", kKeyed + "    token_order: global\n", 6, 18, "routes[0].token_order: only for a keyed route"},
    {"forget without fence_key", kKeyed + "    forget_idle_keys_after: 1h\n", 6, 29,
     "routes[0].forget_idle_keys_after: only for a keyed route"},
    // Routes naming one fence.
    {"same fence, one keyed", kKeyedA + "  - name: b\n    prefix: /b\n    fence: a\n", 7, 5,
     "routes[1]: fence 'a' is keyed on route 'a' (line 4) but not keyed here"},
    {"same fence, the other keyed", kKeyed + "  - name: b\n    prefix: /b\n    fence: a\n    fence_key: {header: X-K}\n",
     9, 16, "routes[1]: fence 'a' is not keyed on route 'a' (line 4) but keyed here"},
    {"same fence, max_keys differs", kKeyedA + "  - name: b\n    prefix: /b\n    fence: a\n    fence_key: {header: X-K}\n"
     "    max_keys: 5\n", 11, 15,
     "routes[1].max_keys: 5 here, but 1000000 on route 'a' (line 4), which names the same fence 'a'"},
    {"same fence, token_order differs, left out", kKeyedA + "    token_order: global\n  - name: b\n    prefix: /b\n"
     "    fence: a\n    fence_key: {header: X-K}\n", 8, 5,
     "routes[1].token_order: per_lock here, but global on route 'a' (line 4)"},
    {"same fence, forgetting differs", kKeyedA + "    token_order: global\n    forget_idle_keys_after: 1h\n"
     "  - name: b\n    prefix: /b\n    fence: a\n    fence_key: {header: X-K}\n    token_order: global\n"
     "    forget_idle_keys_after: 2h\n", 14, 29, "must agree on forget_idle_keys_after"},
};

INSTANTIATE_TEST_SUITE_P(File, ConfigErrorTest, testing::ValuesIn(kFileErrors));
INSTANTIATE_TEST_SUITE_P(FenceKeys, ConfigErrorTest, testing::ValuesIn(kFenceKeyErrors));
INSTANTIATE_TEST_SUITE_P(Keys, ConfigErrorTest, testing::ValuesIn(kKeyErrors));
INSTANTIATE_TEST_SUITE_P(Listen, ConfigErrorTest, testing::ValuesIn(kListenErrors));
INSTANTIATE_TEST_SUITE_P(Backend, ConfigErrorTest, testing::ValuesIn(kBackendErrors));
INSTANTIATE_TEST_SUITE_P(Scalars, ConfigErrorTest, testing::ValuesIn(kScalarErrors));
INSTANTIATE_TEST_SUITE_P(Timeouts, ConfigErrorTest, testing::ValuesIn(kTimeoutErrors));
INSTANTIATE_TEST_SUITE_P(Limits, ConfigErrorTest, testing::ValuesIn(kLimitErrors));
INSTANTIATE_TEST_SUITE_P(Routes, ConfigErrorTest, testing::ValuesIn(kRouteErrors));

TEST(ConfigTest, FenceKeysLoad) {
  const std::string text = kRoutes +
                           "  - name: objects\n    prefix: /objects\n    fence_key: {path_segment: 2}\n"
                           "    max_keys: 500\n    token_order: global\n    forget_idle_keys_after: 720h\n"
                           // Same fence, its key from another place: fine, the settings agree.
                           "  - name: objects-api\n    prefix: /api/objects\n    fence: objects\n"
                           "    fence_key: {header: X-Object-Key}\n    max_keys: 500\n    token_order: global\n"
                           "    forget_idle_keys_after: 30d\n"
                           "  - name: plain\n    prefix: /plain\n";
  // 30d is not a duration: the agreement check must not pass it silently either.
  ConfigResult bad = ParseConfig(text, "f.yaml");
  ASSERT_FALSE(bad.ok());
  std::string fixed = text;
  fixed.replace(fixed.find("30d"), 3, "720h");
  const ConfigResult r = ParseConfig(fixed, "f.yaml");
  ASSERT_TRUE(r.ok()) << DumpErrors(r);
  const ProxyConfig& c = *r.config;
  ASSERT_EQ(c.routes.size(), 3u);
  EXPECT_EQ(c.routes[0].fence_key.source, FenceKeySpec::Source::kPathSegment);
  EXPECT_EQ(c.routes[0].fence_key.path_segment, 2u);
  EXPECT_EQ(c.routes[0].max_keys, 500u);
  EXPECT_EQ(c.routes[0].token_order, TokenOrder::kGlobal);
  EXPECT_EQ(c.routes[0].forget_idle_keys_after, std::chrono::hours(720));
  EXPECT_EQ(c.routes[1].fence_key.source, FenceKeySpec::Source::kHeader);
  EXPECT_EQ(c.routes[1].fence_key.header, "X-Object-Key");
  EXPECT_EQ(c.routes[1].fence, "objects");
  EXPECT_FALSE(c.routes[2].fence_key.keyed());
  const RouteConfig defaults;
  EXPECT_EQ(c.routes[2].max_keys, defaults.max_keys);
  EXPECT_EQ(defaults.max_keys, 1000000u);
  EXPECT_EQ(c.routes[2].token_order, TokenOrder::kPerLock);
  EXPECT_EQ(c.routes[2].forget_idle_keys_after.count(), 0);
}

// A route with a key setting in error still takes part in the agreement check: both problems
// are reported in one round.
TEST(ConfigTest, KeySettingErrorsAndDisagreementsInOneRound) {
  const std::string text = kKeyedA + "    forget_idle_keys_after: 720h\n"
                           "  - name: b\n    prefix: /b\n    fence: a\n";
  const ConfigResult r = ParseConfig(text, "f.yaml");
  ASSERT_EQ(r.errors.size(), 2u) << DumpErrors(r);
  EXPECT_EQ(r.errors[0].line, 7);
  EXPECT_NE(r.errors[0].message.find("needs token_order: global"), std::string::npos);
  EXPECT_EQ(r.errors[1].line, 8);
  EXPECT_NE(r.errors[1].message.find("keyed on route 'a' (line 4) but not keyed here"), std::string::npos);
}

TEST(ConfigTest, KeyHeaderWithUnderscoreNeedsAllow) {
  const std::string route = kKeyed + "    fence_key: {header: X_Object_Key}\n";
  EXPECT_FALSE(ParseConfig(route, "f.yaml").ok());
  const ConfigResult r = ParseConfig(route + "headers_with_underscores: allow\n", "f.yaml");
  ASSERT_TRUE(r.ok()) << DumpErrors(r);
  EXPECT_EQ(r.config->routes[0].fence_key.header, "X_Object_Key");
}

TEST(ConfigTest, CollectsEveryErrorInFileOrder) {
  // Missing backend is found last (after the walk) but sorts first (the mapping's position).
  const std::string text =
      "state_file: s\n"                       // 1
      "threads: many\n"                       // 2
      "routes:\n"                             // 3
      "  - name: a\n"                         // 4
      "    prefix: /a/\n"                     // 5
      "  - name: a\n"                         // 6
      "    prefix: /b\n"                      // 7
      "timeouts: { connect: 1, idle: 1.5s }\n"  // 8
      "lsten: x\n";                           // 9
  const ConfigResult r = ParseConfig(text, "f.yaml");
  EXPECT_FALSE(r.ok());
  std::vector<std::string> got;
  for (const ConfigError& e : r.errors) got.push_back(e.ToString());
  const std::vector<std::string> want = {
      "f.yaml:1:1: missing required key 'backend' (the legacy resource, e.g. http://127.0.0.1:8081)",
      "f.yaml:2:10: threads: expected a non-negative integer (got 'many')",
      "f.yaml:5:13: routes[0].prefix: must not end with '/' (/orders already matches /orders and /orders/...) "
      "(got '/a/')",
      "f.yaml:6:11: routes[1].name: duplicate route name 'a' (first at line 4)",
      "f.yaml:8:22: timeouts.connect: expected a duration such as 250ms, 2s or 1m; a bare number has no unit "
      "(got '1')",
      "f.yaml:8:31: timeouts.idle: expected a duration such as 250ms, 2s or 1m; fractions are not allowed "
      "(write 1500ms, not 1.5s) (got '1.5s')",
      "f.yaml:9:1: unknown key 'lsten'; did you mean 'listen'?",
  };
  EXPECT_EQ(got, want);
}

TEST(ConfigTest, MisspeltRequiredKeyGivesBothErrors) {
  const ConfigResult r = ParseConfig(kRoutes + "  - name: a\n    prefx: /a\n", "f.yaml");
  ASSERT_EQ(r.errors.size(), 2u) << DumpErrors(r);
  EXPECT_EQ(r.errors[0].ToString(), "f.yaml:4:5: routes[0]: missing required key 'prefix'");
  EXPECT_EQ(r.errors[1].ToString(), "f.yaml:5:5: routes[0]: unknown key 'prefx'; did you mean 'prefix'?");
}

TEST(ConfigTest, SelfReferencingAliasIsAnErrorNotAHang) {
  const ConfigResult r = ParseConfig(kHead + "routes: &r [*r]\n", "f.yaml");
  EXPECT_FALSE(r.ok());
  ASSERT_EQ(r.errors.size(), 1u) << DumpErrors(r);
  EXPECT_NE(r.errors[0].message.find("expected a route"), std::string::npos);
}

TEST(ConfigTest, LongValuesAreShortenedInMessages) {
  const ConfigResult r = ParseConfig(kHead + "unmatched: " + std::string(500, 'x') + "\n", "f.yaml");
  ASSERT_EQ(r.errors.size(), 1u);
  EXPECT_LT(r.errors[0].message.size(), 120u) << r.errors[0].message;
  EXPECT_NE(r.errors[0].message.find("...'"), std::string::npos);
}

// ---------------------------------------------------------------------------------------------
// Files

TEST(ConfigTest, ErrorToStringIsCompilerStyle) {
  const ConfigError e{"routes.yaml", 12, 7, "unknown key 'x'"};
  EXPECT_EQ(e.ToString(), "routes.yaml:12:7: unknown key 'x'");
}

TEST(ConfigTest, UnreadableFileIsOneErrorAtLineZero) {
  const std::string path = "/nonexistent-dir/routes.yaml";
  const ConfigResult r = LoadConfigFile(path);
  EXPECT_FALSE(r.ok());
  ASSERT_EQ(r.errors.size(), 1u);
  EXPECT_EQ(r.errors[0].file, path);
  EXPECT_EQ(r.errors[0].line, 0);
  EXPECT_EQ(r.errors[0].column, 0);
  EXPECT_NE(r.errors[0].message.find("No such file or directory"), std::string::npos) << r.errors[0].message;
  EXPECT_EQ(r.errors[0].ToString().rfind(path + ":0:0: ", 0), 0u) << r.errors[0].ToString();
}

TEST(ConfigTest, DirectoryIsUnreadable) {
  const ConfigResult r = LoadConfigFile(FP_SOURCE_DIR "/config");
  ASSERT_EQ(r.errors.size(), 1u);
  EXPECT_EQ(r.errors[0].line, 0);
  EXPECT_NE(r.errors[0].message.find("Is a directory"), std::string::npos) << r.errors[0].message;
}

class ConfigFileTest : public testing::Test {
 protected:
  void SetUp() override {
    dir_ = std::filesystem::temp_directory_path() / ("config_test." + std::to_string(::getpid()));
    std::filesystem::create_directories(dir_);
  }
  void TearDown() override { std::filesystem::remove_all(dir_); }
  std::string Write(const std::string& name, const std::string& text) {
    const std::string path = (dir_ / name).string();
    std::ofstream(path) << text;
    return path;
  }
  std::filesystem::path dir_;
};

TEST_F(ConfigFileTest, LoadsAFileAndNamesItInErrors) {
  const std::string good = Write("good.yaml", kHead);
  const ConfigResult ok = LoadConfigFile(good);
  ASSERT_TRUE(ok.ok()) << DumpErrors(ok);
  EXPECT_EQ(ok.config->source_path, good);

  const std::string bad = Write("bad.yaml", kHead + "threads: x\n");
  const ConfigResult r = LoadConfigFile(bad);
  ASSERT_EQ(r.errors.size(), 1u);
  EXPECT_EQ(r.errors[0].ToString(), bad + ":3:10: threads: expected a non-negative integer (got 'x')");
}

TEST_F(ConfigFileTest, UnreadablePermissions) {
  if (::geteuid() == 0) GTEST_SKIP() << "root reads any file";
  const std::string path = Write("secret.yaml", kHead);
  std::filesystem::permissions(path, std::filesystem::perms::none);
  const ConfigResult r = LoadConfigFile(path);
  ASSERT_EQ(r.errors.size(), 1u);
  EXPECT_NE(r.errors[0].message.find("Permission denied"), std::string::npos) << r.errors[0].message;
}

TEST(ConfigExamplesTest, DemoLoadsAsDocumented) {
  const ConfigResult r = LoadConfigFile(FP_SOURCE_DIR "/config/examples/demo.yaml");
  ASSERT_TRUE(r.ok()) << DumpErrors(r);
  const ProxyConfig& c = *r.config;
  EXPECT_EQ(c.listen.ToString(), "127.0.0.1:8080");
  EXPECT_EQ(c.admin_listen.ToString(), "127.0.0.1:9901");
  EXPECT_EQ(c.backend.ToString(), "127.0.0.1:8081");
  EXPECT_EQ(c.state_file, "./demo-state/fences.log");
  ASSERT_EQ(c.routes.size(), 2u);
  EXPECT_EQ(c.routes[0].name, "orders");
  EXPECT_EQ(c.routes[0].prefix, "/orders");
  EXPECT_EQ(c.routes[0].fence, "orders");
  EXPECT_EQ(c.routes[0].mode, FenceMode::kEnforce);
  EXPECT_EQ(c.routes[1].name, "notes");
  EXPECT_EQ(c.routes[1].prefix, "/notes");
  EXPECT_EQ(c.routes[1].mode, FenceMode::kObserve);
}

// The reference file claims to show every default: hold it to that.
TEST(ConfigExamplesTest, ReferenceShowsTheDefaults) {
  const ConfigResult r = LoadConfigFile(FP_SOURCE_DIR "/config/examples/reference.yaml");
  ASSERT_TRUE(r.ok()) << DumpErrors(r);
  const ProxyConfig& c = *r.config;
  const ProxyConfig defaults;
  EXPECT_EQ(c.listen.ToString(), defaults.listen.ToString());
  EXPECT_EQ(c.admin_listen.ToString(), defaults.admin_listen.ToString());
  EXPECT_EQ(c.token_header, defaults.token_header);
  EXPECT_EQ(c.threads, defaults.threads);
  EXPECT_EQ(c.unmatched, defaults.unmatched);
  EXPECT_EQ(c.headers_with_underscores, defaults.headers_with_underscores);
  EXPECT_EQ(c.timeouts.connect, defaults.timeouts.connect);
  EXPECT_EQ(c.timeouts.request, defaults.timeouts.request);
  EXPECT_EQ(c.timeouts.idle, defaults.timeouts.idle);
  EXPECT_EQ(c.timeouts.header_read, defaults.timeouts.header_read);
  EXPECT_EQ(c.timeouts.shutdown, defaults.timeouts.shutdown);
  EXPECT_EQ(c.limits.max_header_bytes, defaults.limits.max_header_bytes);
  EXPECT_EQ(c.limits.max_body_bytes, defaults.limits.max_body_bytes);
  EXPECT_EQ(c.limits.max_connections, defaults.limits.max_connections);
  EXPECT_EQ(c.limits.buffered_body_bytes, defaults.limits.buffered_body_bytes);
  // The first route shows the defaults; the keyed ones after it show the key settings.
  ASSERT_EQ(c.routes.size(), 3u);
  const RouteConfig route_defaults;
  EXPECT_FALSE(c.routes[0].fence_key.keyed());
  EXPECT_EQ(c.routes[1].fence_key.source, FenceKeySpec::Source::kPathSegment);
  EXPECT_EQ(c.routes[1].max_keys, route_defaults.max_keys);
  EXPECT_EQ(c.routes[1].token_order, route_defaults.token_order);
  EXPECT_EQ(c.routes[1].forget_idle_keys_after, route_defaults.forget_idle_keys_after);
  EXPECT_EQ(c.routes[2].fence_key.source, FenceKeySpec::Source::kHeader);
  EXPECT_EQ(c.routes[0].fence, c.routes[0].name);
  EXPECT_EQ(c.routes[0].methods, route_defaults.methods);
  EXPECT_EQ(c.routes[0].missing_token, route_defaults.missing_token);
  EXPECT_EQ(c.routes[0].mode, route_defaults.mode);
  EXPECT_EQ(c.routes[0].forward_token, route_defaults.forward_token);
  EXPECT_EQ(c.routes[0].path_case_insensitive, route_defaults.path_case_insensitive);
  EXPECT_EQ(c.routes[0].max_token_jump, route_defaults.max_token_jump);
}

// One "key: value" line of reference.yaml, with the section it is in.
struct WrittenKey {
  KeySection section;
  std::string name;
  std::string value;  // as written, without the comment
  int line;
};

std::string Trim(std::string_view text) {
  const size_t first = text.find_first_not_of(' ');
  if (first == std::string_view::npos) return "";
  return std::string(text.substr(first, text.find_last_not_of(' ') - first + 1));
}

// The keys of a block-style file like reference.yaml: top-level keys at column 1, the keys of a
// section indented under it, a route's keys after "- ". The bodies of lock_services and
// fence_store are left out: the keys in them are NestedKeys() (and lock_services' are names the
// file chooses).
std::vector<WrittenKey> KeysWritten(const std::string& yaml) {
  std::vector<WrittenKey> keys;
  KeySection nested = KeySection::kTop;
  bool names = false;
  std::istringstream in(yaml);
  std::string line;
  for (int number = 1; std::getline(in, line); ++number) {
    const size_t indent = line.find_first_not_of(' ');
    if (indent == std::string::npos || line[indent] == '#') continue;
    std::string_view rest = std::string_view(line).substr(indent);
    if (rest.starts_with("- ")) rest.remove_prefix(2);
    const size_t colon = rest.find(':');
    if (colon == std::string_view::npos) continue;
    const std::string name(rest.substr(0, colon));
    const std::string value = Trim(rest.substr(colon + 1, rest.find('#') - colon - 1));
    if (indent == 0) {
      keys.push_back({KeySection::kTop, name, value, number});
      nested = KeySection::kTop;
      names = name == "lock_services" || name == "fence_store" || name == "backend_tls";
      for (KeySection s : {KeySection::kTimeouts, KeySection::kLimits, KeySection::kTls, KeySection::kRoute}) {
        if (SectionName(s) == name) nested = s;
      }
    } else if (!names) {
      keys.push_back({nested, name, value, number});
    }
  }
  return keys;
}

// "a | b" as the README's tables write it: "`a` \| `b`".
std::string ReadmeType(std::string_view type) {
  if (type.find(" | ") == std::string_view::npos) return std::string(type);
  std::string out;
  size_t start = 0;
  for (;;) {
    const size_t bar = type.find(" | ", start);
    out += "`" + std::string(type.substr(start, bar - start)) + "`";
    if (bar == std::string_view::npos) return out;
    out += " \\| ";
    start = bar + 3;
  }
}

// The README table row of a key ("| `name` | ..."), or "".
std::string ReadmeRow(const std::string& readme, std::string_view name) {
  const std::string start = "| `" + std::string(name) + "` |";
  const size_t at = readme.find("\n" + start);
  if (at == std::string::npos) return "";
  return readme.substr(at + 1, readme.find('\n', at + 1) - at - 1);
}

// The reference file with its commented-out fence_store block ("# fence_store:" and the "#  "
// lines after it) written instead of its state_file: the two exclude each other, so the file
// shows the one the fewest use as a comment.
std::string WithFenceStore(const std::string& reference) {
  std::string out;
  std::istringstream in(reference);
  std::string line;
  bool in_block = false;
  while (std::getline(in, line)) {
    if (line == "# fence_store:") {
      in_block = true;
    } else if (in_block && !line.starts_with("#  ")) {
      in_block = false;
    }
    if (in_block) {
      out += line.substr(2) + "\n";
    } else if (!line.starts_with("state_file:")) {
      out += line + "\n";
    }
  }
  return out;
}

// The reference file with its commented-out backend_tls block ("# backend_tls:" and the "#  "
// lines after it) written, and the https backend shown above it ("# backend: \"https") instead
// of the http one: backend_tls is only for an https backend, which the file shows as a comment.
std::string WithBackendTls(const std::string& reference) {
  std::string out;
  std::istringstream in(reference);
  std::string line;
  bool in_block = false;
  while (std::getline(in, line)) {
    if (line == "# backend_tls:") {
      in_block = true;
    } else if (in_block && !line.starts_with("#  ")) {
      in_block = false;
    }
    if (in_block || line.starts_with("# backend: \"https")) {
      out += line.substr(2) + "\n";
    } else if (!line.starts_with("backend:")) {
      out += line + "\n";
    }
  }
  return out;
}

// The key table is the one list of keys: the reference file writes each of them with its
// default and nothing else, and the operators' reference documents each one.
TEST(ConfigExamplesTest, ReferenceWritesEveryKeyOfTheTable) {
  const std::string reference = ReadFile(FP_SOURCE_DIR "/config/examples/reference.yaml");
  const std::string readme = ReadFile(FP_SOURCE_DIR "/config/README.md");
  std::vector<WrittenKey> written = KeysWritten(reference);
  for (WrittenKey& w : KeysWritten(WithFenceStore(reference))) {
    if (w.name == "fence_store") written.push_back(std::move(w));
  }
  for (WrittenKey& w : KeysWritten(WithBackendTls(reference))) {
    if (w.name == "backend_tls") written.push_back(std::move(w));
  }
  ASSERT_FALSE(written.empty());
  for (const ConfigKey& key : ConfigKeys()) {
    SCOPED_TRACE(key.Path());
    auto it = std::find_if(written.begin(), written.end(), [&](const WrittenKey& w) {
      return w.section == key.section && w.name == key.name;
    });
    ASSERT_NE(it, written.end()) << "reference.yaml does not write " << key.Path();
    if (!key.default_value.empty()) {
      EXPECT_EQ(it->value, key.default_value) << "reference.yaml:" << it->line;
    }

    EXPECT_NE(readme.find("`" + std::string(key.name) + "`"), std::string::npos);
    const std::string row = ReadmeRow(readme, key.name);
    ASSERT_FALSE(row.empty()) << "no README table row for " << key.Path();
    // The timeouts table has no type column: every timeout is a duration.
    if (key.section != KeySection::kTimeouts) {
      EXPECT_NE(row.find("| " + ReadmeType(key.type) + " |"), std::string::npos) << row;
    }
    if (key.required) {
      EXPECT_NE(row.find("**required**"), std::string::npos) << row;
    }
    std::string shown(key.default_value);
    if (shown.size() >= 2 && shown.front() == '"') shown = shown.substr(1, shown.size() - 2);
    if (!shown.empty()) {
      EXPECT_NE(row.find("`" + shown + "`"), std::string::npos) << row;
    }
  }
  for (const WrittenKey& w : written) {
    const bool known = std::any_of(ConfigKeys().begin(), ConfigKeys().end(), [&](const ConfigKey& key) {
      return key.section == w.section && key.name == w.name;
    });
    EXPECT_TRUE(known) << "reference.yaml:" << w.line << " writes '" << w.name << "', which is not in the key table";
  }
}

// Whether a line of yaml, outside its comment, writes "name:" as a key (block or flow style).
bool WritesKey(const std::string& yaml, std::string_view name) {
  std::istringstream in(yaml);
  std::string line;
  while (std::getline(in, line)) {
    const std::string code = line.substr(0, line.find('#'));
    for (size_t at = code.find(std::string(name) + ":"); at != std::string::npos;
         at = code.find(std::string(name) + ":", at + 1)) {
      if (at == 0 || code[at - 1] == ' ' || code[at - 1] == '{' || code[at - 1] == ',') return true;
    }
  }
  return false;
}

// The keys inside key values (a route's verify, a lock service's etcd, tls and zookeeper blocks)
// are written in the reference file too, and a lock service's each have a row in the README.
TEST(ConfigExamplesTest, ReferenceWritesEveryNestedKey) {
  const std::string reference = ReadFile(FP_SOURCE_DIR "/config/examples/reference.yaml");
  const std::string with_fence_store = WithFenceStore(reference);
  const std::string with_backend_tls = WithBackendTls(reference);
  const std::string readme = ReadFile(FP_SOURCE_DIR "/config/README.md");
  ASSERT_FALSE(NestedKeys().empty());
  for (const NestedConfigKeys& nested : NestedKeys()) {
    for (std::string_view name : nested.names) {
      SCOPED_TRACE(std::string(nested.path) + "." + std::string(name));
      EXPECT_NE(readme.find(std::string(name)), std::string::npos);
      // "password" is known only to be refused with its own message: nothing to write or tabulate.
      if (name == "password") continue;
      const bool store = nested.path.starts_with("fence_store");
      const bool backend_tls = nested.path == "backend_tls";
      EXPECT_TRUE(WritesKey(store ? with_fence_store : backend_tls ? with_backend_tls : reference, name))
          << "reference.yaml does not write it";
      // The README has a table for each block of a lock service, and for the fence store's etcd.
      if (nested.path.starts_with("lock_services.NAME.") || nested.path == "fence_store.etcd") {
        EXPECT_FALSE(ReadmeRow(readme, name).empty()) << "no README table row";
      }
    }
  }
  // The reference's services and verified route load as written.
  const ConfigResult r = LoadConfigFile(FP_SOURCE_DIR "/config/examples/reference.yaml");
  ASSERT_TRUE(r.ok()) << DumpErrors(r);
  ASSERT_EQ(r.config->lock_services.size(), 3u);
  EXPECT_TRUE(r.config->lock_services[1].etcd.tls);
  EXPECT_EQ(r.config->routes[1].verify.lock, "/locks/objects/{key}");
}

// The reference's commented-out fence_store, written instead of state_file, loads: every key it
// shows is valid, member_ttl and timeout at their defaults.
TEST(ConfigExamplesTest, ReferenceFenceStoreLoads) {
  const std::string reference = ReadFile(FP_SOURCE_DIR "/config/examples/reference.yaml");
  const std::string text = WithFenceStore(reference);
  ASSERT_NE(text, reference);
  // Its tenants route forgets idle keys, which the shared store does not: that is the one error.
  const ConfigResult forgetting = ParseConfig(text, "reference.yaml+fence_store");
  ASSERT_EQ(forgetting.errors.size(), 1u) << DumpErrors(forgetting);
  EXPECT_NE(forgetting.errors[0].message.find("forget_idle_keys_after: not with fence_store"), std::string::npos);
  const size_t forget = text.find("    forget_idle_keys_after:");
  ASSERT_NE(forget, std::string::npos);
  const ConfigResult r =
      ParseConfig(text.substr(0, forget) + text.substr(text.find('\n', forget) + 1), "reference.yaml+fence_store");
  ASSERT_TRUE(r.ok()) << DumpErrors(r);
  ASSERT_TRUE(r.config->fence_store.has_value());
  const FenceStoreConfig& store = *r.config->fence_store;
  EXPECT_TRUE(r.config->state_file.empty());
  EXPECT_EQ(store.prefix, "/fencing-proxy/orders-db");
  EXPECT_EQ(store.member_ttl, FenceStoreConfig{}.member_ttl);
  EXPECT_EQ(store.etcd.timeout, EtcdClientConfig{}.timeout);
  EXPECT_TRUE(store.etcd.tls);
  EXPECT_FALSE(store.etcd.tls_settings.server_name.empty());
  // As the file stands, there is no fence store.
  const ConfigResult plain = ParseConfig(reference, "reference.yaml");
  ASSERT_TRUE(plain.ok()) << DumpErrors(plain);
  EXPECT_FALSE(plain.config->fence_store.has_value());
}

// The reference's commented-out https backend and backend_tls, written instead of its backend,
// load: every key it shows is valid.
TEST(ConfigExamplesTest, ReferenceBackendTlsLoads) {
  const std::string reference = ReadFile(FP_SOURCE_DIR "/config/examples/reference.yaml");
  const std::string text = WithBackendTls(reference);
  ASSERT_NE(text, reference);
  const ConfigResult r = ParseConfig(text, "reference.yaml+backend_tls");
  ASSERT_TRUE(r.ok()) << DumpErrors(r);
  const ProxyConfig& c = *r.config;
  EXPECT_TRUE(c.backend_https);
  EXPECT_EQ(c.backend.host, "orders-db.internal");
  EXPECT_FALSE(c.backend_tls.ca_file.empty());
  EXPECT_FALSE(c.backend_tls.cert_file.empty());
  EXPECT_FALSE(c.backend_tls.key_file.empty());
  EXPECT_EQ(c.backend_tls.server_name, "orders-db.internal");
  // As the file stands, the backend is plain HTTP.
  const ConfigResult plain = ParseConfig(reference, "reference.yaml");
  ASSERT_TRUE(plain.ok()) << DumpErrors(plain);
  EXPECT_FALSE(plain.config->backend_https);
}

TEST(ConfigExamplesTest, SharedFencesLoadsAsDocumented) {
  const ConfigResult r = LoadConfigFile(FP_SOURCE_DIR "/config/examples/shared-fences.yaml");
  ASSERT_TRUE(r.ok()) << DumpErrors(r);
  const ProxyConfig& c = *r.config;
  EXPECT_TRUE(c.state_file.empty());
  ASSERT_TRUE(c.fence_store.has_value());
  EXPECT_EQ(c.fence_store->etcd.endpoints, std::vector<std::string>{"http://127.0.0.1:2379"});
  EXPECT_EQ(c.fence_store->prefix, "/fencing-proxy/orders-db");
  EXPECT_EQ(c.fence_store->member_ttl, std::chrono::seconds(10));
  ASSERT_EQ(c.routes.size(), 2u);
  EXPECT_FALSE(c.routes[0].fence_key.keyed());
  EXPECT_TRUE(c.routes[1].fence_key.keyed());
}

// What the table declares is what the loader accepts: each key loads in its section, and a
// restart-only key says how to compare it.
TEST(ConfigKeysTest, EveryKeyLoadsInItsSection) {
  for (const ConfigKey& key : ConfigKeys()) {
    SCOPED_TRACE(key.Path());
    EXPECT_NE(key.load, nullptr);
    // Route keys are compared per fence (same_fence), every other key per file (same).
    if (key.section == KeySection::kRoute) {
      EXPECT_EQ(key.same, nullptr);
      EXPECT_EQ(key.restart_only, key.same_fence != nullptr);
    } else {
      EXPECT_EQ(key.same_fence, nullptr);
      EXPECT_EQ(key.restart_only, key.same != nullptr);
    }
    EXPECT_FALSE(key.required && !key.default_value.empty());
    // Written where it does not belong, the loader names the key as unknown there.
    const std::string misplaced = key.section == KeySection::kTop ? "timeouts:\n  " + std::string(key.name) + ": x\n"
                                                                  : std::string(key.name) + ": x\n";
    const ConfigResult r = ParseConfig(kHead + misplaced, "f.yaml");
    ASSERT_FALSE(r.ok());
    bool unknown = false;
    for (const ConfigError& e : r.errors) unknown = unknown || e.message.find("unknown key '" + std::string(key.name) + "'") != std::string::npos;
    EXPECT_TRUE(unknown) << DumpErrors(r);
  }
}

// ---------------------------------------------------------------------------------------------
// Durations and sizes

struct DurationCase {
  const char* text;
  bool ok;
  int64_t ms;
};

TEST(ParseDurationTest, Table) {
  const DurationCase cases[] = {
      {"250ms", true, 250},
      {"1ms", true, 1},
      {"2s", true, 2000},
      {"1m", true, 60000},
      {"1h", true, 3600000},
      {"90m", true, 5400000},
      {"007s", true, 7000},
      {"9223372036854ms", true, 9223372036854},  // the largest that still fits a nanosecond clock
      {"2562047h", true, 2562047ll * 3600000},
      {"9223372036855ms", false, 0},
      {"2562048h", false, 0},
      {"18446744073709551616ms", false, 0},  // 2^64
      {"99999999999999999999999s", false, 0},
      {"", false, 0},
      {"0s", false, 0},
      {"0ms", false, 0},
      {"2", false, 0},
      {"1.5s", false, 0},
      {".5s", false, 0},
      {"-1s", false, 0},
      {"+1s", false, 0},
      {"2S", false, 0},
      {"2MS", false, 0},
      {"2 s", false, 0},
      {" 2s", false, 0},
      {"2s ", false, 0},
      {"s", false, 0},
      {"2sec", false, 0},
      {"1d", false, 0},
      {"1e3ms", false, 0},
      {"0x10s", false, 0},
      {"1h30m", false, 0},
  };
  for (const DurationCase& c : cases) {
    milliseconds out{-1};
    EXPECT_EQ(ParseDuration(c.text, &out), c.ok) << "'" << c.text << "'";
    if (c.ok) {
      EXPECT_EQ(out.count(), c.ms) << c.text;
    } else {
      EXPECT_EQ(out.count(), -1) << "output written on failure: " << c.text;
    }
  }
}

struct SizeCase {
  const char* text;
  bool ok;
  uint64_t bytes;
};

TEST(ParseSizeTest, Table) {
  const SizeCase cases[] = {
      {"0", true, 0},
      {"1", true, 1},
      {"16384", true, 16384},
      {"1KiB", true, 1024},
      {"16KiB", true, 16384},
      {"64MiB", true, 64ull << 20},
      {"1GiB", true, 1ull << 30},
      {"18446744073709551615", true, UINT64_MAX},
      {"17179869183GiB", true, 17179869183ull << 30},  // the largest GiB count that fits
      {"18446744073709551616", false, 0},               // 2^64
      {"17179869184GiB", false, 0},                     // 2^64 bytes
      {"18014398509481984KiB", false, 0},               // 2^64 bytes
      {"99999999999999999999999", false, 0},
      {"", false, 0},
      {"16KB", false, 0},
      {"16kB", false, 0},
      {"16MB", false, 0},
      {"16GB", false, 0},
      {"16K", false, 0},
      {"16k", false, 0},
      {"16kib", false, 0},
      {"16KIB", false, 0},
      {"1TiB", false, 0},
      {"16B", false, 0},
      {"16 KiB", false, 0},
      {"1.5MiB", false, 0},
      {"-1", false, 0},
      {"+1", false, 0},
      {"KiB", false, 0},
      {"0x10", false, 0},
      {"1e3", false, 0},
      {" 1", false, 0},
  };
  for (const SizeCase& c : cases) {
    uint64_t out = 12345;
    EXPECT_EQ(ParseSize(c.text, &out), c.ok) << "'" << c.text << "'";
    if (c.ok) {
      EXPECT_EQ(out, c.bytes) << c.text;
    } else {
      EXPECT_EQ(out, 12345u) << "output written on failure: " << c.text;
    }
  }
}

TEST(HostPortTest, ToStringBracketsIpv6) {
  EXPECT_EQ((HostPort{"0.0.0.0", 8080}).ToString(), "0.0.0.0:8080");
  EXPECT_EQ((HostPort{"localhost", 80}).ToString(), "localhost:80");
  EXPECT_EQ((HostPort{"::1", 9901}).ToString(), "[::1]:9901");
  EXPECT_EQ((HostPort{"fe80::1%eth0", 1}).ToString(), "[fe80::1%eth0]:1");
}

// yaml-cpp 0.7's LoadAll never returns on this input (found by fuzzing): the loader must not hang.
TEST(ConfigTest, ALoneCommaIsAnErrorNotAHang) {
  ConfigResult r = ParseConfig(",", "comma.yaml");
  EXPECT_FALSE(r.ok());
  ASSERT_FALSE(r.errors.empty());
}

TEST(ConfigTest, DocumentMarkersAroundOneDocumentAreFine) {
  ConfigResult r = ParseConfig("---\nbackend: http://127.0.0.1:8081\nstate_file: s.log\n...\n# done\n", "one.yaml");
  EXPECT_TRUE(r.ok()) << (r.errors.empty() ? "" : r.errors[0].ToString());
}

}  // namespace
}  // namespace fencing
