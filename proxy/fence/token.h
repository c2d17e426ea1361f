#pragma once
// Parsing the fencing-token header. Pure: no I/O, no state.

#include <cstdint>
#include <optional>
#include <string_view>

namespace fencing {

enum class TokenParse {
  kOk,
  kMissing,    // no header at all
  kMalformed,  // empty, not 1-20 ASCII digits, above 2^64-1, or the header sent more than once
};

struct ParsedToken {
  TokenParse status = TokenParse::kMissing;
  uint64_t value = 0;
  const char* reason = "";  // why it is malformed, for the problem body
};

// Parses one header value: optional whitespace (SP/HTAB) around 1-20 ASCII digits, <= 2^64-1.
ParsedToken ParseTokenValue(std::string_view value);

// header_count is how many times the header appeared; anything but one value is rejected,
// because two tokens on one request leave the fence no way to choose.
ParsedToken ParseTokenHeader(size_t header_count, std::string_view first_value);

}  // namespace fencing
