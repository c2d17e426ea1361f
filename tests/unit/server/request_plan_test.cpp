// The decision on a request head (server/request_plan.h), without sockets: framing, method,
// target, route and token, in that order, then the fence's answer turned into a forward or a
// problem. A Runtime is built from a parsed route file, with real Fence objects behind a fake
// persister and real RouteMetrics; heads are Beast request headers.

#include <gtest/gtest.h>

#include "http/ascii.h"

#include <boost/beast/http.hpp>
#include <boost/json/parse.hpp>
#include <boost/json/value.hpp>

#include <atomic>
#include <cstdint>
#include <limits>
#include <map>
#include <memory>
#include <optional>
#include <ostream>
#include <string>
#include <utility>
#include <vector>

#include "metrics/metrics.h"
#include "config/config.h"
#include "fence/fence.h"
#include "http/problem.h"
#include "server/request_plan.h"
#include "server/runtime.h"

namespace fencing {
namespace {

namespace http = boost::beast::http;
namespace json = boost::json;

using Action = RequestPlan::Action;
using Fields = std::vector<std::pair<std::string, std::string>>;

// Raises are not exercised here: a raise is durable at once.
class FakePersister : public FencePersister {
 public:
  void Persist(Fence& fence, uint64_t token) override { fence.OnPersisted(token, true); }
};

class NullWaiter : public RaiseWaiter {
 public:
  void Resolve(Admission, uint64_t) override {}
};

constexpr const char* kRoutes =
    "routes:\n"
    "  - name: orders\n"
    "    prefix: /orders\n"
    "  - name: notes\n"
    "    prefix: /notes\n"
    "    mode: observe\n"
    "  - name: open\n"
    "    prefix: /open\n"
    "    missing_token: allow\n"
    "  - name: blind\n"
    "    prefix: /blind\n"
    "    forward_token: false\n"
    "  - name: items\n"
    "    prefix: /orders/items\n"
    "    fence: orders\n"
    "    methods: [GET, PUT]\n";

enum class Variant {
  kPass,    // unmatched: pass, no root route
  kReject,  // unmatched: reject, no root route
  kRoot,    // unmatched: reject, and a root route "/" (so nothing is unmatched)
};

const char* VariantName(Variant v) {
  switch (v) {
    case Variant::kPass: return "unmatched: pass";
    case Variant::kReject: return "unmatched: reject";
    case Variant::kRoot: return "root route";
  }
  return "?";
}

// One Runtime per variant, built the way ProxyServer::BuildRuntime does, with the orders fence
// at max_token 10 and every other fence at 0.
class Env {
 public:
  // extra: more top-level keys for the route file; routes: more routes after kRoutes.
  explicit Env(Variant variant, std::string_view extra = "", std::string_view more_routes = "") {
    std::string text = "backend: http://127.0.0.1:8081\nstate_file: fences.log\n";
    text += extra;
    text += variant == Variant::kPass ? "unmatched: pass\n" : "unmatched: reject\n";
    text += kRoutes;
    text += more_routes;
    if (variant == Variant::kRoot) text += "  - name: root\n    prefix: /\n";
    ConfigResult parsed = ParseConfig(text, "plan.yaml");
    for (const ConfigError& e : parsed.errors) ADD_FAILURE() << e.ToString();
    config_ = parsed.config;
    if (!config_) return;
    std::vector<RouteRuntime> routes;
    for (const RouteConfig& route : config_->routes) {
      routes.push_back(RouteRuntime{&route, &GetFence(route.fence), &metrics_.ForRoute(route.name)});
    }
    runtime_ = std::make_unique<Runtime>(config_, std::move(routes), &metrics_.ForRoute(kNoRouteLabel));
  }

  const Runtime& runtime() const { return *runtime_; }
  bool ok() const { return runtime_ != nullptr; }
  Fence& fence(const std::string& name) { return *fences_.at(name); }
  std::atomic<bool>& state_failed() { return state_failed_; }

 private:
  Fence& GetFence(const std::string& name) {
    auto& slot = fences_[name];
    if (!slot) {
      slot = std::make_unique<Fence>(name, name == "orders" ? 10 : 0, persister_, state_failed_,
                                     [] { return 0.0; }, &metrics_.ForFence(name));
    }
    return *slot;
  }

  Metrics metrics_;
  FakePersister persister_;
  std::atomic<bool> state_failed_{false};
  std::shared_ptr<const ProxyConfig> config_;
  std::map<std::string, std::unique_ptr<Fence>> fences_;
  std::unique_ptr<Runtime> runtime_;
};

Env& EnvFor(Variant variant) {
  static Env pass(Variant::kPass), reject(Variant::kReject), root(Variant::kRoot);
  switch (variant) {
    case Variant::kPass: return pass;
    case Variant::kReject: return reject;
    case Variant::kRoot: return root;
  }
  return pass;
}

RequestHead Head(std::string_view method, std::string_view target, const Fields& fields,
                            unsigned version = 11) {
  RequestHead h;
  h.method_string(method);
  h.target(target);
  h.version(version);
  // Every HTTP/1.1 request needs one Host; cases about Host say "Host" themselves.
  bool names_host = false;
  for (const auto& [name, value] : fields) names_host = names_host || EqualsIgnoreCase(name, "Host");
  if (!names_host && version >= 11) h.set(http::field::host, "proxy.test");
  for (const auto& [name, value] : fields) h.insert(name, value);  // insert: duplicates stay separate
  return h;
}

// ---------------------------------------------------------------- PlanRequest

struct PlanCase {
  const char* what;
  std::string method = "PUT";
  std::string target = "/orders/1";
  Fields fields = {};
  unsigned version = 11;
  Variant variant = Variant::kPass;
  // Expected:
  Action action = Action::kReject;
  Outcome outcome = Outcome::kRejectedRequest;
  int status = 0;              // kReject: the problem's status
  bool close = false;          // kReject: the connection must close
  const char* route = nullptr;  // the matched route's name; nullptr: none
  uint64_t token = 0;          // kFence
  const char* origin = nullptr;  // the upstream target; nullptr: not checked (rejections)
  bool drop_token = false;     // drop_header names the token header
  const char* host = "";       // the Host to forward instead of the client's; "": keep the client's
};

void PrintTo(const PlanCase& c, std::ostream* os) { *os << c.what << " [" << VariantName(c.variant) << "]"; }

class PlanRequestTest : public testing::TestWithParam<PlanCase> {};

TEST_P(PlanRequestTest, DecidesOnTheHead) {
  const PlanCase& c = GetParam();
  Env& env = EnvFor(c.variant);
  ASSERT_TRUE(env.ok());
  RequestHead head = Head(c.method, c.target, c.fields, c.version);
  RequestPlan plan = PlanRequest(head, env.runtime());

  EXPECT_EQ(static_cast<int>(plan.action), static_cast<int>(c.action)) << c.what << ": action";
  EXPECT_EQ(OutcomeName(plan.outcome), OutcomeName(c.outcome)) << c.what << ": outcome";
  if (c.route) {
    ASSERT_NE(plan.route, nullptr) << c.what << ": expected route " << c.route;
    EXPECT_EQ(plan.route->config->name, c.route) << c.what;
  } else {
    EXPECT_EQ(plan.route, nullptr) << c.what << ": expected no route, got " << plan.route->config->name;
  }
  if (c.action == Action::kReject) {
    EXPECT_EQ(static_cast<int>(plan.problem.status), c.status) << c.what << ": status";
    EXPECT_EQ(plan.close, c.close) << c.what << ": close";
    // After a malformed message the next request's boundary is unknown.
    if (plan.problem.status == http::status::bad_request) {
      EXPECT_TRUE(plan.close) << c.what << ": every 400 closes the connection";
    }
    EXPECT_FALSE(plan.problem.type.empty()) << c.what;
    EXPECT_FALSE(plan.problem.title.empty()) << c.what;
    EXPECT_FALSE(plan.problem.detail.empty()) << c.what;
    if (c.route) {
      EXPECT_EQ(plan.problem.route, c.route) << c.what << ": a route's rejection names the route";
      EXPECT_EQ(plan.problem.fence, plan.route->config->fence) << c.what;
    }
  } else {
    EXPECT_FALSE(plan.close) << c.what;
  }
  if (c.action == Action::kFence) {
    EXPECT_EQ(plan.token, c.token) << c.what;
    EXPECT_EQ(plan.problem.token, c.token) << c.what << ": the token is ready for a 409 body";
  }
  if (c.origin) {
    EXPECT_EQ(plan.origin_target, c.origin) << c.what << ": origin_target";
  }
  if (c.action != Action::kReject) {
    EXPECT_EQ(plan.host, c.host) << c.what << ": host";
  }
  // A fenced request's token goes on as the proxy parsed it (rewritten), unless the route drops it.
  const bool rewritten = c.action == Action::kFence && !c.drop_token;
  EXPECT_EQ(plan.rewrite_token, rewritten) << c.what << ": rewrite_token";
  EXPECT_EQ(plan.drop_header, c.drop_token || rewritten ? std::string_view("X-Fencing-Token") : std::string_view())
      << c.what << ": drop_header";
  // The metrics the session will count into: the route's, or the unmatched ones.
  EXPECT_EQ(&plan.metrics(env.runtime()),
            plan.route ? plan.route->metrics : &env.runtime().unmatched_metrics())
      << c.what;
}

const Fields kToken10 = {{"X-Fencing-Token", "10"}};

Fields Token(std::string value) { return {{"X-Fencing-Token", std::move(value)}}; }
Fields With(Fields a, const Fields& b) {
  a.insert(a.end(), b.begin(), b.end());
  return a;
}

// Framing: 400, and the connection cannot be trusted for another request.
PlanCase Framing(const char* what, Fields fields, unsigned version = 11) {
  return PlanCase{.what = what, .fields = With(kToken10, fields), .version = version,
                  .outcome = Outcome::kRejectedRequest, .status = 400, .close = true};
}

// A path that could reach the backend as another route: 400, counted as rejected_path.
PlanCase BadPath(const char* what, std::string target, Variant variant = Variant::kPass) {
  return PlanCase{.what = what, .target = std::move(target), .fields = Token("5"), .variant = variant,
                  .outcome = Outcome::kRejectedPath, .status = 400, .close = true};
}

INSTANTIATE_TEST_SUITE_P(
    Framing, PlanRequestTest,
    testing::Values(
        Framing("Content-Length with Transfer-Encoding", {{"Content-Length", "3"}, {"Transfer-Encoding", "chunked"}}),
        Framing("two different Content-Lengths", {{"Content-Length", "3"}, {"Content-Length", "4"}}),
        Framing("two equal Content-Lengths", {{"Content-Length", "3"}, {"Content-Length", "3"}}),
        Framing("Content-Length 3, 3", {{"Content-Length", "3, 3"}}),
        Framing("Content-Length abc", {{"Content-Length", "abc"}}),
        Framing("Content-Length -1", {{"Content-Length", "-1"}}),
        Framing("Content-Length +5", {{"Content-Length", "+5"}}),
        Framing("Transfer-Encoding gzip", {{"Transfer-Encoding", "gzip"}}),
        Framing("Transfer-Encoding identity", {{"Transfer-Encoding", "identity"}}),
        Framing("Transfer-Encoding chunked, gzip", {{"Transfer-Encoding", "chunked, gzip"}}),
        Framing("Transfer-Encoding gzip, chunked", {{"Transfer-Encoding", "gzip, chunked"}}),
        Framing("Transfer-Encoding on HTTP/1.0", {{"Transfer-Encoding", "chunked"}}, 10),
        Framing("CR LF inside a value", {{"X-A", "a\r\nContent-Length: 5"}}),
        Framing("NUL inside a value", {{"X-B", std::string("1\0", 2)}}),
        // Framing comes first: it beats a refused method, an Upgrade and a bad path.
        PlanCase{.what = "CONNECT with Content-Length and Transfer-Encoding", .method = "CONNECT",
                 .target = "h:443", .fields = {{"Content-Length", "3"}, {"Transfer-Encoding", "chunked"}},
                 .status = 400, .close = true},
        PlanCase{.what = "a bad path with two Content-Lengths", .target = "/orders/../admin",
                 .fields = {{"Content-Length", "1"}, {"Content-Length", "1"}}, .status = 400, .close = true},
        PlanCase{.what = "Upgrade with Transfer-Encoding gzip", .method = "GET",
                 .fields = {{"Upgrade", "websocket"}, {"Transfer-Encoding", "gzip"}}, .status = 400,
                 .close = true},
        // Unambiguous framing is not a refusal.
        PlanCase{.what = "one Content-Length", .fields = With(kToken10, {{"Content-Length", "3"}}),
                 .action = Action::kFence, .route = "orders", .token = 10, .origin = "/orders/1"},
        PlanCase{.what = "chunked", .fields = With(kToken10, {{"Transfer-Encoding", "chunked"}}),
                 .action = Action::kFence, .route = "orders", .token = 10, .origin = "/orders/1"}));

INSTANTIATE_TEST_SUITE_P(
    MethodAndUpgrade, PlanRequestTest,
    testing::Values(
        PlanCase{.what = "CONNECT", .method = "CONNECT", .target = "h:443", .status = 405, .close = true},
        // TRACE would echo the request, credentials included: 405 as nginx, whatever the route.
        PlanCase{.what = "TRACE", .method = "TRACE", .target = "/other", .status = 405},
        PlanCase{.what = "TRACE to a fenced path", .method = "TRACE", .target = "/orders/1", .fields = kToken10,
                 .status = 405},
        PlanCase{.what = "CONNECT to a fenced path", .method = "CONNECT", .target = "/orders/1", .fields = kToken10,
                 .status = 405, .close = true},
        PlanCase{.what = "CONNECT with unmatched: reject", .method = "CONNECT", .target = "h:443",
                 .variant = Variant::kReject, .status = 405, .close = true},
        PlanCase{.what = "Upgrade: websocket", .method = "GET",
                 .fields = {{"Connection", "Upgrade"}, {"Upgrade", "websocket"}}, .status = 400, .close = true},
        PlanCase{.what = "Upgrade: h2c on an unfenced path", .method = "GET", .target = "/other",
                 .fields = {{"Upgrade", "h2c"}}, .status = 400, .close = true},
        PlanCase{.what = "Upgrade with a valid token", .fields = With(kToken10, {{"Upgrade", "websocket"}}),
                 .status = 400, .close = true},
        PlanCase{.what = "an empty Upgrade header", .method = "GET", .fields = {{"Upgrade", ""}}, .status = 400, .close = true}));

// A client must not strip what the decision or the backend's framing rests on by naming it in
// Connection (the proxy drops the fields Connection names): 400, and the connection closes.
PlanCase BadConnection(const char* what, Fields fields, std::string method = "PUT") {
  return PlanCase{.what = what, .method = std::move(method), .fields = With(kToken10, fields),
                  .outcome = Outcome::kRejectedRequest, .status = 400, .close = true};
}

INSTANTIATE_TEST_SUITE_P(
    Connection, PlanRequestTest,
    testing::Values(
        BadConnection("Connection: Host", {{"Connection", "Host"}}),
        BadConnection("Connection: host, on an unfenced GET", {{"Connection", "host"}}, "GET"),
        BadConnection("Connection names the token header", {{"Connection", "X-Fencing-Token"}}),
        BadConnection("Connection names the token header in another case", {{"Connection", "x-FENCING-token"}}),
        BadConnection("Connection: Content-Length", {{"Connection", "Content-Length"}, {"Content-Length", "0"}}),
        BadConnection("Connection: Transfer-Encoding",
                      {{"Connection", "Transfer-Encoding"}, {"Transfer-Encoding", "chunked"}}),
        BadConnection("in a list", {{"Connection", "keep-alive, Host"}}),
        BadConnection("in a list with odd spacing", {{"Connection", "close ,\tx-fencing-token ,"}}),
        BadConnection("in a second Connection field", {{"Connection", "keep-alive"}, {"Connection", "Host"}}),
        // Naming other fields is what Connection is for.
        PlanCase{.what = "Connection: close", .fields = With(kToken10, {{"Connection", "close"}}),
                 .action = Action::kFence, .route = "orders", .token = 10, .origin = "/orders/1"},
        PlanCase{.what = "Connection names an end-to-end field", .fields = With(kToken10, {{"Connection", "X-Secret"}}),
                 .action = Action::kFence, .route = "orders", .token = 10},
        PlanCase{.what = "Connection names a field like the token's", .fields = With(kToken10, {{"Connection", "X-Fencing-Tokens, Hosts"}}),
                 .action = Action::kFence, .route = "orders", .token = 10}));

// A field named with '_' can pose as the token header to a CGI-style backend
// (X_Fencing_Token is HTTP_X_FENCING_TOKEN there, like X-Fencing-Token).
TEST(PlanRequestUnderscoreTest, RejectRefusesAnyUnderscoredFieldDropAndAllowLeaveItToTheRewrite) {
  Env reject(Variant::kPass, "headers_with_underscores: reject\n");
  Env allow(Variant::kPass, "headers_with_underscores: allow\n");
  ASSERT_TRUE(reject.ok() && allow.ok());
  const Fields posing = With(kToken10, {{"X_Fencing_Token", "99"}});
  for (const auto& [method, target] : {std::pair{"PUT", "/orders/1"}, std::pair{"GET", "/other"}}) {
    RequestPlan plan = PlanRequest(Head(method, target, posing), reject.runtime());
    EXPECT_EQ(plan.action, Action::kReject) << method << " " << target;
    EXPECT_EQ(plan.problem.type, "underscore-header");
    EXPECT_EQ(plan.problem.status, http::status::bad_request);
    EXPECT_TRUE(plan.close);
    EXPECT_EQ(OutcomeName(plan.outcome), OutcomeName(Outcome::kRejectedRequest));
    EXPECT_NE(plan.problem.detail.find("X_Fencing_Token"), std::string::npos) << plan.problem.detail;
  }
  EXPECT_EQ(PlanRequest(Head("PUT", "/orders/1", kToken10), reject.runtime()).action, Action::kFence)
      << "a request without such fields is not refused";
  EXPECT_EQ(PlanRequest(Head("PUT", "/orders/1", posing), allow.runtime()).action, Action::kFence);
  EXPECT_EQ(PlanRequest(Head("PUT", "/orders/1", posing), EnvFor(Variant::kPass).runtime()).action, Action::kFence)
      << "drop (the default) is the rewrite's job";
}

TEST(PlanRequestConnectionTest, TheConfiguredTokenHeaderIsTheProtectedOne) {
  Env env(Variant::kPass, "token_header: X-Lock-Token\n");
  ASSERT_TRUE(env.ok());
  RequestPlan plan =
      PlanRequest(Head("PUT", "/orders/1", {{"X-Lock-Token", "10"}, {"Connection", "x-lock-token"}}), env.runtime());
  EXPECT_EQ(plan.action, Action::kReject);
  EXPECT_EQ(plan.problem.type, "bad-connection-header");
  EXPECT_TRUE(plan.close);
  plan = PlanRequest(Head("PUT", "/orders/1", {{"X-Lock-Token", "10"}, {"Connection", "X-Fencing-Token"}}),
                     env.runtime());
  EXPECT_EQ(plan.action, Action::kFence) << "the default name is no token header here";
}

// ---------------------------------------------------------------- fence keys

constexpr const char* kKeyedRoutes =
    "  - name: objects\n"
    "    prefix: /objects\n"
    "    fence_key: {path_segment: 1}\n"
    "  - name: tenants\n"
    "    prefix: /tenants\n"
    "    mode: observe\n"
    "    fence_key: {header: X-Tenant}\n"
    "  - name: lax\n"
    "    prefix: /lax\n"
    "    missing_token: allow\n"
    "    fence_key: {path_segment: 2}\n"
    "  - name: folded\n"
    "    prefix: /Folded\n"
    "    path_case_insensitive: true\n"
    "    fence_key: {path_segment: 1}\n";

Env& KeyedEnv() {
  static Env env(Variant::kPass, "", kKeyedRoutes);
  return env;
}

struct KeyCase {
  const char* what;
  std::string method;
  std::string target;
  Fields fields;
  Action action;
  Outcome outcome;
  const char* problem_type;  // kReject
  const char* key;           // the plan's key ("" for none)
};

void PrintTo(const KeyCase& c, std::ostream* os) { *os << c.what; }

class PlanKeyTest : public testing::TestWithParam<KeyCase> {};

TEST_P(PlanKeyTest, TakesTheKeyOfAFencedRequest) {
  const KeyCase& c = GetParam();
  ASSERT_TRUE(KeyedEnv().ok());
  RequestHead head = Head(c.method, c.target, c.fields);
  RequestPlan plan = PlanRequest(head, KeyedEnv().runtime());
  EXPECT_EQ(plan.action, c.action) << plan.problem.detail;
  EXPECT_EQ(OutcomeName(plan.outcome), OutcomeName(c.outcome));
  EXPECT_EQ(plan.key, c.key);
  EXPECT_EQ(plan.problem.key, c.key) << "later problems (409, 503) carry the key";
  if (!plan.key.empty()) {
    // A view into the head: the key is the bytes the backend receives.
    const std::string_view target = head.target();
    bool in_target = plan.key.data() >= target.data() && plan.key.data() + plan.key.size() <= target.data() + target.size();
    bool in_field = false;
    for (const auto& field : head) {
      const std::string_view v = field.value();
      in_field = in_field || (plan.key.data() >= v.data() && plan.key.data() + plan.key.size() <= v.data() + v.size());
    }
    EXPECT_TRUE(in_target || in_field);
  }
  if (c.action == Action::kReject) {
    EXPECT_EQ(plan.problem.type, c.problem_type);
    if (plan.problem.type != "missing-token") {
      EXPECT_EQ(plan.problem.status, http::status::bad_request);
      EXPECT_TRUE(plan.close);
    }
    EXPECT_FALSE(plan.problem.detail.empty());
  }
}

const Fields kTenant = {{"X-Fencing-Token", "10"}, {"X-Tenant", "t-1"}};

INSTANTIATE_TEST_SUITE_P(
    Keys, PlanKeyTest,
    testing::Values(
        KeyCase{"path key", "PUT", "/objects/k1/part", kToken10, Action::kFence, Outcome::kRejectedRequest, "", "k1"},
        KeyCase{"path key, absolute-form", "PUT", "http://h/objects/k1?x=1", kToken10, Action::kFence,
                Outcome::kRejectedRequest, "", "k1"},
        KeyCase{"path key missing", "PUT", "/objects", kToken10, Action::kReject, Outcome::kRejectedKey,
                "missing-fence-key", ""},
        KeyCase{"path key missing, trailing slash", "PUT", "/objects/?k=1", kToken10, Action::kReject,
                Outcome::kRejectedKey, "missing-fence-key", ""},
        KeyCase{"path key percent-encoded", "PUT", "/objects/k%20", kToken10, Action::kReject, Outcome::kRejectedKey,
                "bad-fence-key", ""},
        // An encoded unreserved character is refused by the path check, before any key.
        KeyCase{"path key with an encoded unreserved character", "PUT", "/objects/k%31", kToken10, Action::kReject,
                Outcome::kRejectedPath, "ambiguous-path", ""},
        KeyCase{"path key with a parameter", "PUT", "/objects/k1;v=2/part", kToken10, Action::kReject,
                Outcome::kRejectedKey, "bad-fence-key", ""},
        KeyCase{"path key too long", "PUT", "/objects/" + std::string(129, 'k'), kToken10, Action::kReject,
                Outcome::kRejectedKey, "bad-fence-key", ""},
        // Key errors come before the token's: the key is part of the request, not of the fence.
        KeyCase{"no key and no token", "PUT", "/objects", {}, Action::kReject, Outcome::kRejectedKey,
                "missing-fence-key", ""},
        KeyCase{"a key and no token", "PUT", "/objects/k1", {}, Action::kReject, Outcome::kRejectedMissing,
                "missing-token", "k1"},
        // Not fenced: no key needed.
        KeyCase{"GET needs no key", "GET", "/objects", {}, Action::kForward, Outcome::kUnfenced, "", ""},
        KeyCase{"missing_token: allow without a token", "PUT", "/lax", {}, Action::kForward, Outcome::kUnfenced, "", ""},
        KeyCase{"missing_token: allow with a token", "PUT", "/lax/a", kToken10, Action::kReject, Outcome::kRejectedKey,
                "missing-fence-key", ""},
        KeyCase{"missing_token: allow with a token and a key", "PUT", "/lax/a/b", kToken10, Action::kFence,
                Outcome::kRejectedRequest, "", "b"},
        // Observe mode: key errors are request errors, still 400.
        KeyCase{"header key", "PUT", "/tenants/x", kTenant, Action::kFence, Outcome::kRejectedRequest, "", "t-1"},
        KeyCase{"header key with OWS", "PUT", "/tenants/x", With(kToken10, {{"x-tenant", " \tt-2 "}}), Action::kFence,
                Outcome::kRejectedRequest, "", "t-2"},
        KeyCase{"header key missing, observe", "PUT", "/tenants/x", kToken10, Action::kReject, Outcome::kRejectedKey,
                "missing-fence-key", ""},
        KeyCase{"header key missing, observe, no token", "PUT", "/tenants/x", {}, Action::kReject,
                Outcome::kRejectedKey, "missing-fence-key", ""},
        KeyCase{"header key twice", "PUT", "/tenants/x", With(kTenant, {{"X-Tenant", "t-1"}}), Action::kReject,
                Outcome::kRejectedKey, "bad-fence-key", ""},
        KeyCase{"header key empty", "PUT", "/tenants/x", With(kToken10, {{"X-Tenant", ""}}), Action::kReject,
                Outcome::kRejectedKey, "bad-fence-key", ""},
        KeyCase{"header key with a comma", "PUT", "/tenants/x", With(kToken10, {{"X-Tenant", "a,b"}}), Action::kReject,
                Outcome::kRejectedKey, "bad-fence-key", ""},
        KeyCase{"observe: a malformed token with a key is observed", "PUT", "/tenants/x",
                {{"X-Fencing-Token", "x"}, {"X-Tenant", "t-1"}}, Action::kForward, Outcome::kObservedMalformed, "", "t-1"},
        // Case-insensitive routes: the prefix in any case, the key lower-case.
        KeyCase{"folded prefix", "PUT", "/FOLDED/k1", kToken10, Action::kFence, Outcome::kRejectedRequest, "", "k1"},
        KeyCase{"folded route, upper-case key", "PUT", "/folded/K1", kToken10, Action::kReject, Outcome::kRejectedKey,
                "bad-fence-key", ""},
        // An unkeyed route ignores key-like parts.
        KeyCase{"unkeyed route", "PUT", "/orders/1", With(kToken10, {{"X-Tenant", "a,b"}}), Action::kFence,
                Outcome::kRejectedRequest, "", ""},
        // A Connection header must not strip the field the key was taken from, on any route.
        KeyCase{"Connection names the key header", "PUT", "/tenants/x", With(kTenant, {{"Connection", "x-TENANT"}}),
                Action::kReject, Outcome::kRejectedRequest, "bad-connection-header", ""},
        KeyCase{"Connection names the key header on an unkeyed route", "GET", "/other", {{"Connection", "X-Tenant"}},
                Action::kReject, Outcome::kRejectedRequest, "bad-connection-header", ""}));

// ---------------------------------------------------------------- writers and the identity

constexpr const char* kWriterRoutes =
    "  - name: guarded\n"
    "    prefix: /guarded\n"
    "    writers: [\"spiffe://td/ns/shop/sa/writer\", \"dns:batch.svc\", \"spiffe://td/ns/ops/*\"]\n"
    "    identity_header: X-Client-Identity\n"
    "  - name: watched\n"
    "    prefix: /watched\n"
    "    mode: observe\n"
    "    writers: [\"spiffe://td/ns/shop/sa/writer\"]\n"
    "  - name: guarded-keys\n"
    "    prefix: /gk\n"
    "    fence_key: {path_segment: 1}\n"
    "    writers: [\"spiffe://td/ns/shop/sa/writer\"]\n"
    "  - name: guarded-lax\n"
    "    prefix: /gl\n"
    "    missing_token: allow\n"
    "    writers: [\"spiffe://td/ns/shop/sa/writer\"]\n";

Env& WritersEnv() {
  static Env env(Variant::kPass, "tls: {cert_file: c.pem, key_file: k.pem, client_ca_file: ca.pem}\n", kWriterRoutes);
  return env;
}

const ClientIdentity kWriter = ClientIdentity::Of({"spiffe://td/ns/shop/sa/writer"});
const ClientIdentity kReader = ClientIdentity::Of({"spiffe://td/ns/shop/sa/reader", "dns:reader.svc"});
const ClientIdentity kOps = ClientIdentity::Of({"dns:ops.svc", "spiffe://td/ns/ops/sa/deployer"});
const ClientIdentity kBatch = ClientIdentity::Of({"dns:batch.svc"});

struct WriterCase {
  const char* what;
  const ClientIdentity* identity;
  std::string method;
  std::string target;
  Fields fields;
  Action action;
  Outcome outcome;
};

void PrintTo(const WriterCase& c, std::ostream* os) { *os << c.what; }

class PlanWritersTest : public testing::TestWithParam<WriterCase> {};

// A fenced method from anyone but a writer is refused before its token (or key) is read: 403, no
// token and no max in the problem, the connection kept.
TEST_P(PlanWritersTest, OnlyWritersSendFencedMethods) {
  const WriterCase& c = GetParam();
  ASSERT_TRUE(WritersEnv().ok());
  RequestPlan plan = PlanRequest(Head(c.method, c.target, c.fields), WritersEnv().runtime(), *c.identity);
  EXPECT_EQ(plan.action, c.action) << plan.problem.detail;
  EXPECT_EQ(OutcomeName(plan.outcome), OutcomeName(c.outcome));
  if (c.outcome != Outcome::kRejectedWriter) return;
  EXPECT_EQ(plan.problem.status, http::status::forbidden);
  EXPECT_EQ(plan.problem.type, "writer-not-allowed");
  EXPECT_FALSE(plan.close);
  EXPECT_FALSE(plan.problem.token.has_value());
  EXPECT_FALSE(plan.problem.max_token.has_value());
  EXPECT_TRUE(plan.problem.fence.empty()) << "a stranger learns nothing of the fence, not even its name";
  EXPECT_NE(plan.problem.detail.find(c.identity->empty() ? "no client identity" : c.identity->joined),
            std::string::npos)
      << plan.problem.detail;
}

INSTANTIATE_TEST_SUITE_P(
    Writers, PlanWritersTest,
    testing::Values(
        WriterCase{"a writer", &kWriter, "PUT", "/guarded/1", kToken10, Action::kFence, Outcome::kRejectedRequest},
        WriterCase{"a writer by prefix", &kOps, "POST", "/guarded/1", kToken10, Action::kFence,
                   Outcome::kRejectedRequest},
        WriterCase{"a writer by DNS name", &kBatch, "DELETE", "/guarded/1", kToken10, Action::kFence,
                   Outcome::kRejectedRequest},
        WriterCase{"no identity", &kNoIdentity, "PUT", "/guarded/1", kToken10, Action::kReject,
                   Outcome::kRejectedWriter},
        WriterCase{"another identity", &kReader, "PUT", "/guarded/1", kToken10, Action::kReject,
                   Outcome::kRejectedWriter},
        WriterCase{"another identity, a malformed token: 403, not 400", &kReader, "PUT", "/guarded/1", Token("x"),
                   Action::kReject, Outcome::kRejectedWriter},
        WriterCase{"another identity, no token: 403, not 428", &kReader, "PUT", "/guarded/1", {}, Action::kReject,
                   Outcome::kRejectedWriter},
        WriterCase{"another identity, a token sent twice", &kReader, "PUT", "/guarded/1", With(kToken10, kToken10),
                   Action::kReject, Outcome::kRejectedWriter},
        WriterCase{"another identity, not fenced", &kReader, "GET", "/guarded/1", {}, Action::kForward,
                   Outcome::kUnfenced},
        WriterCase{"no identity, not fenced", &kNoIdentity, "HEAD", "/guarded/1", kToken10, Action::kForward,
                   Outcome::kUnfenced},
        WriterCase{"observe mode refuses too", &kReader, "PUT", "/watched/1", kToken10, Action::kReject,
                   Outcome::kRejectedWriter},
        WriterCase{"observe mode, a writer", &kWriter, "PUT", "/watched/1", kToken10, Action::kFence,
                   Outcome::kRejectedRequest},
        WriterCase{"a keyed route: before the key", &kReader, "PUT", "/gk", kToken10, Action::kReject,
                   Outcome::kRejectedWriter},
        WriterCase{"a keyed route, a writer", &kWriter, "PUT", "/gk/k1", kToken10, Action::kFence,
                   Outcome::kRejectedRequest},
        WriterCase{"missing_token: allow without a token is still a fenced method", &kReader, "PUT", "/gl/1", {},
                   Action::kReject, Outcome::kRejectedWriter},
        WriterCase{"a route without writers", &kNoIdentity, "PUT", "/orders/1", kToken10, Action::kFence,
                   Outcome::kRejectedRequest},
        WriterCase{"no route", &kNoIdentity, "PUT", "/elsewhere", kToken10, Action::kForward, Outcome::kUnmatched},
        // The request's own errors come first: they are about the message, not its sender.
        WriterCase{"a path that is refused", &kReader, "PUT", "/guarded/../orders", kToken10, Action::kReject,
                   Outcome::kRejectedPath}));

// The problem body: route and fence, no token, no max.
TEST(PlanWritersTest, TheProblemSaysWhichRouteAndNothingOfTheFence) {
  ASSERT_TRUE(WritersEnv().ok());
  RequestPlan refused = PlanRequest(Head("PUT", "/guarded/1", kToken10), WritersEnv().runtime(), kReader);
  json::object body = json::parse(ProblemJson(refused.problem)).as_object();
  EXPECT_EQ(body.at("type").as_string(), "urn:fencing-proxy:problem:writer-not-allowed");
  EXPECT_EQ(body.at("status").to_number<int>(), 403);
  EXPECT_EQ(body.at("route").as_string(), "guarded");
  EXPECT_FALSE(body.contains("token"));
  EXPECT_FALSE(body.contains("max_token"));
}

TEST(PlanKeyTest, LaterProblemsCarryTheKey) {
  ASSERT_TRUE(KeyedEnv().ok());
  RequestHead head = Head("PUT", "/objects/k-9/part", Token("3"));
  RequestPlan plan = PlanRequest(head, KeyedEnv().runtime());
  ASSERT_EQ(plan.action, Action::kFence);
  ApplyAdmission(plan, Admission::kStale, 7);
  ASSERT_EQ(plan.action, Action::kReject);
  json::object body = json::parse(ProblemJson(plan.problem)).as_object();
  EXPECT_EQ(body.at("key").as_string(), "k-9");
  EXPECT_EQ(body.at("fence").as_string(), "objects");
  EXPECT_EQ(body.at("max_token").to_number<uint64_t>(), 7u);
  // The detail of a key error says where the key comes from.
  plan = PlanRequest(Head("PUT", "/objects", kToken10), KeyedEnv().runtime());
  EXPECT_NE(plan.problem.detail.find("path segment 1 after /objects"), std::string::npos) << plan.problem.detail;
  plan = PlanRequest(Head("PUT", "/tenants/x", kToken10), KeyedEnv().runtime());
  EXPECT_NE(plan.problem.detail.find("X-Tenant"), std::string::npos) << plan.problem.detail;
  body = json::parse(ProblemJson(plan.problem)).as_object();
  EXPECT_FALSE(body.contains("key"));
  EXPECT_EQ(body.at("type").as_string(), "urn:fencing-proxy:problem:missing-fence-key");
}

// RFC 9112 section 3.2: a server must answer 400 to a missing or repeated Host, or one that is
// not a valid host[:port] (RFC 3986). An absolute-form target's authority is the Host forwarded.
PlanCase BadHost(const char* what, Fields fields, std::string target = "/orders/1", unsigned version = 11) {
  return PlanCase{.what = what, .target = std::move(target), .fields = With(kToken10, fields), .version = version,
                  .outcome = Outcome::kRejectedRequest, .status = 400, .close = true};
}

PlanCase GoodHost(const char* what, Fields fields, std::string target = "/orders/1", const char* host = "",
                  unsigned version = 11) {
  return PlanCase{.what = what, .target = std::move(target), .fields = With(kToken10, fields), .version = version,
                  .action = Action::kFence, .route = "orders", .token = 10, .host = host};
}

INSTANTIATE_TEST_SUITE_P(
    Host, PlanRequestTest,
    testing::Values(
        BadHost("two Host headers", {{"Host", "a"}, {"Host", "b"}}),
        BadHost("two Host headers on HTTP/1.0", {{"Host", "a"}, {"Host", "a"}}, "/orders/1", 10),
        BadHost("a space in Host", {{"Host", "a b"}}),
        BadHost("a slash in Host", {{"Host", "a/b"}}),
        BadHost("userinfo in Host", {{"Host", "a@b"}}),
        BadHost("an empty Host on HTTP/1.1", {{"Host", ""}}),
        // An http URI has a host (RFC 9110 section 4.2.1), and the backend is asked in HTTP/1.1.
        BadHost("an empty Host on HTTP/1.0", {{"Host", ""}}, "/orders/1", 10),
        BadHost("a port without digits", {{"Host", "h:"}}),
        BadHost("a port that is no port", {{"Host", "h:99999"}}),
        BadHost("an unclosed IPv6 literal", {{"Host", "[::1"}}),
        BadHost("a query in Host", {{"Host", "h?x"}}),
        BadHost("absolute-form with userinfo", {}, "http://user@h/orders/1"),
        BadHost("absolute-form with an empty authority", {}, "http:///orders/1"),
        BadHost("absolute-form with a bad port", {}, "http://h:x/orders/1"),
        GoodHost("a name and a port", {{"Host", "orders.example:8080"}}),
        GoodHost("an IPv6 literal", {{"Host", "[::1]:8080"}}),
        GoodHost("an IPv4 address", {{"Host", "10.0.0.1"}}),
        GoodHost("HTTP/1.0 without Host", {}, "/orders/1", "", 10),
        GoodHost("absolute-form: its authority is the Host forwarded", {{"Host", "proxy.example"}},
                 "http://other.example/orders/1", "other.example"),
        GoodHost("absolute-form with a port and an IPv6 literal", {}, "http://[::1]:81/orders/1", "[::1]:81"),
        GoodHost("absolute-form on HTTP/1.0 without Host", {}, "http://h/orders/1", "h", 10)));

// "put" is not PUT to HTTP, but a backend that upper-cases methods would apply it as one.
INSTANTIATE_TEST_SUITE_P(
    MethodCase, PlanRequestTest,
    testing::Values(PlanCase{.what = "lower-case put without a token", .method = "put",
                             .outcome = Outcome::kRejectedMissing, .status = 428, .route = "orders"},
                    PlanCase{.what = "mixed-case Put with a token", .method = "Put", .fields = kToken10,
                             .action = Action::kFence, .outcome = Outcome::kRejectedRequest, .route = "orders",
                             .token = 10, .origin = "/orders/1"}));

TEST(PlanRequestHostTest, Http11WithoutHostIsRefusedHttp10IsNot) {
  Env& env = EnvFor(Variant::kPass);
  RequestHead head;
  head.method_string("GET");
  head.target("/other");
  head.version(11);
  RequestPlan plan = PlanRequest(head, env.runtime());
  EXPECT_EQ(plan.action, Action::kReject);
  EXPECT_EQ(plan.problem.status, http::status::bad_request);
  EXPECT_TRUE(plan.close) << "every 400 closes the connection";
  head.version(10);
  plan = PlanRequest(head, env.runtime());
  EXPECT_EQ(plan.action, Action::kForward) << "HTTP/1.0 may omit Host";
}


INSTANTIATE_TEST_SUITE_P(
    Paths, PlanRequestTest,
    testing::Values(
        BadPath("dot-dot out of the fenced prefix", "/orders/../admin"),
        BadPath("dot-dot into the fenced prefix", "/x/../orders"),
        BadPath("dot-dot into the fenced prefix, root route", "/x/../orders", Variant::kRoot),
        BadPath("dot segment", "/./orders/1"),
        BadPath("trailing dot-dot", "/orders/1/.."),
        BadPath("dot-dot with a path parameter", "/x/..;a/orders"),
        BadPath("encoded dot-dot", "/%2e%2e/orders"),
        BadPath("encoded dot-dot, upper case", "/%2E%2E/orders"),
        BadPath("encoded slash", "/orders%2fx"),
        BadPath("encoded slash, upper case", "/x%2F..%2Forders"),
        BadPath("encoded backslash", "/x%5c..%5corders"),
        BadPath("empty segment", "//orders"),
        BadPath("empty segment inside", "/orders//1"),
        BadPath("backslash", "/orders\\x"),
        BadPath("encoded unreserved letter", "/%6Frders"),
        BadPath("encoded NUL", "/orders%00/1"),
        BadPath("malformed escape", "/orders%zz"),
        BadPath("truncated escape", "/orders%2"),
        BadPath("asterisk-form", "*"),
        BadPath("no leading slash", "orders/1"),
        BadPath("absolute-form with a query and no path", "http://h?x=1"),
        BadPath("absolute-form with dot-dot", "http://h/x/../orders"),
        BadPath("another scheme", "ftp://h/orders"),
        BadPath("a target that is no path at all (GET ! HTTP/1.1)", "!"),
        // Servlet containers (Tomcat, Jetty, Spring) drop ";params" from every segment before
        // routing: these reach them as "/orders/1" or "//orders".
        BadPath("a path parameter on the fenced segment", "/orders;x/1"),
        BadPath("a path parameter on the fenced segment, last", "/orders;jsessionid=A"),
        BadPath("a path parameter on the fenced segment, root route", "/orders;x/1", Variant::kRoot),
        BadPath("an empty segment hidden behind a parameter", "/;x/orders"),
        BadPath("a path parameter moving to a longer prefix", "/orders/items;x/1")));

INSTANTIATE_TEST_SUITE_P(
    Routes, PlanRequestTest,
    testing::Values(
        PlanCase{.what = "unmatched, pass", .target = "/other/1?q=1", .fields = Token("5"), .variant = Variant::kPass,
                 .action = Action::kForward, .outcome = Outcome::kUnmatched, .origin = "/other/1?q=1"},
        PlanCase{.what = "not a whole segment of /orders, pass", .target = "/ordersX", .fields = Token("5"),
                 .action = Action::kForward, .outcome = Outcome::kUnmatched, .origin = "/ordersX"},
        PlanCase{.what = "unmatched, reject", .target = "/other/1", .variant = Variant::kReject,
                 .outcome = Outcome::kUnmatched, .status = 404},
        PlanCase{.what = "unmatched GET, reject", .method = "GET", .target = "/", .variant = Variant::kReject,
                 .outcome = Outcome::kUnmatched, .status = 404},
        PlanCase{.what = "root route catches the rest", .target = "/other/1", .variant = Variant::kRoot,
                 .outcome = Outcome::kRejectedMissing, .status = 428, .route = "root"},
        PlanCase{.what = "root route, token", .target = "/", .fields = Token("3"), .variant = Variant::kRoot,
                 .action = Action::kFence, .route = "root", .token = 3, .origin = "/"},
        PlanCase{.what = "longest prefix wins", .method = "GET", .target = "/orders/items/3",
                 .fields = Token("4"), .action = Action::kFence, .route = "items", .token = 4,
                 .origin = "/orders/items/3"},
        PlanCase{.what = "unfenced method", .method = "GET", .action = Action::kForward,
                 .outcome = Outcome::kUnfenced, .route = "orders", .origin = "/orders/1"},
        PlanCase{.what = "unfenced method with a malformed token", .method = "HEAD", .fields = Token("x"),
                 .action = Action::kForward, .outcome = Outcome::kUnfenced, .route = "orders",
                 .origin = "/orders/1"},
        PlanCase{.what = "method not in the route's list", .method = "DELETE", .target = "/orders/items/1",
                 .action = Action::kForward, .outcome = Outcome::kUnfenced, .route = "items"},
        PlanCase{.what = "an extension method is not fenced by default", .method = "PROPPATCH",
                 .action = Action::kForward, .outcome = Outcome::kUnfenced, .route = "orders"},
        PlanCase{.what = "origin-form keeps the query", .target = "/orders/1?a=b&c=%2F", .fields = kToken10,
                 .action = Action::kFence, .route = "orders", .token = 10, .origin = "/orders/1?a=b&c=%2F"},
        PlanCase{.what = "absolute-form is routed by its path", .target = "http://h/orders/1?x=1",
                 .fields = kToken10, .action = Action::kFence, .route = "orders", .token = 10,
                 .origin = "/orders/1?x=1", .host = "h"},
        PlanCase{.what = "absolute-form, upper-case scheme and a port", .target = "HTTPS://H:8443/orders",
                 .fields = kToken10, .action = Action::kFence, .route = "orders", .token = 10, .origin = "/orders",
                 .host = "H:8443"},
        PlanCase{.what = "absolute-form, an unmatched path", .method = "GET", .target = "http://h/other",
                 .action = Action::kForward, .outcome = Outcome::kUnmatched, .origin = "/other", .host = "h"},
        PlanCase{.what = "a path parameter that changes no route", .target = "/orders/1;jsessionid=A?q",
                 .fields = kToken10, .action = Action::kFence, .route = "orders", .token = 10,
                 .origin = "/orders/1;jsessionid=A?q"},
        PlanCase{.what = "a path parameter, unmatched either way", .target = "/other;x/1", .fields = Token("5"),
                 .action = Action::kForward, .outcome = Outcome::kUnmatched, .origin = "/other;x/1"},
        PlanCase{.what = "a parameter in the query is no path parameter", .target = "/other?a=/orders;x",
                 .fields = Token("5"), .action = Action::kForward, .outcome = Outcome::kUnmatched,
                 .origin = "/other?a=/orders;x"},
        PlanCase{.what = "absolute-form without a path is '/'", .method = "GET", .target = "http://h",
                 .action = Action::kForward, .outcome = Outcome::kUnmatched, .origin = "/", .host = "h"},
        PlanCase{.what = "absolute-form without a path reaches the root route", .target = "http://h:80",
                 .fields = Token("2"), .variant = Variant::kRoot, .action = Action::kFence, .route = "root",
                 .token = 2, .origin = "/", .host = "h:80"}));

INSTANTIATE_TEST_SUITE_P(
    Tokens, PlanRequestTest,
    testing::Values(
        PlanCase{.what = "missing token, reject", .outcome = Outcome::kRejectedMissing, .status = 428,
                 .route = "orders"},
        PlanCase{.what = "missing token, allow", .target = "/open/1", .action = Action::kForward,
                 .outcome = Outcome::kUnfenced, .route = "open", .origin = "/open/1"},
        PlanCase{.what = "missing token, observe", .target = "/notes/1", .action = Action::kForward,
                 .outcome = Outcome::kObservedMissing, .route = "notes", .origin = "/notes/1"},
        PlanCase{.what = "another header is not the token", .fields = {{"X-Fencing-Tokens", "5"}},
                 .outcome = Outcome::kRejectedMissing, .status = 428, .route = "orders"},
        PlanCase{.what = "malformed: letters", .fields = Token("abc"), .outcome = Outcome::kRejectedMalformed,
                 .status = 400, .close = true, .route = "orders"},
        PlanCase{.what = "malformed: empty", .fields = Token(""), .outcome = Outcome::kRejectedMalformed,
                 .status = 400, .close = true, .route = "orders"},
        PlanCase{.what = "malformed: a list", .fields = Token("5, 6"), .outcome = Outcome::kRejectedMalformed,
                 .status = 400, .close = true, .route = "orders"},
        PlanCase{.what = "malformed: hex", .fields = Token("0x5"), .outcome = Outcome::kRejectedMalformed,
                 .status = 400, .close = true, .route = "orders"},
        PlanCase{.what = "malformed: a sign", .fields = Token("+5"), .outcome = Outcome::kRejectedMalformed,
                 .status = 400, .close = true, .route = "orders"},
        PlanCase{.what = "malformed: inner space", .fields = Token("5 1"), .outcome = Outcome::kRejectedMalformed,
                 .status = 400, .close = true, .route = "orders"},
        PlanCase{.what = "malformed: 2^64", .fields = Token("18446744073709551616"),
                 .outcome = Outcome::kRejectedMalformed, .status = 400, .close = true, .route = "orders"},
        PlanCase{.what = "malformed: Arabic-Indic digits", .fields = Token("\xd9\xa1\xd9\xa0"),
                 .outcome = Outcome::kRejectedMalformed, .status = 400, .close = true, .route = "orders"},
        PlanCase{.what = "malformed, allow still refuses", .target = "/open/1", .fields = Token("x"),
                 .outcome = Outcome::kRejectedMalformed, .status = 400, .close = true, .route = "open"},
        PlanCase{.what = "malformed, observe", .target = "/notes/1", .fields = Token("x"),
                 .action = Action::kForward, .outcome = Outcome::kObservedMalformed, .route = "notes",
                 .origin = "/notes/1"},
        PlanCase{.what = "the token twice, equal", .fields = {{"X-Fencing-Token", "5"}, {"X-Fencing-Token", "5"}},
                 .outcome = Outcome::kRejectedMalformed, .status = 400, .close = true, .route = "orders"},
        PlanCase{.what = "the token twice, names in different case",
                 .fields = {{"X-Fencing-Token", "5"}, {"x-fencing-token", "6"}},
                 .outcome = Outcome::kRejectedMalformed, .status = 400, .close = true, .route = "orders"},
        PlanCase{.what = "the token twice, one empty", .fields = {{"X-Fencing-Token", ""}, {"X-Fencing-Token", "5"}},
                 .outcome = Outcome::kRejectedMalformed, .status = 400, .close = true, .route = "orders"},
        PlanCase{.what = "the token twice, observe",
                 .target = "/notes/1", .fields = {{"X-Fencing-Token", "5"}, {"X-Fencing-Token", "6"}},
                 .action = Action::kForward, .outcome = Outcome::kObservedMalformed, .route = "notes"},
        PlanCase{.what = "header name in lower case", .fields = {{"x-fencing-token", "7"}}, .action = Action::kFence,
                 .route = "orders", .token = 7, .origin = "/orders/1"},
        PlanCase{.what = "header name in upper case", .fields = {{"X-FENCING-TOKEN", "7"}}, .action = Action::kFence,
                 .route = "orders", .token = 7},
        PlanCase{.what = "surrounding whitespace", .fields = Token(" \t7 "), .action = Action::kFence,
                 .route = "orders", .token = 7},
        PlanCase{.what = "leading zeros", .fields = Token("007"), .action = Action::kFence, .route = "orders",
                 .token = 7},
        PlanCase{.what = "zero", .fields = Token("0"), .action = Action::kFence, .route = "orders", .token = 0},
        PlanCase{.what = "2^64-1", .fields = Token("18446744073709551615"), .action = Action::kFence,
                 .route = "orders", .token = std::numeric_limits<uint64_t>::max()},
        PlanCase{.what = "valid token, observe route is fenced too", .target = "/notes/1", .fields = Token("3"),
                 .action = Action::kFence, .route = "notes", .token = 3, .origin = "/notes/1"},
        PlanCase{.what = "valid token, allow route", .method = "POST", .target = "/open", .fields = Token("3"),
                 .action = Action::kFence, .route = "open", .token = 3, .origin = "/open"},
        PlanCase{.what = "forward_token: false drops the header", .target = "/blind/1", .fields = Token("3"),
                 .action = Action::kFence, .route = "blind", .token = 3, .origin = "/blind/1", .drop_token = true},
        PlanCase{.what = "forward_token: false, unfenced method", .method = "GET", .target = "/blind/1",
                 .fields = Token("3"), .action = Action::kForward, .outcome = Outcome::kUnfenced, .route = "blind",
                 .drop_token = true},
        PlanCase{.what = "forward_token: false, missing token", .target = "/blind/1",
                 .outcome = Outcome::kRejectedMissing, .status = 428, .route = "blind", .drop_token = true}));

// ---------------------------------------------------------------- ApplyAdmission

struct AdmissionCase {
  const char* what;
  const char* target;  // /orders (enforce) or /notes (observe)
  Admission admission;
  Action action;
  Outcome outcome;
  int status;  // kReject only
  bool has_max_token;
};

void PrintTo(const AdmissionCase& c, std::ostream* os) { *os << c.what; }

class ApplyAdmissionTest : public testing::TestWithParam<AdmissionCase> {};

TEST_P(ApplyAdmissionTest, TurnsTheFencesAnswerIntoAForwardOrAProblem) {
  const AdmissionCase& c = GetParam();
  Env& env = EnvFor(Variant::kPass);
  ASSERT_TRUE(env.ok());
  RequestPlan plan = PlanRequest(Head("PUT", c.target, Token("5")), env.runtime());
  ASSERT_EQ(plan.action, Action::kFence) << c.what;
  ApplyAdmission(plan, c.admission, 9);

  EXPECT_EQ(static_cast<int>(plan.action), static_cast<int>(c.action)) << c.what;
  EXPECT_EQ(OutcomeName(plan.outcome), OutcomeName(c.outcome)) << c.what;
  EXPECT_FALSE(plan.close) << c.what << ": a fence's refusal keeps the connection";
  if (c.action != Action::kReject) return;

  EXPECT_EQ(static_cast<int>(plan.problem.status), c.status) << c.what;
  json::value body = json::parse(ProblemJson(plan.problem));
  const json::object& o = body.as_object();
  EXPECT_EQ(o.at("status").as_int64(), c.status) << c.what;
  for (const char* field : {"title", "detail", "type"}) {
    ASSERT_TRUE(o.contains(field)) << c.what << ": " << field;
    EXPECT_FALSE(o.at(field).as_string().empty()) << c.what << ": " << field;
  }
  EXPECT_EQ(o.at("route").as_string(), plan.route->config->name) << c.what;
  EXPECT_EQ(o.at("fence").as_string(), plan.route->config->fence) << c.what;
  ASSERT_TRUE(o.contains("token")) << c.what;
  EXPECT_EQ(o.at("token").to_number<uint64_t>(), 5u) << c.what;
  auto response = MakeProblemResponse(plan.problem, 11, true);
  if (c.has_max_token) {
    ASSERT_TRUE(o.contains("max_token")) << c.what;
    EXPECT_TRUE(o.at("max_token").is_number()) << c.what << ": max_token is a JSON number";
    EXPECT_EQ(o.at("max_token").to_number<uint64_t>(), 9u) << c.what;
    EXPECT_EQ(response[http::field::content_type], "application/problem+json") << c.what;
    EXPECT_EQ(response["X-Fencing-Token-Max"], "9") << c.what;
  } else {
    EXPECT_FALSE(o.contains("max_token")) << c.what << ": " << body;
    EXPECT_EQ(response.count("X-Fencing-Token-Max"), 0u) << c.what;
  }
}

INSTANTIATE_TEST_SUITE_P(
    Table, ApplyAdmissionTest,
    testing::Values(
        AdmissionCase{"enforce, admitted", "/orders/1", Admission::kAdmitted, Action::kForward, Outcome::kForwarded,
                      0, false},
        AdmissionCase{"enforce, stale", "/orders/1", Admission::kStale, Action::kReject, Outcome::kRejectedStale, 409,
                      true},
        AdmissionCase{"enforce, state failed", "/orders/1", Admission::kFailed, Action::kReject,
                      Outcome::kRaiseFailed, 503, false},
        AdmissionCase{"enforce, raise timed out", "/orders/1", Admission::kWaiting, Action::kReject,
                      Outcome::kRaiseFailed, 503, false},
        AdmissionCase{"observe, admitted", "/notes/1", Admission::kAdmitted, Action::kForward, Outcome::kForwarded, 0,
                      false},
        AdmissionCase{"observe, stale", "/notes/1", Admission::kStale, Action::kForward, Outcome::kObservedStale, 0,
                      false},
        AdmissionCase{"observe, state failed", "/notes/1", Admission::kFailed, Action::kForward,
                      Outcome::kRaiseFailed, 0, false},
        AdmissionCase{"observe, raise timed out", "/notes/1", Admission::kWaiting, Action::kForward,
                      Outcome::kRaiseFailed, 0, false},
        AdmissionCase{"enforce, jump too far", "/orders/1", Admission::kTooFar, Action::kReject,
                      Outcome::kRejectedJump, 409, true},
        AdmissionCase{"observe, jump too far", "/notes/1", Admission::kTooFar, Action::kForward,
                      Outcome::kObservedJump, 0, false}));

// ---------------------------------------------------------------- ApplyVerification

TEST(ApplyVerificationTest, TurnsTheLockServicesVerdictIntoAGoAheadOrAProblem) {
  Env& env = EnvFor(Variant::kPass);
  ASSERT_TRUE(env.ok());
  auto plan_for = [&](const char* target) {
    RequestPlan plan = PlanRequest(Head("PUT", target, Token("5")), env.runtime());
    EXPECT_EQ(plan.action, Action::kFence);
    return plan;
  };
  Verification verified{Verdict::kVerified, 0, "/locks/a/1", ""};
  Verification not_holder{Verdict::kNotHolder, 4, "/locks/a/1", ""};
  Verification free{Verdict::kNoHolder, 0, "", ""};
  Verification down{Verdict::kUnavailable, 0, "", "connection refused"};

  RequestPlan plan = plan_for("/orders/1");
  ApplyVerification(plan, verified, "main-etcd", "/locks/a");
  EXPECT_EQ(plan.action, Action::kFence) << "verified: the raise goes on to the fence";

  for (const Verification* v : {&not_holder, &free}) {
    plan = plan_for("/orders/1");
    ApplyVerification(plan, *v, "main-etcd", "/locks/a");
    EXPECT_EQ(plan.action, Action::kReject);
    EXPECT_EQ(OutcomeName(plan.outcome), "rejected_unverified");
    EXPECT_EQ(static_cast<int>(plan.problem.status), 409);
    EXPECT_EQ(plan.problem.type, "token-not-verified");
    EXPECT_FALSE(plan.close) << "the request was well formed";
    auto response = MakeProblemResponse(plan.problem, 11, true);
    EXPECT_EQ(response.count("X-Fencing-Token-Max"), 0u) << "not stale: no max to report";
    EXPECT_EQ(response.count(http::field::retry_after), 0u);
    json::object o = json::parse(response.body()).as_object();
    EXPECT_EQ(o.at("lock_service").as_string(), "main-etcd");
    EXPECT_EQ(o.at("token").to_number<uint64_t>(), 5u);
    EXPECT_EQ(plan.problem.detail.find('4'), std::string::npos) << "the holder's number is not told: " << plan.problem.detail;
  }

  plan = plan_for("/orders/1");
  ApplyVerification(plan, down, "main-etcd", "/locks/a");
  EXPECT_EQ(plan.action, Action::kReject);
  EXPECT_EQ(OutcomeName(plan.outcome), "lock_service_unavailable");
  EXPECT_EQ(static_cast<int>(plan.problem.status), 503);
  EXPECT_EQ(plan.problem.type, "lock-service-unavailable");
  EXPECT_EQ(plan.problem.detail.find("connection refused"), std::string::npos)
      << "the reason names the operator's infrastructure: it goes to the log and /fences";
  EXPECT_NE(plan.problem.detail.find("main-etcd"), std::string::npos);
  EXPECT_EQ(MakeProblemResponse(plan.problem, 11, true)[http::field::retry_after], "1");

  // Observe mode forwards what enforce would refuse; the session then skips the fence, so the
  // max does not move.
  for (const Verification* v : {&not_holder, &free, &down}) {
    plan = plan_for("/notes/1");
    ApplyVerification(plan, *v, "main-etcd", "/locks/a");
    EXPECT_EQ(plan.action, Action::kForward);
    EXPECT_EQ(OutcomeName(plan.outcome), "observed_unverified");
  }
}

// The plan and a real fence together, as the session runs them.
TEST(RequestPlanWithFenceTest, StaleEqualAndFailedAgainstTheOrdersFence) {
  Env env(Variant::kPass);
  ASSERT_TRUE(env.ok());
  NullWaiter waiter;
  auto decide = [&](std::string token) {
    RequestPlan plan = PlanRequest(Head("PUT", "/orders/1", Token(std::move(token))), env.runtime());
    EXPECT_EQ(plan.action, Action::kFence);
    EXPECT_EQ(plan.route->fence, &env.fence("orders"));
    AdmitResult result = plan.route->fence->Admit(plan.token, waiter);
    ApplyAdmission(plan, result.admission, result.max_token);
    if (result.admission == Admission::kAdmitted) plan.route->fence->Release();
    return plan;
  };

  RequestPlan stale = decide("5");
  EXPECT_EQ(stale.action, Action::kReject);
  EXPECT_EQ(stale.problem.status, http::status::conflict);
  EXPECT_EQ(stale.problem.token, 5u);
  EXPECT_EQ(stale.problem.max_token, 10u);

  RequestPlan equal = decide("10");
  EXPECT_EQ(equal.action, Action::kForward);
  EXPECT_EQ(OutcomeName(equal.outcome), OutcomeName(Outcome::kForwarded));

  env.state_failed() = true;
  RequestPlan failed = decide("10");
  EXPECT_EQ(failed.action, Action::kReject);
  EXPECT_EQ(failed.problem.status, http::status::service_unavailable);
  EXPECT_FALSE(failed.problem.max_token.has_value());
}

// Routes naming the same fence share it: /orders/items answers to the orders fence.
TEST(RequestPlanWithFenceTest, RoutesSharingAFenceShareItsMax) {
  Env env(Variant::kPass);
  ASSERT_TRUE(env.ok());
  RequestPlan plan = PlanRequest(Head("PUT", "/orders/items/1", Token("5")), env.runtime());
  ASSERT_EQ(plan.action, Action::kFence);
  EXPECT_EQ(plan.route->config->name, "items");
  EXPECT_EQ(plan.route->fence, &env.fence("orders"));
  NullWaiter waiter;
  AdmitResult result = plan.route->fence->Admit(plan.token, waiter);
  EXPECT_EQ(result.admission, Admission::kStale);
  EXPECT_EQ(result.max_token, 10u);
}

}  // namespace
}  // namespace fencing
