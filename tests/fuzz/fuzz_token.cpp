// Differential fuzzing of the token parser: ParseTokenValue against an independent reading of
// the same rule (trim SP/HTAB, then 1-20 ASCII digits whose value fits in 64 bits, decided by
// std::from_chars). Any disagreement is a bug in one of them and aborts.

#include "fence/token.h"
#include "fuzz_check.h"

#include <charconv>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <optional>
#include <string_view>

namespace {

using namespace fencing;

std::optional<uint64_t> Reference(std::string_view value) {
  const size_t first = value.find_first_not_of(" \t");
  if (first == std::string_view::npos) return std::nullopt;
  const std::string_view digits = value.substr(first, value.find_last_not_of(" \t") - first + 1);
  if (digits.size() > 20) return std::nullopt;
  for (char c : digits) {
    if (c < '0' || c > '9') return std::nullopt;  // from_chars alone would stop at the first non-digit
  }
  uint64_t out = 0;
  const auto [end, ec] = std::from_chars(digits.data(), digits.data() + digits.size(), out);
  if (ec != std::errc() || end != digits.data() + digits.size()) return std::nullopt;  // overflow
  return out;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string_view input = fuzz::AsView(data, size);
  const ParsedToken got = ParseTokenValue(input);
  const std::optional<uint64_t> want = Reference(input);

  if (want) {
    FUZZ_CHECK(got.status == TokenParse::kOk, "the reference accepts a token the parser refuses");
    FUZZ_CHECK(got.value == *want, "the parser and the reference read different values");
  } else {
    FUZZ_CHECK(got.status == TokenParse::kMalformed, "the parser accepts a token the reference refuses");
    FUZZ_CHECK(got.reason != nullptr && std::strlen(got.reason) > 0, "a refusal without a reason");
  }

  // The header-level rule: absent is missing, repeated is malformed whatever the values,
  // exactly once is the value's own verdict.
  const ParsedToken none = ParseTokenHeader(0, input);
  FUZZ_CHECK(none.status == TokenParse::kMissing, "no header must read as missing");
  const ParsedToken twice = ParseTokenHeader(2 + size % 3, input);
  FUZZ_CHECK(twice.status == TokenParse::kMalformed, "a repeated header must be malformed");
  const ParsedToken once = ParseTokenHeader(1, input);
  FUZZ_CHECK(once.status == got.status && once.value == got.value, "one header must read as its value");
  return 0;
}
