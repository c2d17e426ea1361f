// A keyed fence (fence/fence_keys.h): each key a fence of its own, the key cap, the floor of
// unknown keys, folding idle Fences back, and forgetting only through a durable record. Driven
// with a fake persister and a virtual clock, then by threads against a sweeper.

#include <gtest/gtest.h>

#include <atomic>
#include <cstdint>
#include <functional>
#include <mutex>
#include <random>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "fence/fence.h"
#include "fence/fence_keys.h"

namespace fencing {
namespace {

// Queues every record; the test completes them (or, synchronous, they complete at once).
class FakeKeyPersister : public KeyPersister {
 public:
  void PersistKey(FenceRecord record, std::function<void(PersistResult)> done) override {
    std::unique_lock lock(mu);
    records.push_back(record);
    if (synchronous) {
      lock.unlock();
      done(PersistResult::kDurable);
      return;
    }
    pending.push_back(std::move(done));
  }
  // Completes the oldest outstanding record.
  void CompleteOne(bool ok = true) {
    std::function<void(PersistResult)> done;
    {
      std::lock_guard lock(mu);
      ASSERT_FALSE(pending.empty()) << "nothing to complete";
      done = std::move(pending.front());
      pending.erase(pending.begin());
    }
    done(ok ? PersistResult::kDurable : PersistResult::kFailed);
  }
  void CompleteAll() {
    while (true) {
      {
        std::lock_guard lock(mu);
        if (pending.empty()) return;
      }
      CompleteOne();
    }
  }
  size_t outstanding() {
    std::lock_guard lock(mu);
    return pending.size();
  }

  std::mutex mu;
  bool synchronous = false;
  std::vector<FenceRecord> records;
  std::vector<std::function<void(PersistResult)>> pending;
};

class FakeWaiter : public RaiseWaiter {
 public:
  void Resolve(Admission a, uint64_t max) override {
    resolved = true;
    admission = a;
    max_token = max;
  }
  bool resolved = false;
  Admission admission = Admission::kFailed;
  uint64_t max_token = 0;
};

class AtomicWaiter : public RaiseWaiter {
 public:
  void Resolve(Admission a, uint64_t) override {
    admission = a;
    resolved.store(true, std::memory_order_release);
  }
  std::atomic<bool> resolved{false};
  Admission admission = Admission::kFailed;
};

class CountingObserver : public FenceObserver {
 public:
  void MaxToken(uint64_t m) const override { max_token = m; }
  void Raised() const override { ++raises; }
  void RaiseWaited(double) const override {}
  void KeysChanged(int64_t delta) const override { keys += static_cast<uint64_t>(delta); }
  void KeysForgotten(uint64_t count) const override { forgotten += count; }
  mutable std::atomic<uint64_t> max_token{0}, raises{0}, keys{0}, forgotten{0};  // reported from any thread
};

class FenceKeysTest : public ::testing::Test {
 protected:
  std::unique_ptr<FenceKeys> Make(uint64_t floor = 0, KeyMaxima keys = {}, KeySettings settings = {}) {
    return std::make_unique<FenceKeys>("objects", floor, std::move(keys), settings, persister, state_failed,
                                       [this] { return now; }, &observer);
  }
  // Acquires and admits `token` for `key`, completing a raise; the FenceRef is returned held.
  FenceRef AdmitNow(FenceKeys& keys, std::string_view key, uint64_t token) {
    KeyLookup found = keys.Acquire(key, token);
    EXPECT_TRUE(found.fence) << key;
    if (!found.fence) return {};
    FakeWaiter waiter;
    AdmitResult r = found.fence->Admit(token, waiter);
    if (r.admission == Admission::kWaiting) {
      persister.CompleteAll();
      EXPECT_TRUE(waiter.resolved);
      EXPECT_EQ(waiter.admission, Admission::kAdmitted);
    } else {
      EXPECT_EQ(r.admission, Admission::kAdmitted);
    }
    return std::move(found.fence);
  }

  FakeKeyPersister persister;
  std::atomic<bool> state_failed{false};
  CountingObserver observer;
  double now = 1000;
};

TEST_F(FenceKeysTest, EachKeyHasItsOwnMax) {
  auto keys = Make();
  {
    FenceRef a = AdmitNow(*keys, "a", 100);
    a->Release();
  }
  // B legitimately got its lock at 90: A's 100 is no concern of B's.
  FenceRef b = AdmitNow(*keys, "b", 90);
  b->Release();
  KeyLookup stale = keys->Acquire("b", 89);
  ASSERT_TRUE(stale.fence);
  AdmitResult r = stale.fence->AdmitWithoutWaiting(89);
  EXPECT_EQ(r.admission, Admission::kStale);
  EXPECT_EQ(r.max_token, 90u);
  ASSERT_EQ(persister.records.size(), 2u);
  EXPECT_EQ(persister.records[0].fence, "objects");
  EXPECT_EQ(persister.records[0].key, "a");
  EXPECT_EQ(persister.records[0].token, 100u);
  EXPECT_EQ(persister.records[0].kind, FenceRecord::Kind::kSetMax);
  EXPECT_EQ(persister.records[1].key, "b");
  EXPECT_EQ(keys->Snapshot().keys, 2u);
  EXPECT_EQ(observer.keys.load(), 2u);
  EXPECT_EQ(observer.max_token.load(), 100u);  // the highest of any key
}

TEST_F(FenceKeysTest, ARaiseNeverWaitsForAnotherKeysWrite) {
  auto keys = Make();
  FenceRef held = AdmitNow(*keys, "a", 5);  // admitted, not released: in flight at the backend
  KeyLookup other = keys->Acquire("b", 7);
  ASSERT_TRUE(other.fence);
  FakeWaiter waiter;
  ASSERT_EQ(other.fence->Admit(7, waiter).admission, Admission::kWaiting);
  // The raise of b went to the disk at once, though a's write is still in flight.
  ASSERT_EQ(persister.outstanding(), 1u);
  EXPECT_EQ(persister.records.back().key, "b");
  persister.CompleteOne();
  EXPECT_TRUE(waiter.resolved);
  EXPECT_EQ(waiter.admission, Admission::kAdmitted);
  other.fence->Release();
  held->Release();
}

TEST_F(FenceKeysTest, ANewKeyBeyondMaxKeysIsRefusedAndCreatesNothing) {
  KeySettings settings;
  settings.max_keys = 2;
  auto keys = Make(0, {}, settings);
  AdmitNow(*keys, "a", 1)->Release();
  AdmitNow(*keys, "b", 1)->Release();
  KeyLookup third = keys->Acquire("c", 1);
  EXPECT_FALSE(third.fence);
  EXPECT_EQ(third.refusal, Admission::kKeyLimit);
  EXPECT_EQ(keys->Snapshot().keys, 2u);
  EXPECT_FALSE(keys->Find("c").has_value());
  // Known keys go on as before.
  AdmitNow(*keys, "a", 2)->Release();
}

TEST_F(FenceKeysTest, AnUnknownKeyStartsAtTheFloorAndABelowFloorTokenCreatesNothing) {
  auto keys = Make(/*floor=*/50);
  KeyLookup below = keys->Acquire("x", 49);
  EXPECT_FALSE(below.fence);
  EXPECT_EQ(below.refusal, Admission::kStale);
  EXPECT_EQ(below.max_token, 50u);
  EXPECT_EQ(keys->Snapshot().keys, 0u);
  // At the floor: admitted without a raise (the floor is durable already).
  FenceRef at = AdmitNow(*keys, "x", 50);
  at->Release();
  EXPECT_TRUE(persister.records.empty());
}

// A verified route asks first without making the key; only a confirmed token makes it.
TEST_F(FenceKeysTest, WithoutMayCreateANewKeyIsReportedUnknownAndNothingIsMade) {
  auto keys = Make(/*floor=*/50);
  KeyLookup ask = keys->Acquire("x", 70, /*may_create=*/false);
  EXPECT_FALSE(ask.fence);
  EXPECT_TRUE(ask.unknown);
  EXPECT_EQ(ask.refusal, Admission::kAdmitted) << "not a refusal: ask the lock service";
  EXPECT_EQ(keys->Snapshot().keys, 0u) << "no slot taken against max_keys";
  EXPECT_FALSE(keys->Find("x").has_value());
  KeyLookup below = keys->Acquire("x", 49, /*may_create=*/false);
  EXPECT_FALSE(below.unknown) << "below the floor is stale whoever holds the lock";
  EXPECT_EQ(below.refusal, Admission::kStale);
  // Confirmed: made. A known key is pinned whatever may_create says.
  KeyLookup made = keys->Acquire("x", 70, /*may_create=*/true);
  ASSERT_TRUE(made.fence);
  made.fence = FenceRef();
  KeyLookup known = keys->Acquire("x", 70, /*may_create=*/false);
  EXPECT_TRUE(known.fence);
  EXPECT_FALSE(known.unknown);
  EXPECT_EQ(keys->Snapshot().keys, 1u);
}

TEST_F(FenceKeysTest, ReplayedKeysKeepTheirMaxEvenBelowTheFloor) {
  auto keys = Make(/*floor=*/100, KeyMaxima{{"old", 40}, {"new", 120}});
  EXPECT_EQ(keys->Snapshot().keys, 2u);
  EXPECT_EQ(keys->Find("old")->max_token, 40u);
  EXPECT_EQ(keys->Find("new")->max_token, 120u);
  // A known key is not an unknown one: its holder at 60 is still the holder.
  AdmitNow(*keys, "old", 60)->Release();
  EXPECT_EQ(keys->Highest(), 120u);
}

TEST_F(FenceKeysTest, IdleFencesAreFoldedBackButNeverAPinnedOrBusyOne) {
  auto keys = Make();
  AdmitNow(*keys, "idle", 3)->Release();
  FenceRef pinned = AdmitNow(*keys, "pinned", 4);  // admitted and in flight
  EXPECT_EQ(keys->Snapshot().active, 2u);
  now += 10;
  keys->Sweep(now);
  EXPECT_EQ(keys->Snapshot().active, 1u);
  EXPECT_EQ(keys->Find("idle")->max_token, 3u);  // folded: the max stays
  EXPECT_EQ(keys->Find("pinned")->inflight, 1u);
  pinned->Release();
  pinned.reset();
  keys->Sweep(now + 10);
  EXPECT_EQ(keys->Snapshot().active, 0u);
  // Made again from its slot.
  KeyLookup again = keys->Acquire("idle", 2);
  EXPECT_EQ(again.fence->AdmitWithoutWaiting(2).admission, Admission::kStale);
}

TEST_F(FenceKeysTest, AKeyIsForgottenOnlyOnceItsRecordIsDurable) {
  KeySettings settings;
  settings.forget_idle_after = std::chrono::seconds(60);
  auto keys = Make(0, {}, settings);
  AdmitNow(*keys, "gone", 70)->Release();
  persister.records.clear();
  now += 30;
  keys->Sweep(now);
  EXPECT_TRUE(persister.records.empty()) << "not idle long enough";
  now += 31;
  keys->Sweep(now);
  ASSERT_EQ(persister.records.size(), 1u);
  EXPECT_EQ(persister.records[0].kind, FenceRecord::Kind::kForgetKey);
  EXPECT_EQ(persister.records[0].key, "gone");
  EXPECT_EQ(persister.records[0].token, 70u);
  // Not yet durable: still known, floor unchanged.
  keys->Sweep(now + 1);
  EXPECT_EQ(persister.records.size(), 1u) << "submitted once";
  EXPECT_TRUE(keys->Find("gone").has_value());
  EXPECT_EQ(keys->floor(), 0u);
  persister.CompleteOne();
  EXPECT_FALSE(keys->Find("gone").has_value());
  EXPECT_EQ(keys->floor(), 70u);
  EXPECT_EQ(observer.forgotten.load(), 1u);
  EXPECT_EQ(keys->Snapshot().keys, 0u);
  // The forgotten holder's old token is refused; the next grant (global order: above) passes.
  EXPECT_EQ(keys->Acquire("gone", 69).refusal, Admission::kStale);
  AdmitNow(*keys, "gone", 71)->Release();
}

TEST_F(FenceKeysTest, AKeyUsedWhileItsForgetRecordIsOnItsWayStaysKnown) {
  KeySettings settings;
  settings.forget_idle_after = std::chrono::seconds(1);
  auto keys = Make(0, {}, settings);
  AdmitNow(*keys, "k", 10)->Release();
  now += 5;
  keys->Sweep(now);
  ASSERT_EQ(persister.outstanding(), 1u);
  FenceRef used = keys->Acquire("k", 10).fence;  // a request arrives meanwhile
  persister.CompleteOne();
  EXPECT_TRUE(keys->Find("k").has_value());
  EXPECT_EQ(keys->floor(), 10u);  // the file's floor holds it, and so does this one
  EXPECT_EQ(used->AdmitWithoutWaiting(10).admission, Admission::kAdmitted);
  used->Release();
}

// However many keys fall idle together (a restart starts every key's idle time at once), the
// state writer gets their forget records one slice at a time: the next slice only once every
// record of the one before is answered, so a raise of another fence waits behind one slice.
TEST_F(FenceKeysTest, KeysFallingIdleTogetherAreForgottenOneSliceAtATime) {
  KeySettings settings;
  settings.forget_idle_after = std::chrono::seconds(1);
  settings.forget_slice = 4;
  KeyMaxima replayed;
  for (int i = 0; i < 10; ++i) replayed.emplace("k" + std::to_string(i), 100 + i);
  auto keys = Make(0, std::move(replayed), settings);
  now += 5;
  keys->Sweep(now);
  EXPECT_EQ(persister.outstanding(), 4u) << "one slice submitted";
  EXPECT_EQ(keys->forgets_queued(), 6u);
  keys->Sweep(now + 1);  // a sweep meanwhile submits nothing more, and chooses no key twice
  EXPECT_EQ(persister.outstanding(), 4u);
  EXPECT_EQ(keys->forgets_queued(), 6u);
  for (int i = 0; i < 3; ++i) persister.CompleteOne();
  EXPECT_EQ(persister.outstanding(), 1u) << "the next slice waits for the whole of this one";
  persister.CompleteOne();
  EXPECT_EQ(persister.outstanding(), 4u) << "the last answer submits the next slice";
  EXPECT_EQ(keys->forgets_queued(), 2u);
  persister.CompleteAll();  // completes the third slice too, as it is submitted
  EXPECT_EQ(persister.outstanding(), 0u);
  EXPECT_EQ(keys->forgets_queued(), 0u);
  EXPECT_EQ(keys->forgets_in_flight(), 0u);
  EXPECT_EQ(keys->Snapshot().keys, 0u);
  EXPECT_EQ(keys->floor(), 109u);
  EXPECT_EQ(observer.forgotten.load(), 10u);
  ASSERT_EQ(persister.records.size(), 10u);
  for (const FenceRecord& r : persister.records) EXPECT_EQ(r.kind, FenceRecord::Kind::kForgetKey);
}

// A key queued to be forgotten and used before its slice is submitted is not forgotten, and a
// queued key's record carries its max as of the submission.
TEST_F(FenceKeysTest, AQueuedKeyUsedBeforeItsSliceIsSubmittedIsNotForgotten) {
  KeySettings settings;
  settings.forget_idle_after = std::chrono::seconds(1);
  settings.forget_slice = 1;
  KeyMaxima replayed{{"a", 10}, {"b", 20}, {"c", 30}};
  auto keys = Make(0, std::move(replayed), settings);
  now += 5;
  keys->Sweep(now);
  ASSERT_EQ(persister.outstanding(), 1u);
  const std::string first = persister.records[0].key;
  std::vector<std::string> queued;
  for (const char* k : {"a", "b", "c"}) {
    if (k != first) queued.push_back(k);
  }
  keys->Acquire(queued[0], 0).fence.reset();  // used again: stays
  keys->NoteCommitted(queued[1], 99);          // raised by another proxy while queued
  persister.CompleteAll();
  ASSERT_EQ(persister.records.size(), 2u);
  EXPECT_EQ(persister.records[1].key, queued[1]);
  EXPECT_EQ(persister.records[1].token, 99u);
  EXPECT_TRUE(keys->Find(queued[0]).has_value());
  EXPECT_FALSE(keys->Find(queued[1]).has_value());
  EXPECT_EQ(keys->floor(), 99u);
  EXPECT_EQ(keys->Snapshot().keys, 1u);
}

// A synchronous persister (it answers inside PersistKey) forgets every slice in one sweep
// without recursing once per slice.
TEST_F(FenceKeysTest, ASynchronousPersisterForgetsEverySliceInOneSweep) {
  persister.synchronous = true;
  KeySettings settings;
  settings.forget_idle_after = std::chrono::seconds(1);
  settings.forget_slice = 2;
  KeyMaxima replayed;
  for (int i = 0; i < 5000; ++i) replayed.emplace("k" + std::to_string(i), i);
  auto keys = Make(0, std::move(replayed), settings);
  now += 5;
  keys->Sweep(now);
  EXPECT_EQ(keys->Snapshot().keys, 0u);
  EXPECT_EQ(keys->forgets_in_flight(), 0u);
  EXPECT_EQ(keys->floor(), 4999u);
}

// After a burst of forgetting the few keys left move into one arena per shard (so that they do
// not keep the pages of the million forgotten ones resident): every one of them is still found
// with its max, can be used and raised, and keys of 1 and 128 bytes keep their length.
TEST_F(FenceKeysTest, KeysLeftAfterABurstOfForgettingAreRelocatedIntact) {
  persister.synchronous = true;
  KeySettings settings;
  settings.forget_idle_after = std::chrono::seconds(10);
  KeyMaxima replayed;
  for (int i = 0; i < 100000; ++i) replayed.emplace("k" + std::to_string(i), 1000 + i);
  const std::string longest(128, 'x');
  replayed.emplace("a", 7);
  replayed.emplace(longest, 9);
  auto keys = Make(0, std::move(replayed), settings);
  now += 20;
  // Kept in use: 100 keys and the two odd lengths.
  std::vector<std::string> kept = {"a", longest};
  for (int i = 0; i < 100; ++i) kept.push_back("k" + std::to_string(i * 997));
  for (const std::string& k : kept) keys->Acquire(k, 0).fence.reset();
  keys->Sweep(now);  // forgets the rest (the persister answers at once)
  ASSERT_EQ(keys->Snapshot().keys, kept.size());
  keys->Sweep(now + 3);  // the tables are sparse now: relocated (and the Fences folded back)
  EXPECT_GT(keys->relocations(), 0u);
  for (const std::string& k : kept) {
    auto found = keys->Find(k);
    ASSERT_TRUE(found.has_value()) << k;
    const uint64_t want = k == "a" ? 7 : k == longest ? 9 : 1000 + std::stoull(k.substr(1));
    EXPECT_EQ(found->max_token, want) << k;
  }
  EXPECT_FALSE(keys->Find("k1").has_value());
  // Still usable, and raised through the relocated key.
  AdmitNow(*keys, longest, 50)->Release();
  AdmitNow(*keys, "a", 51)->Release();
  EXPECT_EQ(keys->Find(longest)->max_token, 50u);
  // A later relocation (after more forgetting) moves the arena's keys again.
  const uint64_t before = keys->relocations();
  keys->Sweep(now + 100);  // everything idle: the rest goes too
  keys->Sweep(now + 103);
  EXPECT_EQ(keys->Snapshot().keys, 0u);
  EXPECT_GE(keys->relocations(), before);
}

TEST_F(FenceKeysTest, AFailedForgetRecordForgetsNothing) {
  KeySettings settings;
  settings.forget_idle_after = std::chrono::seconds(1);
  auto keys = Make(0, {}, settings);
  AdmitNow(*keys, "k", 10)->Release();
  now += 5;
  keys->Sweep(now);
  persister.CompleteOne(false);
  EXPECT_TRUE(keys->Find("k").has_value());
  EXPECT_EQ(keys->floor(), 0u);
}

// Threads admit equal tokens and raises on a few hundred keys while another thread sweeps with a
// clock that runs fast: no Fence is folded back or forgotten while it is used (ASan would see
// the use after free), every key's max only grows, and admitted writes of a key all carry it.
TEST_F(FenceKeysTest, ConcurrentRequestsAndSweepsKeepEveryKeysOrder) {
  persister.synchronous = true;
  KeySettings settings;
  settings.forget_idle_after = std::chrono::seconds(1);
  std::atomic<double> clock{0};
  FenceKeys keys("objects", 0, {}, settings, persister, state_failed, [&clock] { return clock.load(); }, &observer);
  std::atomic<bool> stop{false};
  std::thread sweeper([&] {
    while (!stop.load()) {
      clock.store(clock.load() + 0.5);
      keys.Sweep(clock.load());
    }
  });
  std::atomic<uint64_t> admitted{0};
  std::vector<std::thread> workers;
  for (int t = 0; t < 4; ++t) {
    workers.emplace_back([&, t] {
      std::mt19937 rng(t);
      for (int i = 0; i < 20000; ++i) {
        std::string key = "k" + std::to_string(rng() % 300);
        uint64_t token = 1 + i / 100 + rng() % 3;
        KeyLookup found = keys.Acquire(key, token);
        if (!found.fence) continue;
        AtomicWaiter waiter;
        AdmitResult r = found.fence->Admit(token, waiter);
        if (r.admission == Admission::kWaiting) {
          while (!waiter.resolved.load(std::memory_order_acquire)) std::this_thread::yield();
          r.admission = waiter.admission;
        }
        if (r.admission == Admission::kAdmitted) {
          EXPECT_EQ(found.fence->Snapshot().max_token, token);
          admitted.fetch_add(1);
          found.fence->Release();
        }
      }
    });
  }
  for (auto& w : workers) w.join();
  stop = true;
  sweeper.join();
  EXPECT_GT(admitted.load(), 1000u);
  size_t raises = 0;
  for (const FenceRecord& r : persister.records) raises += r.kind == FenceRecord::Kind::kSetMax;
  EXPECT_GT(raises, 300u);
}

}  // namespace
}  // namespace fencing
