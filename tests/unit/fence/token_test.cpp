// Token header parsing: exactly 1-20 ASCII digits (optionally padded with SP/HTAB), at most
// 2^64-1, sent exactly once. Anything else is a 400, never a guess at what the client meant.

#include <gtest/gtest.h>

#include <cstdint>
#include <limits>
#include <string>
#include <string_view>

#include "fence/token.h"

namespace fencing {
namespace {

struct ValidCase {
  std::string_view input;
  uint64_t value;
};

class ValidTokenTest : public testing::TestWithParam<ValidCase> {};

TEST_P(ValidTokenTest, ParsesToTheExactValue) {
  const ValidCase& c = GetParam();
  ParsedToken t = ParseTokenValue(c.input);
  EXPECT_EQ(t.status, TokenParse::kOk) << "reason: " << t.reason;
  EXPECT_EQ(t.value, c.value);
  EXPECT_STREQ(t.reason, "");
}

INSTANTIATE_TEST_SUITE_P(
    Table, ValidTokenTest,
    testing::Values(ValidCase{"0", 0}, ValidCase{"7", 7}, ValidCase{" 42 ", 42}, ValidCase{"\t5\t", 5},
                    ValidCase{" \t 9 \t ", 9},
                    // The largest token a lock service can hand out must survive unchanged.
                    ValidCase{"18446744073709551615", std::numeric_limits<uint64_t>::max()},
                    ValidCase{"18446744073709551610", std::numeric_limits<uint64_t>::max() - 5},
                    // 20 digits is the limit counted on digits, so leading zeros still fit.
                    ValidCase{"00000000000000000001", 1}, ValidCase{"00000000000000000000", 0},
                    ValidCase{"0000000000000000007", 7}, ValidCase{"10", 10}));

class MalformedTokenTest : public testing::TestWithParam<std::string> {};

TEST_P(MalformedTokenTest, IsMalformedWithAReason) {
  ParsedToken t = ParseTokenValue(GetParam());
  EXPECT_EQ(t.status, TokenParse::kMalformed) << "parsed as " << t.value;
  EXPECT_EQ(t.value, 0u);
  EXPECT_STRNE(t.reason, "") << "a rejection must say why, for the problem body";
}

INSTANTIATE_TEST_SUITE_P(
    Table, MalformedTokenTest,
    testing::Values(std::string(""), std::string("   "), std::string("\t"), std::string("abc"),
                    std::string("-1"), std::string("+1"), std::string("1.0"), std::string("0x10"),
                    std::string("1e3"), std::string("1,2"), std::string("1 2"), std::string("1\t2"),
                    std::string("\xef\xbc\x91"),      // full-width digit one: not ASCII
                    std::string("1\xef\xbc\x91"),     // ASCII digit followed by a full-width one
                    std::string("18446744073709551616"),  // 2^64: one past the maximum
                    std::string("18446744073709551620"),  // overflow in the last digit
                    std::string("20000000000000000000"),  // overflow before the last digit
                    std::string("99999999999999999999"),
                    std::string("000000000000000000001"),  // 21 digits, even though the value is 1
                    std::string("1\r"), std::string("1\n"), std::string("\v1"),  // only SP/HTAB are OWS
                    std::string("1\0", 2), std::string("\"1\"")));

TEST(ParseTokenHeaderTest, NoHeaderIsMissingNotMalformed) {
  // Missing is its own outcome: the route decides (428 or allow), not the parser.
  ParsedToken t = ParseTokenHeader(0, "");
  EXPECT_EQ(t.status, TokenParse::kMissing);
  EXPECT_EQ(ParseTokenHeader(0, "5").status, TokenParse::kMissing);
}

TEST(ParseTokenHeaderTest, OneHeaderIsParsed) {
  ParsedToken t = ParseTokenHeader(1, " 17 ");
  EXPECT_EQ(t.status, TokenParse::kOk);
  EXPECT_EQ(t.value, 17u);
  EXPECT_EQ(ParseTokenHeader(1, "").status, TokenParse::kMalformed);
  EXPECT_EQ(ParseTokenHeader(1, "x").status, TokenParse::kMalformed);
}

TEST(ParseTokenHeaderTest, TwoHeadersAreMalformedEvenIfEqual) {
  // Two token fields leave the fence no way to choose; equal values are no exception.
  for (size_t count : {size_t{2}, size_t{3}, size_t{100}}) {
    ParsedToken t = ParseTokenHeader(count, "5");
    EXPECT_EQ(t.status, TokenParse::kMalformed) << count;
    EXPECT_STRNE(t.reason, "");
  }
}

// Every value that fits is parsed exactly: a sweep over powers of ten and their neighbours.
TEST(ParseTokenValueTest, RoundTripsPowersOfTenAndNeighbours) {
  uint64_t p = 1;
  for (int i = 0; i < 20; ++i, p *= 10) {
    for (uint64_t v : {p - 1, p, p + 1}) {
      ParsedToken t = ParseTokenValue(std::to_string(v));
      ASSERT_EQ(t.status, TokenParse::kOk) << v;
      EXPECT_EQ(t.value, v);
    }
    if (i == 19) break;  // 10^20 does not fit
  }
}

}  // namespace
}  // namespace fencing
