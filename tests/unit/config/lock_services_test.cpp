// Verified raises in the route file: lock_services (etcd and ZooKeeper clients) and a route's
// verify. Every mistake is reported at its line:column, defaults hold, and a full example loads
// field by field.

#include <gtest/gtest.h>

#include <chrono>
#include <string>
#include <vector>

#include "config/config.h"
#include "config/config_cases.h"

namespace fencing {
namespace {

using namespace config_cases;  // NOLINT(google-build-using-namespace): the shared test table

using std::chrono::milliseconds;

// An etcd service e1 whose mapping's keys start on line 6, column 7.
std::string Etcd(const std::string& body) { return kHead + "lock_services:\n  e1:\n    etcd:\n" + body; }
// The same with a valid endpoint on line 6; body starts on line 7.
std::string EtcdAt(const std::string& endpoint, const std::string& body) {
  return Etcd("      endpoints: [\"" + endpoint + "\"]\n" + body);
}
// A ZooKeeper service z1 whose mapping's keys start on line 6, column 7.
std::string Zk(const std::string& body) { return kHead + "lock_services:\n  z1:\n    zookeeper:\n" + body; }

// Services e1 (etcd) and z1 (ZooKeeper), then a keyed route r whose verify value is on line 10,
// column 13 (its service at column 23, its lock at 33 when service is two letters).
const std::string kServices =
    "lock_services:\n"
    "  e1: {etcd: {endpoints: [\"http://a:1\"]}}\n"
    "  z1: {zookeeper: {hosts: \"a:1\"}}\n";
std::string Keyed(const std::string& verify) {
  return kHead + kServices + "routes:\n  - name: r\n    prefix: /r\n    fence_key: {path_segment: 1}\n    verify: " +
         verify + "\n";
}
// The same route without fence_key: verify on line 9.
std::string Unkeyed(const std::string& verify) {
  return kHead + kServices + "routes:\n  - name: r\n    prefix: /r\n    verify: " + verify + "\n";
}

class LockServiceErrorTest : public testing::TestWithParam<ErrorCase> {};

TEST_P(LockServiceErrorTest, ReportsOneErrorAtItsPosition) { ExpectOneErrorAt(GetParam()); }

const ErrorCase kServiceErrors[] = {
    {"not a mapping", kHead + "lock_services: [a]\n", 3, 16, "lock_services: expected a mapping of NAME"},
    {"bad name", kHead + "lock_services:\n  Main: {zookeeper: {hosts: \"a:1\"}}\n", 4, 3,
     "lock_services: a lock service name may contain only a-z, 0-9, '_' and '-' (got 'Main')"},
    {"service not a mapping", kHead + "lock_services:\n  e1: x\n", 4, 7,
     "lock_services.e1: expected a mapping, {etcd: {...}} or {zookeeper: {...}}, got 'x'"},
    {"no kind", kHead + "lock_services:\n  e1: {}\n", 4, 7, "lock_services.e1: give etcd or zookeeper"},
    {"two kinds", kHead + "lock_services:\n  e1: {etcd: {endpoints: [\"http://a:1\"]}, zookeeper: {hosts: \"a:1\"}}\n",
     4, 43, "give exactly one of etcd and zookeeper, not both"},
    {"misspelt kind", kHead + "lock_services:\n  e1: {etcdd: {}}\n", 4, 8,
     "lock_services.e1: unknown key 'etcdd'; did you mean 'etcd'?"},
    {"kind not a mapping", kHead + "lock_services:\n  e1: {etcd: x}\n", 4, 14,
     "lock_services.e1.etcd: expected a mapping with endpoints, got 'x'"},
    {"kind empty", kHead + "lock_services:\n  z1:\n    zookeeper:\n", 5, 5,
     "lock_services.z1.zookeeper: expected a mapping with hosts, got nothing"},
    {"duplicate name", kHead + "lock_services:\n  z1: {zookeeper: {hosts: \"a:1\"}}\n  z1: {zookeeper: {hosts: \"b:1\"}}\n",
     5, 3, "lock_services: duplicate key 'z1' (first at line 4)"},
};

const ErrorCase kEtcdErrors[] = {
    {"missing endpoints", Etcd("      timeout: 1s\n"), 6, 7,
     "lock_services.e1.etcd: missing required key 'endpoints'"},
    {"misspelt key", EtcdAt("http://a:1", "      timeuot: 1s\n"), 7, 7,
     "lock_services.e1.etcd: unknown key 'timeuot'; did you mean 'timeout'?"},
    {"endpoints a string", Etcd("      endpoints: http://a:1\n"), 6, 18,
     "lock_services.e1.etcd.endpoints: expected a list"},
    {"endpoints empty", Etcd("      endpoints: []\n"), 6, 18, "must list at least one endpoint"},
    {"endpoint a mapping", Etcd("      endpoints: [{a: 1}]\n"), 6, 19, "expected an endpoint such as"},
    {"no scheme", EtcdAt("a:2379", ""), 6, 19, "expected http://host:port or https://host:port"},
    {"other scheme", EtcdAt("grpc://a:2379", ""), 6, 19, "unsupported scheme 'grpc'"},
    {"upper-case scheme", EtcdAt("HTTP://a:2379", ""), 6, 19, "write the scheme in lower case"},
    {"no port", EtcdAt("http://a", ""), 6, 19, "the port is required (etcd's client port is usually 2379)"},
    {"trailing slash", EtcdAt("http://a:1/", ""), 6, 19, "not even a trailing '/'"},
    {"path", EtcdAt("http://a:1/v3", ""), 6, 19, "must not have a path"},
    {"query", EtcdAt("http://a:1?x", ""), 6, 19, "must not have a path, query or fragment"},
    {"user info", EtcdAt("http://u:p@a:1", ""), 6, 19, "must not contain user information (user@)"},
    {"port 0", EtcdAt("http://a:0", ""), 6, 19, "port must be from 1 to 65535"},
    {"bad host", EtcdAt("http://a b:1", ""), 6, 19, "not a valid host name"},
    {"bare v6", EtcdAt("http://::1:2379", ""), 6, 19, "must be in brackets"},
    {"duplicate endpoint", Etcd("      endpoints: [\"http://a:1\", \"http://a:1\"]\n"), 6, 33,
     "duplicate endpoint 'http://a:1'"},
    {"mixed schemes", Etcd("      endpoints: [\"http://a:1\", \"https://b:1\"]\n"), 6, 33,
     "mixes http:// and https:// endpoints"},
    {"timeout bare number", EtcdAt("http://a:1", "      timeout: 2\n"), 7, 16, "a bare number has no unit"},
    {"timeout zero", EtcdAt("http://a:1", "      timeout: 0s\n"), 7, 16, "greater than zero"},
    {"timeout too long", EtcdAt("http://a:1", "      timeout: 61s\n"), 7, 16, "must be at most 1m"},
    {"password", EtcdAt("http://a:1", "      password: hunter2\n"), 7, 7,
     "password: the route file carries no secret; write the password into a file"},
    {"username alone", EtcdAt("http://a:1", "      username: u\n"), 7, 17, "username: needs password_file"},
    {"password_file alone", EtcdAt("http://a:1", "      password_file: /p\n"), 7, 22, "password_file: needs username"},
    {"username empty", EtcdAt("http://a:1", "      username: \"\"\n      password_file: /p\n"), 7, 17,
     "username: must not be empty"},
    {"password_file a list", EtcdAt("http://a:1", "      username: u\n      password_file: [/p]\n"), 8, 22,
     "password_file: expected a string, got a list"},
    {"tls with http", EtcdAt("http://a:1", "      tls: {ca_file: /ca}\n"), 7, 12,
     "tls: the endpoints are http://; TLS settings need https:// endpoints"},
    {"tls a list", EtcdAt("https://a:1", "      tls: [a]\n"), 7, 12, "tls: expected a mapping, got a list"},
    {"tls misspelt key", EtcdAt("https://a:1", "      tls: {ca_fil: /ca}\n"), 7, 13,
     "lock_services.e1.etcd.tls: unknown key 'ca_fil'; did you mean 'ca_file'?"},
    {"cert without key", EtcdAt("https://a:1", "      tls: {cert_file: /c}\n"), 7, 24, "cert_file: needs key_file"},
    {"key without cert", EtcdAt("https://a:1", "      tls: {key_file: /k}\n"), 7, 23, "key_file: needs cert_file"},
    {"ca_file empty", EtcdAt("https://a:1", "      tls: {ca_file: ''}\n"), 7, 22, "ca_file: must not be empty"},
    {"bad server_name", EtcdAt("https://a:1", "      tls: {server_name: 'a b'}\n"), 7, 26,
     "server_name: 'a b' is not a valid host name"},
};

const ErrorCase kZooKeeperErrors[] = {
    {"missing hosts", Zk("      timeout: 1s\n"), 6, 7, "lock_services.z1.zookeeper: missing required key 'hosts'"},
    {"misspelt key", Zk("      hosts: \"a:1\"\n      session_timout: 5s\n"), 7, 7,
     "did you mean 'session_timeout'?"},
    {"hosts a list", Zk("      hosts: [a]\n"), 6, 14, "hosts: expected a string, got a list"},
    {"hosts empty", Zk("      hosts: \"\"\n"), 6, 14, "hosts: must not be empty"},
    {"host without port", Zk("      hosts: \"a:1,b\"\n"), 6, 14,
     "'b': the port is required (ZooKeeper's client port is usually 2181)"},
    {"stray comma", Zk("      hosts: \"a:1,\"\n"), 6, 14, "an empty entry in the host list"},
    {"space", Zk("      hosts: \"a:1, b:2\"\n"), 6, 14, "must not contain spaces"},
    {"IPv6", Zk("      hosts: \"[::1]:2181\"\n"), 6, 14, "IPv6 addresses are not supported in hosts"},
    {"bad port", Zk("      hosts: \"a:99999\"\n"), 6, 14, "'a:99999': port must be from 1 to 65535"},
    {"bad host", Zk("      hosts: \"a..b:1\"\n"), 6, 14, "is not a valid host name"},
    {"duplicate host", Zk("      hosts: \"a:1,b:2,a:1\"\n"), 6, 14, "'a:1' is listed twice"},
    {"chroot trailing slash", Zk("      hosts: \"a:1/apps/\"\n"), 6, 14, "the chroot must not end with '/'"},
    {"chroot without hosts", Zk("      hosts: \"/apps\"\n"), 6, 14, "no host before the chroot"},
    {"timeout too long", Zk("      hosts: \"a:1\"\n      timeout: 2m\n"), 7, 16, "must be at most 1m"},
    {"session too short", Zk("      hosts: \"a:1\"\n      session_timeout: 1500ms\n"), 7, 24,
     "session_timeout: must be from 2s to 10m"},
    {"session too long", Zk("      hosts: \"a:1\"\n      session_timeout: 11m\n"), 7, 24, "must be from 2s to 10m"},
    {"session bad", Zk("      hosts: \"a:1\"\n      session_timeout: ten\n"), 7, 24, "expected a duration"},
};

const ErrorCase kVerifyErrors[] = {
    {"not a mapping", Keyed("e1"), 10, 13, "routes[0].verify: expected a mapping, {service: NAME, lock:"},
    {"missing lock", Keyed("{service: e1}"), 10, 13, "routes[0].verify: missing required key 'lock'"},
    {"missing service", Keyed("{lock: \"/l/{key}\"}"), 10, 13, "routes[0].verify: missing required key 'service'"},
    {"misspelt key", Keyed("{service: e1, lock: \"/l/{key}\", lcok: x}"), 10, 45,
     "routes[0].verify: unknown key 'lcok'; did you mean 'lock'?"},
    {"service near miss", Keyed("{service: e2, lock: \"/l/{key}\"}"), 10, 23,
     "routes[0].verify.service: no lock service 'e2'; did you mean 'e1'?"},
    {"service far", Keyed("{service: other, lock: \"/l/{key}\"}"), 10, 23,
     "no lock service 'other' (lock_services has: e1, z1)"},
    {"no services", kHead + "routes:\n  - name: r\n    prefix: /r\n    verify: {service: e1, lock: \"/l\"}\n", 6, 23,
     "no lock service 'e1'; define it under lock_services"},
    {"service empty", Keyed("{service: '', lock: \"/l/{key}\"}"), 10, 23, "verify.service: must not be empty"},
    {"lock empty", Keyed("{service: e1, lock: \"\"}"), 10, 33, "verify.lock: must not be empty"},
    {"lock a list", Keyed("{service: e1, lock: [a]}"), 10, 33, "verify.lock: expected a string, got a list"},
    {"lock trailing slash", Keyed("{service: e1, lock: \"/l/{key}/\"}"), 10, 33, "must not end with '/'"},
    {"control character", Keyed("{service: e1, lock: \"/l/\\t{key}\"}"), 10, 33, "must not contain control characters"},
    {"other placeholder", Keyed("{service: e1, lock: \"/l/{name}/{key}\"}"), 10, 33,
     "unknown placeholder '{name}'; the one placeholder is {key}"},
    {"unclosed placeholder", Keyed("{service: e1, lock: \"/l/{key\"}"), 10, 33, "has a '{' without '}'"},
    {"stray brace", Keyed("{service: e1, lock: \"/l/{key}}\"}"), 10, 33, "has a '}' without '{'"},
    {"keyed lock without {key}", Keyed("{service: e1, lock: \"/l/all\"}"), 10, 33,
     "a keyed route's lock must contain {key} (each key is its own lock); without it every key would be "
     "verified against the one lock '/l/all'"},
    {"{key} on an unkeyed route", Unkeyed("{service: e1, lock: \"/l/{key}\"}"), 9, 33,
     "{key} is the fence key, and this route has none; add fence_key"},
    {"zookeeper: relative lock", Keyed("{service: z1, lock: \"l/{key}\"}"), 10, 33,
     "must be an absolute znode path (start with '/'): 'z1' is a ZooKeeper service"},
    {"zookeeper: empty segment", Keyed("{service: z1, lock: \"/l//{key}\"}"), 10, 33, "must not contain empty segments"},
    {"zookeeper: dot segment", Keyed("{service: z1, lock: \"/l/../{key}\"}"), 10, 33, "'.' or '..' segments"},
    {"zookeeper: /zookeeper", Keyed("{service: z1, lock: \"/zookeeper/{key}\"}"), 10, 33, "must not be under /zookeeper"},
    {"same fence, another service",
     Keyed("{service: e1, lock: \"/l/{key}\"}") +
         "  - name: s\n    prefix: /s\n    fence: r\n    fence_key: {header: X-K}\n"
         "    verify: {service: z1, lock: \"/l/{key}\"}\n",
     15, 13,
     "routes[1].verify: service 'z1', lock '/l/{key}' here, but service 'e1', lock '/l/{key}' on route 'r' (line 7), "
     "which names the same fence 'r'; routes naming one fence must agree on verify"},
    {"same fence, another lock",
     Keyed("{service: e1, lock: \"/l/{key}\"}") +
         "  - name: s\n    prefix: /s\n    fence: r\n    fence_key: {header: X-K}\n"
         "    verify: {service: e1, lock: \"/m/{key}\"}\n",
     15, 13, "lock '/m/{key}' here, but service 'e1', lock '/l/{key}' on route 'r' (line 7)"},
    {"same fence, no verify",
     Keyed("{service: e1, lock: \"/l/{key}\"}") + "  - name: s\n    prefix: /s\n    fence: r\n    fence_key: {header: X-K}\n",
     11, 5, "routes[1].verify: no verify here, but service 'e1', lock '/l/{key}' on route 'r' (line 7)"},
    {"same unkeyed fence, verify only on the second",
     kHead + kServices + "routes:\n  - name: r\n    prefix: /r\n  - name: s\n    prefix: /s\n    fence: r\n"
                         "    verify: {service: e1, lock: /l}\n",
     12, 13, "service 'e1', lock '/l' here, but no verify on route 'r' (line 7)"},
};

INSTANTIATE_TEST_SUITE_P(Services, LockServiceErrorTest, testing::ValuesIn(kServiceErrors));
INSTANTIATE_TEST_SUITE_P(Etcd, LockServiceErrorTest, testing::ValuesIn(kEtcdErrors));
INSTANTIATE_TEST_SUITE_P(ZooKeeper, LockServiceErrorTest, testing::ValuesIn(kZooKeeperErrors));
INSTANTIATE_TEST_SUITE_P(Verify, LockServiceErrorTest, testing::ValuesIn(kVerifyErrors));

// ---------------------------------------------------------------------------------------------
// Valid files

TEST(LockServicesTest, DefaultsAndNone) {
  const ConfigResult none = ParseConfig(kHead, "f.yaml");
  ASSERT_TRUE(none.ok()) << DumpErrors(none);
  EXPECT_TRUE(none.config->lock_services.empty());
  // Every service commented out: none, as for routes.
  const ConfigResult empty = ParseConfig(kHead + "lock_services:\n#  e1: {etcd: {endpoints: [\"http://a:1\"]}}\n", "f.yaml");
  ASSERT_TRUE(empty.ok()) << DumpErrors(empty);
  EXPECT_TRUE(empty.config->lock_services.empty());

  const ConfigResult r = ParseConfig(kHead + kServices, "f.yaml");
  ASSERT_TRUE(r.ok()) << DumpErrors(r);
  const ProxyConfig& c = *r.config;
  ASSERT_EQ(c.lock_services.size(), 2u);
  const LockServiceConfig& e1 = c.lock_services[0];
  EXPECT_EQ(e1.name, "e1");
  EXPECT_EQ(e1.kind, LockServiceConfig::Kind::kEtcd);
  EXPECT_EQ(e1.etcd.endpoints, std::vector<std::string>{"http://a:1"});
  EXPECT_EQ(e1.etcd.timeout, milliseconds(1000));
  EXPECT_EQ(e1.timeout(), milliseconds(1000));
  EXPECT_TRUE(e1.etcd.username.empty());
  EXPECT_TRUE(e1.etcd.password_file.empty());
  EXPECT_FALSE(e1.etcd.tls);
  EXPECT_EQ(e1.etcd.tls_settings, TlsSettings{});
  const LockServiceConfig& z1 = c.lock_services[1];
  EXPECT_EQ(z1.name, "z1");
  EXPECT_EQ(z1.kind, LockServiceConfig::Kind::kZooKeeper);
  EXPECT_EQ(z1.zookeeper.hosts, "a:1");
  EXPECT_EQ(z1.zookeeper.timeout, milliseconds(1000));
  EXPECT_EQ(z1.zookeeper.session_timeout, milliseconds(10000));
  EXPECT_EQ(c.FindLockService("z1"), &z1);
  EXPECT_EQ(c.FindLockService("e1"), &e1);
  EXPECT_EQ(c.FindLockService("e2"), nullptr);
  EXPECT_EQ(c.FindLockService(""), nullptr);
}

// https endpoints alone mean TLS with the defaults; so does an empty tls block.
TEST(LockServicesTest, HttpsMeansTls) {
  for (const std::string& tls : {std::string(""), std::string("      tls:\n"), std::string("      tls: {}\n")}) {
    SCOPED_TRACE(tls);
    const ConfigResult r = ParseConfig(EtcdAt("https://etcd.example:2379", tls), "f.yaml");
    ASSERT_TRUE(r.ok()) << DumpErrors(r);
    EXPECT_TRUE(r.config->lock_services[0].etcd.tls);
    EXPECT_EQ(r.config->lock_services[0].etcd.tls_settings, TlsSettings{});
  }
}

// The contract's example, with every setting written, loads field by field.
TEST(LockServicesTest, FullExample) {
  const std::string text = kHead + R"(routes:
  - name: objects
    prefix: /objects
    fence_key: {path_segment: 1}
    verify: {service: main-etcd, lock: "/locks/objects/{key}"}   # {key}: the fence key
  - name: objects-by-header
    prefix: /api/objects
    fence: objects
    fence_key: {header: X-Object}
    verify: {service: main-etcd, lock: "/locks/objects/{key}"}
  - name: tenants
    prefix: /tenants
    fence_key: {header: X-Tenant}
    mode: observe
    missing_token: allow
    verify: {service: main-zk, lock: "/locks/tenants/{key}/lock"}
  - name: orders
    prefix: /orders
    verify: {service: secure-etcd, lock: "orders-lock"}
  - name: plain
    prefix: /plain
lock_services:
  main-etcd: {etcd: {endpoints: ["http://127.0.0.1:2379"], timeout: 1s}}
  main-zk:   {zookeeper: {hosts: "127.0.0.1:2181", timeout: 1s}}
  secure-etcd:
    etcd:
      endpoints: ["https://etcd-0:2379", "https://[::1]:2379"]
      timeout: 250ms
      username: fencing-proxy
      password_file: /run/secrets/etcd-password
      tls:
        ca_file: /etc/etcd/ca.crt
        cert_file: /etc/etcd/tls.crt
        key_file: /etc/etcd/tls.key
        server_name: etcd.internal
  zk-ensemble:
    zookeeper:
      hosts: "zk-0:2181,zk-1:2181,10.0.0.3:2182/apps/fencing"
      timeout: 2s
      session_timeout: 30s
)";
  const ConfigResult r = ParseConfig(text, "f.yaml");
  ASSERT_TRUE(r.ok()) << DumpErrors(r);
  const ProxyConfig& c = *r.config;
  ASSERT_EQ(c.lock_services.size(), 4u);
  const LockServiceConfig& secure = c.lock_services[2];
  EXPECT_EQ(secure.name, "secure-etcd");
  EXPECT_EQ(secure.kind, LockServiceConfig::Kind::kEtcd);
  EXPECT_EQ(secure.etcd.endpoints, (std::vector<std::string>{"https://etcd-0:2379", "https://[::1]:2379"}));
  EXPECT_EQ(secure.etcd.timeout, milliseconds(250));
  EXPECT_EQ(secure.timeout(), milliseconds(250));
  EXPECT_EQ(secure.etcd.username, "fencing-proxy");
  EXPECT_EQ(secure.etcd.password_file, "/run/secrets/etcd-password");
  EXPECT_TRUE(secure.etcd.tls);
  EXPECT_EQ(secure.etcd.tls_settings.ca_file, "/etc/etcd/ca.crt");
  EXPECT_EQ(secure.etcd.tls_settings.cert_file, "/etc/etcd/tls.crt");
  EXPECT_EQ(secure.etcd.tls_settings.key_file, "/etc/etcd/tls.key");
  EXPECT_EQ(secure.etcd.tls_settings.server_name, "etcd.internal");
  const LockServiceConfig& ensemble = c.lock_services[3];
  EXPECT_EQ(ensemble.kind, LockServiceConfig::Kind::kZooKeeper);
  EXPECT_EQ(ensemble.zookeeper.hosts, "zk-0:2181,zk-1:2181,10.0.0.3:2182/apps/fencing");
  EXPECT_EQ(ensemble.zookeeper.timeout, milliseconds(2000));
  EXPECT_EQ(ensemble.timeout(), milliseconds(2000));
  EXPECT_EQ(ensemble.zookeeper.session_timeout, milliseconds(30000));

  ASSERT_EQ(c.routes.size(), 5u);
  EXPECT_EQ(c.routes[0].verify.service, "main-etcd");
  EXPECT_EQ(c.routes[0].verify.lock, "/locks/objects/{key}");
  EXPECT_TRUE(c.routes[0].verify.enabled());
  EXPECT_EQ(c.routes[1].verify, c.routes[0].verify);
  EXPECT_EQ(c.routes[2].verify.service, "main-zk");
  EXPECT_EQ(c.routes[2].mode, FenceMode::kObserve);
  EXPECT_EQ(c.routes[2].missing_token, MissingToken::kAllow);
  EXPECT_EQ(c.routes[3].verify.service, "secure-etcd");
  EXPECT_EQ(c.routes[3].verify.lock, "orders-lock");  // an etcd lock need not start with '/'
  EXPECT_FALSE(c.routes[4].verify.enabled());
  EXPECT_EQ(c.FindLockService(c.routes[2].verify.service), &c.lock_services[1]);
}

// A route naming a service that is itself in error is not told the service does not exist: the
// service's own error is the one to fix.
TEST(LockServicesTest, ABrokenServiceIsReportedOnce) {
  const std::string text = kHead + "lock_services:\n  e3: {etcd: {endpoints: []}}\n"
                           "routes:\n  - name: r\n    prefix: /r\n    verify: {service: e3, lock: /l}\n";
  const ConfigResult r = ParseConfig(text, "f.yaml");
  ASSERT_EQ(r.errors.size(), 1u) << DumpErrors(r);
  EXPECT_EQ(r.errors[0].line, 4);
  EXPECT_NE(r.errors[0].message.find("must list at least one endpoint"), std::string::npos);
}

// A fence_key in error leaves open whether the route is keyed: its verify's {key} is not
// blamed for it.
TEST(LockServicesTest, ABrokenFenceKeyIsReportedOnce) {
  for (const std::string& lock : {std::string("/l/{key}"), std::string("/l/all")}) {
    SCOPED_TRACE(lock);
    const std::string text = kHead + kServices + "routes:\n  - name: r\n    prefix: /r\n    fence_key: {path_segment: 0}\n"
                             "    verify: {service: e1, lock: \"" + lock + "\"}\n";
    const ConfigResult r = ParseConfig(text, "f.yaml");
    ASSERT_EQ(r.errors.size(), 1u) << DumpErrors(r);
    EXPECT_EQ(r.errors[0].line, 9);
    EXPECT_NE(r.errors[0].message.find("fence_key.path_segment: must be from 1"), std::string::npos);
  }
}

// Every problem of a service is reported in one round, in file order.
TEST(LockServicesTest, CollectsEveryError) {
  const std::string text = Etcd("      username: u\n      timeout: 0s\n      tls: {cert_file: /c}\n");
  const ConfigResult r = ParseConfig(text, "f.yaml");
  ASSERT_EQ(r.errors.size(), 4u) << DumpErrors(r);
  EXPECT_NE(r.errors[0].message.find("missing required key 'endpoints'"), std::string::npos);
  EXPECT_NE(r.errors[1].message.find("username: needs password_file"), std::string::npos);
  EXPECT_NE(r.errors[2].message.find("timeout: a duration must be greater than zero"), std::string::npos);
  EXPECT_NE(r.errors[3].message.find("cert_file: needs key_file"), std::string::npos);
}

TEST(VerifySpecTest, LockFor) {
  VerifySpec spec{"main", "/locks/objects/{key}"};
  EXPECT_EQ(spec.LockFor("photo-42"), "/locks/objects/photo-42");
  spec.lock = "/locks/{key}/shard-{key}";
  EXPECT_EQ(spec.LockFor("k1"), "/locks/k1/shard-k1");
  spec.lock = "{key}";
  EXPECT_EQ(spec.LockFor("a.b_c~d"), "a.b_c~d");
  spec.lock = "/locks/orders";
  EXPECT_EQ(spec.LockFor("ignored"), "/locks/orders");
  // The key is inserted, never scanned again for placeholders.
  spec.lock = "/l/{key}";
  EXPECT_EQ(spec.LockFor("{key}"), "/l/{key}");
  EXPECT_EQ(spec.LockFor(""), "/l/");
  EXPECT_TRUE(spec.enabled());
  EXPECT_FALSE(VerifySpec{}.enabled());
}

// What the loader keeps is what LockFor expands: the lock of one key of a loaded route.
TEST(VerifySpecTest, LoadedLockExpands) {
  const ConfigResult r = ParseConfig(Keyed("{service: z1, lock: \"/locks/r/{key}\"}"), "f.yaml");
  ASSERT_TRUE(r.ok()) << DumpErrors(r);
  EXPECT_EQ(r.config->routes[0].verify.LockFor("k-1"), "/locks/r/k-1");
}

}  // namespace
}  // namespace fencing
