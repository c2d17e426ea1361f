// The request-target check and the route matcher on arbitrary targets. Oracles: an accepted
// path carries none of the forms a backend could normalise into another route's path, and the
// matched route is exactly the one a naive scan over every route picks (the longest prefix that
// ends at a segment boundary).

#include "config/config.h"
#include "fuzz_check.h"
#include "routing/path_check.h"
#include "routing/route_table.h"

#include <cstddef>
#include <cstdint>
#include <cctype>
#include <cstdlib>
#include <memory>
#include <optional>
#include <string>
#include <string_view>

namespace {

using namespace fencing;

// Nested and sibling prefixes, a one-letter prefix, and the catch-all "/" in a second table,
// so both "no route" and "fallback to /" are exercised.
constexpr std::string_view kRoutes = R"(backend: "http://127.0.0.1:1"
state_file: /nonexistent/fences.log
routes:
  - {name: orders, prefix: /orders}
  - {name: archive, prefix: /orders/archive, fence: orders}
  - {name: items, prefix: /orders/archive/items}
  - {name: api, prefix: /api/v1}
  - {name: a, prefix: /a}
  - {name: dash, prefix: /x-y_z.w~}
  - {name: folded, prefix: /Legacy/Data, path_case_insensitive: true}
  - {name: folded-inner, prefix: /legacy/data/deep, path_case_insensitive: true}
)";

std::shared_ptr<const ProxyConfig> Load(std::string_view text) {
  ConfigResult result = ParseConfig(text, "fuzz-routes.yaml");
  if (!result.ok()) {
    for (const ConfigError& e : result.errors) std::fprintf(stderr, "%s\n", e.ToString().c_str());
    std::abort();
  }
  return result.config;
}

bool FoldsCase(const RouteConfig& route) { return route.path_case_insensitive; }

std::string RouteText(bool with_root) {
  std::string text(kRoutes);
  if (with_root) text += "  - {name: root, prefix: /}\n";
  return text;
}

const RouteTable& Table(bool with_root) {
  static const RouteTable plain(Load(RouteText(false)));
  static const RouteTable rooted(Load(RouteText(true)));
  return with_root ? rooted : plain;
}

bool EqualNoCase(std::string_view a, std::string_view b) {
  if (a.size() != b.size()) return false;
  for (size_t i = 0; i < a.size(); ++i) {
    char x = a[i], y = b[i];
    if (x >= 'A' && x <= 'Z') x = static_cast<char>(x - 'A' + 'a');
    if (y >= 'A' && y <= 'Z') y = static_cast<char>(y - 'A' + 'a');
    if (x != y) return false;
  }
  return true;
}

bool ContainsNoCase(std::string_view haystack, std::string_view lower_needle) {
  for (size_t i = 0; i + lower_needle.size() <= haystack.size(); ++i) {
    size_t j = 0;
    for (; j < lower_needle.size(); ++j) {
      char c = haystack[i + j];
      if (c >= 'A' && c <= 'Z') c = static_cast<char>(c - 'A' + 'a');
      if (c != lower_needle[j]) break;
    }
    if (j == lower_needle.size()) return true;
  }
  return false;
}

bool IsSegmentPrefix(std::string_view prefix, std::string_view path, bool fold_case) {
  if (prefix == "/") return true;
  if (path.size() < prefix.size()) return false;
  const std::string_view head = path.substr(0, prefix.size());
  const bool same = fold_case ? EqualNoCase(head, prefix) : head == prefix;
  return same && (path.size() == prefix.size() || path[prefix.size()] == '/');
}

// The longest whole-segment prefix, by brute force over every route.
std::optional<size_t> NaiveMatch(const ProxyConfig& config, std::string_view path) {
  std::optional<size_t> best;
  for (size_t i = 0; i < config.routes.size(); ++i) {
    const std::string& prefix = config.routes[i].prefix;
    if (!IsSegmentPrefix(prefix, path, FoldsCase(config.routes[i]))) continue;
    if (!best || prefix.size() > config.routes[*best].prefix.size()) best = i;
  }
  return best;
}

void CheckAcceptedPath(std::string_view target, std::string_view path) {
  FUZZ_CHECK(!path.empty() && path.front() == '/', "an accepted path must start with '/'");
  FUZZ_CHECK(path.find('?') == std::string_view::npos, "the query must not be part of the path");
  FUZZ_CHECK(path.find("//") == std::string_view::npos, "an accepted path has an empty segment");
  FUZZ_CHECK(path.find('\\') == std::string_view::npos, "an accepted path has a backslash");
  FUZZ_CHECK(path.find('#') == std::string_view::npos, "an accepted path has a fragment");
  for (std::string_view encoded : {"%2e", "%2f", "%5c", "%3b", "%00"}) {
    FUZZ_CHECK(!ContainsNoCase(path, encoded), "an accepted path has an encoded dot, slash, backslash, semicolon or NUL");
  }
  for (unsigned char c : path) FUZZ_CHECK(c > 0x20 && c != 0x7f, "an accepted path has a control byte or space");
  // "%25" before two hex digits decodes, decoded again, to another escape ("%252e" -> "%2e").
  for (size_t i = 0; (i = path.find('%', i)) != std::string_view::npos; ++i) {
    FUZZ_CHECK(!(path.substr(i, 3) == "%25" && i + 4 < path.size() && std::isxdigit(static_cast<unsigned char>(path[i + 3])) &&
                 std::isxdigit(static_cast<unsigned char>(path[i + 4]))),
               "an accepted path has a double-encoded escape");
  }
  // Segments: none is "." or "..", or empty before the last, even with ";params" after it
  // (servlet containers drop those).
  size_t start = 1;
  while (start <= path.size()) {
    size_t end = path.find('/', start);
    if (end == std::string_view::npos) end = path.size();
    std::string_view segment = path.substr(start, end - start);
    segment = segment.substr(0, segment.find(';'));
    FUZZ_CHECK(segment != "." && segment != "..", "an accepted path has a dot segment");
    FUZZ_CHECK(!segment.empty() || end == path.size(), "an accepted path has an empty segment behind a parameter");
    start = end + 1;
  }
  // The path is a view into the target (or "/" for an absolute-form target with no path), and
  // what follows it in the target is the query or nothing.
  const bool inside = path.data() >= target.data() && path.data() + path.size() <= target.data() + target.size();
  if (inside) {
    std::string_view rest = target.substr(static_cast<size_t>(path.data() - target.data()) + path.size());
    FUZZ_CHECK(rest.empty() || rest.front() == '?', "the path must run to the query or the end of the target");
  } else {
    FUZZ_CHECK(path == "/", "a path outside the target can only be the implicit \"/\"");
  }
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string_view target = fuzz::AsView(data, size);
  const TargetCheck check = CheckRequestTarget(target);
  if (!check.ok) {
    FUZZ_CHECK(check.reason != nullptr && *check.reason != '\0', "a refusal without a reason");
    return 0;
  }
  CheckAcceptedPath(target, check.path);

  for (bool with_root : {false, true}) {
    const RouteTable& table = Table(with_root);
    const std::optional<size_t> got = table.Match(check.path);
    const std::optional<size_t> want = NaiveMatch(table.config(), check.path);
    FUZZ_CHECK(got == want, "RouteTable::Match disagrees with the longest whole-segment prefix");
    if (got) {
      const RouteConfig& route = table.config().routes[*got];
      FUZZ_CHECK(IsSegmentPrefix(route.prefix, check.path, FoldsCase(route)),
                 "the matched prefix is not a whole-segment prefix of the path");
    }
  }
  return 0;
}
