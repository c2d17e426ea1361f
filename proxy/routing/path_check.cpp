#include "routing/path_check.h"

#include "http/ascii.h"
#include "http/uri.h"

#include <array>

namespace fencing {
namespace {

TargetCheck Refuse(const char* reason) { return TargetCheck{false, {}, {}, reason}; }

// The path bytes CheckRequestTarget does something with: a segment's end, an escape, and those
// it refuses (control bytes, space, DEL, backslash, '#').
constexpr std::array<bool, 256> kPathByteToLookAt = [] {
  std::array<bool, 256> table{};
  for (int c = 0; c < 256; ++c) table[c] = c <= 0x20 || c == 0x7f || c == '\\' || c == '#' || c == '%' || c == '/';
  return table;
}();

// Percent-escapes a path may not hold, by the byte they decode to, each with the reason: the one
// place that lists them. A backend that decodes before it routes (or before it strips path
// parameters) reads the decoded byte where the proxy read an escape.
struct RefusedEscape {
  const char* bytes;  // the decoded bytes refused for this reason ("" with `unreserved`/`control`)
  bool control;       // every control byte (0x00-0x1f, 0x7f)
  bool unreserved;    // every unreserved character (RFC 3986: A-Z a-z 0-9 - . _ ~)
  const char* reason;
};
constexpr RefusedEscape kRefusedEscapes[] = {
    {"/\\", false, false, "the path has an encoded slash or backslash"},
    // Servlet containers and Spring decode the path before they strip ";params": "/orders%3Bx/1"
    // is "/orders;x/1" there, that is "/orders/1", while here it matches no route (Spring
    // Security's firewall refuses encoded semicolons for this reason).
    {";", false, false, "the path has an encoded ';' (a Servlet-style backend reads it as a path parameter)"},
    {"", true, false, "the path has an encoded control byte"},
    // Encoding an unreserved character changes nothing for a backend that normalises, so an
    // encoded one can only be an attempt to dodge prefix matching ("%6Frders", "%2e%2e").
    {"", false, true, "the path percent-encodes an unreserved character (such as %2e)"},
};

// The reason an escape decoding to each byte is refused, or null: kRefusedEscapes as a table.
constexpr std::array<const char*, 256> kEscapeRefusal = [] {
  std::array<const char*, 256> table{};
  for (const RefusedEscape& refused : kRefusedEscapes) {
    for (int c = 0; c < 256; ++c) {
      bool hit = (refused.control && (c < 0x20 || c == 0x7f)) || (refused.unreserved && IsUnreserved(static_cast<char>(c)));
      for (const char* b = refused.bytes; *b; ++b) hit = hit || static_cast<unsigned char>(*b) == c;
      if (hit && table[c] == nullptr) table[c] = refused.reason;
    }
  }
  return table;
}();

}  // namespace

const char* RefusedEscapeReason(unsigned char decoded) { return kEscapeRefusal[decoded]; }

TargetCheck CheckRequestTarget(std::string_view target) {
  // Absolute-form: set the authority aside, route by the path ("http://h" alone means "/").
  std::string_view authority;
  // Origin-form ("/..."), nearly every request, cannot be either scheme: two case-folding
  // compares spared per request.
  if (!target.starts_with('/') &&
      (StartsWithIgnoreCase(target, "http://") || StartsWithIgnoreCase(target, "https://"))) {
    size_t authority_at = target.find("://") + 3;
    size_t slash = target.find_first_of("/?#", authority_at);
    authority = target.substr(authority_at, slash == std::string_view::npos ? slash : slash - authority_at);
    if (slash == std::string_view::npos) return TargetCheck{true, "/", authority, ""};
    if (target[slash] != '/') return Refuse("the absolute-form target has no path");
    target.remove_prefix(slash);
  }
  if (target.empty() || target.front() != '/') return Refuse("the request target must start with '/'");

  size_t query = target.find('?');
  std::string_view path = target.substr(0, query);

  // path[0] is the leading '/'; segments start after it (starting at 0 took "/" for "//").
  size_t segment_start = 1;
  for (size_t i = 1; i <= path.size(); ++i) {
    // Most bytes are none of those the loop looks at: one table look-up passes them.
    if (i < path.size() && !kPathByteToLookAt[static_cast<unsigned char>(path[i])]) continue;
    if (i == path.size() || path[i] == '/') {
      std::string_view segment = path.substr(segment_start, i - segment_start);
      bool last = i == path.size();
      if (segment.empty() && !last) return Refuse("the path has an empty segment ('//')");
      // Servlet containers drop ";params" from a segment before resolving dots, so "..;x" is
      // as much a dot segment as "..".
      std::string_view bare = segment.substr(0, segment.find(';'));
      if (bare == "." || bare == "..") return Refuse("the path has a dot segment");
      // And "/;x/orders" as much an empty segment as "//orders" (which they merge into "/orders").
      if (bare.empty() && !last) return Refuse("the path has an empty segment hidden behind a path parameter");
      segment_start = i + 1;
      continue;
    }
    unsigned char c = static_cast<unsigned char>(path[i]);
    if (c <= 0x20 || c == 0x7f) return Refuse("the path has a control byte or space");
    if (c == '\\') return Refuse("the path has a backslash");
    if (c == '#') return Refuse("the path has a fragment");
    if (c == '%') {
      if (i + 2 >= path.size()) return Refuse("the path has a malformed percent escape");
      int hi = HexValue(path[i + 1]);
      int lo = HexValue(path[i + 2]);
      if (hi < 0 || lo < 0) return Refuse("the path has a malformed percent escape");
      unsigned char decoded = static_cast<unsigned char>(hi * 16 + lo);
      if (const char* reason = kEscapeRefusal[decoded]) return Refuse(reason);
      // "%252e" is "%2e" to a backend that decodes twice: an encoded '%' starting an escape.
      if (decoded == '%' && i + 4 < path.size() && HexValue(path[i + 3]) >= 0 && HexValue(path[i + 4]) >= 0) {
        return Refuse("the path has a double-encoded escape (such as %252e)");
      }
      i += 2;
    }
  }
  // The query is forwarded as sent; only bytes that break the request line are refused.
  if (query != std::string_view::npos) {
    for (char ch : target.substr(query)) {
      unsigned char c = static_cast<unsigned char>(ch);
      if (c <= 0x20 || c == 0x7f) return Refuse("the query has a control byte or space");
    }
  }
  return TargetCheck{true, path, authority, ""};
}

}  // namespace fencing
