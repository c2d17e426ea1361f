// Fence key extraction: the Nth segment after a keyed route's prefix, or one header field, taken
// as written. A missing key and a malformed one are told apart (two problem types), and nothing
// that is not a valid fence key is ever given as one.

#include <gtest/gtest.h>

#include <ostream>
#include <string>
#include <string_view>

#include "config/config.h"
#include "http/rules.h"
#include "routing/fence_key.h"
#include "test_heads.h"

namespace fencing {
namespace {

struct PathCase {
  unsigned segment;
  std::string_view prefix;
  bool case_insensitive;
  std::string_view path;
  FenceKeyStatus status;
  std::string_view key;  // kOk
};

void PrintTo(const PathCase& c, std::ostream* os) { *os << c.prefix << " " << c.segment << " " << c.path; }

class PathSegmentKeyTest : public testing::TestWithParam<PathCase> {};

TEST_P(PathSegmentKeyTest, TakesTheNthSegmentAfterThePrefix) {
  const PathCase& c = GetParam();
  const FenceKeyResult r = PathSegmentKey(c.segment, c.prefix, c.case_insensitive, c.path);
  EXPECT_EQ(r.status, c.status) << c.path << ": " << r.reason;
  if (c.status == FenceKeyStatus::kOk) {
    EXPECT_EQ(r.key, c.key);
    // A view into the path, not a copy: the backend gets these very bytes.
    EXPECT_GE(r.key.data(), c.path.data());
    EXPECT_LE(r.key.data() + r.key.size(), c.path.data() + c.path.size());
  } else {
    EXPECT_TRUE(r.key.empty());
    EXPECT_STRNE(r.reason, "");
  }
}

constexpr FenceKeyStatus kOk = FenceKeyStatus::kOk;
constexpr FenceKeyStatus kMissing = FenceKeyStatus::kMissing;
constexpr FenceKeyStatus kMalformed = FenceKeyStatus::kMalformed;

INSTANTIATE_TEST_SUITE_P(
    Table, PathSegmentKeyTest,
    testing::Values(
        PathCase{1, "/objects", false, "/objects/k1/part", kOk, "k1"},
        PathCase{1, "/objects", false, "/objects/k1", kOk, "k1"},
        PathCase{1, "/objects", false, "/objects/k1/", kOk, "k1"},
        PathCase{2, "/objects", false, "/objects/k1/part", kOk, "part"},
        PathCase{2, "/objects", false, "/objects/k1/part/more", kOk, "part"},
        PathCase{1, "/objects", false, "/objects/A.b_c~D-9", kOk, "A.b_c~D-9"},
        PathCase{1, "/", false, "/tenant-7/orders", kOk, "tenant-7"},
        PathCase{2, "/", false, "/tenant-7/orders", kOk, "orders"},
        PathCase{1, "/api/v1", false, "/api/v1/x/y", kOk, "x"},
        // Case-insensitive routes: the prefix in any case, the key in lower case only.
        PathCase{1, "/Objects", true, "/OBJECTS/k1", kOk, "k1"},
        PathCase{1, "/objects", true, "/objects/K1", kMalformed, ""},
        PathCase{1, "/objects", false, "/objects/K1", kOk, "K1"},
        // Too few segments.
        PathCase{1, "/objects", false, "/objects", kMissing, ""},
        PathCase{1, "/objects", false, "/objects/", kMissing, ""},
        PathCase{2, "/objects", false, "/objects/k1", kMissing, ""},
        PathCase{2, "/objects", false, "/objects/k1/", kMissing, ""},
        PathCase{1, "/", false, "/", kMissing, ""},
        PathCase{3, "/", false, "/a/b", kMissing, ""},
        // Not under the prefix at all (a caller's mistake): never a key from elsewhere.
        PathCase{1, "/objects", false, "/other/k1", kMissing, ""},
        PathCase{1, "/objects", false, "/objectsX/k1", kMissing, ""},
        PathCase{0, "/objects", false, "/objects/k1", kMissing, ""},
        // Malformed: as written, never decoded.
        PathCase{1, "/objects", false, "/objects/k%31", kMalformed, ""},
        PathCase{1, "/objects", false, "/objects/a%20b", kMalformed, ""},
        PathCase{1, "/objects", false, "/objects/k1;v=2/part", kMalformed, ""},
        PathCase{1, "/objects", false, "/objects/k1;", kMalformed, ""},
        PathCase{1, "/objects", false, "/objects/a:b", kMalformed, ""},
        PathCase{1, "/objects", false, "/objects/a+b", kMalformed, ""},
        PathCase{1, "/objects", false, "/objects/caf\xc3\xa9", kMalformed, ""},
        PathCase{2, "/objects", false, "/objects/ok/a@b", kMalformed, ""}));

TEST(PathSegmentKeyTest, KeysUpTo128Bytes) {
  const std::string ok = "/objects/" + std::string(kMaxFenceKeyLength, 'k') + "/x";
  const FenceKeyResult r = PathSegmentKey(1, "/objects", false, ok);
  ASSERT_EQ(r.status, FenceKeyStatus::kOk) << r.reason;
  EXPECT_EQ(r.key.size(), kMaxFenceKeyLength);
  const std::string too_long = "/objects/" + std::string(kMaxFenceKeyLength + 1, 'k');
  EXPECT_EQ(PathSegmentKey(1, "/objects", false, too_long).status, FenceKeyStatus::kMalformed);
}

TEST(PathSegmentKeyTest, ReasonsSayWhatIsWrong) {
  EXPECT_NE(std::string(PathSegmentKey(1, "/o", false, "/o/k%31").reason).find("percent"), std::string::npos);
  EXPECT_NE(std::string(PathSegmentKey(1, "/o", false, "/o/k;x").reason).find("';'"), std::string::npos);
  EXPECT_NE(std::string(PathSegmentKey(1, "/o", true, "/o/K").reason).find("path_case_insensitive"),
            std::string::npos);
  EXPECT_NE(std::string(PathSegmentKey(1, "/o", false, "/o/" + std::string(200, 'k')).reason).find("128"),
            std::string::npos);
}

TEST(HeaderKeyTest, OneFieldOwsTrimmed) {
  EXPECT_EQ(HeaderKey(1, "tenant-1").key, "tenant-1");
  EXPECT_EQ(HeaderKey(1, " \ttenant-1\t ").key, "tenant-1");
  EXPECT_EQ(HeaderKey(1, " \ttenant-1\t ").status, FenceKeyStatus::kOk);
  EXPECT_EQ(HeaderKey(0, "").status, FenceKeyStatus::kMissing);
  EXPECT_EQ(HeaderKey(2, "tenant-1").status, FenceKeyStatus::kMalformed);
  EXPECT_EQ(HeaderKey(1, "").status, FenceKeyStatus::kMalformed);
  EXPECT_EQ(HeaderKey(1, "  ").status, FenceKeyStatus::kMalformed);
  EXPECT_EQ(HeaderKey(1, "a,b").status, FenceKeyStatus::kMalformed);
  EXPECT_EQ(HeaderKey(1, "a b").status, FenceKeyStatus::kMalformed);
  EXPECT_EQ(HeaderKey(1, "k%31").status, FenceKeyStatus::kMalformed);
  // Upper case is fine in a header: only a path can be folded by the backend.
  EXPECT_EQ(HeaderKey(1, "Tenant").status, FenceKeyStatus::kOk);
}

TEST(ExtractFenceKeyTest, ReadsTheSpecsSource) {
  FenceKeySpec by_path{.source = FenceKeySpec::Source::kPathSegment, .path_segment = 1, .header = ""};
  FenceKeySpec by_header{.source = FenceKeySpec::Source::kHeader, .path_segment = 0, .header = "X-Fencing-Key"};
  FenceKeySpec none;
  auto head = Request(11, {{"x-fencing-KEY", " tenant-9 "}, {"Host", "h"}});
  head.target("/objects/k1/part");

  FenceKeyResult r = ExtractFenceKey({&by_path, "/objects", false}, "/objects/k1/part", head);
  EXPECT_EQ(r.status, FenceKeyStatus::kOk);
  EXPECT_EQ(r.key, "k1");

  r = ExtractFenceKey({&by_header, "/objects", false}, "/objects/k1/part", head);
  EXPECT_EQ(r.status, FenceKeyStatus::kOk);
  EXPECT_EQ(r.key, "tenant-9");

  EXPECT_EQ(ExtractFenceKey({&none, "/objects", false}, "/objects/k1", head).status, FenceKeyStatus::kMissing);

  auto twice = Request(11, {{"X-Fencing-Key", "a"}, {"X-Fencing-Key", "a"}});
  EXPECT_EQ(ExtractFenceKey({&by_header, "/objects", false}, "/objects/k1", twice).status, FenceKeyStatus::kMalformed);
  auto without = Request(11, {{"X-Fencing-Keys", "a"}});
  EXPECT_EQ(ExtractFenceKey({&by_header, "/objects", false}, "/objects/k1", without).status, FenceKeyStatus::kMissing);
}

}  // namespace
}  // namespace fencing
