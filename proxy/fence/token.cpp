#include "fence/token.h"

#include <limits>

namespace fencing {
namespace {

bool IsOws(char c) { return c == ' ' || c == '\t'; }

ParsedToken Malformed(const char* reason) {
  return ParsedToken{TokenParse::kMalformed, 0, reason};
}

}  // namespace

ParsedToken ParseTokenValue(std::string_view value) {
  while (!value.empty() && IsOws(value.front())) value.remove_prefix(1);
  while (!value.empty() && IsOws(value.back())) value.remove_suffix(1);
  if (value.empty()) return Malformed("the token is empty");
  if (value.size() > 20) return Malformed("the token has more than 20 digits");
  uint64_t result = 0;
  constexpr uint64_t kMax = std::numeric_limits<uint64_t>::max();
  for (char c : value) {
    if (c < '0' || c > '9') return Malformed("the token must be ASCII digits only");
    uint64_t digit = static_cast<uint64_t>(c - '0');
    if (result > (kMax - digit) / 10) return Malformed("the token is above 2^64-1");
    result = result * 10 + digit;
  }
  return ParsedToken{TokenParse::kOk, result, ""};
}

ParsedToken ParseTokenHeader(size_t header_count, std::string_view first_value) {
  if (header_count == 0) return ParsedToken{};
  if (header_count > 1) return Malformed("the token header was sent more than once");
  return ParseTokenValue(first_value);
}

}  // namespace fencing
