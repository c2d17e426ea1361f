// Compaction of the state log: when it runs, what it writes, a crash between any two of its
// file-system calls, failures before and after the rename, the lock across the rename, and the
// size bound under a long run of raises.

#include "state_fault_file_ops.h"

#include "state/state_log.h"
#include "state/state_store.h"
#include "state/state_writer.h"

#include <gtest/gtest.h>

#include "test_files.h"

#include <algorithm>
#include <atomic>
#include <filesystem>
#include <fstream>
#include <future>
#include <limits>
#include <mutex>
#include <optional>
#include <sstream>
#include <thread>
#include <vector>

#include <fcntl.h>
#include <sys/file.h>
#include <unistd.h>

namespace fencing {
namespace {

namespace fs = std::filesystem;

constexpr uint64_t kNever = std::numeric_limits<uint64_t>::max();
constexpr CompactionPolicy kManualOnly{.min_file_bytes = kNever, .snapshot_ratio = 1};
constexpr CompactionPolicy kSmall{.min_file_bytes = 300, .snapshot_ratio = 2};




std::string Snapshot(const FenceMaxima& maxima) {
  std::string out = EncodeHeader();
  for (const auto& [fence, token] : maxima) EncodeRecord(FenceRecord{fence, token}, &out);
  return out;
}

bool SubmitAndWait(StateWriter& writer, const std::string& fence, uint64_t token) {
  std::promise<bool> answered;
  std::future<bool> ok = answered.get_future();
  writer.Submit(fence, token, [&answered](bool result) { answered.set_value(result); });
  return ok.get();
}

// The calls one compaction makes, in order; the crash tests below name their steps by it.
// Inline (Compact()), so nothing is appended meanwhile and the hand-over's copy is skipped.
const std::vector<FileOp> kCompactionCalls = {
    FileOp::kPread,          // B1: the log's prefix, replayed
    FileOp::kUnlink,         // a stale FILE.tmp
    FileOp::kOpen,           // FILE.tmp, O_CREAT|O_EXCL
    FileOp::kFlock,          // locked before it has the real name
    FileOp::kWrite,          // header + one record per fence
    FileOp::kFdatasync,      // the snapshot is durable
    FileOp::kRename,         // FILE.tmp -> FILE
    FileOp::kSyncDirectory,  // the rename is durable
    FileOp::kClose,          // the old log (and its inode's lock)
};
constexpr size_t kBeforeTmpSync = 6;  // 1-based call numbers within kCompactionCalls
constexpr size_t kBeforeRename = 7;
constexpr size_t kBeforeDirSync = 8;
constexpr size_t kBeforeClose = 9;

class StateCompactionTest : public ::testing::Test {
 protected:
  void SetUp() override {
    std::string tmpl = (fs::temp_directory_path() / "fp_state_compaction_test_XXXXXX").string();
    ASSERT_NE(::mkdtemp(tmpl.data()), nullptr);
    dir_ = tmpl;
    path_ = dir_ + "/fences.log";
    tmp_ = path_ + ".tmp";
  }
  void TearDown() override { fs::remove_all(dir_); }

  void ClearDir() {
    for (const auto& entry : fs::directory_iterator(dir_)) fs::remove_all(entry.path());
  }

  Status Open(std::unique_ptr<StateStore>* store, FileOps* ops = nullptr, CompactionPolicy policy = {}) {
    OpenOptions options;
    options.file_ops = ops;
    options.compaction = policy;
    return StateStore::Open(path_, options, store);
  }

  // What a restart on the real file system recovers ({} if it cannot open).
  FenceMaxima Reopen() {
    std::unique_ptr<StateStore> store = MustOpen();
    return store ? store->maxima() : FenceMaxima{};
  }

  // Each caller asserts the result: a null store must not crash the whole binary.
  std::unique_ptr<StateStore> MustOpen(FileOps* ops = nullptr, CompactionPolicy policy = {}) {
    std::unique_ptr<StateStore> store;
    Status s = Open(&store, ops, policy);
    EXPECT_TRUE(s.ok()) << s.message();
    return store;
  }

  // Appends raises round-robin over `fences` fences until the store says compaction is due.
  void GrowUntilDue(StateStore& store, FenceMaxima* expected, int fences = 3) {
    for (int i = 0; !store.CompactionDue(); ++i) {
      ASSERT_LT(i, 10000) << "never due";
      const std::string fence = "f" + std::to_string(i % fences);
      const uint64_t token = ++next_token_;
      ASSERT_TRUE(store.AppendAndSync({{fence, token}}).ok());
      (*expected)[fence] = token;
    }
  }

  std::string dir_;
  std::string path_;
  std::string tmp_;
  uint64_t next_token_ = 0;
};

// ---------------------------------------------------------------- when, and what

TEST_F(StateCompactionTest, DueOnlyPastBothBounds) {
  auto store = MustOpen(nullptr, CompactionPolicy{.min_file_bytes = 200, .snapshot_ratio = 4});
  ASSERT_TRUE(store);
  EXPECT_EQ(store->file_bytes(), kHeaderSize);
  EXPECT_EQ(store->snapshot_bytes(), kHeaderSize);
  // One fence: the snapshot is 16 + 18 bytes, so the size bound (200) is the one that matters.
  while (store->file_bytes() + EncodedRecordSize("a") <= 200) {
    ASSERT_TRUE(store->AppendAndSync({{"a", 1}}).ok());
    EXPECT_FALSE(store->CompactionDue()) << store->file_bytes();
  }
  ASSERT_TRUE(store->AppendAndSync({{"a", 2}}).ok());
  EXPECT_GT(store->file_bytes(), 200u);
  EXPECT_TRUE(store->CompactionDue());
  EXPECT_EQ(store->file_bytes(), fs::file_size(path_));
  EXPECT_EQ(store->snapshot_bytes(), Snapshot(store->maxima()).size());

  // Many fences: past 200 bytes but not past 4x the snapshot, so not due.
  store.reset();
  ClearDir();
  store = MustOpen(nullptr, CompactionPolicy{.min_file_bytes = 200, .snapshot_ratio = 4});
  ASSERT_TRUE(store);
  std::vector<FenceRecord> many;
  for (int i = 0; i < 20; ++i) many.push_back({"fence-" + std::to_string(i), 1});
  ASSERT_TRUE(store->AppendAndSync(many).ok());
  EXPECT_GT(store->file_bytes(), 200u);
  EXPECT_EQ(store->snapshot_bytes(), store->file_bytes());
  EXPECT_FALSE(store->CompactionDue());
}

TEST_F(StateCompactionTest, DefaultPolicyIs64KiBAndFourTimesTheSnapshot) {
  const CompactionPolicy policy;
  EXPECT_EQ(policy.min_file_bytes, 64u * 1024);
  EXPECT_EQ(policy.snapshot_ratio, 4u);
}

TEST_F(StateCompactionTest, ReadOnlyOrUnlockedStoresNeverCompact) {
  {
    auto store = MustOpen(nullptr, CompactionPolicy{.min_file_bytes = 0, .snapshot_ratio = 0});
    ASSERT_TRUE(store);
    ASSERT_TRUE(store->AppendAndSync({{"a", 1}, {"a", 2}}).ok());
    EXPECT_TRUE(store->CompactionDue());
  }
  OpenOptions unlocked;
  unlocked.lock = false;
  unlocked.compaction = CompactionPolicy{.min_file_bytes = 0, .snapshot_ratio = 0};
  std::unique_ptr<StateStore> store;
  ASSERT_TRUE(StateStore::Open(path_, unlocked, &store).ok());
  EXPECT_FALSE(store->CompactionDue());
  EXPECT_FALSE(store->Compact().ok());
  unlocked.read_only = true;
  ASSERT_TRUE(StateStore::Open(path_, unlocked, &store).ok());
  EXPECT_FALSE(store->CompactionDue());
  EXPECT_FALSE(store->Compact().ok());
}

TEST_F(StateCompactionTest, CompactWritesTheSnapshotAndAppendsToIt) {
  auto store = MustOpen(nullptr, kManualOnly);
  ASSERT_TRUE(store);
  ASSERT_TRUE(store->AppendAndSync({{"b", 5}, {"a", 9}}).ok());
  ASSERT_TRUE(store->AppendAndSync({{"b", 7}, {"a", 3}}).ok());
  ASSERT_TRUE(store->Compact().ok());
  EXPECT_EQ(store->compaction_count(), 1u);
  EXPECT_EQ(ReadBytes(path_), Snapshot({{"a", 9}, {"b", 7}}));
  EXPECT_EQ(store->file_bytes(), fs::file_size(path_));
  EXPECT_FALSE(fs::exists(tmp_));

  // Appends go to the new file, which the store holds open and locked.
  ASSERT_TRUE(store->AppendAndSync({{"c", 1}}).ok());
  std::string expected = Snapshot({{"a", 9}, {"b", 7}});
  EncodeRecord({"c", 1}, &expected);
  EXPECT_EQ(ReadBytes(path_), expected);
  std::unique_ptr<StateStore> second;
  EXPECT_TRUE(Contains(Open(&second).message(), "is locked by another process"));
  store.reset();
  EXPECT_EQ(Reopen(), (FenceMaxima{{"a", 9}, {"b", 7}, {"c", 1}}));
}

TEST_F(StateCompactionTest, WriterCompactsAfterASuccessfulSync) {
  auto store = MustOpen(nullptr, kSmall);
  ASSERT_TRUE(store);
  std::vector<bool> observed;  // writer thread only, read after it is joined
  FenceMaxima expected;
  {
    StateWriter writer(*store, nullptr, [&](bool ok, double seconds) {
      EXPECT_GE(seconds, 0.0);
      observed.push_back(ok);
    });
    for (uint64_t token = 1; token <= 60; ++token) {
      const std::string fence = "f" + std::to_string(token % 3);
      ASSERT_TRUE(SubmitAndWait(writer, fence, token));
      expected[fence] = token;
    }
    EXPECT_GE(writer.compaction_count(), 2u);
    EXPECT_FALSE(writer.failed());
  }
  EXPECT_EQ(observed.size(), store->compaction_count());
  for (bool ok : observed) EXPECT_TRUE(ok);
  EXPECT_LE(fs::file_size(path_), kSmall.min_file_bytes + kMaxRecordSize);
  store.reset();
  EXPECT_EQ(Reopen(), expected);
}

TEST_F(StateCompactionTest, CompactionCallsAreTheDocumentedSteps) {
  FailingFileOps ops;
  auto store = MustOpen(&ops, kManualOnly);
  ASSERT_TRUE(store);
  ASSERT_TRUE(store->AppendAndSync({{"a", 1}}).ok());
  ops.ClearTrace();
  ASSERT_TRUE(store->Compact().ok());
  EXPECT_EQ(TraceString(ops.trace()), TraceString(kCompactionCalls));
}

// WriteSnapshot's contract with Compact: whether the name changed, and the new lock if so.
TEST_F(StateCompactionTest, SnapshotSaysWhetherTheNameChangedAndHandsBackTheLockIfSo) {
  WriteBytes(path_, Snapshot({{"a", 1}}));
  {
    FailingFileOps ops;
    ops.FailNth(FileOp::kRename, 1, EIO);
    int fd = -1;
    bool renamed = true;
    EXPECT_FALSE(WriteSnapshot(path_, {{"a", 2}}, &fd, &ops, &renamed).ok());
    EXPECT_FALSE(renamed);
    EXPECT_EQ(fd, -1);
    EXPECT_FALSE(fs::exists(tmp_));
    EXPECT_EQ(ReadBytes(path_), Snapshot({{"a", 1}}));
  }
  FailingFileOps ops;
  ops.FailNth(FileOp::kSyncDirectory, 1, EIO);
  int fd = -1;
  bool renamed = false;
  Status s = WriteSnapshot(path_, {{"a", 2}}, &fd, &ops, &renamed);
  EXPECT_TRUE(Contains(s.message(), "fsync of directory failed")) << s.message();
  EXPECT_TRUE(renamed);
  ASSERT_GE(fd, 0);  // handed back even so: the name holds this inode now
  EXPECT_EQ(ReadBytes(path_), Snapshot({{"a", 2}}));
  std::unique_ptr<StateStore> store;
  EXPECT_TRUE(Contains(Open(&store).message(), "is locked by another process"));
  ::close(fd);
  EXPECT_TRUE(Open(&store).ok());
}

// ---------------------------------------------------------------- a crash at every step

// What may survive a crash besides synced data (DropUnsyncedFileOps options).
struct CrashModel {
  std::optional<uint64_t> prefix_seed = std::nullopt;  // a random prefix of unsynced appends
  bool persist_names = false;           // names never synced (so: leftover temp files)
  std::string ToString() const {
    return std::string("prefix seed ") + (prefix_seed ? std::to_string(*prefix_seed) : "none") +
           (persist_names ? ", names persist" : ", only synced names");
  }
};

// A log with several records per fence, durable before the crash layer starts; a store on it
// through that layer; two more acknowledged appends; then a compaction during which the
// machine crashes before call number `crash_at` (past the end: after it). Returns what the
// name holds after the crash, and checks that a restart sees every acknowledged maximum.
struct CompactionCrash {
  std::string old_log;    // the file under the name just before the compaction
  std::string snapshot;   // what the compaction writes
  std::string after;      // the file under the name after the crash
  bool tmp_left = false;  // a FILE.tmp survived the crash
};

class StateCompactionCrashTest : public StateCompactionTest {
 protected:
  CompactionCrash CrashDuringCompaction(size_t crash_at, CrashModel model = {}) {
    ClearDir();
    std::string log = EncodeHeader();
    for (const FenceRecord& r : std::vector<FenceRecord>{{"a", 1}, {"b", 5}, {"a", 3}, {"c", 9}, {"b", 6}}) {
      EncodeRecord(r, &log);
    }
    WriteBytes(path_, log);
    const FenceMaxima expected = {{"a", 4}, {"b", 6}, {"c", 9}, {"d", 2}};

    CompactionCrash out;
    DropUnsyncedFileOps disk(dir_);
    if (model.prefix_seed) disk.KeepRandomUnsyncedPrefix(*model.prefix_seed);
    if (model.persist_names) disk.PersistNamesOnCrash();
    {
      auto store = MustOpen(&disk, kManualOnly);
      if (!store) return out;
      EXPECT_TRUE(store->AppendAndSync({{"a", 4}, {"d", 2}}).ok());  // acknowledged
      EXPECT_EQ(store->maxima(), expected);
      out.old_log = ReadBytes(path_);
      out.snapshot = Snapshot(expected);
      disk.CrashAtCall(crash_at);
      Status s = store->Compact();
      // Up to the directory sync every step can fail; the old log's close is not checked.
      EXPECT_EQ(s.ok(), crash_at > kBeforeDirSync) << s.message();
      // A crash before the rename leaves a healthy store on the old log (the next append would
      // then fail on the dead disk): either way nothing is lost.
      disk.Crash();
    }
    out.after = ReadBytes(path_);
    out.tmp_left = fs::exists(tmp_);

    std::unique_ptr<StateStore> reopened;
    ::testing::internal::CaptureStderr();
    Status s = Open(&reopened);
    const std::string log_lines = ::testing::internal::GetCapturedStderr();
    EXPECT_TRUE(s.ok()) << s.message();
    if (reopened) {
      EXPECT_EQ(reopened->maxima(), expected);  // every acknowledged max, nothing lower or higher
      EXPECT_EQ(reopened->torn_tail_bytes(), 0u);
    }
    EXPECT_FALSE(fs::exists(tmp_));  // a leftover is removed, with a warning
    EXPECT_EQ(Contains(log_lines, "removed a snapshot left over"), out.tmp_left) << log_lines;
    return out;
  }
};

TEST_F(StateCompactionCrashTest, CrashAfterTheTempFileIsWrittenKeepsTheOldLog) {
  EXPECT_EQ(CrashDuringCompaction(kBeforeTmpSync).after, CrashDuringCompaction(kBeforeTmpSync).old_log);
  CompactionCrash c = CrashDuringCompaction(kBeforeTmpSync, {.persist_names = true});
  EXPECT_EQ(c.after, c.old_log);
  EXPECT_TRUE(c.tmp_left);  // unsynced, maybe empty: removed at open, never read
}

TEST_F(StateCompactionCrashTest, CrashAfterTheTempFileIsSyncedKeepsTheOldLog) {
  for (bool persist_names : {false, true}) {
    CompactionCrash c = CrashDuringCompaction(kBeforeRename, {.persist_names = persist_names});
    EXPECT_EQ(c.after, c.old_log);
    EXPECT_EQ(c.tmp_left, persist_names);
  }
}

TEST_F(StateCompactionCrashTest, CrashAfterTheRenameBeforeTheDirectorySyncLeavesEitherWholeFile) {
  CompactionCrash lost = CrashDuringCompaction(kBeforeDirSync);
  EXPECT_EQ(lost.after, lost.old_log);  // the rename did not reach the disk
  CompactionCrash kept = CrashDuringCompaction(kBeforeDirSync, {.persist_names = true});
  EXPECT_EQ(kept.after, kept.snapshot);  // it did
  EXPECT_FALSE(kept.tmp_left);
}

TEST_F(StateCompactionCrashTest, CrashAfterTheDirectorySyncKeepsTheSnapshot) {
  CompactionCrash c = CrashDuringCompaction(kBeforeClose);
  EXPECT_EQ(c.after, c.snapshot);
  EXPECT_FALSE(c.tmp_left);
}

TEST_F(StateCompactionCrashTest, CrashBetweenAnyTwoCallsLeavesAValidFileWithEveryMax) {
  int leftovers = 0;
  for (size_t crash_at = 1; crash_at <= kCompactionCalls.size() + 1; ++crash_at) {
    for (bool persist_names : {false, true}) {
      for (std::optional<uint64_t> seed : {std::optional<uint64_t>(), std::optional<uint64_t>(1),
                                           std::optional<uint64_t>(2), std::optional<uint64_t>(3)}) {
        const CrashModel model{.prefix_seed = seed, .persist_names = persist_names};
        SCOPED_TRACE("crash before call " + std::to_string(crash_at) + " (" +
                     (crash_at <= kCompactionCalls.size() ? FileOpName(kCompactionCalls[crash_at - 1]) : "none") +
                     "), " + model.ToString());
        CompactionCrash c = CrashDuringCompaction(crash_at, model);
        // The old log until the rename is durable (or, if names persist anyway, done); then the
        // snapshot. Never anything else.
        const size_t last_with_old_log = persist_names ? kBeforeRename : kBeforeDirSync;
        EXPECT_EQ(c.after, crash_at <= last_with_old_log ? c.old_log : c.snapshot);
        leftovers += c.tmp_left ? 1 : 0;
      }
    }
  }
  EXPECT_GT(leftovers, 0);  // the leftover path was exercised
}

// ---------------------------------------------------------------- failures before the rename

TEST_F(StateCompactionTest, FailureBeforeTheRenameIsNotTerminal) {
  struct Case {
    const char* name;
    FileOp op;
    int err;
  };
  const std::vector<Case> cases = {
      {"create", FileOp::kOpen, ENOSPC},     {"lock", FileOp::kFlock, ENOLCK},
      {"write", FileOp::kWrite, ENOSPC},     {"tmp fdatasync", FileOp::kFdatasync, EIO},
      {"rename", FileOp::kRename, EIO},      {"stale tmp unlink", FileOp::kUnlink, EACCES},
  };
  for (const Case& c : cases) {
    SCOPED_TRACE(c.name);
    ClearDir();
    FailingFileOps ops;
    auto store = MustOpen(&ops, kSmall);
    ASSERT_TRUE(store);
    FenceMaxima expected;
    GrowUntilDue(*store, &expected);
    const std::string before = ReadBytes(path_);
    const uint64_t log_syncs = store->sync_count();

    ops.FailNth(c.op, 1, c.err);
    Status s = store->Compact();
    ASSERT_FALSE(s.ok());
    EXPECT_TRUE(Contains(s.message(), tmp_)) << s.message();
    EXPECT_FALSE(store->failed());
    EXPECT_EQ(store->compaction_count(), 0u);
    EXPECT_EQ(ReadBytes(path_), before);  // the log and its name untouched
    EXPECT_FALSE(fs::exists(tmp_));       // the abandoned snapshot removed
    EXPECT_FALSE(store->CompactionDue());  // waits for more growth before trying again

    // Appends go on to the old log; a later threshold crossing compacts.
    ASSERT_TRUE(store->AppendAndSync({{"f0", ++next_token_}}).ok());
    expected["f0"] = next_token_;
    EXPECT_EQ(store->sync_count(), log_syncs + 1);
    GrowUntilDue(*store, &expected);
    EXPECT_GE(store->file_bytes(), before.size() + kSmall.min_file_bytes);
    ASSERT_TRUE(store->Compact().ok());
    EXPECT_EQ(store->compaction_count(), 1u);
    EXPECT_EQ(ReadBytes(path_), Snapshot(expected));
    store.reset();
    EXPECT_EQ(Reopen(), expected);
  }
}

TEST_F(StateCompactionTest, ShortSnapshotWriteIsAbandoned) {
  FailingFileOps ops;
  auto store = MustOpen(&ops, kSmall);
  ASSERT_TRUE(store);
  FenceMaxima expected;
  GrowUntilDue(*store, &expected);
  const std::string before = ReadBytes(path_);
  ops.SetSpaceLeft(20);  // part of the snapshot, then ENOSPC
  EXPECT_FALSE(store->Compact().ok());
  EXPECT_FALSE(store->failed());
  EXPECT_FALSE(fs::exists(tmp_));
  EXPECT_EQ(ReadBytes(path_), before);
  ops.SetSpaceLeft(kNever);
  store.reset();
  EXPECT_EQ(Reopen(), expected);
}

// Through the writer: a failed snapshot sync leaves raises flowing, and a later try succeeds.
TEST_F(StateCompactionTest, WriterKeepsRaisingAfterAFailedCompaction) {
  FailingFileOps ops;
  auto store = MustOpen(&ops, kSmall);
  ASSERT_TRUE(store);
  std::vector<bool> observed;
  FenceMaxima expected;
  {
    StateWriter writer(*store, nullptr, [&](bool ok, double) { observed.push_back(ok); });
    // One record per raise: the sync after the raise that passes the bound is the snapshot's.
    uint64_t raises_until_due = 0;
    for (uint64_t size = kHeaderSize; size <= kSmall.min_file_bytes; size += EncodedRecordSize("f0")) {
      ++raises_until_due;
    }
    ops.FailNth(FileOp::kFdatasync, raises_until_due + 1, EIO);
    for (uint64_t token = 1; token <= 80; ++token) {
      const std::string fence = "f" + std::to_string(token % 3);
      ASSERT_TRUE(SubmitAndWait(writer, fence, token)) << token;
      expected[fence] = token;
    }
    EXPECT_FALSE(writer.failed());
    EXPECT_GE(writer.compaction_count(), 1u);
  }
  ASSERT_GE(observed.size(), 2u);
  EXPECT_FALSE(observed[0]);  // the first compaction's snapshot sync failed
  EXPECT_TRUE(observed[1]);
  store.reset();
  EXPECT_EQ(Reopen(), expected);
}

// ---------------------------------------------------------------- failure after the rename

TEST_F(StateCompactionTest, FailedDirectorySyncAfterTheRenameIsTerminal) {
  FailingFileOps ops;
  auto store = MustOpen(&ops, kSmall);
  ASSERT_TRUE(store);
  FenceMaxima expected;
  {
    StateWriter writer(*store, nullptr);
    ops.FailNth(FileOp::kSyncDirectory, 1, EIO);
    uint64_t token = 0;
    // The compaction runs after a batch is answered: the raise after it may already fail.
    while (!writer.failed()) {
      ++token;
      ASSERT_LT(token, 1000u);
      const std::string fence = "f" + std::to_string(token % 3);
      if (!SubmitAndWait(writer, fence, token)) break;
      expected[fence] = token;
    }
    EXPECT_TRUE(writer.failed());
    EXPECT_EQ(writer.compaction_count(), 0u);
    const uint64_t writes = ops.count(FileOp::kWrite);
    const uint64_t syncs = ops.count(FileOp::kFdatasync);
    EXPECT_FALSE(SubmitAndWait(writer, "f0", token + 1));
    EXPECT_EQ(ops.count(FileOp::kWrite), writes);
    EXPECT_EQ(ops.count(FileOp::kFdatasync), syncs);
  }
  EXPECT_TRUE(store->failed());
  EXPECT_EQ(store->maxima(), expected);
  EXPECT_EQ(ReadBytes(path_), Snapshot(expected));  // the snapshot holds the name...
  std::unique_ptr<StateStore> second;
  EXPECT_TRUE(Contains(Open(&second).message(), "is locked by another process"));  // ...and our lock
  store.reset();
  EXPECT_EQ(Reopen(), expected);
}

// ---------------------------------------------------------------- the lock across the rename

TEST_F(StateCompactionTest, NoSecondStoreCanOpenAtAnyStepOfACompaction) {
  std::vector<std::string> refusals;  // one per call of the compaction; outlives the hook
  FailingFileOps ops;
  auto store = MustOpen(&ops, kManualOnly);
  ASSERT_TRUE(store);
  ASSERT_TRUE(store->AppendAndSync({{"a", 1}, {"b", 2}}).ok());
  ASSERT_TRUE(store->AppendAndSync({{"a", 3}}).ok());
  ops.SetHook([&](FileOp op) {
    std::unique_ptr<StateStore> second;
    Status s = Open(&second);
    refusals.push_back(std::string(FileOpName(op)) + ": " + (s.ok() ? "OPENED" : s.message()));
  });
  ASSERT_TRUE(store->Compact().ok());
  ops.SetHook(nullptr);
  ASSERT_EQ(refusals.size(), kCompactionCalls.size());
  for (const std::string& r : refusals) EXPECT_TRUE(Contains(r, "is locked by another process")) << r;

  std::unique_ptr<StateStore> second;
  EXPECT_TRUE(Contains(Open(&second).message(), "is locked by another process"));
  store.reset();
  ASSERT_TRUE(Open(&second).ok());
  EXPECT_EQ(second->maxima(), (FenceMaxima{{"a", 3}, {"b", 2}}));
}

// The race the inode check closes: a second opener opens the old file, the first proxy compacts
// and closes it (releasing that inode's lock), then the second takes that lock. It must notice
// that the name now holds another inode, and be refused on that one.
TEST_F(StateCompactionTest, SecondOpenerRacingACompactionIsStillRefused) {
  auto first = MustOpen(nullptr, kManualOnly);
  ASSERT_TRUE(first);
  ASSERT_TRUE(first->AppendAndSync({{"a", 1}}).ok());
  FailingFileOps racer;
  bool compacted = false;
  racer.SetHook([&](FileOp op) {
    if (op == FileOp::kFlock && !compacted) {
      compacted = true;
      ASSERT_TRUE(first->Compact().ok());
    }
  });
  std::unique_ptr<StateStore> second;
  Status s = Open(&second, &racer);
  EXPECT_TRUE(compacted);
  EXPECT_TRUE(Contains(s.message(), "is locked by another process")) << s.message();
  EXPECT_EQ(racer.count(FileOp::kOpen), 2u);  // it went round again for the new inode
  EXPECT_EQ(first->compaction_count(), 1u);
}

// ---------------------------------------------------------------- a leftover snapshot at open

TEST_F(StateCompactionTest, LeftoverSnapshotIsRemovedWithAWarningOnlyByTheLockHolder) {
  {
    auto store = MustOpen();
    ASSERT_TRUE(store);
    ASSERT_TRUE(store->AppendAndSync({{"a", 1}}).ok());
  }
  WriteBytes(tmp_, Snapshot({{"a", 99}}));  // an interrupted compaction: never the truth

  OpenOptions read_only{.create_if_missing = false, .lock = false, .read_only = true};
  std::unique_ptr<StateStore> store;
  ASSERT_TRUE(StateStore::Open(path_, read_only, &store).ok());
  EXPECT_TRUE(fs::exists(tmp_));  // readers never write
  store.reset();

  ::testing::internal::CaptureStderr();
  store = MustOpen();
  const std::string log = ::testing::internal::GetCapturedStderr();
  EXPECT_TRUE(Contains(log, "removed a snapshot left over")) << log;
  EXPECT_TRUE(Contains(log, tmp_)) << log;
  EXPECT_FALSE(fs::exists(tmp_));
  EXPECT_EQ(store->maxima(), (FenceMaxima{{"a", 1}}));

  // A refused second opener touches nothing, not even a temp file.
  WriteBytes(tmp_, "in progress");
  std::unique_ptr<StateStore> second;
  EXPECT_FALSE(Open(&second).ok());
  EXPECT_TRUE(fs::exists(tmp_));
}

// ---------------------------------------------------------------- the size bound

// fdatasync skipped (this test is about size, not durability) and the largest size the log
// reaches recorded.
class SizeWatchingFileOps : public ForwardingFileOps {
 public:
  using ForwardingFileOps::ForwardingFileOps;
  int Fdatasync(int) override { return 0; }
  ssize_t Write(int fd, const void* data, size_t size) override {
    const ssize_t n = inner_->Write(fd, data, size);
    struct stat st {};
    if (n > 0 && inner_->Fstat(fd, &st) == 0) {
      max_size_ = std::max<uint64_t>(max_size_, static_cast<uint64_t>(st.st_size));
    }
    return n;
  }
  uint64_t max_size() const { return max_size_; }

 private:
  std::atomic<uint64_t> max_size_{0};
};

TEST_F(StateCompactionTest, HundredThousandRaisesOnSixteenFencesStaySmall) {
  constexpr int kFences = 16;
  constexpr int kRaisesPerFence = 100000 / kFences;
  SizeWatchingFileOps ops(DefaultFileOps());
  auto store = MustOpen(&ops);  // the default policy: 64 KiB and 4x the snapshot
  ASSERT_TRUE(store);
  FenceMaxima expected;
  uint64_t compactions = 0;
  {
    StateWriter writer(*store, nullptr);
    // One thread per fence, each waiting for its raise: batches of up to 16 records, so about
    // one record per raise reaches the log (2.5 MB uncompacted).
    std::vector<std::thread> threads;
    std::atomic<int> failures{0};
    for (int f = 0; f < kFences; ++f) {
      const std::string fence = "fence-" + std::to_string(f);
      expected[fence] = kRaisesPerFence;
      threads.emplace_back([&, fence] {
        for (uint64_t token = 1; token <= kRaisesPerFence; ++token) {
          if (!SubmitAndWait(writer, fence, token)) ++failures;
        }
      });
    }
    for (auto& t : threads) t.join();
    EXPECT_EQ(failures.load(), 0);
    compactions = writer.compaction_count();
  }
  const uint64_t bound = CompactionPolicy{}.min_file_bytes + kFences * kMaxRecordSize;
  EXPECT_LE(fs::file_size(path_), bound);
  EXPECT_LE(ops.max_size(), bound);
  EXPECT_GE(compactions, 20u);
  EXPECT_EQ(store->compaction_count(), compactions);
  EXPECT_EQ(store->maxima(), expected);
  store.reset();
  EXPECT_EQ(Reopen(), expected);
}

}  // namespace
}  // namespace fencing
