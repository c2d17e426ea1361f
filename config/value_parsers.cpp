#include "config/value_parsers.h"

#include "http/ascii.h"
#include "http/fields.h"
#include "http/rules.h"
#include "http/uri.h"

#include <arpa/inet.h>
#include <netinet/in.h>

#include <algorithm>
#include <array>
#include <limits>
#include <vector>

namespace fencing {
namespace config_internal {
namespace {


// Splits "123unit" into digits and the rest.
std::pair<std::string_view, std::string_view> SplitNumber(std::string_view text) {
  size_t i = 0;
  while (i < text.size() && IsAsciiDigit(text[i])) ++i;
  return {text.substr(0, i), text.substr(i)};
}

bool IsIpv4(std::string_view text) {
  in_addr addr{};
  return inet_pton(AF_INET, std::string(text).c_str(), &addr) == 1;
}

bool IsIpv6(std::string_view text) {
  in6_addr addr{};
  return inet_pton(AF_INET6, std::string(text).c_str(), &addr) == 1;
}

// A host as it appears inside or outside brackets.
std::string CheckHost(std::string_view host, bool bracketed) {
  if (host.empty()) return "missing host";
  if (bracketed) {
    const size_t zone_at = host.find('%');
    const std::string_view address = host.substr(0, zone_at);
    if (!IsIpv6(address)) return "'" + std::string(address) + "' is not an IPv6 address";
    if (zone_at != std::string_view::npos) {
      const std::string_view zone = host.substr(zone_at + 1);
      const bool ok = !zone.empty() && std::all_of(zone.begin(), zone.end(), [](char c) {
        return IsAsciiAlpha(c) || IsAsciiDigit(c) || c == '_' || c == '-' || c == '.';
      });
      if (!ok) return "bad IPv6 zone '" + std::string(zone) + "'";
    }
    return "";
  }
  if (host.find(':') != std::string_view::npos) {
    return "an IPv6 address must be in brackets, e.g. [::1]:8080";
  }
  const bool numeric = std::all_of(host.begin(), host.end(), [](char c) { return IsAsciiDigit(c) || c == '.'; });
  if (numeric) {
    return IsIpv4(host) ? "" : "'" + std::string(host) + "' is not a valid IPv4 address";
  }
  const bool chars_ok = std::all_of(host.begin(), host.end(), [](char c) {
    return IsAsciiAlpha(c) || IsAsciiDigit(c) || c == '-' || c == '.' || c == '_';
  });
  if (!chars_ok || host.size() > 253 || host.front() == '.' || host.front() == '-' ||
      host.find("..") != std::string_view::npos) {
    return "'" + std::string(host) + "' is not a valid host name or IP address";
  }
  return "";
}

std::string CheckPort(std::string_view text, uint16_t* out) {
  if (text.empty()) return "missing port after ':'";
  uint64_t value = 0;
  if (!IsDecimalDigits(text)) {
    return "port '" + std::string(text) + "' is not a number";
  }
  if (text.size() > 5 || !ParseDecimalU64(text, &value) || value < 1 || value > 65535) {
    return "port must be from 1 to 65535";
  }
  *out = static_cast<uint16_t>(value);
  return "";
}

// Splits "host", "host:port", "[v6]" or "[v6]:port"; *has_port tells whether a port was written.
std::string SplitHostPort(std::string_view text, HostPort* out, bool* has_port) {
  std::string_view host;
  std::string_view port;
  bool bracketed = false;
  *has_port = false;
  if (!text.empty() && text.front() == '[') {
    const size_t close = text.find(']');
    if (close == std::string_view::npos) return "missing ']' after the IPv6 address";
    bracketed = true;
    host = text.substr(1, close - 1);
    const std::string_view rest = text.substr(close + 1);
    if (!rest.empty()) {
      if (rest.front() != ':') return "expected ':' and a port after ']'";
      port = rest.substr(1);
      *has_port = true;
    }
  } else {
    const size_t colon = text.rfind(':');
    host = text.substr(0, colon);
    if (colon != std::string_view::npos) {
      port = text.substr(colon + 1);
      *has_port = true;
    }
  }
  if (std::string error = CheckHost(host, bracketed); !error.empty()) return error;
  if (*has_port) {
    if (std::string error = CheckPort(port, &out->port); !error.empty()) return error;
  }
  out->host = std::string(host);
  return "";
}

}  // namespace

std::string CheckDuration(std::string_view text, std::chrono::milliseconds* out) {
  const std::string expected = "expected a duration such as 250ms, 2s or 1m";
  const auto [digits, unit] = SplitNumber(text);
  if (digits.empty()) {
    if (!text.empty() && text.front() == '-') return "a duration must be positive";
    return expected;
  }
  if (!unit.empty() && (unit.front() == '.' || unit.front() == ',')) {
    return expected + "; fractions are not allowed (write 1500ms, not 1.5s)";
  }
  if (unit.empty()) return expected + "; a bare number has no unit";
  int64_t unit_ms = 0;
  if (unit == "ms") {
    unit_ms = 1;
  } else if (unit == "s") {
    unit_ms = 1000;
  } else if (unit == "m") {
    unit_ms = 60 * 1000;
  } else if (unit == "h") {
    unit_ms = 60 * 60 * 1000;
  } else {
    return expected + "; unknown unit '" + std::string(unit) + "' (use ms, s, m or h)";
  }
  // Bounded so the value still fits when a timer converts it to nanoseconds.
  constexpr uint64_t kMaxMs = std::numeric_limits<int64_t>::max() / 1000000;
  uint64_t value = 0;
  if (!ParseDecimalU64(digits, &value) || value > kMaxMs / static_cast<uint64_t>(unit_ms)) {
    return "duration is too large";
  }
  if (value == 0) return "a duration must be greater than zero";
  *out = std::chrono::milliseconds(static_cast<int64_t>(value) * unit_ms);
  return "";
}

std::string CheckSize(std::string_view text, uint64_t* out) {
  const std::string expected = "expected a size in bytes such as 16384, 16KiB or 64MiB";
  const auto [digits, unit] = SplitNumber(text);
  if (digits.empty()) {
    if (!text.empty() && text.front() == '-') return "a size must not be negative";
    return expected;
  }
  if (!unit.empty() && (unit.front() == '.' || unit.front() == ',')) {
    return expected + "; fractions are not allowed";
  }
  uint64_t multiplier = 0;
  if (unit.empty()) {
    multiplier = 1;
  } else if (unit == "KiB") {
    multiplier = uint64_t{1} << 10;
  } else if (unit == "MiB") {
    multiplier = uint64_t{1} << 20;
  } else if (unit == "GiB") {
    multiplier = uint64_t{1} << 30;
  } else {
    static constexpr std::array<std::string_view, 9> kLookalikes = {"k", "kb", "m", "mb", "g", "gb",
                                                                     "kib", "mib", "gib"};
    const std::string_view unit_text = unit;  // clang 14 cannot capture a structured binding
    const bool lookalike = std::any_of(kLookalikes.begin(), kLookalikes.end(),
                                       [&](std::string_view u) { return EqualsIgnoreCase(u, unit_text); });
    if (lookalike) {
      return "unit '" + std::string(unit) + "' is not accepted: use KiB/MiB/GiB (1KiB = 1024 bytes)";
    }
    return expected + "; unknown unit '" + std::string(unit) +
           "' (write bytes as a plain integer, or use KiB/MiB/GiB)";
  }
  uint64_t value = 0;
  if (!ParseDecimalU64(digits, &value) || value > std::numeric_limits<uint64_t>::max() / multiplier) {
    return "size is too large";
  }
  *out = value * multiplier;
  return "";
}

std::string CheckUnsigned(std::string_view text, uint64_t* out) {
  if (!IsDecimalDigits(text)) {
    return "expected a non-negative integer";
  }
  if (!ParseDecimalU64(text, out)) return "integer is too large";
  return "";
}

std::string CheckListenAddress(std::string_view text, HostPort* out) {
  if (IsDecimalDigits(text)) {
    return "a port alone is not an address; write 0.0.0.0:" + std::string(text) + " or 127.0.0.1:" +
           std::string(text);
  }
  if (text.find(':') == std::string_view::npos) {
    return "expected host:port, e.g. 0.0.0.0:8080 (the port is required)";
  }
  if (text.front() == ':' && text.find(':', 1) == std::string_view::npos) {
    return "missing host (0.0.0.0 listens on every interface)";
  }
  HostPort parsed;
  bool has_port = false;
  if (std::string error = SplitHostPort(text, &parsed, &has_port); !error.empty()) return error;
  if (!has_port) return "expected host:port, e.g. [::1]:8080 (the port is required)";
  *out = parsed;
  return "";
}

std::string CheckBackendUrl(std::string_view text, HostPort* out, bool* https) {
  const std::string expected = "expected http://host:port or https://host:port, e.g. http://127.0.0.1:8081";
  const size_t scheme_end = text.find("://");
  if (scheme_end == std::string_view::npos) return expected;
  const std::string_view scheme = text.substr(0, scheme_end);
  const bool tls = EqualsIgnoreCase(scheme, "https");
  if (!tls && !EqualsIgnoreCase(scheme, "http")) {
    return "unsupported scheme '" + std::string(scheme) + "'; " + expected;
  }
  const std::string_view rest = text.substr(scheme_end + 3);
  const size_t authority_end = rest.find_first_of("/?#");
  const std::string_view authority = rest.substr(0, authority_end);
  const std::string_view tail = authority_end == std::string_view::npos ? "" : rest.substr(authority_end);
  if (authority.find('@') != std::string_view::npos) {
    return "the backend URL must not contain user information (user@)";
  }
  if (tail.find('?') != std::string_view::npos) return "the backend URL must not have a query";
  if (tail.find('#') != std::string_view::npos) return "the backend URL must not have a fragment";
  if (!tail.empty() && tail != "/") {
    return "the backend URL must not have a path (requests keep their own path); "
           "only a trailing '/' is allowed";
  }
  HostPort parsed;
  parsed.port = tls ? 443 : 80;
  bool has_port = false;
  if (std::string error = SplitHostPort(authority, &parsed, &has_port); !error.empty()) return error;
  *out = parsed;
  *https = tls;
  return "";
}

std::string CheckEtcdEndpoint(std::string_view text, bool* https) {
  const std::string expected = "expected http://host:port or https://host:port, e.g. http://127.0.0.1:2379";
  const size_t scheme_end = text.find("://");
  if (scheme_end == std::string_view::npos) return expected;
  const std::string_view scheme = text.substr(0, scheme_end);
  // Lower case only: the clients take the endpoint as written.
  if (scheme == "https") {
    *https = true;
  } else if (scheme == "http") {
    *https = false;
  } else if (EqualsIgnoreCase(scheme, "http") || EqualsIgnoreCase(scheme, "https")) {
    return "write the scheme in lower case (http:// or https://)";
  } else {
    return "unsupported scheme '" + std::string(scheme) + "'; " + expected;
  }
  const std::string_view rest = text.substr(scheme_end + 3);
  const size_t authority_end = rest.find_first_of("/?#");
  const std::string_view authority = rest.substr(0, authority_end);
  if (authority.find('@') != std::string_view::npos) {
    return "an endpoint must not contain user information (user@); use username and password_file";
  }
  if (authority_end != std::string_view::npos) {
    return "an endpoint must not have a path, query or fragment, not even a trailing '/' (the client adds "
           "the API's paths)";
  }
  HostPort parsed;
  bool has_port = false;
  if (std::string error = SplitHostPort(authority, &parsed, &has_port); !error.empty()) return error;
  if (!has_port) return "the port is required (etcd's client port is usually 2379)";
  return "";
}

std::string CheckZooKeeperHosts(std::string_view text) {
  const std::string expected = "expected host:port[,host:port...][/chroot], e.g. 127.0.0.1:2181";
  if (text.empty()) return "must not be empty; " + expected;
  const size_t slash = text.find('/');
  const std::string_view hosts = text.substr(0, slash);
  if (slash != std::string_view::npos) {
    if (std::string problem = ZnodePathProblem(text.substr(slash)); !problem.empty()) return "the chroot " + problem;
  }
  if (hosts.empty()) return "no host before the chroot; " + expected;
  std::vector<std::string_view> seen;
  size_t start = 0;
  for (;;) {
    const size_t comma = hosts.find(',', start);
    const std::string_view item = hosts.substr(start, comma == std::string_view::npos ? std::string_view::npos
                                                                                      : comma - start);
    if (item.empty()) return "an empty entry in the host list (a stray ',')";
    if (item.find_first_of(" \t") != std::string_view::npos) return "must not contain spaces";
    // The C client splits host and port at the last ':' and takes no brackets.
    if (item.front() == '[' || std::count(item.begin(), item.end(), ':') > 1) {
      return "'" + std::string(item) + "': IPv6 addresses are not supported in hosts; use a host name";
    }
    HostPort parsed;
    bool has_port = false;
    if (std::string error = SplitHostPort(item, &parsed, &has_port); !error.empty()) {
      return "'" + std::string(item) + "': " + error;
    }
    if (!has_port) return "'" + std::string(item) + "': the port is required (ZooKeeper's client port is usually 2181)";
    if (std::find(seen.begin(), seen.end(), item) != seen.end()) return "'" + std::string(item) + "' is listed twice";
    seen.push_back(item);
    if (comma == std::string_view::npos) break;
    start = comma + 1;
  }
  return "";
}

std::string CheckHostName(std::string_view text) { return CheckHost(text, false); }

std::string CheckFenceStorePrefix(std::string_view text) {
  static constexpr std::string_view kExample = " (a key prefix such as \"/fencing-proxy/orders-db\")";
  if (text.empty()) return "must not be empty" + std::string(kExample);
  if (text.front() != '/') return "must start with '/'" + std::string(kExample);
  if (text.size() > kMaxFenceStorePrefixBytes) {
    return "must be at most " + std::to_string(kMaxFenceStorePrefixBytes) + " bytes, got " +
           std::to_string(text.size());
  }
  for (char c : text) {
    // Printable ASCII only: the prefix is shown in logs, /fences and etcdctl output as written.
    if (c <= ' ' || c > '~') return "may contain only printable ASCII characters, without spaces";
  }
  if (text.size() == 1) return "must name something under '/', such as \"/fencing-proxy/orders-db\"";
  if (text.back() == '/') return "must not end with '/' (the store adds \"/members/\", \"/max/\", ... after it)";
  if (text.find("//") != std::string_view::npos) return "must not contain an empty segment (\"//\")";
  return "";
}

std::string CheckLockTemplate(std::string_view text) {
  static constexpr std::string_view kPlaceholder = "{key}";
  if (text.empty()) return "must not be empty";
  for (char c : text) {
    const unsigned char u = static_cast<unsigned char>(c);
    if (u < 0x20 || u == 0x7f) return "must not contain control characters";
  }
  if (text.back() == '/') {
    return "must not end with '/' (an etcd lock's holder is the key under LOCK/, a ZooKeeper lock's the "
           "child of LOCK: name LOCK itself)";
  }
  for (size_t i = 0; i < text.size(); ++i) {
    if (text[i] == '}') return "has a '}' without '{'; the one placeholder is {key}";
    if (text[i] != '{') continue;
    if (text.substr(i, kPlaceholder.size()) != kPlaceholder) {
      const size_t close = text.find('}', i);
      if (close == std::string_view::npos) return "has a '{' without '}'; the one placeholder is {key}";
      return "unknown placeholder '" + std::string(text.substr(i, close - i + 1)) +
             "'; the one placeholder is {key}, the fence key";
    }
    i += kPlaceholder.size() - 1;
  }
  return "";
}

std::string CheckName(std::string_view text) {
  if (text.empty()) return "must not be empty";
  if (text.size() > kMaxNameLength) return "is longer than " + std::to_string(kMaxNameLength) + " characters";
  if (!IsValidName(text)) return "may contain only a-z, 0-9, '_' and '-'";
  return "";
}

std::string CheckPrefix(std::string_view text) {
  if (text.empty() || text.front() != '/') return "must start with '/'";
  for (char c : text) {
    const unsigned char u = static_cast<unsigned char>(c);
    if (u <= 0x20 || u == 0x7f) return "must not contain whitespace or control characters";
    if (u >= 0x80) return "must be ASCII (non-ASCII bytes arrive percent-encoded)";
    switch (c) {
      case '%':
        return "must not contain '%': the prefix is compared with the path as sent, without decoding";
      case '?':
        return "must not contain '?': routes match the path before the query";
      case '#':
        return "must not contain '#'";
      case '\\':
        return "must not contain '\\'";
      default:
        break;
    }
    // RFC 3986 pchar and '/': anything else cannot appear in a valid request path.
    const bool pchar = IsUnreserved(c) || IsSubDelim(c) || c == ':' || c == '@' || c == '/';
    if (!pchar) return std::string("must not contain '") + c + "'";
  }
  if (text.size() > 1 && text.back() == '/') {
    return "must not end with '/' (/orders already matches /orders and /orders/...)";
  }
  if (std::string problem = PathSegmentsProblem(text); !problem.empty()) return problem;
  return "";
}

std::string CheckHeaderName(std::string_view text) {
  if (text.empty()) return "must not be empty";
  if (!IsToken(text)) {
    return "'" + std::string(text) + "' is not a valid HTTP header name (letters, digits and !#$%&'*+-.^_`|~ only)";
  }
  // Headers the proxy itself consumes, rewrites or uses for framing: the hop-by-hop ones and these.
  static constexpr std::string_view kHandled[] = {"Host",           "Content-Length",      "Expect",
                                                  "Proxy-Authorization", "Proxy-Authenticate", "X-Forwarded-For"};
  bool handled = IsHopByHopName(text);
  for (std::string_view h : kHandled) handled = handled || EqualsIgnoreCase(text, h);
  if (handled) {
    return "'" + std::string(text) + "' is a hop-by-hop or framing header the proxy handles itself; choose another name";
  }
  return "";
}

std::string CheckProxyFieldName(std::string_view text) {
  std::string problem = CheckHeaderName(text);
  if (problem.empty() && text.find('_') != std::string_view::npos) {
    problem = "must not contain '_' (CGI-style backends read '_' and '-' alike)";
  }
  return problem;
}

std::string CheckWriter(std::string_view text) {
  if (text == "*") return "";
  const std::string_view identity = text.ends_with('*') ? text.substr(0, text.size() - 1) : text;
  if (identity.find('*') != std::string_view::npos) {
    return "'*' may only end an entry (a prefix: \"spiffe://cluster.local/ns/shop/*\")";
  }
  if (!IsValidIdentity(identity)) {
    return "an identity is visible ASCII without spaces or commas, at most " + std::to_string(kMaxIdentityLength) +
           " bytes";
  }
  // A URI: a scheme (RFC 3986 section 3.1) and ':'. "dns:" is the scheme of a DNS SAN.
  const size_t colon = identity.find(':');
  const std::string_view scheme = identity.substr(0, colon);
  const bool has_scheme = colon != std::string_view::npos && !scheme.empty() && IsAsciiAlpha(scheme.front()) &&
                          std::all_of(scheme.begin(), scheme.end(), [](char c) {
                            return IsAsciiAlpha(c) || IsAsciiDigit(c) || c == '+' || c == '-' || c == '.';
                          });
  if (!has_scheme) {
    return "an identity is a URI SAN as written (\"spiffe://cluster.local/ns/shop/sa/writer\") or \"dns:NAME\" "
           "for a DNS SAN";
  }
  if (identity.starts_with(kDnsIdentityPrefix)) {
    const std::string_view name = identity.substr(kDnsIdentityPrefix.size());
    const bool dns_chars = std::all_of(name.begin(), name.end(), [](char c) {
      return IsAsciiLower(c) || IsAsciiDigit(c) || c == '-' || c == '.';
    });
    if (!dns_chars) {
      return "a DNS identity is \"dns:\" and the name in lower case (letters, digits, '-' and '.'), as the proxy "
             "writes DNS SANs";
    }
    if (name.empty() && !text.ends_with('*')) return "\"dns:\" needs a name after it";
  }
  return "";
}

std::string CheckMethod(std::string_view text) {
  if (text.empty()) return "a method must not be empty";
  if (!IsToken(text)) {
    return "'" + std::string(text) + "' is not an HTTP method";
  }
  if (std::any_of(text.begin(), text.end(), IsAsciiLower)) {
    std::string upper(text);
    for (char& c : upper) c = AsciiUpper(c);
    return "methods are case-sensitive and upper-case: write '" + upper + "', not '" +
           std::string(text) + "'";
  }
  return "";
}

bool IsWildcardHost(std::string_view host) {
  in_addr v4{};
  in6_addr v6{};
  const std::string h(host);
  if (inet_pton(AF_INET, h.c_str(), &v4) == 1) return v4.s_addr == 0;
  if (inet_pton(AF_INET6, h.c_str(), &v6) == 1) return IN6_IS_ADDR_UNSPECIFIED(&v6);
  return false;
}

bool IsLoopbackHost(std::string_view host) {
  if (EqualsIgnoreCase(host, "localhost")) return true;
  in_addr v4{};
  in6_addr v6{};
  const std::string h(host);
  if (inet_pton(AF_INET, h.c_str(), &v4) == 1) return (ntohl(v4.s_addr) >> 24) == 127;
  if (inet_pton(AF_INET6, h.c_str(), &v6) == 1) return IN6_IS_ADDR_LOOPBACK(&v6);
  return false;
}

size_t EditDistance(std::string_view a, std::string_view b) {
  std::vector<size_t> row(b.size() + 1);
  for (size_t j = 0; j <= b.size(); ++j) row[j] = j;
  for (size_t i = 1; i <= a.size(); ++i) {
    size_t diagonal = row[0];
    row[0] = i;
    for (size_t j = 1; j <= b.size(); ++j) {
      const size_t above = row[j];
      row[j] = std::min({row[j] + 1, row[j - 1] + 1, diagonal + (a[i - 1] == b[j - 1] ? 0 : 1)});
      diagonal = above;
    }
  }
  return row[b.size()];
}

}  // namespace config_internal

bool ParseDuration(std::string_view text, std::chrono::milliseconds* out) {
  return config_internal::CheckDuration(text, out).empty();
}

bool ParseSize(std::string_view text, uint64_t* out) {
  return config_internal::CheckSize(text, out).empty();
}

std::string HostPort::ToString() const {
  const std::string port_text = std::to_string(port);
  if (host.find(':') != std::string::npos) return "[" + host + "]:" + port_text;
  return host + ":" + port_text;
}


std::string VerifySpec::LockFor(std::string_view key) const {
  static constexpr std::string_view kPlaceholder = "{key}";
  std::string out;
  out.reserve(lock.size() + key.size());
  size_t from = 0;
  for (size_t at; (at = lock.find(kPlaceholder, from)) != std::string::npos; from = at + kPlaceholder.size()) {
    out.append(lock, from, at - from);
    out.append(key);
  }
  out.append(lock, from);
  return out;
}

const LockServiceConfig* ProxyConfig::FindLockService(std::string_view wanted) const {
  for (const LockServiceConfig& service : lock_services) {
    if (service.name == wanted) return &service;
  }
  return nullptr;
}

}  // namespace fencing
