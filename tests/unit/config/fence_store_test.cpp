// Shared fences in the route file: fence_store (etcd, its prefix and membership lease), and what
// it rules out elsewhere (state_file, forgetting idle keys). Every mistake is reported at its
// line:column, defaults hold, and every option loads field by field.

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
using std::chrono::seconds;

// One valid line without state_file: with a fence_store, none is needed.
const std::string kBackend = "backend: http://127.0.0.1:8081\n";
// fence_store on line 2, its etcd on line 3, the etcd block's keys from line 4, column 5.
std::string Store(const std::string& body) { return kBackend + "fence_store:\n  etcd:\n" + body; }
// The same with valid endpoints and prefix on lines 4 and 5; body starts on line 6.
std::string StoreAt(const std::string& body) {
  return Store("    endpoints: [\"http://a:1\"]\n    prefix: /fp\n" + body);
}
// A prefix value on line 5, column 13.
std::string Prefix(const std::string& value) {
  return Store("    endpoints: [\"http://a:1\"]\n    prefix: " + value + "\n");
}
// A member_ttl value on line 6, column 17.
std::string Ttl(const std::string& value) { return StoreAt("    member_ttl: " + value + "\n"); }

const std::string kFlowStore = "fence_store: {etcd: {endpoints: [\"http://a:1\"], prefix: /fp}}\n";
// A keyed route that forgets idle keys, its forget_idle_keys_after on the last of its 6 lines,
// column 29.
const std::string kForgettingRoute =
    "  - name: r\n    prefix: /r\n    fence_key: {path_segment: 1}\n    token_order: global\n"
    "    forget_idle_keys_after: 1h\n";

class FenceStoreErrorTest : public testing::TestWithParam<ErrorCase> {};

TEST_P(FenceStoreErrorTest, ReportsOneErrorAtItsPosition) { ExpectOneErrorAt(GetParam()); }

const ErrorCase kStoreErrors[] = {
    {"not a mapping", kBackend + "fence_store: etcd\n", 2, 14,
     "fence_store: expected a mapping, {etcd: {endpoints: [...], prefix: \"/...\"}}, got 'etcd'"},
    {"empty", kBackend + "fence_store:\n", 2, 1, "fence_store: expected a mapping, {etcd:"},
    {"no kind", kBackend + "fence_store: {}\n", 2, 14, "fence_store: give etcd, the store's kind"},
    {"misspelt kind", kBackend + "fence_store: {etc: {}}\n", 2, 15,
     "fence_store: unknown kind 'etc'; did you mean 'etcd'?"},
    {"another kind", kBackend + "fence_store:\n  zookeeper: {hosts: \"a:1\"}\n", 3, 3,
     "fence_store: unknown kind 'zookeeper'; fences are shared in etcd only (write etcd: {...})"},
    {"duplicate kind", kBackend + "fence_store:\n  etcd: {endpoints: [\"http://a:1\"], prefix: /fp}\n  etcd: {}\n", 4, 3,
     "fence_store: duplicate key 'etcd' (first at line 3)"},
    {"etcd not a mapping", kBackend + "fence_store: {etcd: x}\n", 2, 21,
     "fence_store.etcd: expected a mapping with endpoints and prefix, got 'x'"},
    {"etcd empty", kBackend + "fence_store:\n  etcd:\n", 3, 3,
     "fence_store.etcd: expected a mapping with endpoints and prefix, got nothing"},
    {"missing prefix", Store("    endpoints: [\"http://a:1\"]\n"), 4, 5,
     "fence_store.etcd: missing required key 'prefix' (the etcd key prefix of the shared fences"},
    {"missing endpoints", Store("    prefix: /fp\n"), 4, 5, "fence_store.etcd: missing required key 'endpoints'"},
    {"misspelt key", StoreAt("    member_tll: 10s\n"), 6, 5,
     "fence_store.etcd: unknown key 'member_tll'; did you mean 'member_ttl'?"},
    {"far key", StoreAt("    session_timeout: 10s\n"), 6, 5,
     "fence_store.etcd: unknown key 'session_timeout' (known keys: endpoints, prefix, member_ttl, timeout"},
    {"bad endpoint", Store("    endpoints: [\"http://a\"]\n    prefix: /fp\n"), 4, 17,
     "fence_store.etcd.endpoints: the port is required"},
    {"timeout too long", StoreAt("    timeout: 61s\n"), 6, 14,
     "fence_store.etcd.timeout: must be at most 1m (each etcd call of a raise waits this long)"},
    {"password", StoreAt("    password: hunter2\n"), 6, 5,
     "fence_store.etcd.password: the route file carries no secret"},
    {"username alone", StoreAt("    username: u\n"), 6, 15, "fence_store.etcd.username: needs password_file"},
    {"tls with http", StoreAt("    tls: {ca_file: /ca}\n"), 6, 10,
     "fence_store.etcd.tls: the endpoints are http://; TLS settings need https:// endpoints"},
    {"tls misspelt key", Store("    endpoints: [\"https://a:1\"]\n    prefix: /fp\n    tls: {ca_fil: /ca}\n"), 6, 11,
     "fence_store.etcd.tls: unknown key 'ca_fil'; did you mean 'ca_file'?"},
};

const ErrorCase kPrefixErrors[] = {
    {"empty", Prefix("''"), 5, 13, "fence_store.etcd.prefix: must not be empty (a key prefix such as"},
    {"a list", Prefix("[/fp]"), 5, 13, "fence_store.etcd.prefix: expected a string, got a list"},
    {"relative", Prefix("fp/orders"), 5, 13, "prefix: must start with '/' (a key prefix such as \"/fencing-proxy/orders-db\")"},
    {"root", Prefix("/"), 5, 13, "prefix: must name something under '/'"},
    {"trailing slash", Prefix("/fp/orders/"), 5, 13, "prefix: must not end with '/' (the store adds \"/members/\""},
    {"empty segment", Prefix("/fp//orders"), 5, 13, "prefix: must not contain an empty segment (\"//\") (got '/fp//orders')"},
    {"space", Prefix("'/fp orders'"), 5, 13, "prefix: may contain only printable ASCII characters, without spaces"},
    {"tab", Prefix("\"/fp\\torders\""), 5, 13, "may contain only printable ASCII characters, without spaces (got '/fp\\torders')"},
    {"non-ASCII", Prefix("/fp/caf\xc3\xa9"), 5, 13, "may contain only printable ASCII characters"},
    {"DEL", Prefix("\"/fp\\x7f\""), 5, 13, "may contain only printable ASCII characters"},
    {"too long", Prefix("/" + std::string(256, 'a')), 5, 13, "prefix: must be at most 256 bytes, got 257"},
};

const ErrorCase kTtlErrors[] = {
    {"milliseconds", Ttl("1500ms"), 6, 17,
     "fence_store.etcd.member_ttl: must be whole seconds: etcd lease TTLs are seconds (got '1500ms')"},
    {"not whole", Ttl("2500ms"), 6, 17, "must be whole seconds"},
    {"too short", Ttl("1s"), 6, 17, "fence_store.etcd.member_ttl: must be from 2s to 300s (got '1s')"},
    {"below the minimum, not whole", Ttl("500ms"), 6, 17, "must be whole seconds"},
    {"too short in ms", Ttl("1000ms"), 6, 17, "must be from 2s to 300s (got '1000ms')"},
    {"too long", Ttl("301s"), 6, 17, "must be from 2s to 300s (got '301s')"},
    {"too long in minutes", Ttl("6m"), 6, 17, "must be from 2s to 300s"},
    {"bare number", Ttl("10"), 6, 17, "a bare number has no unit"},
    {"zero", Ttl("0s"), 6, 17, "greater than zero"},
    {"a list", Ttl("[10s]"), 6, 17, "member_ttl: expected a string, got a list"},
};

// What a fence store rules out elsewhere in the file.
const ErrorCase kUseErrors[] = {
    {"state_file too", kHead + kFlowStore, 3, 1,
     "fence_store and state_file (line 2) exclude each other; a fence_store keeps the fences in etcd: remove "
     "state_file (or fence_store, to keep them in the state file)"},
    {"state_file after it", kBackend + kFlowStore + "state_file: s\n", 2, 1,
     "fence_store and state_file (line 3) exclude each other"},
    {"neither", "backend: http://a:1\n", 1, 1,
     "missing required key 'state_file' (where the highest tokens are kept; or give fence_store, to keep them in "
     "etcd)"},
    {"forgetting keys", kBackend + kFlowStore + "routes:\n" + kForgettingRoute, 8, 29,
     "routes[0].forget_idle_keys_after: not with fence_store: keys are not forgotten in the shared store"},
    {"forgetting keys, store written after", kBackend + "routes:\n  - name: s\n    prefix: /s\n" + kForgettingRoute + kFlowStore,
     9, 29, "routes[1].forget_idle_keys_after: not with fence_store"},
    // The store in error is still a store: the route is told too, and no state_file is asked for.
    {"forgetting keys, store in error", kBackend + "fence_store: {etcd: {endpoints: [\"http://a:1\"]}}\nroutes:\n" +
                                            kForgettingRoute.substr(0, kForgettingRoute.rfind("    forget")),
     2, 21, "fence_store.etcd: missing required key 'prefix'"},
};

INSTANTIATE_TEST_SUITE_P(Store, FenceStoreErrorTest, testing::ValuesIn(kStoreErrors));
INSTANTIATE_TEST_SUITE_P(Prefix, FenceStoreErrorTest, testing::ValuesIn(kPrefixErrors));
INSTANTIATE_TEST_SUITE_P(MemberTtl, FenceStoreErrorTest, testing::ValuesIn(kTtlErrors));
INSTANTIATE_TEST_SUITE_P(Use, FenceStoreErrorTest, testing::ValuesIn(kUseErrors));

// ---------------------------------------------------------------------------------------------
// Valid files

TEST(FenceStoreTest, NoneByDefault) {
  const ConfigResult r = ParseConfig(kHead, "f.yaml");
  ASSERT_TRUE(r.ok()) << DumpErrors(r);
  EXPECT_FALSE(r.config->fence_store.has_value());
  EXPECT_EQ(r.config->state_file, "/var/lib/fp/fences.log");
}

TEST(FenceStoreTest, Defaults) {
  const ConfigResult r = ParseConfig(kBackend + kFlowStore, "f.yaml");
  ASSERT_TRUE(r.ok()) << DumpErrors(r);
  const ProxyConfig& c = *r.config;
  EXPECT_TRUE(c.state_file.empty());
  ASSERT_TRUE(c.fence_store.has_value());
  const FenceStoreConfig& store = *c.fence_store;
  EXPECT_EQ(store.etcd.endpoints, std::vector<std::string>{"http://a:1"});
  EXPECT_EQ(store.prefix, "/fp");
  EXPECT_EQ(store.member_ttl, seconds(10));
  EXPECT_EQ(store.etcd.timeout, milliseconds(1000));
  EXPECT_TRUE(store.etcd.username.empty());
  EXPECT_TRUE(store.etcd.password_file.empty());
  EXPECT_FALSE(store.etcd.tls);
  EXPECT_EQ(store.etcd.tls_settings, TlsSettings{});
}

TEST(FenceStoreTest, EveryOption) {
  const std::string text = kBackend + R"(fence_store:
  etcd:
    endpoints: ["https://etcd-0:2379", "https://[::1]:2379"]
    prefix: "/fencing-proxy/orders-db"
    member_ttl: 30s
    timeout: 250ms
    username: fencing-proxy
    password_file: /run/secrets/etcd-password
    tls:
      ca_file: /etc/etcd/ca.crt
      cert_file: /etc/etcd/tls.crt
      key_file: /etc/etcd/tls.key
      server_name: etcd.internal
lock_services:
  main-etcd: {etcd: {endpoints: ["http://127.0.0.1:2379"]}}
routes:
  - name: orders
    prefix: /orders
  - name: objects
    prefix: /objects
    fence_key: {path_segment: 1}
    token_order: global
    max_keys: 10
    verify: {service: main-etcd, lock: "/locks/{key}"}
)";
  const ConfigResult r = ParseConfig(text, "f.yaml");
  ASSERT_TRUE(r.ok()) << DumpErrors(r);
  const ProxyConfig& c = *r.config;
  ASSERT_TRUE(c.fence_store.has_value());
  const FenceStoreConfig& store = *c.fence_store;
  EXPECT_EQ(store.etcd.endpoints, (std::vector<std::string>{"https://etcd-0:2379", "https://[::1]:2379"}));
  EXPECT_EQ(store.prefix, "/fencing-proxy/orders-db");
  EXPECT_EQ(store.member_ttl, seconds(30));
  EXPECT_EQ(store.etcd.timeout, milliseconds(250));
  EXPECT_EQ(store.etcd.username, "fencing-proxy");
  EXPECT_EQ(store.etcd.password_file, "/run/secrets/etcd-password");
  EXPECT_TRUE(store.etcd.tls);
  EXPECT_EQ(store.etcd.tls_settings.ca_file, "/etc/etcd/ca.crt");
  EXPECT_EQ(store.etcd.tls_settings.cert_file, "/etc/etcd/tls.crt");
  EXPECT_EQ(store.etcd.tls_settings.key_file, "/etc/etcd/tls.key");
  EXPECT_EQ(store.etcd.tls_settings.server_name, "etcd.internal");
  // The lock service is a client of its own: the store's settings are not its.
  ASSERT_EQ(c.lock_services.size(), 1u);
  EXPECT_NE(c.lock_services[0].etcd, store.etcd);
  ASSERT_EQ(c.routes.size(), 2u);
  EXPECT_TRUE(c.routes[1].fence_key.keyed());
}

// member_ttl at its bounds and in any unit that is whole seconds.
TEST(FenceStoreTest, MemberTtlBoundsAndUnits) {
  const std::pair<std::string, seconds> cases[] = {
      {"2s", seconds(2)}, {"300s", seconds(300)}, {"5m", seconds(300)},
      {"2000ms", seconds(2)}, {"1m", seconds(60)}, {"299s", seconds(299)},
  };
  for (const auto& [text, ttl] : cases) {
    SCOPED_TRACE(text);
    const ConfigResult r = ParseConfig(Ttl(text), "f.yaml");
    ASSERT_TRUE(r.ok()) << DumpErrors(r);
    EXPECT_EQ(r.config->fence_store->member_ttl, ttl);
  }
}

TEST(FenceStoreTest, PrefixesThatPass) {
  for (const std::string& prefix : {std::string("/a"), std::string("/fencing-proxy/orders-db"),
                                    std::string("/a.b_c-d~e:f@g=h/1"), std::string("/") + std::string(255, 'p')}) {
    SCOPED_TRACE(prefix);
    const ConfigResult r = ParseConfig(Prefix("\"" + prefix + "\""), "f.yaml");
    ASSERT_TRUE(r.ok()) << DumpErrors(r);
    EXPECT_EQ(r.config->fence_store->prefix, prefix);
  }
}

// A keyed route keeps its other key settings with a fence store; only forgetting is ruled out.
TEST(FenceStoreTest, KeyedRoutesWithoutForgetting) {
  const ConfigResult r = ParseConfig(kBackend + kFlowStore +
                                         "routes:\n  - name: r\n    prefix: /r\n    fence_key: {header: X-Key}\n"
                                         "    token_order: global\n    max_keys: 5\n",
                                     "f.yaml");
  ASSERT_TRUE(r.ok()) << DumpErrors(r);
  EXPECT_EQ(r.config->routes[0].max_keys, 5u);
  EXPECT_EQ(r.config->routes[0].forget_idle_keys_after, milliseconds(0));
}

// Every problem of the store and its use is reported in one round, in file order.
TEST(FenceStoreTest, CollectsEveryError) {
  const std::string text = kHead + "fence_store:\n  etcd:\n    endpoints: [\"http://a:1\"]\n    prefix: /fp/\n"
                                   "    member_ttl: 1500ms\n";
  const ConfigResult r = ParseConfig(text, "f.yaml");
  ASSERT_EQ(r.errors.size(), 3u) << DumpErrors(r);
  EXPECT_EQ(r.errors[0].line, 3);
  EXPECT_NE(r.errors[0].message.find("exclude each other"), std::string::npos);
  EXPECT_EQ(r.errors[1].line, 6);
  EXPECT_NE(r.errors[1].message.find("must not end with '/'"), std::string::npos);
  EXPECT_EQ(r.errors[2].line, 7);
  EXPECT_NE(r.errors[2].message.find("whole seconds"), std::string::npos);
}

}  // namespace
}  // namespace fencing
