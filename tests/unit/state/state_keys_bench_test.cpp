// A measurement, not a test (DISABLED_: ctest lists it and does not run it). It writes
// 1,000,000 keys of 16 bytes into a state file and prints: replay time at open, RSS of the
// replayed keys, file size, snapshot size, compaction time, and the longest writer stall and
// the slowest raise during a background compaction while raises keep being submitted.
//
//   build/tests/state_keys_bench_test --gtest_also_run_disabled_tests
//   FP_BENCH_DIR=/var/tmp FP_BENCH_KEYS=1000000 ...   (the directory decides the disk measured)

#include "state/state_log.h"
#include "state/state_store.h"
#include "state/state_writer.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <future>
#include <mutex>
#include <random>
#include <thread>
#include <vector>

#include <unistd.h>

namespace fencing {
namespace {

namespace fs = std::filesystem;
using Clock = std::chrono::steady_clock;

double Seconds(Clock::time_point from, Clock::time_point to) { return std::chrono::duration<double>(to - from).count(); }

uint64_t RssBytes() {
  std::ifstream statm("/proc/self/statm");
  uint64_t size = 0;
  uint64_t resident = 0;
  statm >> size >> resident;
  return resident * static_cast<uint64_t>(::sysconf(_SC_PAGESIZE));
}

std::string KeyName(uint64_t i) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "k%015llu", static_cast<unsigned long long>(i));  // 16 bytes
  return buf;
}

uint64_t EnvOr(const char* name, uint64_t fallback) {
  const char* v = std::getenv(name);
  return v != nullptr && *v != '\0' ? std::strtoull(v, nullptr, 10) : fallback;
}

TEST(StateKeysBench, DISABLED_MillionKeys) {
  const uint64_t keys = EnvOr("FP_BENCH_KEYS", 1000000);
  const char* base = std::getenv("FP_BENCH_DIR");
  std::string tmpl = (fs::path(base != nullptr && *base != '\0' ? base : fs::temp_directory_path().string()) /
                      "fp_state_keys_bench_XXXXXX")
                         .string();
  ASSERT_NE(::mkdtemp(tmpl.data()), nullptr);
  const std::string dir = tmpl;
  const std::string path = dir + "/fences.log";
  std::printf("state keys bench: %llu keys of 16 bytes, file %s\n", static_cast<unsigned long long>(keys), path.c_str());

  // 1. Write the keys: batches of 10,000 records, one fdatasync each.
  {
    OpenOptions options;
    options.compaction = CompactionPolicy{.min_file_bytes = UINT64_MAX, .snapshot_ratio = 1};
    std::unique_ptr<StateStore> store;
    ASSERT_TRUE(StateStore::Open(path, options, &store).ok());
    (void)store->TakeKeyMaxima();
    const auto start = Clock::now();
    std::vector<FenceRecord> batch;
    for (uint64_t i = 0; i < keys; ++i) {
      batch.push_back(FenceRecord{"objects", i + 1, KeyName(i)});
      if (batch.size() == 10000 || i + 1 == keys) {
        ASSERT_TRUE(store->AppendAndSync(batch).ok());
        batch.clear();
      }
    }
    std::printf("  write:   %.2f s for %llu records (%llu fdatasyncs)\n", Seconds(start, Clock::now()),
                static_cast<unsigned long long>(keys), static_cast<unsigned long long>(store->sync_count()));
  }
  const uint64_t log_size = fs::file_size(path);
  std::printf("  file:    %.1f MB (%.1f bytes per key record)\n", log_size / 1e6, double(log_size) / keys);

  // 2. Replay at open, and what the replayed keys take in memory.
  const uint64_t rss_before = RssBytes();
  const auto open_start = Clock::now();
  OpenOptions options;
  // Ratio 1 and a minimum of the file plus 256 KiB: after about 6,500 raises (the baseline) the
  // whole million is compacted in the background while the raises go on.
  options.compaction = CompactionPolicy{.min_file_bytes = log_size + 256 * 1024, .snapshot_ratio = 1};
  std::unique_ptr<StateStore> store;
  ASSERT_TRUE(StateStore::Open(path, options, &store).ok());
  const double replay_s = Seconds(open_start, Clock::now());
  const uint64_t rss_after = RssBytes();
  FenceKeyMaxima registry = store->TakeKeyMaxima();  // the registry's copy, as the proxy holds it
  ASSERT_EQ(registry.at("objects").size(), keys);
  std::printf("  replay:  %.3f s at open (%.0f records/s)\n", replay_s, keys / replay_s);
  std::printf("  memory:  %.1f MB RSS for the replayed keys, %.1f bytes per key (KeyMaxima: boost::unordered_flat_map)\n",
              (rss_after - rss_before) / 1e6, double(rss_after - rss_before) / keys);
  std::printf("  snapshot (as replayed): %.1f MB\n", store->snapshot_bytes() / 1e6);

  // 3. Raises from 8 threads on random keys, while the writer compacts in the background.
  struct Raise {
    Clock::time_point submitted;
    double seconds;
  };
  std::mutex mu;
  std::vector<Raise> raises;
  std::promise<std::pair<bool, double>> first_compaction;
  std::atomic<bool> first{true};
  Clock::time_point compaction_done;
  std::atomic<bool> stop{false};
  std::atomic<uint64_t> next_token{keys + 1};
  double longest_stall = 0;
  uint64_t compactions = 0;
  uint64_t syncs_before = store->sync_count();
  {
    StateWriter writer(*store, nullptr, [&](bool ok, double seconds) {
      if (first.exchange(false)) {
        compaction_done = Clock::now();
        stop = true;  // measure this compaction only (ratio 1 makes the next one due at once)
        first_compaction.set_value({ok, seconds});
      }
    });
    std::vector<std::thread> threads;
    for (int t = 0; t < 8; ++t) {
      threads.emplace_back([&, t] {
        std::mt19937_64 rng(t);
        std::vector<Raise> mine;
        while (!stop) {
          const uint64_t k = rng() % keys;
          std::promise<bool> answered;
          auto done = answered.get_future();
          const auto submitted = Clock::now();
          writer.Submit(FenceRecord{"objects", next_token++, KeyName(k)}, [&](bool ok) { answered.set_value(ok); });
          EXPECT_TRUE(done.get());
          mine.push_back(Raise{submitted, Seconds(submitted, Clock::now())});
        }
        std::lock_guard<std::mutex> lock(mu);
        raises.insert(raises.end(), mine.begin(), mine.end());
      });
    }
    auto result = first_compaction.get_future().get();
    for (auto& th : threads) th.join();
    longest_stall = writer.longest_compaction_stall_seconds();
    compactions = writer.compaction_count();
    EXPECT_TRUE(result.first);
    const double compaction_s = result.second;
    const auto compaction_start = compaction_done - std::chrono::duration_cast<Clock::duration>(
                                                        std::chrono::duration<double>(compaction_s));
    std::vector<double> during;
    std::vector<double> outside;  // before the compaction started: the baseline
    for (const Raise& r : raises) {
      const auto end = r.submitted + std::chrono::duration_cast<Clock::duration>(std::chrono::duration<double>(r.seconds));
      if (end < compaction_start) {
        outside.push_back(r.seconds);
      } else if (r.submitted <= compaction_done) {
        during.push_back(r.seconds);
      }
    }
    auto summary = [](std::vector<double> v) {
      if (v.empty()) return std::string("none");
      std::sort(v.begin(), v.end());
      char buf[128];
      std::snprintf(buf, sizeof buf, "%zu raises, p50 %.2f ms, p99 %.2f ms, max %.2f ms", v.size(), v[v.size() / 2] * 1e3,
                    v[v.size() * 99 / 100] * 1e3, v.back() * 1e3);
      return std::string(buf);
    };
    std::printf("  compaction: %.3f s start to hand-over (background), %llu compaction(s) in the run\n", compaction_s,
                static_cast<unsigned long long>(compactions));
    std::printf("  longest writer stall (hand-over): %.2f ms\n", longest_stall * 1e3);
    // The hand-over is two syncs, a rename and a directory fsync; the replaced log's close (44 ms
    // at a million keys) is not the writer's (FORMAT.md H7). FP_BENCH_MAX_HANDOVER_MS overrides.
    const char* bound_env = std::getenv("FP_BENCH_MAX_HANDOVER_MS");
    const double bound_ms = bound_env != nullptr ? std::atof(bound_env) : 10.0;
    EXPECT_LE(longest_stall * 1e3, bound_ms) << "the compaction's hand-over stalled the writer";
    std::printf("  raises during the compaction: %s\n", summary(during).c_str());
    std::printf("  raises before it (baseline):  %s\n", summary(outside).c_str());
    std::printf("  group commits in the run: %llu\n", static_cast<unsigned long long>(store->sync_count() - syncs_before));
  }
  std::printf("  file after compaction: %.1f MB\n", fs::file_size(path) / 1e6);
  store.reset();
  {
    const auto start = Clock::now();
    OpenOptions read_only{.create_if_missing = false, .lock = false, .read_only = true};
    std::unique_ptr<StateStore> again;
    ASSERT_TRUE(StateStore::Open(path, read_only, &again).ok());
    EXPECT_EQ(again->key_maxima().at("objects").size(), keys);
    std::printf("  replay of the compacted file: %.3f s\n", Seconds(start, Clock::now()));
  }
  fs::remove_all(dir);
}

}  // namespace
}  // namespace fencing
