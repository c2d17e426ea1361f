#pragma once
// RFC 3986 pieces the proxy checks: character classes, and the host[:port] of a Host header or
// of an absolute-form target's authority.

#include <string_view>

namespace fencing {

// unreserved = ALPHA / DIGIT / "-" / "." / "_" / "~"
constexpr bool IsUnreserved(char c) {
  return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '-' || c == '.' ||
         c == '_' || c == '~';
}

// sub-delims = "!" / "$" / "&" / "'" / "(" / ")" / "*" / "+" / "," / ";" / "="
constexpr bool IsSubDelim(char c) { return std::string_view("!$&'()*+,;=").find(c) != std::string_view::npos; }

// The value of a HEXDIG (either case), or -1.
constexpr int HexValue(char c) {
  if (c >= '0' && c <= '9') return c - '0';
  if (c >= 'a' && c <= 'f') return c - 'a' + 10;
  if (c >= 'A' && c <= 'F') return c - 'A' + 10;
  return -1;
}

// host [ ":" port ], where host is an IP-literal ("[" IPv6address or IPvFuture "]"), an
// IPv4address or a non-empty reg-name (unreserved, pct-encoded, sub-delims), and port is 1 to 5
// digits up to 65535. No userinfo ("user@"), no whitespace, no path.
bool IsValidHostPort(std::string_view text);

}  // namespace fencing
