#include "http/uri.h"

#include "http/rules.h"

#include <arpa/inet.h>
#include <netinet/in.h>

#include <algorithm>
#include <cstring>

namespace fencing {
namespace {

bool IsIpv6Address(std::string_view text) {
  char buffer[INET6_ADDRSTRLEN + 1];  // inet_pton wants a C string
  if (text.empty() || text.size() >= sizeof buffer) return false;
  std::memcpy(buffer, text.data(), text.size());
  buffer[text.size()] = '\0';
  in6_addr address{};
  return inet_pton(AF_INET6, buffer, &address) == 1;
}

// IPvFuture = "v" 1*HEXDIG "." 1*( unreserved / sub-delims / ":" )
bool IsIpvFuture(std::string_view text) {
  if (text.size() < 4 || (text[0] != 'v' && text[0] != 'V')) return false;
  size_t dot = text.find('.', 1);
  if (dot == std::string_view::npos || dot == 1 || dot + 1 == text.size()) return false;
  for (char c : text.substr(1, dot - 1)) {
    if (HexValue(c) < 0) return false;
  }
  for (char c : text.substr(dot + 1)) {
    if (!IsUnreserved(c) && !IsSubDelim(c) && c != ':') return false;
  }
  return true;
}

// reg-name = *( unreserved / pct-encoded / sub-delims ), here non-empty. An IPv4address is a
// reg-name too, as far as the characters go.
bool IsRegName(std::string_view text) {
  if (text.empty()) return false;
  for (size_t i = 0; i < text.size(); ++i) {
    const char c = text[i];
    if (c == '%') {
      if (i + 2 >= text.size() || HexValue(text[i + 1]) < 0 || HexValue(text[i + 2]) < 0) return false;
      i += 2;
    } else if (!IsUnreserved(c) && !IsSubDelim(c)) {
      return false;
    }
  }
  return true;
}

bool IsPort(std::string_view text) {
  uint64_t port = 0;
  return text.size() <= 5 && ParseDecimalU64(text, &port) && port <= 65535;
}

}  // namespace

bool IsValidHostPort(std::string_view text) {
  std::string_view host = text;
  std::string_view rest;
  if (!text.empty() && text.front() == '[') {
    const size_t close = text.find(']');
    if (close == std::string_view::npos) return false;
    const std::string_view literal = text.substr(1, close - 1);
    if (!IsIpv6Address(literal) && !IsIpvFuture(literal)) return false;
    rest = text.substr(close + 1);
  } else {
    const size_t colon = text.find(':');
    host = text.substr(0, colon);
    rest = colon == std::string_view::npos ? std::string_view() : text.substr(colon);
    if (!IsRegName(host)) return false;
  }
  if (rest.empty()) return true;
  return rest.front() == ':' && IsPort(rest.substr(1));
}

}  // namespace fencing
