// The shared fence store's keys and values (store/layout.h): pure rules, as tables.

#include "store/layout.h"

#include <gtest/gtest.h>

#include <cstdint>
#include <string>
#include <tuple>
#include <vector>

namespace fencing::store {
namespace {


TEST(LayoutRules, TokenTextIsTwentyDigitsAndParsesBack) {
  const std::vector<std::pair<uint64_t, std::string>> cases = {
      {0, "00000000000000000000"},
      {7, "00000000000000000007"},
      {1234567890, "00000000001234567890"},
      {UINT64_MAX, "18446744073709551615"},
  };
  for (const auto& [token, text] : cases) {
    EXPECT_EQ(TokenText(token), text);
    uint64_t parsed = 1;
    ASSERT_TRUE(ParseToken(text, &parsed)) << text;
    EXPECT_EQ(parsed, token);
  }
}

TEST(LayoutRules, BytewiseOrderOfTheTextIsNumericOrder) {
  // etcd compares values as bytes: a txn's "value < T" must mean the number.
  const std::vector<std::pair<uint64_t, uint64_t>> lower_higher = {
      {0, 1}, {9, 10}, {99, 100}, {123456789, 1234567890}, {UINT64_MAX - 1, UINT64_MAX}, {2, 10000000000000000000u}};
  for (const auto& [lower, higher] : lower_higher) {
    EXPECT_LT(TokenText(lower), TokenText(higher)) << lower << " < " << higher;
  }
}

TEST(LayoutRules, ParseTokenRefusesAnythingButTwentyDigitsUpToUint64Max) {
  for (const char* bad : {"18446744073709551616",    // UINT64_MAX + 1
                          "99999999999999999999",    // far above
                          "0000000000000000007",     // 19 digits
                          "000000000000000000007",   // 21
                          "", "7",
                          "0000000000000000000a", "+0000000000000000007", " 0000000000000000007",
                          "0000000000000000007 ", "-0000000000000000007"}) {
    uint64_t token = 42;
    EXPECT_FALSE(ParseToken(bad, &token)) << '"' << bad << '"';
    EXPECT_EQ(token, 42u) << "a refused text leaves the token alone: " << bad;
  }
}

TEST(LayoutRules, MemberIdIsSixteenLowerCaseHexDigits) {
  EXPECT_EQ(MemberId(1), "0000000000000001");
  EXPECT_EQ(MemberId(0x694d7a3c1f2b00ef), "694d7a3c1f2b00ef");
  EXPECT_EQ(MemberId(INT64_MAX), "7fffffffffffffff");
}

TEST(LayoutRules, ParseTokenAndReadsATokenAndOneWord) {
  uint64_t token = 0;
  std::string word;
  ASSERT_TRUE(ParseTokenAnd("00000000000000000007 694d7a3c1f2b00ef", &token, &word));
  EXPECT_EQ(token, 7u);
  EXPECT_EQ(word, "694d7a3c1f2b00ef");
  ASSERT_TRUE(ParseTokenAnd("18446744073709551615 12345", &token, &word));
  EXPECT_EQ(token, UINT64_MAX);
  EXPECT_EQ(word, "12345");
  for (const char* bad : {"00000000000000000007", "00000000000000000007 ", "00000000000000000007x694d",
                          "00000000000000000007  694d", "00000000000000000007 a b", "7 694d",
                          "18446744073709551616 694d", "0000000000000000000x 694d", ""}) {
    EXPECT_FALSE(ParseTokenAnd(bad, &token, &word)) << '"' << bad << '"';
  }
}

TEST(LayoutRules, SplitTargetIsAFenceOrAFenceAndOneKey) {
  const std::vector<std::tuple<std::string, std::string, std::string>> good = {
      {"orders", "orders", ""}, {"tenants/k1", "tenants", "k1"}, {"t/A-z.0_~", "t", "A-z.0_~"}};
  for (const auto& [target, fence, key] : good) {
    std::string f = "x", k = "x";
    ASSERT_TRUE(SplitTarget(target, &f, &k)) << target;
    EXPECT_EQ(f, fence);
    EXPECT_EQ(k, key);
  }
  for (const char* bad : {"", "/k1", "tenants/", "tenants/a/b", "/", "a//b"}) {
    std::string f, k;
    EXPECT_FALSE(SplitTarget(bad, &f, &k)) << '"' << bad << '"';
  }
}

TEST(LayoutRules, PendingValuesAreARaiserOrWithdrawn) {
  PendingValue raise{7, "694d7a3c1f2b00ef", false};
  EXPECT_EQ(PendingText(raise), "00000000000000000007 694d7a3c1f2b00ef");
  PendingValue back;
  ASSERT_TRUE(ParsePending(PendingText(raise), &back));
  EXPECT_EQ(back, raise);
  PendingValue given_up{9, "", true};
  EXPECT_EQ(PendingText(given_up), "00000000000000000009 withdrawn");
  ASSERT_TRUE(ParsePending("00000000000000000009 withdrawn", &back));
  EXPECT_TRUE(back.withdrawn);
  EXPECT_EQ(back.token, 9u);
  EXPECT_TRUE(back.member.empty());
  for (const char* bad : {"", "9 m", "00000000000000000009", "00000000000000000009 ", "00000000000000000009 a b"}) {
    EXPECT_FALSE(ParsePending(bad, &back)) << '"' << bad << '"';
  }
}

TEST(LayoutRules, AckValuesAreATokenAndARevision) {
  EXPECT_EQ(AckText(12, 345), "00000000000000000012 345");
  uint64_t token = 0;
  int64_t revision = 0;
  ASSERT_TRUE(ParseAck("00000000000000000012 345", &token, &revision));
  EXPECT_EQ(token, 12u);
  EXPECT_EQ(revision, 345);
  for (const char* bad : {"00000000000000000012 x", "00000000000000000012 -1", "00000000000000000012 9223372036854775808",
                          "12 345"}) {
    EXPECT_FALSE(ParseAck(bad, &token, &revision)) << '"' << bad << '"';
  }
}

TEST(LayoutRules, ClassifyNamesEveryKeyOfThePrefixAndNothingElse) {
  Layout layout("/fp/orders");
  using Kind = Layout::Key::Kind;
  struct Row {
    std::string key;
    Kind kind;
    std::string member, target, fence, k;
  };
  const std::vector<Row> rows = {
      {"/fp/orders/members/00000000000000aa", Kind::kMember, "00000000000000aa", "", "", ""},
      {"/fp/orders/roster/00000000000000aa", Kind::kRoster, "00000000000000aa", "", "", ""},
      {"/fp/orders/max/orders", Kind::kMax, "", "orders", "orders", ""},
      {"/fp/orders/max/objects/k1", Kind::kMax, "", "objects/k1", "objects", "k1"},
      {"/fp/orders/pending/objects/k1", Kind::kPending, "", "objects/k1", "objects", "k1"},
      {"/fp/orders/ack/00000000000000aa/objects/k1", Kind::kAck, "00000000000000aa", "objects/k1", "objects", "k1"},
      {"/fp/orders/probe/00000000000000aa", Kind::kProbe, "00000000000000aa", "", "", ""},
      {"/fp/orders/max/a/b/c", Kind::kOther, "", "", "", ""},
      {"/fp/orders/ack/00000000000000aa", Kind::kOther, "", "", "", ""},
      {"/fp/orders/members/", Kind::kOther, "", "", "", ""},
      {"/fp/orders/members/a/b", Kind::kOther, "", "", "", ""},
      {"/fp/orders/other", Kind::kOther, "", "", "", ""},
      {"/fp/ordersX/max/orders", Kind::kOther, "", "", "", ""},
  };
  for (const Row& row : rows) {
    Layout::Key key = layout.Classify(row.key);
    EXPECT_EQ(key.kind, row.kind) << row.key;
    if (key.kind == Kind::kOther) continue;
    EXPECT_EQ(key.member, row.member) << row.key;
    EXPECT_EQ(key.target, row.target) << row.key;
    EXPECT_EQ(key.fence, row.fence) << row.key;
    EXPECT_EQ(key.key, row.k) << row.key;
  }
  EXPECT_EQ(layout.Ack("m", "objects/k1"), "/fp/orders/ack/m/objects/k1");
  EXPECT_EQ(layout.Classify(layout.Pending("t")).kind, Kind::kPending);
}

}  // namespace
}  // namespace fencing::store
