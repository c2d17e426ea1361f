// The state log: format, replay, recovery by byte surgery (LevelDB log_test style), locking,
// terminal failures, and the group-committing writer thread. Real files, one temp dir per test.

#include "state/state_log.h"
#include "state/state_store.h"
#include "state/state_writer.h"

#include <gtest/gtest.h>

#include "test_files.h"

#include <atomic>
#include <condition_variable>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <limits>
#include <mutex>
#include <sstream>
#include <thread>
#include <vector>

#include <fcntl.h>
#include <unistd.h>

namespace fencing {

// Declared a friend by StateStore: lets tests swap the file descriptor to inject I/O failures.
class StateStoreTestPeer {
 public:
  static int Fd(StateStore& store) { return store.fd_; }
};

namespace {

namespace fs = std::filesystem;


constexpr uint64_t kU64Max = std::numeric_limits<uint64_t>::max();



std::string Encode(const std::vector<FenceRecord>& records) {
  std::string out;
  for (const auto& r : records) EncodeRecord(r, &out);
  return out;
}

void PutU16(std::string* out, uint16_t v) {
  out->push_back(static_cast<char>(v & 0xff));
  out->push_back(static_cast<char>(v >> 8));
}

void PutU32(std::string* out, uint32_t v) {
  for (int i = 0; i < 4; ++i) out->push_back(static_cast<char>((v >> (8 * i)) & 0xff));
}

// A record with a correct CRC around whatever type and payload the test wants.
std::string RawRecord(uint8_t type, const std::string& payload) {
  std::string covered(1, static_cast<char>(type));
  covered += payload;
  std::string out;
  PutU32(&out, MaskCrc(Crc32c(covered)));
  PutU16(&out, static_cast<uint16_t>(payload.size()));
  out += covered;
  return out;
}

std::string SetMaxPayload(uint64_t token, uint8_t name_size, const std::string& name) {
  std::string p;
  for (int i = 0; i < 8; ++i) p.push_back(static_cast<char>((token >> (8 * i)) & 0xff));
  p.push_back(static_cast<char>(name_size));
  p += name;
  return p;
}

std::string KeyPayload(uint64_t token, uint8_t name_size, const std::string& name, uint8_t key_size,
                       const std::string& key) {
  std::string p = SetMaxPayload(token, name_size, name);
  p.push_back(static_cast<char>(key_size));
  p += key;
  return p;
}

class StateTest : public ::testing::Test {
 protected:
  void SetUp() override {
    std::string tmpl = (fs::temp_directory_path() / "fp_state_test_XXXXXX").string();
    ASSERT_NE(::mkdtemp(tmpl.data()), nullptr);
    dir_ = tmpl;
    path_ = dir_ + "/fences.log";
  }
  void TearDown() override { fs::remove_all(dir_); }

  Status Open(std::unique_ptr<StateStore>* store, OpenOptions options = {}) {
    return StateStore::Open(path_, options, store);
  }

  std::unique_ptr<StateStore> MustOpen(OpenOptions options = {}) {
    std::unique_ptr<StateStore> store;
    Status s = Open(&store, options);
    EXPECT_TRUE(s.ok()) << s.message();
    return store;
  }

  static OpenOptions ReadOnly() {
    OpenOptions o;
    o.create_if_missing = false;
    o.lock = false;
    o.read_only = true;
    return o;
  }

  // Writes a file made of a good header and these records; returns each record's offset.
  std::vector<size_t> WriteLog(const std::vector<FenceRecord>& records, std::string* data = nullptr) {
    std::string file = EncodeHeader();
    std::vector<size_t> offsets;
    for (const auto& r : records) {
      offsets.push_back(file.size());
      EncodeRecord(r, &file);
    }
    WriteBytes(path_, file);
    if (data != nullptr) *data = file;
    return offsets;
  }

  std::string dir_;
  std::string path_;
};

// ---------------------------------------------------------------- format

TEST(StateLogFormat, Crc32cIsCastagnoli) {
  EXPECT_EQ(Crc32c("123456789"), 0xE3069283u);  // the standard CRC-32C check value
  EXPECT_EQ(Crc32c(""), 0u);
}

TEST(StateLogFormat, MaskRoundTripsAndChangesTheValue) {
  for (uint32_t crc : {0u, 1u, 0xE3069283u, 0xFFFFFFFFu, 0x80000000u}) {
    EXPECT_EQ(UnmaskCrc(MaskCrc(crc)), crc);
    EXPECT_NE(MaskCrc(crc), crc);
  }
}

TEST(StateLogFormat, HeaderLayout) {
  const std::string header = EncodeHeader();
  ASSERT_EQ(header.size(), kHeaderSize);
  EXPECT_EQ(header.substr(0, 8), "FENCELOG");
  EXPECT_EQ(header.substr(8, 4), std::string("\x02\x00\x00\x00", 4));  // version 2
  std::string crc;
  PutU32(&crc, MaskCrc(Crc32c(header.substr(0, 12))));
  EXPECT_EQ(header.substr(12, 4), crc);
}

TEST(StateLogFormat, SetMaxRecordLayout) {
  std::string out;
  EncodeRecord(FenceRecord{"ab", 0x0102030405060708ull}, &out);
  ASSERT_EQ(out.size(), kRecordHeaderSize + 8 + 1 + 2);
  EXPECT_EQ(out.substr(4, 2), std::string("\x0b\x00", 2));  // payload length 11, LE
  EXPECT_EQ(out[6], '\x01');                                   // SET_MAX
  EXPECT_EQ(out.substr(7, 8), std::string("\x08\x07\x06\x05\x04\x03\x02\x01", 8));
  EXPECT_EQ(out[15], '\x02');
  EXPECT_EQ(out.substr(16), "ab");
  EXPECT_EQ(out, RawRecord(1, SetMaxPayload(0x0102030405060708ull, 2, "ab")));
}

TEST(StateLogFormat, LongestNameAndKeyMakeTheMaximalRecord) {
  std::string out;
  EncodeRecord(FenceRecord{std::string(kMaxFenceNameSize, 'z'), kU64Max}, &out);
  EXPECT_EQ(out.size(), 80u);  // the longest SET_MAX, version 1's bound
  out.clear();
  EncodeRecord(FenceRecord{std::string(kMaxFenceNameSize, 'z'), kU64Max, std::string(kMaxKeySize, '~')}, &out);
  EXPECT_EQ(out.size(), kMaxRecordSize);
  EXPECT_EQ(kMaxRecordSize, 209u);
  out.clear();
  EncodeRecord(FenceRecord{std::string(kMaxFenceNameSize, 'z'), kU64Max, std::string(kMaxKeySize, '~'),
                           FenceRecord::Kind::kForgetKey},
               &out);
  EXPECT_EQ(out.size(), kMaxRecordSize);
}

TEST(StateLogFormat, FenceNames) {
  EXPECT_TRUE(IsValidFenceName("orders"));
  EXPECT_TRUE(IsValidFenceName("a-b_c-09"));
  EXPECT_TRUE(IsValidFenceName(std::string(64, 'a')));
  EXPECT_FALSE(IsValidFenceName(""));
  EXPECT_FALSE(IsValidFenceName(std::string(65, 'a')));
  EXPECT_FALSE(IsValidFenceName("Orders"));
  EXPECT_FALSE(IsValidFenceName("a b"));
  EXPECT_FALSE(IsValidFenceName("a/b"));
  EXPECT_FALSE(IsValidFenceName("a.b"));
  EXPECT_FALSE(IsValidFenceName(std::string("a\0b", 3)));
}

// ---------------------------------------------------------------- create and round trip

TEST_F(StateTest, NewFileHasOnlyTheHeader) {
  auto store = MustOpen();
  ASSERT_TRUE(store);
  EXPECT_TRUE(store->maxima().empty());
  EXPECT_EQ(store->torn_tail_bytes(), 0u);
  EXPECT_EQ(store->path(), path_);
  EXPECT_EQ(ReadBytes(path_), EncodeHeader());
  store.reset();
  // A second open reads it back as an empty, valid log.
  store = MustOpen();
  EXPECT_TRUE(store->maxima().empty());
  EXPECT_EQ(ReadBytes(path_), EncodeHeader());
}

TEST_F(StateTest, MissingFileWithoutCreateIsAnError) {
  std::unique_ptr<StateStore> store;
  OpenOptions options;
  options.create_if_missing = false;
  Status s = Open(&store, options);
  ASSERT_FALSE(s.ok());
  EXPECT_TRUE(Contains(s.message(), path_));
  EXPECT_TRUE(Contains(s.message(), "does not exist"));
  EXPECT_FALSE(store);
  EXPECT_FALSE(fs::exists(path_));
  EXPECT_FALSE(Open(&store, ReadOnly()).ok());
  EXPECT_FALSE(fs::exists(path_));
}

TEST_F(StateTest, MissingDirectoryIsNamed) {
  const std::string missing = dir_ + "/nope";
  std::unique_ptr<StateStore> store;
  Status s = StateStore::Open(missing + "/fences.log", {}, &store);
  ASSERT_FALSE(s.ok());
  EXPECT_TRUE(Contains(s.message(), "directory " + missing + " does not exist"));
  EXPECT_FALSE(fs::exists(missing));
}

TEST_F(StateTest, RoundTrip) {
  {
    auto store = MustOpen();
    ASSERT_TRUE(store->AppendAndSync({{"orders", 5}, {"billing", 7}}).ok());
    ASSERT_TRUE(store->AppendAndSync({{"orders", 6}}).ok());
    EXPECT_EQ(store->maxima(), (FenceMaxima{{"billing", 7}, {"orders", 6}}));
    EXPECT_EQ(store->sync_count(), 2u);
  }
  auto store = MustOpen();
  EXPECT_EQ(store->maxima(), (FenceMaxima{{"billing", 7}, {"orders", 6}}));
  EXPECT_EQ(store->torn_tail_bytes(), 0u);
  // Appending after a reopen continues the same log.
  ASSERT_TRUE(store->AppendAndSync({{"audit", 1}}).ok());
  store.reset();
  store = MustOpen();
  EXPECT_EQ(store->maxima(), (FenceMaxima{{"audit", 1}, {"billing", 7}, {"orders", 6}}));
}

TEST_F(StateTest, ALowerRecordDoesNotLowerTheMaximum) {
  {
    auto store = MustOpen();
    ASSERT_TRUE(store->AppendAndSync({{"a", 10}}).ok());
    ASSERT_TRUE(store->AppendAndSync({{"a", 3}}).ok());
    EXPECT_EQ(store->maxima().at("a"), 10u);
    ASSERT_TRUE(store->AppendAndSync({{"a", 4}, {"a", 12}, {"a", 11}}).ok());
    EXPECT_EQ(store->maxima().at("a"), 12u);
  }
  EXPECT_EQ(MustOpen()->maxima().at("a"), 12u);
}

TEST_F(StateTest, ManyFences) {
  FenceMaxima expected;
  {
    auto store = MustOpen();
    std::vector<FenceRecord> batch;
    for (int i = 0; i < 500; ++i) {
      const std::string name = "fence-" + std::to_string(i);
      const uint64_t token = 1000 + static_cast<uint64_t>(i) * 7;
      expected[name] = token;
      if (i % 2 == 0) {
        batch.push_back({name, token});
      } else {
        ASSERT_TRUE(store->AppendAndSync({{name, token}}).ok());
      }
    }
    ASSERT_TRUE(store->AppendAndSync(batch).ok());
    EXPECT_EQ(store->maxima(), expected);
  }
  EXPECT_EQ(MustOpen()->maxima(), expected);
}

TEST_F(StateTest, TokensSpanTheWholeU64Range) {
  const std::string longest(kMaxFenceNameSize, 'x');
  {
    auto store = MustOpen();
    ASSERT_TRUE(store->AppendAndSync({{"top", kU64Max}, {"zero", 0}, {longest, kU64Max - 1}}).ok());
  }
  EXPECT_EQ(MustOpen()->maxima(), (FenceMaxima{{longest, kU64Max - 1}, {"top", kU64Max}, {"zero", 0}}));
}

TEST_F(StateTest, InvalidNameIsRefusedWithoutFailingTheStore) {
  auto store = MustOpen();
  for (const std::string& bad : std::vector<std::string>{"", "Upper", std::string(65, 'a'), "sl/ash"}) {
    Status s = store->AppendAndSync({{"ok", 1}, {bad, 2}});
    EXPECT_FALSE(s.ok()) << bad;
  }
  EXPECT_FALSE(store->failed());
  EXPECT_EQ(ReadBytes(path_), EncodeHeader());  // nothing of the refused batches was written
  EXPECT_TRUE(store->AppendAndSync({{"ok", 1}}).ok());
}

TEST_F(StateTest, EmptyAppendIsANoOp) {
  auto store = MustOpen();
  EXPECT_TRUE(store->AppendAndSync({}).ok());
  EXPECT_EQ(store->sync_count(), 0u);
}

// ---------------------------------------------------------------- header

// What every refusal of a damaged header tells the operator to do.
void ExpectDamagedHeaderAdvice(const std::string& message) {
  EXPECT_TRUE(Contains(message, "this is damage, not a new file"));
  EXPECT_TRUE(Contains(message, "restore it from a backup"));
  EXPECT_TRUE(Contains(message, "remove it deliberately to start every fence from 0"));
  EXPECT_TRUE(Contains(message, "loses the fences' max tokens"));
}

TEST_F(StateTest, BadMagicIsRefused) {
  std::string data;
  WriteLog({{"a", 1}}, &data);
  data[0] = 'X';
  WriteBytes(path_, data);
  std::unique_ptr<StateStore> store;
  Status s = Open(&store);
  ASSERT_FALSE(s.ok());
  EXPECT_TRUE(Contains(s.message(), path_));
  EXPECT_TRUE(Contains(s.message(), "bad magic"));
  ExpectDamagedHeaderAdvice(s.message());
  EXPECT_EQ(ReadBytes(path_), data);  // a refused file is left alone
}

TEST_F(StateTest, UnknownVersionIsRefused) {
  std::string data;
  WriteLog({{"a", 1}}, &data);
  // Version 3 with a header CRC that matches it: only the version is wrong.
  std::string header = std::string(kMagic);
  PutU32(&header, 3);
  PutU32(&header, MaskCrc(Crc32c(header)));
  data.replace(0, kHeaderSize, header);
  WriteBytes(path_, data);
  std::unique_ptr<StateStore> store;
  Status s = Open(&store);
  ASSERT_FALSE(s.ok());
  EXPECT_TRUE(Contains(s.message(), path_));
  EXPECT_TRUE(Contains(s.message(), "unsupported format version 3 (this build reads versions 1 to 2)"));
}

TEST_F(StateTest, BadHeaderCrcIsRefused) {
  for (size_t i = kHeaderCrcOffset; i < kHeaderSize; ++i) {
    std::string data;
    WriteLog({{"a", 1}}, &data);
    data[i] ^= 0x40;
    WriteBytes(path_, data);
    std::unique_ptr<StateStore> store;
    Status s = Open(&store);
    ASSERT_FALSE(s.ok()) << i;
    EXPECT_TRUE(Contains(s.message(), path_));
    EXPECT_TRUE(Contains(s.message(), "header checksum mismatch"));
    ExpectDamagedHeaderAdvice(s.message());
  }
}

// A state file is created whole under a temporary name (FORMAT.md "Creation"), so one under its
// real name without a complete header is damage: refused by the proxy's open and by a read-only
// one alike, naming the file and saying what to do, and never rewritten.
TEST_F(StateTest, EmptyFileIsRefusedNamingTheFile) {
  WriteBytes(path_, "");
  for (const OpenOptions& options : {OpenOptions{}, ReadOnly()}) {
    SCOPED_TRACE(options.read_only ? "read-only" : "writable");
    std::unique_ptr<StateStore> store;
    Status s = Open(&store, options);
    ASSERT_FALSE(s.ok());
    EXPECT_FALSE(store);
    EXPECT_TRUE(Contains(s.message(), path_ + ": state file is empty (0 bytes)"));
    ExpectDamagedHeaderAdvice(s.message());
    EXPECT_TRUE(fs::exists(path_));
    EXPECT_EQ(ReadBytes(path_), "");  // left for the operator: not given a header
  }
}

TEST_F(StateTest, HalfAHeaderIsRefusedNamingTheFile) {
  const std::string header = EncodeHeader();
  for (size_t n = 1; n < kHeaderSize; ++n) {  // every prefix, as a creation in place could leave
    WriteBytes(path_, header.substr(0, n));
    for (const OpenOptions& options : {OpenOptions{}, ReadOnly()}) {
      SCOPED_TRACE(std::to_string(n) + " bytes, " + (options.read_only ? "read-only" : "writable"));
      std::unique_ptr<StateStore> store;
      Status s = Open(&store, options);
      ASSERT_FALSE(s.ok());
      EXPECT_TRUE(Contains(s.message(), path_ + ": state file is " + std::to_string(n) +
                                            " bytes, shorter than the 16-byte header"));
      ExpectDamagedHeaderAdvice(s.message());
      EXPECT_EQ(ReadBytes(path_), header.substr(0, n));
    }
  }
}

TEST_F(StateTest, ShortFileThatIsNotAHeaderPrefixIsRefused) {
  for (const std::string& data : {std::string("FENCELOX"), std::string("hello"),
                                  EncodeHeader().substr(0, 15).replace(9, 1, "\x07")}) {
    WriteBytes(path_, data);
    std::unique_ptr<StateStore> store;
    Status s = Open(&store);
    ASSERT_FALSE(s.ok());
    EXPECT_TRUE(Contains(s.message(), path_));
    EXPECT_TRUE(Contains(s.message(), "shorter than the 16-byte header"));
    ExpectDamagedHeaderAdvice(s.message());
    EXPECT_EQ(ReadBytes(path_), data);
  }
}

// ---------------------------------------------------------------- recovery by byte surgery

TEST_F(StateTest, TruncatedAtEveryByteOfTheLastRecordIsATornTail) {
  const std::vector<FenceRecord> records = {
      {"orders", 5},
      {"billing", 9},
      {"orders", 7},
      {std::string(kMaxFenceNameSize, 'q'), kU64Max, std::string(kMaxKeySize, 'K')}};  // the maximal record
  std::string full;
  const std::vector<size_t> offsets = WriteLog(records, &full);
  const size_t last = offsets.back();
  ASSERT_EQ(full.size() - last, kMaxRecordSize);
  const FenceMaxima earlier = {{"billing", 9}, {"orders", 7}};

  for (size_t cut = last; cut < full.size(); ++cut) {
    SCOPED_TRACE("cut at " + std::to_string(cut));
    WriteBytes(path_, full.substr(0, cut));
    {
      auto store = MustOpen();
      ASSERT_TRUE(store);
      EXPECT_EQ(store->maxima(), earlier);
      EXPECT_EQ(store->torn_tail_bytes(), cut - last);
    }
    EXPECT_EQ(fs::file_size(path_), last);  // truncated to the last good boundary
    auto store = MustOpen();                // and clean from then on
    EXPECT_EQ(store->torn_tail_bytes(), 0u);
    EXPECT_EQ(store->maxima(), earlier);
  }
  // The whole file is not torn at all.
  WriteBytes(path_, full);
  auto store = MustOpen();
  EXPECT_EQ(store->torn_tail_bytes(), 0u);
  EXPECT_EQ(store->maxima().size(), 3u);
}

TEST_F(StateTest, TornOnlyRecordLeavesAnEmptyLog) {
  std::string full;
  WriteLog({{"solo", 42}}, &full);
  for (size_t cut = kHeaderSize + 1; cut < full.size(); ++cut) {
    WriteBytes(path_, full.substr(0, cut));
    auto store = MustOpen();
    ASSERT_TRUE(store);
    EXPECT_TRUE(store->maxima().empty());
    EXPECT_EQ(store->torn_tail_bytes(), cut - kHeaderSize);
    EXPECT_EQ(ReadBytes(path_), EncodeHeader());
  }
}

TEST_F(StateTest, AppendAfterTornTailRecoveryIsReadBack) {
  std::string full;
  const auto offsets = WriteLog({{"a", 1}, {"b", 2}}, &full);
  WriteBytes(path_, full.substr(0, offsets[1] + 5));
  {
    auto store = MustOpen();
    ASSERT_TRUE(store->AppendAndSync({{"c", 3}}).ok());
  }
  auto store = MustOpen();
  EXPECT_EQ(store->maxima(), (FenceMaxima{{"a", 1}, {"c", 3}}));
  EXPECT_EQ(store->torn_tail_bytes(), 0u);
}

TEST_F(StateTest, DamageBeforeValidRecordsIsCorruptionAtItsOffset) {
  // The victim is the second record; more than one maximal record of valid data follows it.
  const std::vector<FenceRecord> records = {
      {"first", 1}, {"victim-fence", 77}, {"after-one", 2}, {"after-two", 3}, {"after-three", 4},
      {"after-four", 5}, {"after-five", 6, "a-key"}, {"after-six", 7}, {"after-seven", 8}, {"after-eight", 9}};
  std::string full;
  const auto offsets = WriteLog(records, &full);
  const size_t start = offsets[1];
  const size_t end = offsets[2];
  ASSERT_GE(full.size() - end, kMaxRecordSize);

  for (size_t i = start; i < end; ++i) {
    for (uint8_t flip : {0x01, 0x80, 0xFF}) {
      SCOPED_TRACE("byte " + std::to_string(i) + " ^ " + std::to_string(flip));
      std::string damaged = full;
      damaged[i] = static_cast<char>(damaged[i] ^ flip);
      WriteBytes(path_, damaged);
      std::unique_ptr<StateStore> store;
      Status s = Open(&store);
      ASSERT_FALSE(s.ok());
      EXPECT_FALSE(store);
      EXPECT_TRUE(Contains(s.message(), path_ + ": corrupt record at byte offset " +
                                         std::to_string(start) + ": "));
      EXPECT_EQ(ReadBytes(path_), damaged);  // never "repaired" by truncation
    }
  }
}

TEST_F(StateTest, DamageInTheFirstRecordNamesOffset16) {
  std::string full;
  WriteLog({{"a", 1},
            {"bbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbb", 2},
            {"ccccccccccccccccccccc", 3},
            {"dddddddddddddddddddddddddddddddddddddddddddddddddddd", 4},
            {"eeeeeeeeeeeeeeeeeeeeeeeeeeeeeeeeeeeeeeeeeeeeeeeeeeeeeeee", 5}},
           &full);
  full[kHeaderSize + 7] ^= 0x01;
  WriteBytes(path_, full);
  std::unique_ptr<StateStore> store;
  Status s = Open(&store);
  ASSERT_FALSE(s.ok());
  EXPECT_TRUE(Contains(s.message(), "corrupt record at byte offset 16: checksum mismatch"));
}

TEST_F(StateTest, ShortGarbageAtTheEndIsATornTail) {
  std::string good;
  WriteLog({{"a", 1}, {"b", 2}}, &good);
  for (size_t n = 1; n < kMaxRecordSize; ++n) {
    for (char fill : {'\xab', '\0'}) {
      WriteBytes(path_, good + std::string(n, fill));
      auto store = MustOpen();
      ASSERT_TRUE(store) << n;
      EXPECT_EQ(store->torn_tail_bytes(), n);
      EXPECT_EQ(store->maxima(), (FenceMaxima{{"a", 1}, {"b", 2}}));
      EXPECT_EQ(ReadBytes(path_), good);
    }
  }
}

TEST_F(StateTest, LongGarbageAtTheEndIsCorruption) {
  std::string good;
  WriteLog({{"a", 1}, {"b", 2}}, &good);
  for (size_t n : {kMaxRecordSize, kMaxRecordSize + 1, size_t{4096}}) {
    for (char fill : {'\xab', '\0'}) {
      WriteBytes(path_, good + std::string(n, fill));
      std::unique_ptr<StateStore> store;
      Status s = Open(&store);
      ASSERT_FALSE(s.ok()) << n;
      EXPECT_TRUE(Contains(s.message(), "corrupt record at byte offset " + std::to_string(good.size())));
      EXPECT_EQ(fs::file_size(path_), good.size() + n);
    }
  }
}

// Records whose CRC is right but whose content is not: each check has its own reason.
TEST_F(StateTest, WellChecksummedButInvalidRecordsAreCorruption) {
  struct Case {
    std::string record;
    std::string reason;
  };
  const std::vector<Case> cases = {
      {RawRecord(4, SetMaxPayload(1, 1, "a")), "unknown record type 4"},
      {RawRecord(0, SetMaxPayload(1, 1, "a")), "unknown record type 0"},
      {RawRecord(1, SetMaxPayload(1, 1, "A")), "invalid fence name"},
      {RawRecord(1, SetMaxPayload(1, 2, "a.")), "invalid fence name"},
      {RawRecord(1, SetMaxPayload(1, 3, "ab")), "name length 3 does not match payload length 11"},
      {RawRecord(1, SetMaxPayload(1, 0, "a")), "name length 0 does not match"},
      {RawRecord(1, SetMaxPayload(1, 0, "")), "payload length 9 out of range 10..202"},
      {RawRecord(1, SetMaxPayload(1, 65, std::string(65, 'a'))), "invalid fence name"},  // 65 > 64
      {RawRecord(1, SetMaxPayload(1, 194, std::string(194, 'a'))), "payload length 203 out of range 10..202"},
      // Key records: the key rule, and both lengths against the payload's.
      {RawRecord(2, KeyPayload(1, 1, "a", 2, "k/")), "invalid fence key"},
      {RawRecord(3, KeyPayload(1, 1, "a", 3, "k%2")), "invalid fence key"},
      {RawRecord(2, KeyPayload(1, 1, "A", 1, "k")), "invalid fence name"},
      {RawRecord(2, KeyPayload(1, 1, "a", 0, "")), "invalid fence key"},  // empty
      {RawRecord(2, KeyPayload(1, 1, "a", 2, "k")), "name length 1 and key length 2 do not match payload length 12"},
      {RawRecord(3, KeyPayload(1, 9, "a", 1, "k")), "name length 9 does not fit payload length 12"},
      {RawRecord(2, KeyPayload(1, 1, "a", 129, std::string(129, 'k'))), "invalid fence key"},
  };
  const std::string tail = Encode({{std::string(60, 'x'), 1}, {std::string(60, 'y'), 2}, {std::string(60, 'z'), 3}});
  for (const Case& c : cases) {
    SCOPED_TRACE(c.reason);
    std::string file = EncodeHeader() + Encode({{"ok", 1}});
    const size_t offset = file.size();
    file += c.record + tail;
    WriteBytes(path_, file);
    std::unique_ptr<StateStore> store;
    Status s = Open(&store);
    ASSERT_FALSE(s.ok());
    EXPECT_TRUE(Contains(s.message(), "corrupt record at byte offset " + std::to_string(offset) + ": " +
                                       c.reason));
  }
}

TEST_F(StateTest, ReadOnlyOpenNeverModifiesTheFile) {
  std::string full;
  const auto offsets = WriteLog({{"a", 1}, {"b", 2}, {"c", 3}}, &full);
  const std::string torn = full.substr(0, offsets[2] + 4);
  WriteBytes(path_, torn);
  {
    auto store = MustOpen(ReadOnly());
    ASSERT_TRUE(store);
    EXPECT_EQ(store->maxima(), (FenceMaxima{{"a", 1}, {"b", 2}}));
    EXPECT_EQ(store->torn_tail_bytes(), 4u);
    EXPECT_FALSE(store->AppendAndSync({{"d", 4}}).ok());
  }
  EXPECT_EQ(ReadBytes(path_), torn);
}

// ---------------------------------------------------------------- lock

TEST_F(StateTest, SecondOpenerIsRefusedWhileTheLockIsHeld) {
  auto first = MustOpen();
  ASSERT_TRUE(first);
  std::unique_ptr<StateStore> second;
  Status s = Open(&second);
  ASSERT_FALSE(s.ok());
  EXPECT_EQ(s.message(), path_ + " is locked by another process (is another fencing-proxy running on it?)");
  EXPECT_FALSE(second);

  // Readers that do not lock are not refused.
  EXPECT_TRUE(Open(&second, ReadOnly()).ok());
  second.reset();

  first.reset();  // releases the lock
  EXPECT_TRUE(Open(&second).ok());
}

TEST_F(StateTest, ReadOnlyOpenCanTakeTheLockToo) {
  auto first = MustOpen();
  OpenOptions options = ReadOnly();
  options.lock = true;
  std::unique_ptr<StateStore> second;
  EXPECT_TRUE(Contains(Open(&second, options).message(), "is locked by another process"));
}

// ---------------------------------------------------------------- snapshot (state set, compaction)

TEST_F(StateTest, SnapshotReplacesTheLogAndCanLower) {
  {
    auto store = MustOpen();
    ASSERT_TRUE(store->AppendAndSync({{"a", 10}, {"b", 20}, {"a", 11}}).ok());
  }
  WriteBytes(path_ + ".tmp", "stale leftover from a crash");
  const FenceMaxima lowered = {{"a", 2}, {"b", 20}, {"c", kU64Max}};
  ASSERT_TRUE(WriteSnapshot(path_, lowered, nullptr).ok());
  EXPECT_FALSE(fs::exists(path_ + ".tmp"));
  EXPECT_EQ(ReadBytes(path_), EncodeHeader() + Encode({{"a", 2}, {"b", 20}, {"c", kU64Max}}));
  EXPECT_EQ(MustOpen()->maxima(), lowered);
}

TEST_F(StateTest, SnapshotCanHandBackTheLockedNewFile) {
  int fd = -1;
  ASSERT_TRUE(WriteSnapshot(path_, {{"a", 1}}, &fd).ok());
  ASSERT_GE(fd, 0);
  std::unique_ptr<StateStore> store;
  EXPECT_TRUE(Contains(Open(&store).message(), "is locked by another process"));
  ::close(fd);
  EXPECT_TRUE(Open(&store).ok());
  EXPECT_EQ(store->maxima(), (FenceMaxima{{"a", 1}}));
}

// ---------------------------------------------------------------- terminal failures

TEST_F(StateTest, FailedWriteIsTerminal) {
  auto store = MustOpen();
  ASSERT_TRUE(store->AppendAndSync({{"a", 1}}).ok());
  const int fd = StateStoreTestPeer::Fd(*store);
  const int saved = ::dup(fd);
  const int full = ::open("/dev/full", O_WRONLY | O_CLOEXEC);
  ASSERT_GE(saved, 0);
  ASSERT_GE(full, 0);
  ASSERT_EQ(::dup2(full, fd), fd);  // every write now fails with ENOSPC
  ::close(full);

  Status s = store->AppendAndSync({{"a", 2}});
  ASSERT_FALSE(s.ok());
  EXPECT_TRUE(Contains(s.message(), path_ + ": write failed"));
  EXPECT_TRUE(store->failed());
  EXPECT_EQ(store->maxima().at("a"), 1u);
  EXPECT_EQ(store->sync_count(), 1u);

  // Even with a working descriptor back, nothing more is written to this file.
  ASSERT_EQ(::dup2(saved, fd), fd);
  ::close(saved);
  const std::string before = ReadBytes(path_);
  s = store->AppendAndSync({{"a", 3}});
  EXPECT_FALSE(s.ok());
  EXPECT_TRUE(Contains(s.message(), "an earlier write or sync of the state file failed"));
  EXPECT_TRUE(store->failed());
  EXPECT_EQ(ReadBytes(path_), before);
  EXPECT_EQ(store->maxima().at("a"), 1u);
  EXPECT_EQ(store->sync_count(), 1u);
}

TEST_F(StateTest, FailedSyncIsTerminalAndNotRetried) {
  auto store = MustOpen();
  const int fd = StateStoreTestPeer::Fd(*store);
  const int saved = ::dup(fd);
  int pipe_fds[2];
  ASSERT_EQ(::pipe(pipe_fds), 0);
  ASSERT_EQ(::dup2(pipe_fds[1], fd), fd);  // write succeeds into the pipe, fdatasync fails (EINVAL)

  Status s = store->AppendAndSync({{"a", 5}});
  ASSERT_FALSE(s.ok());
  EXPECT_TRUE(Contains(s.message(), path_ + ": fdatasync failed"));
  EXPECT_TRUE(store->failed());
  EXPECT_EQ(store->maxima().count("a"), 0u);  // not durable, so not a maximum
  EXPECT_EQ(store->sync_count(), 0u);

  // No second write reaches the descriptor either.
  s = store->AppendAndSync({{"a", 6}});
  EXPECT_FALSE(s.ok());
  ::close(pipe_fds[1]);
  ASSERT_EQ(::dup2(saved, fd), fd);
  ::close(saved);
  std::string piped;
  char buf[512];
  for (ssize_t n; (n = ::read(pipe_fds[0], buf, sizeof buf)) > 0;) piped.append(buf, static_cast<size_t>(n));
  ::close(pipe_fds[0]);
  EXPECT_EQ(piped, Encode({{"a", 5}}));  // exactly the first batch, once
}

// ---------------------------------------------------------------- writer thread

// Blocks the writer thread in a callback until the test opens it: makes batching deterministic.
class Gate {
 public:
  void Wait() {
    std::unique_lock<std::mutex> lock(mu_);
    entered_ = true;
    cv_.notify_all();
    cv_.wait(lock, [this] { return open_; });
  }
  void WaitUntilEntered() {
    std::unique_lock<std::mutex> lock(mu_);
    cv_.wait(lock, [this] { return entered_; });
  }
  void Open() {
    std::lock_guard<std::mutex> lock(mu_);
    open_ = true;
    cv_.notify_all();
  }

 private:
  std::mutex mu_;
  std::condition_variable cv_;
  bool entered_ = false;
  bool open_ = false;
};

TEST_F(StateTest, WriterGroupCommitsConcurrentSubmits) {
  constexpr int kThreads = 8;
  constexpr int kPerThread = 50;
  constexpr int kTotal = kThreads * kPerThread;
  std::vector<std::atomic<int>> calls(kTotal + 1);
  std::vector<std::atomic<int>> oks(kTotal + 1);
  FenceMaxima expected;
  uint64_t syncs = 0;
  {
    auto store = MustOpen();
    std::atomic<int> observed{0};
    {
      Gate gate;
      StateWriter writer(*store, [&](double seconds) {
        EXPECT_GE(seconds, 0.0);
        ++observed;
      });
      // Submission 0 holds the writer thread in its callback while everything else queues.
      writer.Submit("warmup", 1, [&](bool ok) {
        ++calls[kTotal];
        if (ok) ++oks[kTotal];
        gate.Wait();
      });
      gate.WaitUntilEntered();

      std::vector<std::thread> threads;
      for (int t = 0; t < kThreads; ++t) {
        threads.emplace_back([&, t] {
          for (int i = 0; i < kPerThread; ++i) {
            const int id = t * kPerThread + i;
            writer.Submit("fence-" + std::to_string(t % 3), 100 + static_cast<uint64_t>(id), [&, id](bool ok) {
              ++calls[id];
              if (ok) ++oks[id];
            });
          }
        });
      }
      for (auto& th : threads) th.join();
      gate.Open();
    }  // the destructor completes everything queued
    for (int id = 0; id <= kTotal; ++id) {
      EXPECT_EQ(calls[id].load(), 1) << id;
      EXPECT_EQ(oks[id].load(), 1) << id;
    }
    syncs = store->sync_count();
    EXPECT_EQ(observed.load(), static_cast<int>(syncs));
    EXPECT_EQ(syncs, 2u);  // the warm-up, then everything that queued behind it
    for (int t = 0; t < kThreads; ++t) {
      const uint64_t top = 100 + static_cast<uint64_t>(t * kPerThread + kPerThread - 1);
      uint64_t& max = expected["fence-" + std::to_string(t % 3)];
      max = std::max(max, top);
    }
    expected["warmup"] = 1;
    EXPECT_EQ(store->maxima(), expected);
  }
  EXPECT_LT(syncs, static_cast<uint64_t>(kTotal));
  EXPECT_EQ(MustOpen()->maxima(), expected);
}

TEST_F(StateTest, WriterFreeRunningCompletesEverySubmitOnce) {
  constexpr int kThreads = 6;
  constexpr int kPerThread = 200;
  std::vector<std::atomic<int>> calls(kThreads * kPerThread);
  std::atomic<int> failures{0};
  {
    auto store = MustOpen();
    {
      StateWriter writer(*store, nullptr);
      std::vector<std::thread> threads;
      for (int t = 0; t < kThreads; ++t) {
        threads.emplace_back([&, t] {
          for (int i = 0; i < kPerThread; ++i) {
            const int id = t * kPerThread + i;
            writer.Submit("f" + std::to_string(t), static_cast<uint64_t>(i + 1), [&, id](bool ok) {
              ++calls[id];
              if (!ok) ++failures;
            });
          }
        });
      }
      for (auto& th : threads) th.join();
    }
    EXPECT_LE(store->sync_count(), static_cast<uint64_t>(kThreads * kPerThread));
    EXPECT_GE(store->sync_count(), 1u);
  }
  for (auto& c : calls) EXPECT_EQ(c.load(), 1);
  EXPECT_EQ(failures.load(), 0);
  FenceMaxima expected;
  for (int t = 0; t < kThreads; ++t) expected["f" + std::to_string(t)] = kPerThread;
  EXPECT_EQ(MustOpen()->maxima(), expected);
}

TEST_F(StateTest, WriterCompletesInSubmissionOrder) {
  auto store = MustOpen();
  std::vector<int> order;  // only touched on the writer thread, read after it is joined
  {
    Gate gate;
    StateWriter writer(*store, nullptr);
    writer.Submit("a", 1, [&](bool) {
      order.push_back(0);
      gate.Wait();
    });
    gate.WaitUntilEntered();
    for (int i = 1; i <= 20; ++i) {
      writer.Submit(i % 2 ? "b" : "c", static_cast<uint64_t>(100 - i), [&order, i](bool) { order.push_back(i); });
    }
    gate.Open();
  }
  std::vector<int> expected(21);
  for (int i = 0; i <= 20; ++i) expected[i] = i;
  EXPECT_EQ(order, expected);
  // One record per fence per batch, its highest token.
  EXPECT_EQ(store->maxima(), (FenceMaxima{{"a", 1}, {"b", 99}, {"c", 98}}));
  EXPECT_EQ(ReadBytes(path_), EncodeHeader() + Encode({{"a", 1}, {"b", 99}, {"c", 98}}));
}

TEST_F(StateTest, WriterFailureFailsQueuedAndLaterSubmitsWithoutTouchingTheDisk) {
  auto store = MustOpen();
  ASSERT_TRUE(store->AppendAndSync({{"a", 1}}).ok());
  const int fd = StateStoreTestPeer::Fd(*store);
  const int saved = ::dup(fd);
  const int full = ::open("/dev/full", O_WRONLY | O_CLOEXEC);
  ASSERT_EQ(::dup2(full, fd), fd);
  ::close(full);

  std::vector<std::pair<int, bool>> done;  // writer thread only until joined
  std::mutex done_mu;
  auto record = [&](int id) {
    return [&, id](bool ok) {
      std::lock_guard<std::mutex> lock(done_mu);
      done.emplace_back(id, ok);
    };
  };
  const std::string before = ReadBytes(path_);
  {
    Gate gate;
    int observed = 0;
    StateWriter writer(*store, [&](double) {
      if (observed++ == 0) gate.Wait();  // hold the failed batch; queue more behind it
    });
    EXPECT_FALSE(writer.failed());
    writer.Submit("a", 2, record(0));
    gate.WaitUntilEntered();
    // Restore a working descriptor: if anything were written from now on, the file would show it.
    ASSERT_EQ(::dup2(saved, fd), fd);
    writer.Submit("a", 3, record(1));
    writer.Submit("b", 4, record(2));
    gate.Open();
    // Later submits are answered without the disk too.
    std::mutex mu;
    std::condition_variable cv;
    bool later_done = false;
    bool later_ok = true;
    writer.Submit("c", 5, [&](bool ok) {
      std::lock_guard<std::mutex> lock(mu);
      later_done = true;
      later_ok = ok;
      cv.notify_all();
    });
    {
      std::unique_lock<std::mutex> lock(mu);
      cv.wait(lock, [&] { return later_done; });
    }
    EXPECT_FALSE(later_ok);
    EXPECT_TRUE(writer.failed());
    EXPECT_EQ(observed, 1);  // only the failed attempt touched the disk
  }
  ::close(saved);
  EXPECT_EQ(done, (std::vector<std::pair<int, bool>>{{0, false}, {1, false}, {2, false}}));
  EXPECT_EQ(ReadBytes(path_), before);
  EXPECT_EQ(store->sync_count(), 1u);
  EXPECT_EQ(store->maxima(), (FenceMaxima{{"a", 1}}));
}

TEST_F(StateTest, WriterOnAFailedStoreStartsFailed) {
  auto store = MustOpen();
  const int fd = StateStoreTestPeer::Fd(*store);
  const int full = ::open("/dev/full", O_WRONLY | O_CLOEXEC);
  ASSERT_EQ(::dup2(full, fd), fd);
  ::close(full);
  ASSERT_FALSE(store->AppendAndSync({{"a", 1}}).ok());
  std::atomic<int> answers{0};
  {
    StateWriter writer(*store, nullptr);
    EXPECT_TRUE(writer.failed());
    writer.Submit("a", 2, [&](bool ok) {
      EXPECT_FALSE(ok);
      ++answers;
    });
  }
  EXPECT_EQ(answers.load(), 1);
}

TEST_F(StateTest, WriterAcceptsSubmitsFromItsOwnCallbacks) {
  auto store = MustOpen();
  std::atomic<int> answered{0};
  {
    StateWriter writer(*store, nullptr);
    writer.Submit("a", 1, [&](bool ok) {
      EXPECT_TRUE(ok);
      ++answered;
      writer.Submit("a", 2, [&](bool ok2) {
        EXPECT_TRUE(ok2);
        ++answered;
      });
    });
  }  // the destructor waits for the chained submit too
  EXPECT_EQ(answered.load(), 2);
  EXPECT_EQ(store->maxima().at("a"), 2u);
}

}  // namespace
}  // namespace fencing
