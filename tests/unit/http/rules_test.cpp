// The small shared rules (http/rules.h, http/ascii.h, http/fields.h) that the route file, the
// state file, `state set`, the fences and the request path all apply: decimal numbers, RFC 9110
// tokens, route and fence names, ASCII case, the hop-by-hop list.

#include <gtest/gtest.h>

#include <cstdint>
#include <limits>
#include <optional>
#include <string>
#include <string_view>

#include "http/ascii.h"
#include "http/fields.h"
#include "http/rules.h"

namespace fencing {
namespace {

constexpr uint64_t kU64Max = std::numeric_limits<uint64_t>::max();

std::optional<uint64_t> Decimal(std::string_view text) {
  uint64_t value = 12345;  // untouched on failure
  if (!ParseDecimalU64(text, &value)) {
    EXPECT_EQ(value, 12345u) << "'" << text << "': a failed parse must not write its output";
    return std::nullopt;
  }
  return value;
}

TEST(DecimalTest, ParsesAllOfTheTextUpTo2To64Minus1) {
  EXPECT_EQ(Decimal("0"), 0u);
  EXPECT_EQ(Decimal("7"), 7u);
  EXPECT_EQ(Decimal("007"), 7u) << "leading zeros are allowed";
  EXPECT_EQ(Decimal("18446744073709551615"), kU64Max);
  EXPECT_EQ(Decimal("000000000000000000000018446744073709551615"), kU64Max) << "length alone is no limit";
  const std::string_view bad_inputs[] = {"", "18446744073709551616", "99999999999999999999", "184467440737095516150",
                                         "-1", "+1", " 1", "1 ", "1,000", "0x10", "1e3", "1.5", "\xd9\xa1",
                                         std::string_view("1\0", 2)};
  for (std::string_view bad : bad_inputs) {
    EXPECT_EQ(Decimal(bad), std::nullopt) << "'" << bad << "'";
  }
}

TEST(DecimalTest, IsDecimalDigitsIsTheCharacterRuleAlone) {
  EXPECT_TRUE(IsDecimalDigits("0123456789"));
  EXPECT_TRUE(IsDecimalDigits("99999999999999999999999")) << "no range check here";
  EXPECT_FALSE(IsDecimalDigits(""));
  EXPECT_FALSE(IsDecimalDigits("12a"));
  EXPECT_FALSE(IsDecimalDigits(" 12"));
  EXPECT_EQ(kMaxU64Digits, std::to_string(kU64Max).size());
}

TEST(TokenCharsTest, RFC9110Tchar) {
  for (char c : std::string_view("!#$%&'*+-.^_`|~09azAZ")) EXPECT_TRUE(IsTokenChar(c)) << c;
  for (char c : std::string_view("\"(),/:;<=>?@[\\]{} \t\x7f\x01")) EXPECT_FALSE(IsTokenChar(c)) << int(c);
  EXPECT_FALSE(IsTokenChar('\0'));
  EXPECT_FALSE(IsTokenChar(static_cast<char>(0xc3)));
  EXPECT_TRUE(IsToken("X-Fencing-Token"));
  EXPECT_TRUE(IsToken("M-SEARCH"));
  EXPECT_FALSE(IsToken(""));
  EXPECT_FALSE(IsToken("X Token"));
  EXPECT_FALSE(IsToken("X-Token:"));
}

TEST(TokenCharsTest, TheByteTableSaysWhatTheFunctionsSay) {
  for (int c = 0; c < 256; ++c) {
    EXPECT_EQ(IsTokenByte(static_cast<unsigned char>(c)), IsTokenChar(static_cast<char>(c))) << c;
    EXPECT_EQ(IsValueByte(static_cast<unsigned char>(c)), IsFieldValueChar(static_cast<char>(c))) << c;
  }
}

// FindNonFieldValueChar reads eight bytes at a time: every byte value, at every offset of texts
// from 0 to 19 bytes (a word's every lane and the tail), against the byte rule.
TEST(FieldValueTest, FindNonFieldValueCharFindsTheFirstRefusedByteAtEveryOffset) {
  for (size_t size = 0; size < 20; ++size) {
    for (size_t at = 0; at < size; ++at) {
      for (int c = 0; c < 256; ++c) {
        std::string text(size, 'a');
        text[at] = static_cast<char>(c);
        const size_t expected = IsFieldValueChar(static_cast<char>(c)) ? size : at;
        ASSERT_EQ(FindNonFieldValueChar(text), expected) << "size " << size << " byte " << c << " at " << at;
      }
    }
    EXPECT_EQ(FindNonFieldValueChar(std::string(size, '\xff')), size) << "obs-text passes";
  }
  EXPECT_EQ(FindNonFieldValueChar("a\tb c\td\te\r\nf"), 9u) << "tabs pass, the CR does not";
  EXPECT_EQ(FindNonFieldValueChar("abcdefg\t\x7fh"), 8u);
}

TEST(TrimOwsTest, RemovesSpacesAndTabsAtBothEndsOnly) {
  EXPECT_EQ(TrimOws(" \t7 \t"), "7");
  EXPECT_EQ(TrimOws("5 1"), "5 1");
  EXPECT_EQ(TrimOws(" \t "), "");
  EXPECT_EQ(TrimOws("\v7"), "\v7") << "only SP and HTAB are OWS";
}

TEST(NameTest, LowerCaseDigitsUnderscoreAndDashUpTo64) {
  EXPECT_TRUE(IsValidName("orders"));
  EXPECT_TRUE(IsValidName("a-b_c-09"));
  EXPECT_TRUE(IsValidName(std::string(kMaxNameLength, 'a')));
  EXPECT_EQ(kMaxNameLength, 64u);
  for (std::string bad : {std::string(), std::string(kMaxNameLength + 1, 'a'), std::string("Orders"),
                          std::string("a b"), std::string("a/b"), std::string("a.b"), std::string("(none)"),
                          std::string("a\0b", 3), std::string("caf\xc3\xa9")}) {
    EXPECT_FALSE(IsValidName(bad)) << "'" << bad << "'";
  }
}

TEST(AsciiTest, CaseFoldingTouchesAToZOnly) {
  EXPECT_TRUE(EqualsIgnoreCase("X-Fencing-TOKEN", "x-fencing-token"));
  EXPECT_TRUE(EqualsIgnoreCase("put", "PUT"));
  EXPECT_FALSE(EqualsIgnoreCase("PUT", "PUTS"));
  EXPECT_FALSE(EqualsIgnoreCase("a", "b"));
  EXPECT_FALSE(EqualsIgnoreCase("[", "{")) << "'[' is not the upper case of '{'";
  EXPECT_FALSE(EqualsIgnoreCase("\xc3\xa9", "\xc3\x89")) << "no Unicode folding";
  EXPECT_EQ(ToAsciiLower("/Orders/ABC-\xc3\x89"), "/orders/abc-\xc3\x89");
  EXPECT_EQ(AsciiUpper('a'), 'A');
  EXPECT_EQ(AsciiUpper('{'), '{');
  EXPECT_TRUE(StartsWithIgnoreCase("HTTP://h/x", "http://"));
  EXPECT_FALSE(StartsWithIgnoreCase("http:/", "http://"));
  EXPECT_TRUE(IsAsciiDigit('0') && IsAsciiDigit('9') && !IsAsciiDigit('a') && !IsAsciiDigit('/'));
}

TEST(HopByHopTest, TheRFC9110ListByEnumAndByName) {
  for (std::string_view name : {"Connection", "keep-alive", "PROXY-CONNECTION", "TE", "Trailer", "Transfer-Encoding",
                                "upgrade"}) {
    EXPECT_TRUE(IsHopByHopName(name)) << name;
  }
  for (std::string_view name : {"Host", "Content-Length", "X-Fencing-Token", "Trailers", "X-Connection", ""}) {
    EXPECT_FALSE(IsHopByHopName(name)) << name;
  }
  EXPECT_TRUE(IsHopByHop(boost::beast::http::field::te));
  EXPECT_FALSE(IsHopByHop(boost::beast::http::field::unknown));
}

TEST(RulesTest, FenceKeysAreUnreservedCharactersAndNeverPercentEncoded) {
  EXPECT_TRUE(IsValidFenceKey("tenant-42"));
  EXPECT_TRUE(IsValidFenceKey("A.b_c~D-9"));
  EXPECT_TRUE(IsValidFenceKey(std::string(kMaxFenceKeyLength, 'k')));
  EXPECT_FALSE(IsValidFenceKey(""));
  EXPECT_FALSE(IsValidFenceKey(std::string(kMaxFenceKeyLength + 1, 'k')));
  for (std::string_view bad : {"a%2fb", "a/b", "a b", "a;b", "a:b", "caf\xc3\xa9", "a\tb", "a+b", "a@b"}) {
    EXPECT_FALSE(IsValidFenceKey(bad)) << bad;
  }
}

// One rule for route prefixes, the route file's ZooKeeper locks and each lock the ZooKeeper
// client is asked about (a fence key such as ".." can make a template's path invalid).
TEST(RulesTest, ZnodePathsAreAbsoluteWithPlainSegmentsBelowTheRoot) {
  for (const char* ok : {"/locks", "/locks/objects/k-1.a_b~", "/zookeeper-locks/x"}) {
    EXPECT_EQ(ZnodePathProblem(ok), "") << ok;
  }
  const std::pair<std::string, std::string_view> bad[] = {
      {"", "start with '/'"},
      {"locks/x", "start with '/'"},
      {"/", "below the root"},
      {"/locks/", "end with '/'"},
      {"/locks//x", "empty segments"},
      {"/locks/./x", "'.' or '..'"},
      {"/locks/..", "'.' or '..'"},
      {std::string("/locks/a\0b", 10), "control characters"},
      {"/zookeeper", "/zookeeper"},
      {"/zookeeper/quota", "/zookeeper"},
  };
  for (const auto& [path, why] : bad) {
    const std::string problem = ZnodePathProblem(path);
    EXPECT_NE(problem.find(why), std::string::npos) << "'" << path << "': " << problem;
  }
  EXPECT_EQ(PathSegmentsProblem("/"), "") << "the root alone has no segment to refuse";
  EXPECT_EQ(PathSegmentsProblem("/a/b.c/..d"), "");
  EXPECT_NE(PathSegmentsProblem("/a/../b"), "");
}

// An identity goes into a header field whose values are comma-separated: visible ASCII only,
// no comma; what a route's writers admit is an exact match or a prefix before a final '*'.
TEST(RulesTest, IdentitiesAndTheWritersThatAdmitThem) {
  EXPECT_TRUE(IsValidIdentity("spiffe://cluster.local/ns/shop/sa/order-writer"));
  EXPECT_TRUE(IsValidIdentity("dns:batch.shop.svc"));
  EXPECT_TRUE(IsValidIdentity(std::string(kMaxIdentityLength, 'i')));
  for (std::string_view bad : {"", "a,b", "a b", "a\tb", "a\r\nX-Evil: 1", "caf\xc3\xa9", "a\x7f"}) {
    EXPECT_FALSE(IsValidIdentity(bad)) << bad;
  }
  EXPECT_FALSE(IsValidIdentity(std::string(kMaxIdentityLength + 1, 'i')));

  EXPECT_TRUE(WriterAdmits("spiffe://td/w", "spiffe://td/w"));
  EXPECT_FALSE(WriterAdmits("spiffe://td/w", "spiffe://td/w2"));
  EXPECT_FALSE(WriterAdmits("spiffe://td/w", "spiffe://td/"));
  EXPECT_FALSE(WriterAdmits("spiffe://td/w", "SPIFFE://td/w")) << "URIs as written: bytes, not folded";
  EXPECT_TRUE(WriterAdmits("spiffe://td/ns/shop/*", "spiffe://td/ns/shop/sa/w"));
  EXPECT_TRUE(WriterAdmits("spiffe://td/ns/shop/*", "spiffe://td/ns/shop/"));
  EXPECT_FALSE(WriterAdmits("spiffe://td/ns/shop/*", "spiffe://td/ns/shopping/sa/w"));
  EXPECT_FALSE(WriterAdmits("spiffe://td/ns/shop/*", "spiffe://td/ns/shop"));
  EXPECT_TRUE(WriterAdmits("*", "dns:anything"));
  EXPECT_FALSE(WriterAdmits("dns:a.svc", "spiffe://a.svc"));
  EXPECT_FALSE(WriterAdmits("*", "")) << "no identity is never admitted, not even by '*'";
}

}  // namespace
}  // namespace fencing
