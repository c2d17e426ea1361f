// Fence key extraction on arbitrary targets and key headers, through PlanRequest: the request
// target check, the route match (and its path-parameter check), then the key.
//
// Input: one flags byte, one position byte, then the target, '\n', the X-Tenant value.
//   flags bit 0: a keyed root route "/" too; bit 1: the key header twice; bit 2: no key header;
//   bit 3: GET (unfenced) instead of PUT; bits 4-6: how to derive a second target that a backend
//   could read as the same path (see Alias), or none.
//
// Oracles (each abort is a lock that two requests could reach as two fences, or a fence chosen
// from bytes the backend does not see):
//  - a key is a valid fence key (IsValidFenceKey), a view into the request, and comes only from a
//    keyed route and a fenced request; a refused target never yields one;
//  - a path key is exactly the Nth '/'-separated segment after the prefix of the path sent
//    upstream; a header key is exactly the one key field's value, OWS trimmed;
//  - a fenced request on a keyed route that is not refused has a key (never a shared fence);
//  - two targets that a backend could read as the same path (escapes decoded, ";params"
//    dropped, case folded on case-insensitive routes, origin- or absolute-form) and that are both
//    let through go to the same route with the same key.

#include "metrics/metrics.h"
#include "config/config.h"
#include "fence/fence.h"
#include "fuzz_check.h"
#include "http/ascii.h"
#include "http/rules.h"
#include "http/uri.h"
#include "routing/path_check.h"
#include "server/request_plan.h"
#include "server/runtime.h"

#include <boost/beast/http.hpp>

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <functional>
#include <algorithm>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace {

using namespace fencing;
namespace http = boost::beast::http;

// Keyed routes nested in each other, a header key on an observe route, a case-insensitive route
// and a prefix with ';' in it, next to an unkeyed one; unmatched: pass, so a path that misses
// every route is forwarded (unfenced) and takes part in the alias oracle too.
constexpr std::string_view kRoutes = R"(backend: "http://127.0.0.1:1"
state_file: /nonexistent/fences.log
routes:
  - {name: objects, prefix: /objects, fence_key: {path_segment: 1}}
  - {name: deep, prefix: /objects/deep, fence_key: {path_segment: 2}}
  - {name: tenants, prefix: /tenants, mode: observe, fence_key: {header: X-Tenant}}
  - {name: folded, prefix: /Folded/Data, path_case_insensitive: true, fence_key: {path_segment: 1}}
  - {name: folded-deep, prefix: /folded/data/x, path_case_insensitive: true, fence_key: {path_segment: 3}}
  - {name: semi, prefix: "/a;b", fence_key: {path_segment: 1}}
  - {name: plain, prefix: /plain}
)";

class NoPersister : public FencePersister {
 public:
  void Persist(Fence& fence, uint64_t token) override { fence.OnPersisted(token, true); }
};

// PlanRequest never calls the fence; the runtime needs one per route all the same.
struct World {
  explicit World(bool with_root) {
    std::string text(kRoutes);
    if (with_root) text += "  - {name: root, prefix: /, fence_key: {path_segment: 1}}\n";
    ConfigResult r = ParseConfig(text, "fuzz-keys.yaml");
    if (!r.ok()) {
      for (const ConfigError& e : r.errors) std::fprintf(stderr, "%s\n", e.ToString().c_str());
      std::abort();
    }
    config = r.config;
    std::vector<RouteRuntime> routes;
    for (const RouteConfig& route : config->routes) {
      auto& fence = fences[route.fence];
      if (!fence) {
        fence = std::make_unique<Fence>(route.fence, 0, persister, failed, [] { return 0.0; },
                                        &metrics.ForFence(route.fence));
      }
      routes.push_back(RouteRuntime{&route, fence.get(), &metrics.ForRoute(route.name)});
    }
    runtime = std::make_unique<Runtime>(config, std::move(routes), &metrics.ForRoute(kNoRouteLabel));
  }
  Metrics metrics;
  NoPersister persister;
  std::atomic<bool> failed{false};
  std::shared_ptr<const ProxyConfig> config;
  std::map<std::string, std::unique_ptr<Fence>> fences;
  std::unique_ptr<Runtime> runtime;
};

const Runtime& RuntimeFor(bool with_root) {
  static World* plain = new World(false);
  static World* rooted = new World(true);
  return *(with_root ? rooted : plain)->runtime;
}

struct Request {
  std::string target;
  std::string key_value;
  bool key_twice = false;
  bool no_key = false;
  bool get = false;
};

RequestHead Head(const Request& r) {
  RequestHead h;
  h.method_string(r.get ? "GET" : "PUT");
  h.target(r.target);
  h.version(11);
  h.set(http::field::host, "proxy.test");
  h.insert("X-Fencing-Token", "10");
  if (!r.no_key) {
    h.insert("X-Tenant", r.key_value);
    if (r.key_twice) h.insert("X-Tenant", r.key_value);
  }
  return h;
}

bool Within(std::string_view part, std::string_view whole) {
  const std::less_equal<const char*> le;
  return le(whole.data(), part.data()) && le(part.data() + part.size(), whole.data() + whole.size());
}

std::string_view TrimOws(std::string_view v) {
  while (!v.empty() && (v.front() == ' ' || v.front() == '\t')) v.remove_prefix(1);
  while (!v.empty() && (v.back() == ' ' || v.back() == '\t')) v.remove_suffix(1);
  return v;
}

// The Nth segment after the prefix, by plain splitting (nullopt: there is none).
std::optional<std::string> NaiveSegment(std::string_view path, std::string_view prefix, unsigned n) {
  std::string_view rest = path.substr(prefix == "/" ? 1 : prefix.size());
  if (prefix != "/") {
    if (rest.empty()) return std::nullopt;
    rest.remove_prefix(1);
  }
  std::vector<std::string_view> segments;
  size_t start = 0;
  for (;;) {
    const size_t slash = rest.find('/', start);
    segments.push_back(rest.substr(start, slash == std::string_view::npos ? std::string_view::npos : slash - start));
    if (slash == std::string_view::npos) break;
    start = slash + 1;
  }
  if (n == 0 || n > segments.size()) return std::nullopt;
  return std::string(segments[n - 1]);
}

// What one request was decided as, for the alias oracle.
struct Decision {
  bool let_through = false;  // forwarded or sent to the fence
  const RouteConfig* route = nullptr;
  std::string key;
};

Decision PlanAndCheck(const Request& r, bool with_root) {
  const Runtime& runtime = RuntimeFor(with_root);
  const RequestHead head = Head(r);
  const RequestPlan plan = PlanRequest(head, runtime);
  const TargetCheck target = CheckRequestTarget(head.target());

  Decision d;
  d.let_through = plan.action != RequestPlan::Action::kReject;
  d.route = plan.route ? plan.route->config : nullptr;
  d.key = std::string(plan.key);

  FUZZ_CHECK(plan.key == plan.problem.key, "the problem must carry the plan's key");
  if (!target.ok) {
    FUZZ_CHECK(plan.action == RequestPlan::Action::kReject, "a refused target was let through");
    FUZZ_CHECK(plan.key.empty(), "a key from a refused target");
  }
  if (plan.outcome == Outcome::kRejectedPath) FUZZ_CHECK(plan.key.empty(), "a key from a refused path");

  const RouteConfig* route = d.route;
  const bool keyed = route && route->fence_key.keyed();
  const bool fenced = route && plan.route->FencesMethod(head.method_string());
  if (!plan.key.empty()) {
    FUZZ_CHECK(IsValidFenceKey(plan.key), "an invalid fence key was accepted");
    FUZZ_CHECK(keyed, "a key on an unkeyed route");
    FUZZ_CHECK(fenced, "a key for a request that is not fenced");
  } else if (keyed && fenced && d.let_through) {
    FUZZ_CHECK(false, "a fenced request on a keyed route let through without a key");
  }
  if (!keyed || !fenced) {
    FUZZ_CHECK(plan.key.empty(), "a key where none is needed");
    FUZZ_CHECK(plan.outcome != Outcome::kRejectedKey, "a key error where no key is needed");
  }
  if (plan.key.empty()) return d;

  if (route->fence_key.source == FenceKeySpec::Source::kPathSegment) {
    FUZZ_CHECK(Within(plan.key, head.target()), "a path key that is not a view into the target");
    FUZZ_CHECK(Within(plan.key, plan.origin_target), "a path key outside what is sent upstream");
    // The path the backend receives: what is sent upstream, before its query.
    const std::string_view upstream_path = plan.origin_target.substr(0, plan.origin_target.find('?'));
    const std::optional<std::string> segment =
        NaiveSegment(upstream_path, route->prefix, route->fence_key.path_segment);
    FUZZ_CHECK(segment.has_value(), "a path key where the upstream path has no such segment");
    FUZZ_CHECK(*segment == plan.key, "a path key other than the Nth segment after the prefix upstream");
  } else {
    FUZZ_CHECK(!r.no_key && !r.key_twice, "a header key from no field or from two");
    FUZZ_CHECK(plan.key == TrimOws(r.key_value), "a header key other than the field's trimmed value");
    bool inside = false;
    for (const auto& field : head) inside = inside || Within(plan.key, field.value());
    FUZZ_CHECK(inside, "a header key that is not a view into the field");
  }
  return d;
}

// ---- the alias oracle

bool IsHex(char c) { return HexValue(c) >= 0; }

// ";params" dropped from every segment, as servlet containers do.
std::string WithoutParameters(std::string_view path) {
  std::string out;
  bool in_parameter = false;
  for (char c : path) {
    if (c == '/') in_parameter = false;
    if (c == ';') in_parameter = true;
    if (!in_parameter) out.push_back(c);
  }
  return out;
}

// The path a permissive backend resolves: the path of an origin- or absolute-form target, every
// escape decoded once, ";params" dropped from each segment, and (fold) ASCII case folded.
std::string BackendPath(std::string_view target, bool fold) {
  if (StartsWithIgnoreCase(target, "http://") || StartsWithIgnoreCase(target, "https://")) {
    const size_t after = target.find("://") + 3;
    const size_t slash = target.find_first_of("/?#", after);
    target = slash == std::string_view::npos || target[slash] != '/' ? std::string_view("/") : target.substr(slash);
  }
  target = target.substr(0, target.find_first_of("?#"));
  std::string decoded;
  for (size_t i = 0; i < target.size(); ++i) {
    if (target[i] == '%' && i + 2 < target.size() && IsHex(target[i + 1]) && IsHex(target[i + 2])) {
      decoded.push_back(static_cast<char>(HexValue(target[i + 1]) * 16 + HexValue(target[i + 2])));
      i += 2;
    } else {
      decoded.push_back(target[i]);
    }
  }
  std::string out = WithoutParameters(decoded);
  if (fold) out = ToAsciiLower(out);
  return out;
}

// A second spelling of the target that a backend could read as the same path.
std::string Alias(std::string_view target, unsigned kind, size_t pos) {
  static constexpr char kHex[] = "0123456789ABCDEF";
  std::string t(target);
  if (t.empty()) return t;
  pos %= t.size();
  switch (kind) {
    case 1: {  // percent-encode one byte of the path
      const size_t end = t.find_first_of("?#");
      if (pos >= end || t[pos] == '/') return t;
      const unsigned char c = static_cast<unsigned char>(t[pos]);
      return t.substr(0, pos) + '%' + kHex[c >> 4] + kHex[c & 15] + t.substr(pos + 1);
    }
    case 2: {  // decode the first escape at or after pos
      for (size_t i = pos; i + 2 < t.size(); ++i) {
        if (t[i] == '%' && IsHex(t[i + 1]) && IsHex(t[i + 2])) {
          return t.substr(0, i) + static_cast<char>(HexValue(t[i + 1]) * 16 + HexValue(t[i + 2])) + t.substr(i + 3);
        }
      }
      return t;
    }
    case 3:  // flip the case of every letter from pos on (an alias only to a folding backend)
      for (size_t i = pos; i < t.size() && t[i] != '?'; ++i) {
        t[i] = IsAsciiUpper(t[i]) ? AsciiLower(t[i]) : AsciiUpper(t[i]);
      }
      return t;
    case 4: {  // a ";param" at the end of the segment holding pos
      const size_t end = t.find_first_of("/?#", pos);
      return t.substr(0, end == std::string::npos ? t.size() : end) + ";p=1" +
             (end == std::string::npos ? std::string() : t.substr(end));
    }
    case 5: {  // every ";param" dropped
      const size_t end = std::min(t.find_first_of("?#"), t.size());
      return WithoutParameters(t.substr(0, end)) + t.substr(end);
    }
    case 6:  // hex digits of escapes in the other case
      for (size_t i = 0; i + 2 < t.size(); ++i) {
        if (t[i] == '%') {
          t[i + 1] = IsAsciiUpper(t[i + 1]) ? AsciiLower(t[i + 1]) : AsciiUpper(t[i + 1]);
          t[i + 2] = IsAsciiUpper(t[i + 2]) ? AsciiLower(t[i + 2]) : AsciiUpper(t[i + 2]);
        }
      }
      return t;
    case 7:  // absolute-form of an origin-form target, and back
      if (t.front() == '/') return "http://h" + t;
      if (StartsWithIgnoreCase(t, "http://")) {
        const size_t slash = t.find('/', 7);
        return slash == std::string::npos ? "/" : t.substr(slash);
      }
      return t;
    default:
      return t;
  }
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size < 2) return 0;
  const unsigned flags = data[0];
  const size_t pos = data[1];
  const std::string_view rest = fuzz::AsView(data + 2, size - 2);
  Request first;
  const size_t newline = rest.find('\n');
  first.target = std::string(rest.substr(0, newline));
  first.key_value = newline == std::string_view::npos ? "k" : std::string(rest.substr(newline + 1));
  first.key_twice = flags & 2;
  first.no_key = flags & 4;
  first.get = flags & 8;
  // Bytes no HTTP parser lets into a target or a field value: the head check refuses them first.
  for (char c : first.target) {
    if (c == '\r' || c == '\n' || c == '\0' || c == ' ') return 0;
  }
  for (char c : first.key_value) {
    if (c == '\r' || c == '\n' || c == '\0') return 0;
  }
  const bool with_root = flags & 1;
  const Decision a = PlanAndCheck(first, with_root);

  const unsigned kind = (flags >> 4) & 7;
  if (kind == 0) return 0;
  Request second = first;
  second.target = Alias(first.target, kind, pos);
  for (char c : second.target) {
    if (c == '\r' || c == '\n' || c == '\0' || c == ' ') return 0;
  }
  const Decision b = PlanAndCheck(second, with_root);
  if (!a.let_through || !b.let_through) return 0;
  const bool fold = (a.route && a.route->path_case_insensitive) || (b.route && b.route->path_case_insensitive);
  if (BackendPath(first.target, fold) != BackendPath(second.target, fold)) return 0;
  FUZZ_CHECK(a.route == b.route, "two spellings of one path went to different routes");
  FUZZ_CHECK(a.key == b.key, "two spellings of one path got different fence keys");
  return 0;
}
