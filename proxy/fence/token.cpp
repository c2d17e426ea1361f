#include "fence/token.h"

#include "http/rules.h"

namespace fencing {
namespace {

ParsedToken Malformed(const char* reason) {
  return ParsedToken{TokenParse::kMalformed, 0, reason};
}

}  // namespace

ParsedToken ParseTokenValue(std::string_view value) {
  value = TrimOws(value);
  if (value.empty()) return Malformed("the token is empty");
  if (value.size() > kMaxU64Digits) return Malformed("the token has more than 20 digits");
  if (!IsDecimalDigits(value)) return Malformed("the token must be ASCII digits only");
  uint64_t result = 0;
  if (!ParseDecimalU64(value, &result)) return Malformed("the token is above 2^64-1");
  return ParsedToken{TokenParse::kOk, result, ""};
}

ParsedToken ParseTokenHeader(size_t header_count, std::string_view first_value) {
  if (header_count == 0) return ParsedToken{};
  if (header_count > 1) return Malformed("the token header was sent more than once");
  return ParseTokenValue(first_value);
}

}  // namespace fencing
