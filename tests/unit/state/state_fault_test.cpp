// The state log under injected faults: crashes that drop unsynced data (LevelDB
// fault_injection_test style), failed syncs, a full disk. First the fault layer itself is
// checked (a blind harness proves nothing), then raise storms through the real StateWriter,
// then terminal failures.

#include "state_fault_file_ops.h"

#include "state/state_log.h"
#include "state/state_store.h"
#include "state/state_writer.h"

#include <gtest/gtest.h>

#include "test_files.h"

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <filesystem>
#include <fstream>
#include <future>
#include <iostream>
#include <map>
#include <mutex>
#include <random>
#include <sstream>
#include <thread>
#include <vector>

#include <fcntl.h>

namespace fencing {
namespace {

namespace fs = std::filesystem;



// Submits one raise and waits for its answer.
bool SubmitAndWait(StateWriter& writer, const std::string& fence, uint64_t token) {
  std::promise<bool> answered;
  std::future<bool> ok = answered.get_future();
  writer.Submit(fence, token, [&answered](bool result) { answered.set_value(result); });
  return ok.get();
}

class StateFaultTest : public ::testing::Test {
 protected:
  void SetUp() override {
    std::string tmpl = (fs::temp_directory_path() / "fp_state_fault_test_XXXXXX").string();
    ASSERT_NE(::mkdtemp(tmpl.data()), nullptr);
    dir_ = tmpl;
    path_ = dir_ + "/fences.log";
  }
  void TearDown() override { fs::remove_all(dir_); }

  void ClearDir() {
    for (const auto& entry : fs::directory_iterator(dir_)) fs::remove_all(entry.path());
  }

  // What a restart on the real file system recovers ({} if it cannot open).
  FenceMaxima Reopen() {
    std::unique_ptr<StateStore> store = MustOpen();
    return store ? store->maxima() : FenceMaxima{};
  }

  // Each caller asserts the result: a null store must not crash the whole binary.
  std::unique_ptr<StateStore> MustOpen(FileOps* ops = nullptr, CompactionPolicy policy = {}) {
    OpenOptions options;
    options.file_ops = ops;
    options.compaction = policy;
    std::unique_ptr<StateStore> store;
    Status s = StateStore::Open(path_, options, &store);
    EXPECT_TRUE(s.ok()) << s.message();
    return store;
  }

  std::string dir_;
  std::string path_;
};

// ---------------------------------------------------------------- the fault layer itself

// Writes through ops to a new file in the directory, with the calls a test asks for.
int CreateThrough(FileOps& ops, const std::string& path) {
  return ops.Open(path, O_RDWR | O_APPEND | O_CREAT | O_EXCL | O_CLOEXEC, 0644);
}

TEST_F(StateFaultTest, LayerDropsWhatWasNeverSynced) {
  DropUnsyncedFileOps disk(dir_);
  const int fd = CreateThrough(disk, path_);
  ASSERT_GE(fd, 0);
  ASSERT_EQ(disk.Write(fd, "abc", 3), 3);
  ASSERT_EQ(disk.Fdatasync(fd), 0);
  disk.Crash();  // the file's data was synced, its name never was
  disk.Close(fd);
  EXPECT_FALSE(fs::exists(path_));
}

TEST_F(StateFaultTest, LayerKeepsSyncedDataAndDropsTheRest) {
  DropUnsyncedFileOps disk(dir_);
  const int fd = CreateThrough(disk, path_);
  ASSERT_EQ(disk.SyncDirectory(dir_), 0);
  ASSERT_EQ(disk.Write(fd, "abc", 3), 3);
  ASSERT_EQ(disk.Fdatasync(fd), 0);
  ASSERT_EQ(disk.Write(fd, "def", 3), 3);
  EXPECT_EQ(ReadBytes(path_), "abcdef");  // the page cache has it...
  disk.Crash();
  EXPECT_EQ(ReadBytes(path_), "abc");  // ...the disk does not
  EXPECT_EQ(disk.Write(fd, "x", 1), -1);  // and the process is gone
  EXPECT_EQ(errno, EIO);
  disk.Close(fd);
}

TEST_F(StateFaultTest, LayerUndoesARenameUntilTheDirectoryIsSynced) {
  WriteBytes(path_, "old");  // there before the layer: durable
  for (bool sync_dir : {false, true}) {
    SCOPED_TRACE(sync_dir);
    WriteBytes(path_, "old");
    fs::remove(path_ + ".tmp");
    DropUnsyncedFileOps disk(dir_);
    const int fd = CreateThrough(disk, path_ + ".tmp");
    ASSERT_EQ(disk.Write(fd, "new", 3), 3);
    ASSERT_EQ(disk.Fdatasync(fd), 0);
    ASSERT_EQ(disk.Rename(path_ + ".tmp", path_), 0);
    if (sync_dir) {
      ASSERT_EQ(disk.SyncDirectory(dir_), 0);
    }
    disk.Crash();
    disk.Close(fd);
    EXPECT_EQ(ReadBytes(path_), sync_dir ? "new" : "old");
    EXPECT_FALSE(fs::exists(path_ + ".tmp"));  // never durable under that name either
  }
}

TEST_F(StateFaultTest, LayerCanKeepNamesThatWereNeverSynced) {
  DropUnsyncedFileOps disk(dir_);
  disk.PersistNamesOnCrash();
  const int fd = CreateThrough(disk, path_);
  ASSERT_EQ(disk.Write(fd, "abc", 3), 3);
  disk.Crash();
  disk.Close(fd);
  EXPECT_TRUE(fs::exists(path_));
  EXPECT_EQ(ReadBytes(path_), "");  // the name survived, the unsynced data did not
}

TEST_F(StateFaultTest, LayerCanKeepAPrefixOfUnsyncedAppends) {
  WriteBytes(path_, "base");
  std::set<std::string> seen;
  for (uint64_t seed = 0; seed < 40; ++seed) {
    WriteBytes(path_, "base");
    DropUnsyncedFileOps disk(dir_);
    disk.KeepRandomUnsyncedPrefix(seed);
    const int fd = disk.Open(path_, O_RDWR | O_APPEND, 0);
    ASSERT_EQ(disk.Write(fd, "12345", 5), 5);
    disk.Crash();
    disk.Close(fd);
    const std::string after = ReadBytes(path_);
    ASSERT_EQ(after, std::string("base12345").substr(0, after.size()));
    ASSERT_GE(after.size(), 4u);
    seen.insert(after);
  }
  EXPECT_GT(seen.size(), 3u);  // really random
}

TEST_F(StateFaultTest, LayerCrashesAtTheNthCall) {
  DropUnsyncedFileOps disk(dir_);
  disk.CrashAtCall(3);
  const int fd = CreateThrough(disk, path_);  // 1
  ASSERT_EQ(disk.SyncDirectory(dir_), 0);      // 2
  EXPECT_EQ(disk.Write(fd, "a", 1), -1);       // 3: never happens
  EXPECT_TRUE(disk.crashed());
  disk.Close(fd);
  EXPECT_EQ(ReadBytes(path_), "");
}

TEST_F(StateFaultTest, FailingLayerFailsTheNthCallAndFillsTheDisk) {
  FailingFileOps failing;
  const int fd = CreateThrough(failing, path_);
  failing.FailNth(FileOp::kFdatasync, 2, EIO);
  EXPECT_EQ(failing.Fdatasync(fd), 0);
  EXPECT_EQ(failing.Fdatasync(fd), -1);
  EXPECT_EQ(errno, EIO);
  EXPECT_EQ(failing.Fdatasync(fd), 0);
  failing.SetSpaceLeft(4);
  EXPECT_EQ(failing.Write(fd, "abcdef", 6), 4);  // short
  EXPECT_EQ(failing.Write(fd, "ef", 2), -1);
  EXPECT_EQ(errno, ENOSPC);
  EXPECT_EQ(failing.count(FileOp::kWrite), 2u);
  EXPECT_EQ(failing.count(FileOp::kFdatasync), 3u);
  failing.Close(fd);
  EXPECT_EQ(ReadBytes(path_), "abcd");
}

// ---------------------------------------------------------------- raise storms with crashes

struct StormResult {
  int acknowledged = 0;  // raises answered ok
  int lost = 0;          // acknowledged raises above the recovered max of their fence
  int invented = 0;      // recovered maxima above every token submitted for their fence
  uint64_t compactions = 0;
  bool crashed_mid_run = false;
  bool reopen_failed = false;
  uint64_t calls = 0;
  std::string detail;
};

constexpr int kStormThreads = 4;
constexpr int kStormFences = 3;
constexpr int kStormRaisesPerThread = 30;
constexpr uint64_t kStormMaxCrashCall = 220;  // some runs finish first and crash at the end

// One seeded run: maybe a pre-existing log, a crash planned at a random call, kStormThreads
// threads raising kStormFences fences through a StateWriter (each waits for its answer, so
// batches and compactions interleave), then the crash, and a reopen on the real file system.
StormResult RunStorm(const std::string& dir, const std::string& path, uint64_t seed, bool skip_sync) {
  std::mt19937_64 rng(seed);
  StormResult result;
  std::map<std::string, uint64_t> submitted;  // highest token submitted per fence
  std::map<std::string, uint64_t> acked;      // highest token acknowledged per fence
  std::mutex mu;

  if (rng() % 2 == 0) {  // start from an existing log, there before the crash layer: durable
    std::string log = EncodeHeader();
    for (int f = 0; f < kStormFences; ++f) {
      const std::string fence = "fence-" + std::to_string(f);
      const uint64_t token = 1 + rng() % 50;
      EncodeRecord(FenceRecord{fence, token}, &log);
      submitted[fence] = acked[fence] = token;
    }
    WriteBytes(path, log);
  }

  DropUnsyncedFileOps disk(dir);
  if (rng() % 2 == 0) disk.KeepRandomUnsyncedPrefix(seed);
  if (rng() % 3 == 0) disk.PersistNamesOnCrash();
  NoSyncFileOps no_sync(&disk);
  disk.CrashAtCall(1 + rng() % kStormMaxCrashCall);

  OpenOptions options;
  options.file_ops = skip_sync ? static_cast<FileOps*>(&no_sync) : &disk;
  options.compaction = CompactionPolicy{.min_file_bytes = 200 + rng() % 400, .snapshot_ratio = 2};
  std::unique_ptr<StateStore> store;
  if (StateStore::Open(path, options, &store).ok()) {
    std::atomic<uint64_t> next_token{100};
    {
      StateWriter writer(*store, nullptr);
      std::vector<std::thread> threads;
      for (int t = 0; t < kStormThreads; ++t) {
        threads.emplace_back([&, t] {
          std::mt19937_64 thread_rng(seed * 131 + static_cast<uint64_t>(t));
          for (int i = 0; i < kStormRaisesPerThread; ++i) {
            const std::string fence = "fence-" + std::to_string(thread_rng() % kStormFences);
            const uint64_t token = next_token.fetch_add(1 + thread_rng() % 3);
            {
              std::lock_guard<std::mutex> lock(mu);
              uint64_t& top = submitted[fence];
              top = std::max(top, token);
            }
            if (!SubmitAndWait(writer, fence, token)) return;  // the store failed: stop
            std::lock_guard<std::mutex> lock(mu);
            uint64_t& top = acked[fence];
            top = std::max(top, token);
            ++result.acknowledged;
          }
        });
      }
      for (auto& th : threads) th.join();
    }
    result.compactions = store->compaction_count();
  }
  result.crashed_mid_run = disk.crashed();
  result.calls = disk.calls();
  disk.Crash();  // no-op if it already happened
  store.reset();

  // Reopened through a fresh layer only so that recovery's syncs are simulated, not slow.
  DropUnsyncedFileOps after_restart(dir);
  OpenOptions reopen_options;
  reopen_options.file_ops = &after_restart;
  std::unique_ptr<StateStore> reopened;
  Status s = StateStore::Open(path, reopen_options, &reopened);
  if (!s.ok()) {
    result.reopen_failed = true;
    result.detail = "reopen failed: " + s.message();
    return result;
  }
  const FenceMaxima& recovered = reopened->maxima();
  for (const auto& [fence, token] : acked) {
    auto it = recovered.find(fence);
    if (it == recovered.end() || it->second < token) {
      ++result.lost;
      result.detail += fence + " acknowledged " + std::to_string(token) + " recovered " +
                       (it == recovered.end() ? std::string("none") : std::to_string(it->second)) + "; ";
    }
  }
  for (const auto& [fence, token] : recovered) {
    auto it = submitted.find(fence);
    if (it == submitted.end() || token > it->second) {
      ++result.invented;
      result.detail += fence + " recovered " + std::to_string(token) + " never submitted; ";
    }
  }
  return result;
}

constexpr uint64_t kStormSeeds = 300;

TEST_F(StateFaultTest, RaiseStormsLoseNoAcknowledgedRaiseAcrossCrashes) {
  int mid_run_crashes = 0;
  int acknowledged = 0;
  uint64_t compactions = 0;
  ::testing::internal::CaptureStderr();  // hundreds of expected warnings and errors
  for (uint64_t seed = 0; seed < kStormSeeds; ++seed) {
    ClearDir();
    StormResult r = RunStorm(dir_, path_, seed, /*skip_sync=*/false);
    EXPECT_FALSE(r.reopen_failed) << "seed " << seed << ": " << r.detail;
    EXPECT_EQ(r.lost, 0) << "seed " << seed << ": " << r.detail;
    EXPECT_EQ(r.invented, 0) << "seed " << seed << ": " << r.detail;
    mid_run_crashes += r.crashed_mid_run ? 1 : 0;
    acknowledged += r.acknowledged;
    compactions += r.compactions;
  }
  ::testing::internal::GetCapturedStderr();
  // The harness really crashed mid-storm, acknowledged raises and compacted.
  EXPECT_GT(mid_run_crashes, static_cast<int>(kStormSeeds / 2));
  EXPECT_GT(acknowledged, static_cast<int>(kStormSeeds * 10));
  EXPECT_GT(compactions, kStormSeeds / 4);
}

// Negative control: the same storms with fdatasync skipped must lose acknowledged raises, or
// the harness above could not see a lost one.
TEST_F(StateFaultTest, NegativeControlWithoutSyncLosesAcknowledgedRaises) {
  int seeds_with_loss = 0;
  ::testing::internal::CaptureStderr();
  for (uint64_t seed = 0; seed < kStormSeeds; ++seed) {
    ClearDir();
    StormResult r = RunStorm(dir_, path_, seed, /*skip_sync=*/true);
    EXPECT_FALSE(r.reopen_failed) << "seed " << seed << ": " << r.detail;
    EXPECT_EQ(r.invented, 0) << "seed " << seed << ": " << r.detail;
    if (r.lost > 0) ++seeds_with_loss;
  }
  ::testing::internal::GetCapturedStderr();
  std::cout << "negative control: " << seeds_with_loss << " of " << kStormSeeds
            << " seeds lost acknowledged raises\n";
  EXPECT_GT(seeds_with_loss, static_cast<int>(kStormSeeds / 2));
}

// ---------------------------------------------------------------- terminal failures

// A raise whose fdatasync fails is not durable, and nothing is written or synced after it.
TEST_F(StateFaultTest, FailedSyncFailsTheRaiseAndEveryLaterOneWithoutTouchingTheDisk) {
  DropUnsyncedFileOps disk(dir_);
  FailingFileOps failing(&disk);
  auto store = MustOpen(&failing, CompactionPolicy{.min_file_bytes = 0, .snapshot_ratio = 1});
  ASSERT_TRUE(store);
  {
    StateWriter writer(*store, nullptr);
    ASSERT_TRUE(SubmitAndWait(writer, "a", 1));
    failing.FailNth(FileOp::kFdatasync, 1, EIO);
    EXPECT_FALSE(SubmitAndWait(writer, "a", 2));
    EXPECT_TRUE(writer.failed());
    const auto calls_after_failure = failing.trace().size();
    const uint64_t writes = failing.count(FileOp::kWrite);
    const uint64_t syncs = failing.count(FileOp::kFdatasync);
    EXPECT_FALSE(SubmitAndWait(writer, "a", 3));
    EXPECT_FALSE(SubmitAndWait(writer, "b", 4));
    EXPECT_EQ(failing.count(FileOp::kWrite), writes);
    EXPECT_EQ(failing.count(FileOp::kFdatasync), syncs);
    EXPECT_EQ(failing.trace().size(), calls_after_failure) << TraceString(failing.trace());
    EXPECT_TRUE(writer.failed());
  }
  EXPECT_TRUE(store->failed());
  EXPECT_EQ(store->maxima(), (FenceMaxima{{"a", 1}}));  // the failed batch is not a maximum
  EXPECT_EQ(store->compaction_count(), 0u);              // and no snapshot carried it either
  disk.Crash();
  store.reset();
  EXPECT_EQ(Reopen(), (FenceMaxima{{"a", 1}}));
}

TEST_F(StateFaultTest, FullDiskFailsTheRaiseAndEveryLaterOne) {
  for (uint64_t space : {uint64_t{0}, uint64_t{5}}) {  // ENOSPC at once; a short write first
    SCOPED_TRACE(space);
    ClearDir();
    FailingFileOps failing;
    auto store = MustOpen(&failing);
    ASSERT_TRUE(store);
    {
      StateWriter writer(*store, nullptr);
      ASSERT_TRUE(SubmitAndWait(writer, "a", 1));
      failing.SetSpaceLeft(space);
      EXPECT_FALSE(SubmitAndWait(writer, "a", 2));
      const uint64_t writes = failing.count(FileOp::kWrite);
      EXPECT_EQ(writes, space == 0 ? 3u : 4u);  // header, raise 1, then the failing ones
      EXPECT_FALSE(SubmitAndWait(writer, "c", 3));
      EXPECT_EQ(failing.count(FileOp::kWrite), writes);
      EXPECT_EQ(failing.count(FileOp::kFdatasync), 2u);  // the header's and raise 1's
      EXPECT_TRUE(writer.failed());
    }
    EXPECT_TRUE(store->failed());
    EXPECT_EQ(store->maxima(), (FenceMaxima{{"a", 1}}));
    store.reset();
    // The short write left a torn tail behind; a restart drops it.
    auto reopened = MustOpen();
    ASSERT_TRUE(reopened);
    EXPECT_EQ(reopened->maxima(), (FenceMaxima{{"a", 1}}));
    EXPECT_EQ(reopened->torn_tail_bytes(), space);
  }
}

}  // namespace
}  // namespace fencing
