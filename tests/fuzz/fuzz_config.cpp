// The route-file loader on arbitrary text. Oracles: it never throws or crashes; a refusal has
// at least one error, each with a position (line/column >= 0) and a message; an accepted file
// obeys every invariant config.h promises (unique route names and prefixes, valid names,
// canonical prefixes, fenced methods, fence key settings), and each route's own prefix routes to it.

#include "config/config.h"
#include "fuzz_check.h"
#include "http/ascii.h"
#include "http/rules.h"
#include "routing/route_table.h"

#include <cstddef>
#include <cstdint>
#include <map>
#include <set>
#include <string>
#include <string_view>

namespace {

using namespace fencing;

// The name rule read independently of http/rules.h, as an oracle.
bool IsRouteName(std::string_view name) {
  if (name.empty() || name.size() > kMaxNameLength) return false;
  for (char c : name) {
    if (!((c >= 'a' && c <= 'z') || (c >= '0' && c <= '9') || c == '_' || c == '-')) return false;
  }
  return true;
}

void CheckConfig(const ProxyConfig& config) {
  std::set<std::string_view> names, prefixes;
  for (const RouteConfig& route : config.routes) {
    FUZZ_CHECK(names.insert(route.name).second, "two routes share a name");
    FUZZ_CHECK(prefixes.insert(route.prefix).second, "two routes share a prefix");
    FUZZ_CHECK(IsRouteName(route.name), "a route name outside [a-z0-9_-]{1,64}");
    FUZZ_CHECK(IsRouteName(route.fence), "a fence name outside [a-z0-9_-]{1,64}");
    FUZZ_CHECK(!route.prefix.empty() && route.prefix.front() == '/', "a prefix not starting with '/'");
    FUZZ_CHECK(route.prefix == "/" || route.prefix.back() != '/', "a prefix with a trailing '/'");
    FUZZ_CHECK(!route.methods.empty(), "a route fencing no method");
    std::set<std::string_view> methods;
    for (const std::string& m : route.methods) {
      FUZZ_CHECK(methods.insert(m).second, "a method listed twice");
      FUZZ_CHECK(!m.empty(), "an empty method");
      for (char c : m) FUZZ_CHECK(!(c >= 'a' && c <= 'z'), "a method not in upper case");
    }
  }
  // Fence keys: a source that can be read, settings only on keyed routes, forgetting only with one
  // cluster-wide counter, and every route of one fence agreeing on them.
  std::map<std::string_view, const RouteConfig*> fences;
  for (const RouteConfig& route : config.routes) {
    const FenceKeySpec& key = route.fence_key;
    if (key.source == FenceKeySpec::Source::kPathSegment) {
      FUZZ_CHECK(key.path_segment >= 1 && key.path_segment <= kMaxFenceKeySegment, "a path_segment out of bounds");
    }
    if (key.source == FenceKeySpec::Source::kHeader) {
      FUZZ_CHECK(!key.header.empty(), "an empty key header");
      FUZZ_CHECK(!EqualsIgnoreCase(key.header, config.token_header), "the key header is the token header");
      FUZZ_CHECK(key.header.find('_') == std::string::npos ||
                     config.headers_with_underscores == HeadersWithUnderscores::kAllow,
                 "a key header with '_' without headers_with_underscores: allow");
    }
    const RouteConfig defaults;
    if (!key.keyed()) {
      FUZZ_CHECK(route.max_keys == defaults.max_keys && route.token_order == defaults.token_order &&
                     route.forget_idle_keys_after == defaults.forget_idle_keys_after,
                 "key settings on an unkeyed route");
    }
    FUZZ_CHECK(route.max_keys >= 1, "max_keys 0");
    FUZZ_CHECK(route.forget_idle_keys_after.count() == 0 || route.token_order == TokenOrder::kGlobal,
               "forgetting without token_order: global");
    auto [it, added] = fences.emplace(route.fence, &route);
    if (added) continue;
    const RouteConfig& first = *it->second;
    FUZZ_CHECK(first.fence_key.keyed() == key.keyed() && first.max_keys == route.max_keys &&
                   first.token_order == route.token_order &&
                   first.forget_idle_keys_after == route.forget_idle_keys_after,
               "routes of one fence disagree on its keys");
  }
  FUZZ_CHECK(!config.backend.host.empty(), "an accepted config without a backend host");
  FUZZ_CHECK(!config.state_file.empty(), "an accepted config without a state file");
  FUZZ_CHECK(!config.token_header.empty(), "an empty token header name");
  FUZZ_CHECK(config.limits.max_header_bytes >= 1024 && config.limits.max_header_bytes <= 1024 * 1024,
             "max_header_bytes outside 1KiB..1MiB");
  FUZZ_CHECK(config.limits.max_body_bytes >= 1 && config.limits.max_connections >= 1, "a zero limit");
  for (auto t : {config.timeouts.connect, config.timeouts.request, config.timeouts.idle,
                 config.timeouts.header_read, config.timeouts.shutdown}) {
    FUZZ_CHECK(t.count() > 0 && t <= std::chrono::hours(24), "a timeout outside (0, 24h]");
  }
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string file = "fuzz.yaml";
  const ConfigResult result = ParseConfig(fuzz::AsView(data, size), file);
  if (!result.ok()) {
    FUZZ_CHECK(!result.errors.empty(), "a refused file with no error");
    for (const ConfigError& e : result.errors) {
      FUZZ_CHECK(e.line >= 0 && e.column >= 0, "an error with a negative position");
      FUZZ_CHECK(!e.message.empty(), "an error without a message");
      FUZZ_CHECK(e.file == file, "an error naming another file");
      FUZZ_CHECK(e.ToString().rfind(file + ":", 0) == 0, "an error that does not start with FILE:");
    }
    return 0;
  }
  FUZZ_CHECK(result.errors.empty(), "an accepted file with errors");
  CheckConfig(*result.config);

  const RouteTable table(result.config);
  for (size_t i = 0; i < result.config->routes.size(); ++i) {
    FUZZ_CHECK(table.Match(result.config->routes[i].prefix) == i, "a route's own prefix routes elsewhere");
  }
  return 0;
}
