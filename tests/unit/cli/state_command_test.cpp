// `fencing-proxy state show|set` against real files, one temp dir per test.

#include "cli/state_command.h"
#include "state/state_log.h"
#include "state/state_store.h"

#include <gtest/gtest.h>

#include "test_files.h"

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>
#include <vector>

namespace fencing {
namespace {

namespace fs = std::filesystem;



struct CommandResult {
  int code = -1;
  std::string out;
  std::string err;
};

CommandResult Show(const std::string& file) {
  CommandResult r;
  ::testing::internal::CaptureStdout();
  ::testing::internal::CaptureStderr();
  r.code = RunStateShow(file);
  r.err = ::testing::internal::GetCapturedStderr();
  r.out = ::testing::internal::GetCapturedStdout();
  return r;
}

CommandResult Set(const std::string& file, const std::string& fence, const std::string& token) {
  CommandResult r;
  ::testing::internal::CaptureStdout();
  ::testing::internal::CaptureStderr();
  r.code = RunStateSet(file, fence, token);
  r.err = ::testing::internal::GetCapturedStderr();
  r.out = ::testing::internal::GetCapturedStdout();
  return r;
}

class StateCommandTest : public ::testing::Test {
 protected:
  void SetUp() override {
    std::string tmpl = (fs::temp_directory_path() / "fp_state_command_test_XXXXXX").string();
    ASSERT_NE(::mkdtemp(tmpl.data()), nullptr);
    dir_ = tmpl;
    path_ = dir_ + "/fences.log";
  }
  void TearDown() override { fs::remove_all(dir_); }

  void Seed(const std::vector<FenceRecord>& records) {
    std::unique_ptr<StateStore> store;
    Status s = StateStore::Open(path_, {}, &store);
    ASSERT_TRUE(s.ok()) << s.message();
    if (!records.empty()) {
      ASSERT_TRUE(store->AppendAndSync(records).ok());
    }
  }

  FenceMaxima Reopen() {
    std::unique_ptr<StateStore> store;
    Status s = StateStore::Open(path_, {}, &store);
    EXPECT_TRUE(s.ok()) << s.message();
    return store ? store->maxima() : FenceMaxima{};
  }

  std::string dir_;
  std::string path_;
};

TEST_F(StateCommandTest, ShowPrintsSortedExactJson) {
  Seed({{"orders", 7}, {"billing", 18446744073709551615ull}, {"a-b_c", 0}, {"orders", 3}});
  CommandResult r = Show(path_);
  EXPECT_EQ(r.code, 0) << r.err;
  EXPECT_EQ(r.out, "{\"fences\":{\"a-b_c\":0,\"billing\":18446744073709551615,\"orders\":7}}\n");
  EXPECT_EQ(r.err, "");
}

TEST_F(StateCommandTest, ShowEmptyFile) {
  Seed({});
  CommandResult r = Show(path_);
  EXPECT_EQ(r.code, 0);
  EXPECT_EQ(r.out, "{\"fences\":{}}\n");
}

TEST_F(StateCommandTest, ShowMissingFileSaysSoAndCreatesNothing) {
  CommandResult r = Show(path_);
  EXPECT_EQ(r.code, 1);
  EXPECT_EQ(r.out, "");
  EXPECT_TRUE(Contains(r.err, path_ + ": state file does not exist"));
  EXPECT_FALSE(fs::exists(path_));
}

TEST_F(StateCommandTest, ShowWorksBesideARunningProxy) {
  Seed({{"a", 1}});
  std::unique_ptr<StateStore> proxy;
  ASSERT_TRUE(StateStore::Open(path_, {}, &proxy).ok());  // holds the lock
  CommandResult r = Show(path_);
  EXPECT_EQ(r.code, 0) << r.err;
  EXPECT_EQ(r.out, "{\"fences\":{\"a\":1}}\n");
}

TEST_F(StateCommandTest, ShowReportsCorruptionWithTheOffset) {
  Seed({{"first", 1}, {std::string(60, 'x'), 2}, {std::string(60, 'y'), 3}, {std::string(60, 'z'), 4}});
  std::string data = ReadBytes(path_);
  data[kHeaderSize + 8] ^= 0x10;  // inside the first record
  {
    std::ofstream out(path_, std::ios::binary | std::ios::trunc);
    out << data;
  }
  CommandResult r = Show(path_);
  EXPECT_EQ(r.code, 1);
  EXPECT_EQ(r.out, "");
  EXPECT_TRUE(Contains(r.err, path_ + ": corrupt record at byte offset 16"));
  EXPECT_EQ(ReadBytes(path_), data);
}

// A state file is created whole, so one without its whole header is damage (FORMAT.md
// "Creation"): `state show` says so and what to do, and `state set` does not make it new.
TEST_F(StateCommandTest, ShowAndSetRefuseAnEmptyOrHeaderlessFile) {
  Seed({});
  const std::string header = ReadBytes(path_);
  ASSERT_EQ(header.size(), kHeaderSize);
  for (size_t size : {size_t{0}, kHeaderSize / 2}) {
    SCOPED_TRACE(std::to_string(size) + " bytes");
    const std::string damaged = header.substr(0, size);
    {
      std::ofstream out(path_, std::ios::binary | std::ios::trunc);
      out << damaged;
    }
    CommandResult r = Show(path_);
    EXPECT_EQ(r.code, 1);
    EXPECT_EQ(r.out, "");
    EXPECT_TRUE(Contains(r.err, "fencing-proxy state show: " + path_ + ": state file is "));
    EXPECT_TRUE(Contains(r.err, "this is damage, not a new file"));
    EXPECT_TRUE(Contains(r.err, "restore it from a backup"));
    r = Set(path_, "orders", "5");
    EXPECT_EQ(r.code, 1);
    EXPECT_EQ(r.out, "");
    EXPECT_TRUE(Contains(r.err, "fencing-proxy state set: " + path_ + ": state file is "));
    EXPECT_EQ(ReadBytes(path_), damaged);
  }
}

TEST_F(StateCommandTest, ShowLeavesATornTailInPlace) {
  Seed({{"a", 1}, {"b", 2}});
  const std::string full = ReadBytes(path_);
  const std::string torn = full.substr(0, full.size() - 3);
  {
    std::ofstream out(path_, std::ios::binary | std::ios::trunc);
    out << torn;
  }
  CommandResult r = Show(path_);
  EXPECT_EQ(r.code, 0);
  EXPECT_EQ(r.out, "{\"fences\":{\"a\":1}}\n");
  EXPECT_TRUE(Contains(r.err, "torn last record"));
  EXPECT_EQ(ReadBytes(path_), torn);
}

TEST_F(StateCommandTest, SetRaisesLowersAndAddsFences) {
  Seed({{"orders", 10}, {"billing", 5}});

  CommandResult r = Set(path_, "orders", "20");
  EXPECT_EQ(r.code, 0) << r.err;
  EXPECT_EQ(r.out, "orders: 10 -> 20\n");

  r = Set(path_, "orders", "3");  // the repair path: lowering
  EXPECT_EQ(r.code, 0) << r.err;
  EXPECT_EQ(r.out, "orders: 20 -> 3\n");

  r = Set(path_, "audit", "18446744073709551615");
  EXPECT_EQ(r.code, 0) << r.err;
  EXPECT_EQ(r.out, "audit: none -> 18446744073709551615\n");

  r = Set(path_, "billing", "5");  // unchanged: said so, nothing rewritten
  EXPECT_EQ(r.code, 0) << r.err;
  EXPECT_EQ(r.out, "billing: 5 -> 5\n");

  r = Show(path_);
  EXPECT_EQ(r.code, 0);
  EXPECT_EQ(r.out, "{\"fences\":{\"audit\":18446744073709551615,\"billing\":5,\"orders\":3}}\n");
  EXPECT_FALSE(fs::exists(path_ + ".tmp"));

  // The file is a compact snapshot: header plus one record per fence.
  std::string expected = EncodeHeader();
  for (const auto& r2 : std::vector<FenceRecord>{{"audit", 18446744073709551615ull}, {"billing", 5}, {"orders", 3}}) {
    EncodeRecord(r2, &expected);
  }
  EXPECT_EQ(ReadBytes(path_), expected);

  // And a proxy starting on it sees the lowered value, and can raise from there.
  EXPECT_EQ(Reopen(), (FenceMaxima{{"audit", 18446744073709551615ull}, {"billing", 5}, {"orders", 3}}));
}

TEST_F(StateCommandTest, SetRefusedWhileAProxyHoldsTheLock) {
  Seed({{"orders", 10}});
  const std::string before = ReadBytes(path_);
  {
    std::unique_ptr<StateStore> proxy;
    ASSERT_TRUE(StateStore::Open(path_, {}, &proxy).ok());
    CommandResult r = Set(path_, "orders", "1");
    EXPECT_EQ(r.code, 1);
    EXPECT_EQ(r.out, "");
    EXPECT_TRUE(Contains(r.err, path_ + " is locked by another process"));
    EXPECT_EQ(ReadBytes(path_), before);
    EXPECT_FALSE(fs::exists(path_ + ".tmp"));
  }
  CommandResult r = Set(path_, "orders", "1");  // the proxy is gone
  EXPECT_EQ(r.code, 0) << r.err;
  EXPECT_EQ(r.out, "orders: 10 -> 1\n");
}

TEST_F(StateCommandTest, SetOnAMissingFileCreatesNothing) {
  CommandResult r = Set(path_, "orders", "1");
  EXPECT_EQ(r.code, 1);
  EXPECT_TRUE(Contains(r.err, path_ + ": state file does not exist"));
  EXPECT_FALSE(fs::exists(path_));
}

TEST_F(StateCommandTest, SetRefusesACorruptFile) {
  Seed({{"first", 1}, {std::string(60, 'x'), 2}, {std::string(60, 'y'), 3}, {std::string(60, 'z'), 4}});
  std::string data = ReadBytes(path_);
  data[kHeaderSize] ^= 0x01;
  {
    std::ofstream out(path_, std::ios::binary | std::ios::trunc);
    out << data;
  }
  CommandResult r = Set(path_, "first", "5");
  EXPECT_EQ(r.code, 1);
  EXPECT_TRUE(Contains(r.err, "corrupt record at byte offset 16"));
  EXPECT_EQ(ReadBytes(path_), data);
}

TEST_F(StateCommandTest, SetRejectsInvalidFenceNames) {
  Seed({{"a", 1}});
  const std::string before = ReadBytes(path_);
  for (const std::string& fence : std::vector<std::string>{"", "Orders", "a b", "a/b", "a.b", "é",
                                                           std::string(65, 'a')}) {
    SCOPED_TRACE(fence);
    CommandResult r = Set(path_, fence, "5");
    EXPECT_EQ(r.code, 2);
    EXPECT_EQ(r.out, "");
    EXPECT_TRUE(Contains(r.err, "invalid fence name \"" + fence + "\""));
  }
  EXPECT_EQ(ReadBytes(path_), before);
  CommandResult r = Set(path_, std::string(64, 'a'), "5");
  EXPECT_EQ(r.code, 0) << r.err;
}

TEST_F(StateCommandTest, SetRejectsInvalidTokens) {
  Seed({{"a", 1}});
  const std::string before = ReadBytes(path_);
  for (const std::string& token : std::vector<std::string>{
           "", "-1", "+1", " 1", "1 ", "1.0", "0x10", "1e3", "abc", "18446744073709551616",
           "99999999999999999999", "000000000000000000001", "١"}) {
    SCOPED_TRACE(token);
    CommandResult r = Set(path_, "a", token);
    EXPECT_EQ(r.code, 2);
    EXPECT_EQ(r.out, "");
    EXPECT_TRUE(Contains(r.err, "invalid token \"" + token + "\""));
  }
  EXPECT_EQ(ReadBytes(path_), before);

  struct Good {
    std::string text;
    std::string printed;
  };
  for (const Good& g : std::vector<Good>{{"18446744073709551615", "18446744073709551615"},
                                         {"00000000000000000042", "42"},
                                         {"0", "0"}}) {
    CommandResult r = Set(path_, "a", g.text);
    EXPECT_EQ(r.code, 0) << r.err;
    EXPECT_TRUE(Contains(r.out, "-> " + g.printed + "\n"));
  }
}

}  // namespace
}  // namespace fencing

namespace fencing {
namespace {

CommandResult ShowWith(const std::string& file, const StateShowOptions& options) {
  CommandResult r;
  ::testing::internal::CaptureStdout();
  ::testing::internal::CaptureStderr();
  r.code = RunStateShow(file, options);
  r.err = ::testing::internal::GetCapturedStderr();
  r.out = ::testing::internal::GetCapturedStdout();
  return r;
}

CommandResult SetKey(const std::string& file, const std::string& fence, const std::string& token,
                     const std::string& key) {
  CommandResult r;
  ::testing::internal::CaptureStdout();
  ::testing::internal::CaptureStderr();
  r.code = RunStateSet(file, fence, token, key);
  r.err = ::testing::internal::GetCapturedStderr();
  r.out = ::testing::internal::GetCapturedStdout();
  return r;
}

StateShowOptions Opts(std::string fence, std::string key, bool keys) {
  StateShowOptions o;
  o.fence = std::move(fence);
  o.key = std::move(key);
  o.keys = keys;
  return o;
}

FenceRecord Key(std::string fence, std::string key, uint64_t token) {
  return FenceRecord{std::move(fence), token, std::move(key)};
}

class StateKeysCommandTest : public StateCommandTest {
 protected:
  void SeedKeys() {
    Seed({{"orders", 7},
          {"objects", 5},
          Key("objects", "b", 90),
          Key("objects", "a", 100),
          Key("objects", "low", 1),  // below the floor: still known
          Key("tenants", "t1", 3)});  // a fence with keys only: floor 0
  }
};

TEST_F(StateKeysCommandTest, ShowAddsKeyCountsAndFloorsForKeyedFences) {
  SeedKeys();
  CommandResult r = Show(path_);
  EXPECT_EQ(r.code, 0) << r.err;
  EXPECT_EQ(r.out,
            "{\"fences\":{\"objects\":5,\"orders\":7,\"tenants\":0},"
            "\"keys\":{\"objects\":{\"count\":3,\"floor\":5},\"tenants\":{\"count\":1,\"floor\":0}}}\n");
}

TEST_F(StateKeysCommandTest, ShowOneFenceItsKeysAndOneKey) {
  SeedKeys();
  CommandResult r = ShowWith(path_, Opts("objects", "", false));
  EXPECT_EQ(r.code, 0) << r.err;
  EXPECT_EQ(r.out, "{\"fence\":\"objects\",\"floor\":5,\"key_count\":3}\n");

  r = ShowWith(path_, Opts("orders", "", false));
  EXPECT_EQ(r.code, 0) << r.err;
  EXPECT_EQ(r.out, "{\"fence\":\"orders\",\"max\":7,\"key_count\":0}\n");

  r = ShowWith(path_, Opts("objects", "", true));
  EXPECT_EQ(r.code, 0) << r.err;
  EXPECT_EQ(r.out, "{\"fence\":\"objects\",\"floor\":5,\"key_count\":3,\"keys\":{\"a\":100,\"b\":90,\"low\":1}}\n");

  r = ShowWith(path_, Opts("objects", "a", false));
  EXPECT_EQ(r.code, 0) << r.err;
  EXPECT_EQ(r.out, "{\"fence\":\"objects\",\"key\":\"a\",\"max\":100}\n");

  r = ShowWith(path_, Opts("objects", "low", false));
  EXPECT_EQ(r.code, 0) << r.err;
  EXPECT_EQ(r.out, "{\"fence\":\"objects\",\"key\":\"low\",\"max\":1}\n");
}

TEST_F(StateKeysCommandTest, ShowAnUnknownKeyGivesTheFloorAndExitsOne) {
  SeedKeys();
  CommandResult r = ShowWith(path_, Opts("objects", "zz", false));
  EXPECT_EQ(r.code, 1);
  EXPECT_EQ(r.out, "{\"fence\":\"objects\",\"key\":\"zz\",\"known\":false,\"floor\":5}\n");
  EXPECT_TRUE(Contains(r.err, "key \"zz\" of fence \"objects\" is unknown: it starts at the fence's floor, 5"));
  r = ShowWith(path_, Opts("orders", "k", false));  // an unkeyed fence knows no key
  EXPECT_EQ(r.code, 1);
  EXPECT_TRUE(Contains(r.out, "\"known\":false,\"floor\":7"));
}

TEST_F(StateKeysCommandTest, ShowRefusesBadArgumentsWithTheRule) {
  SeedKeys();
  CommandResult r = ShowWith(path_, Opts("nope", "", false));
  EXPECT_EQ(r.code, 1);
  EXPECT_EQ(r.err, "fencing-proxy state show: fence \"nope\" is not in " + path_ + "\n");
  r = ShowWith(path_, Opts("objects", "a/b", false));
  EXPECT_EQ(r.code, 2);
  EXPECT_EQ(r.out, "");
  EXPECT_EQ(r.err,
            "fencing-proxy state show: invalid fence key \"a/b\": use 1 to 128 characters of A-Z, a-z, 0-9, '-', "
            "'.', '_' and '~'\n");
  r = ShowWith(path_, Opts("objects", std::string(129, 'k'), false));
  EXPECT_EQ(r.code, 2);
  r = ShowWith(path_, Opts("", "a", false));
  EXPECT_EQ(r.code, 2);
  EXPECT_TRUE(Contains(r.err, "--key and --keys need --fence NAME"));
  r = ShowWith(path_, Opts("objects", "a", true));
  EXPECT_EQ(r.code, 2);
  EXPECT_TRUE(Contains(r.err, "not both"));
}

TEST_F(StateKeysCommandTest, SetOneKeyRaisesLowersAndAddsIt) {
  SeedKeys();
  CommandResult r = SetKey(path_, "objects", "50", "a");  // lowering: the repair path
  EXPECT_EQ(r.code, 0) << r.err;
  EXPECT_EQ(r.out, "objects key a: 100 -> 50\n");
  r = SetKey(path_, "objects", "8", "new");
  EXPECT_EQ(r.code, 0) << r.err;
  EXPECT_EQ(r.out, "objects key new: none (floor 5) -> 8\n");
  r = SetKey(path_, "orders", "2", "k");  // the first key of a fence
  EXPECT_EQ(r.code, 0) << r.err;
  EXPECT_EQ(r.out, "orders key k: none (floor 7) -> 2\n");
  r = SetKey(path_, "fresh", "4", "k");  // a new fence, through its key
  EXPECT_EQ(r.code, 0) << r.err;
  EXPECT_EQ(r.out, "fresh key k: none (floor 0) -> 4\n");

  std::unique_ptr<StateStore> store;
  ASSERT_TRUE(StateStore::Open(path_, {}, &store).ok());
  EXPECT_EQ(store->maxima(), (FenceMaxima{{"fresh", 0}, {"objects", 5}, {"orders", 7}, {"tenants", 0}}));
  const FenceKeyMaxima& keys = store->key_maxima();
  EXPECT_EQ(keys.at("objects").at("a"), 50u);
  EXPECT_EQ(keys.at("objects").at("b"), 90u);  // the others untouched
  EXPECT_EQ(keys.at("objects").at("low"), 1u);
  EXPECT_EQ(keys.at("objects").at("new"), 8u);
  EXPECT_EQ(keys.at("orders").at("k"), 2u);
  EXPECT_EQ(keys.at("fresh").at("k"), 4u);
  EXPECT_FALSE(fs::exists(path_ + ".tmp"));
}

TEST_F(StateKeysCommandTest, SetWithoutAKeyOnAKeyedFenceSetsItsFloor) {
  SeedKeys();
  CommandResult r = Set(path_, "objects", "2");
  EXPECT_EQ(r.code, 0) << r.err;
  EXPECT_EQ(r.out, "objects floor: 5 -> 2\n");
  r = ShowWith(path_, Opts("objects", "", true));
  EXPECT_EQ(r.out, "{\"fence\":\"objects\",\"floor\":2,\"key_count\":3,\"keys\":{\"a\":100,\"b\":90,\"low\":1}}\n");
}

TEST_F(StateKeysCommandTest, SetAKeyIsRefusedWhileAProxyHoldsTheLockAndRejectsBadKeys) {
  SeedKeys();
  const std::string before = ReadBytes(path_);
  {
    std::unique_ptr<StateStore> proxy;
    ASSERT_TRUE(StateStore::Open(path_, {}, &proxy).ok());
    CommandResult r = SetKey(path_, "objects", "1", "a");
    EXPECT_EQ(r.code, 1);
    EXPECT_EQ(r.out, "");
    EXPECT_TRUE(Contains(r.err, path_ + " is locked by another process"));
  }
  CommandResult r = SetKey(path_, "objects", "1", "a b");
  EXPECT_EQ(r.code, 2);
  EXPECT_EQ(r.err,
            "fencing-proxy state set: invalid fence key \"a b\": use 1 to 128 characters of A-Z, a-z, 0-9, '-', "
            "'.', '_' and '~'\n");
  r = SetKey(path_, "objects", "x1", "a");
  EXPECT_EQ(r.code, 2);
  EXPECT_TRUE(Contains(r.err, "invalid token \"x1\""));
  EXPECT_EQ(ReadBytes(path_), before);
}

}  // namespace
}  // namespace fencing
