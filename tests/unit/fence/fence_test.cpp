// The fence state machine: stale rejection, the drain barrier before a raise, durable-before-
// forward, and what happens to waiters when a higher token or a failed sync overtakes them.
// Driven single-threaded with a fake persister, fake waiters and a virtual clock, first through
// hand-written scenarios, then through thousands of seeded random schedules checked against the
// order guarantee's invariants after every event.

#include <gtest/gtest.h>


#include <algorithm>
#include <cstdio>
#include <atomic>
#include <cstdint>
#include <functional>
#include <limits>
#include <map>
#include <memory>
#include <optional>
#include <random>
#include <string>
#include <utility>
#include <vector>

#include "fence/fence_observer.h"
#include "fence/fence.h"
#include "fence/admission_names.h"

namespace fencing {
namespace {

// Records Persist calls. Asynchronous by default: the test completes the outstanding write with
// Complete(ok). With synchronous set, Persist calls OnPersisted before returning, which the
// interface allows and which makes Resolve run inside Admit/Release.
class FakePersister : public FencePersister {
 public:
  void Persist(Fence& fence, uint64_t token) override {
    calls.push_back(token);
    if (before_persist) before_persist(token);
    if (outstanding) overlapping_persists++;  // one write at a time per fence
    if (synchronous) {
      if (on_durable && synchronous_ok) on_durable(token);
      fence.OnPersisted(token, synchronous_ok);
      return;
    }
    outstanding = token;
    fence_ = &fence;
  }

  // Finishes the outstanding write. The fence may start the next one from inside OnPersisted.
  void Complete(bool ok) {
    ASSERT_TRUE(outstanding.has_value()) << "no Persist to complete";
    uint64_t token = *outstanding;
    outstanding.reset();
    if (on_durable && ok) on_durable(token);
    fence_->OnPersisted(token, ok);
  }

  std::vector<uint64_t> calls;
  std::optional<uint64_t> outstanding;
  int overlapping_persists = 0;
  bool synchronous = false;
  bool synchronous_ok = true;
  std::function<void(uint64_t)> before_persist;  // checks made at the moment of Persist
  std::function<void(uint64_t)> on_durable;      // the token is durable, OnPersisted comes next

 private:
  Fence* fence_ = nullptr;
};

class FakeWaiter : public RaiseWaiter {
 public:
  void Resolve(Admission admission, uint64_t max_token) override {
    resolves.emplace_back(admission, max_token);
    if (on_resolve) on_resolve(admission, max_token);
  }

  std::vector<std::pair<Admission, uint64_t>> resolves;
  std::function<void(Admission, uint64_t)> on_resolve;
};


// Prints as "admitted/7" in assertion messages.
testing::AssertionResult Is(Admission expected, uint64_t expected_max, const AdmitResult& r) {
  if (r.admission == expected && r.max_token == expected_max) return testing::AssertionSuccess();
  return testing::AssertionFailure() << "got " << Name(r.admission) << "/" << r.max_token << ", want "
                                     << Name(expected) << "/" << expected_max;
}

testing::AssertionResult ResolvedOnce(const FakeWaiter& w, Admission expected, uint64_t expected_max) {
  if (w.resolves.size() != 1) {
    return testing::AssertionFailure() << "resolved " << w.resolves.size() << " times, want once";
  }
  if (w.resolves[0].first != expected || w.resolves[0].second != expected_max) {
    return testing::AssertionFailure() << "resolved " << Name(w.resolves[0].first) << "/" << w.resolves[0].second
                                       << ", want " << Name(expected) << "/" << expected_max;
  }
  return testing::AssertionSuccess();
}

// What the fence reports, kept as the metrics would show it (the fence knows no metrics library).
struct TestFenceMetrics final : FenceObserver {
  mutable double max_token = -1;  // -1: never reported
  mutable double raises = 0;
  mutable uint64_t waits = 0;
  mutable double wait_total = 0;

  void MaxToken(uint64_t value) const override { max_token = static_cast<double>(value); }
  void Raised() const override { raises += 1; }
  void RaiseWaited(double seconds) const override {
    ++waits;
    wait_total += seconds;
  }
  uint64_t wait_count() const { return waits; }
  double wait_sum() const { return wait_total; }
};

class FenceTest : public testing::Test {
 protected:
  static constexpr uint64_t kStart = 5;

  std::unique_ptr<Fence> MakeFence(uint64_t max, const FenceObserver* metrics = nullptr) {
    return std::make_unique<Fence>("orders", max, persister_, state_failed_, [this] { return now_; }, metrics);
  }

  FakePersister persister_;
  std::atomic<bool> state_failed_{false};
  double now_ = 100.0;
  std::unique_ptr<Fence> fence_ = MakeFence(kStart);
  FakeWaiter w1_, w2_, w3_, w4_;
};

TEST_F(FenceTest, EqualTokenIsAdmittedWithoutDiskIo) {
  EXPECT_TRUE(Is(Admission::kAdmitted, 5, fence_->Admit(5, w1_)));
  EXPECT_TRUE(Is(Admission::kAdmitted, 5, fence_->Admit(5, w2_)));
  EXPECT_EQ(fence_->Snapshot().inflight, 2u);
  fence_->Release();
  fence_->Release();
  EXPECT_TRUE(persister_.calls.empty());
  EXPECT_TRUE(w1_.resolves.empty()) << "a direct admission is not also resolved";
  FenceSnapshot s = fence_->Snapshot();
  EXPECT_EQ(s.max_token, 5u);
  EXPECT_EQ(s.inflight, 0u);
}

TEST_F(FenceTest, StaleTokenIsRejectedWithTheMax) {
  EXPECT_TRUE(Is(Admission::kStale, 5, fence_->Admit(4, w1_)));
  EXPECT_TRUE(Is(Admission::kStale, 5, fence_->Admit(0, w2_)));
  EXPECT_TRUE(persister_.calls.empty());
  EXPECT_TRUE(w1_.resolves.empty());
  FenceSnapshot s = fence_->Snapshot();
  EXPECT_EQ(s.inflight, 0u);
  EXPECT_EQ(s.waiting, 0u);
}

TEST_F(FenceTest, AdmitWithoutWaitingDecidesWhatNeedsNoWaitAndChangesNothingElse) {
  EXPECT_TRUE(Is(Admission::kAdmitted, 5, fence_->AdmitWithoutWaiting(5)));
  EXPECT_EQ(fence_->Snapshot().inflight, 1u) << "an admission it must Release";
  fence_->Release();
  EXPECT_TRUE(Is(Admission::kStale, 5, fence_->AdmitWithoutWaiting(4)));
  EXPECT_TRUE(Is(Admission::kTooFar, 5, fence_->AdmitWithoutWaiting(100, 10)));
  // A raise would wait: reported, and nothing started (no pending raise, no disk I/O).
  EXPECT_TRUE(Is(Admission::kWaiting, 5, fence_->AdmitWithoutWaiting(7)));
  FenceSnapshot s = fence_->Snapshot();
  EXPECT_EQ(s.pending, 0u);
  EXPECT_EQ(s.waiting, 0u);
  EXPECT_EQ(s.inflight, 0u);
  EXPECT_TRUE(persister_.calls.empty());
  // While a raise is pending, even the old max waits (and stays unadmitted).
  EXPECT_TRUE(Is(Admission::kWaiting, 7, fence_->Admit(7, w1_)));
  EXPECT_TRUE(Is(Admission::kStale, 7, fence_->AdmitWithoutWaiting(5)));
  EXPECT_TRUE(Is(Admission::kWaiting, 7, fence_->AdmitWithoutWaiting(7)));
  EXPECT_EQ(fence_->Snapshot().waiting, 1u);
  state_failed_ = true;
  EXPECT_EQ(fence_->AdmitWithoutWaiting(7).admission, Admission::kFailed);
}

// A verified route asks its lock service exactly for the tokens above the effective max these
// report (request_plan.h NeedsVerification).
TEST_F(FenceTest, CheckAndProbeReportTheEffectiveMaxThatTellsARaise) {
  EXPECT_EQ(fence_->Check(6).max_token, 5u);
  EXPECT_EQ(fence_->AdmitWithoutWaiting(6).max_token, 5u);
  EXPECT_TRUE(Is(Admission::kWaiting, 8, fence_->Admit(8, w1_)));
  EXPECT_EQ(fence_->Check(8).max_token, 8u) << "joining the pending raise is not a new one";
  EXPECT_EQ(fence_->AdmitWithoutWaiting(9).max_token, 8u) << "above the pending raise: a new one";
  EXPECT_EQ(fence_->Snapshot().pending, 8u) << "asking changes nothing";
}

TEST_F(FenceTest, CheckRefusesWhatAdmitWouldRefuseAndHoldsNothing) {
  EXPECT_TRUE(Is(Admission::kAdmitted, 5, fence_->Check(5)));
  EXPECT_TRUE(Is(Admission::kAdmitted, 5, fence_->Check(9)));  // would raise
  EXPECT_TRUE(Is(Admission::kStale, 5, fence_->Check(4)));
  EXPECT_TRUE(Is(Admission::kTooFar, 5, fence_->Check(100, 10)));
  FenceSnapshot s = fence_->Snapshot();
  EXPECT_EQ(s.inflight, 0u) << "a check admits nothing";
  EXPECT_EQ(s.pending, 0u) << "a check starts no raise";
  EXPECT_TRUE(persister_.calls.empty());
  // A pending raise counts as the max.
  EXPECT_TRUE(Is(Admission::kWaiting, 7, fence_->Admit(7, w1_)));
  EXPECT_TRUE(Is(Admission::kStale, 7, fence_->Check(5)));
  EXPECT_TRUE(Is(Admission::kAdmitted, 7, fence_->Check(7)));
  state_failed_ = true;
  EXPECT_EQ(fence_->Check(7).admission, Admission::kFailed);
}

TEST_F(FenceTest, FreshFenceAdmitsTokenZero) {
  auto fence = MakeFence(0);
  EXPECT_TRUE(Is(Admission::kAdmitted, 0, fence->Admit(0, w1_)));
  EXPECT_TRUE(persister_.calls.empty());
}

TEST_F(FenceTest, RaiseWithNothingInFlightPersistsAtOnceAndAdmitsWhenDurable) {
  EXPECT_TRUE(Is(Admission::kWaiting, 7, fence_->Admit(7, w1_)));
  EXPECT_EQ(persister_.calls, std::vector<uint64_t>{7});
  FenceSnapshot s = fence_->Snapshot();
  EXPECT_EQ(s.max_token, 5u) << "not durable yet";
  EXPECT_EQ(s.pending, 7u);
  EXPECT_EQ(s.waiting, 1u);
  EXPECT_EQ(s.inflight, 0u);
  EXPECT_TRUE(w1_.resolves.empty()) << "forwarded before the raise was durable";

  persister_.Complete(true);
  EXPECT_TRUE(ResolvedOnce(w1_, Admission::kAdmitted, 7));
  s = fence_->Snapshot();
  EXPECT_EQ(s.max_token, 7u);
  EXPECT_EQ(s.pending, 0u);
  EXPECT_EQ(s.waiting, 0u);
  EXPECT_EQ(s.inflight, 1u) << "the resolved waiter holds an admission";

  // After the raise, 7 is the plain max: no more disk I/O for it.
  EXPECT_TRUE(Is(Admission::kAdmitted, 7, fence_->Admit(7, w2_)));
  EXPECT_EQ(persister_.calls.size(), 1u);
}

TEST_F(FenceTest, RaiseWaitsForEveryOlderWriteToComplete) {
  ASSERT_TRUE(Is(Admission::kAdmitted, 5, fence_->Admit(5, w1_)));
  ASSERT_TRUE(Is(Admission::kAdmitted, 5, fence_->Admit(5, w2_)));
  EXPECT_TRUE(Is(Admission::kWaiting, 6, fence_->Admit(6, w3_)));
  EXPECT_TRUE(persister_.calls.empty()) << "persisted while two older writes were in flight";
  fence_->Release();
  EXPECT_TRUE(persister_.calls.empty()) << "persisted while an older write was in flight";
  EXPECT_EQ(fence_->Snapshot().inflight, 1u);
  fence_->Release();  // the drain barrier opens here
  EXPECT_EQ(persister_.calls, std::vector<uint64_t>{6});
  EXPECT_TRUE(w3_.resolves.empty());
  persister_.Complete(true);
  EXPECT_TRUE(ResolvedOnce(w3_, Admission::kAdmitted, 6));
}

TEST_F(FenceTest, DuringARaiseLowerTokensIncludingTheOldMaxAreStale) {
  ASSERT_TRUE(Is(Admission::kAdmitted, 5, fence_->Admit(5, w1_)));
  ASSERT_TRUE(Is(Admission::kWaiting, 8, fence_->Admit(8, w2_)));
  // The pending raise counts as the max: the old holder's writes stop at once, they never wait.
  EXPECT_TRUE(Is(Admission::kStale, 8, fence_->Admit(5, w3_)));
  EXPECT_TRUE(Is(Admission::kStale, 8, fence_->Admit(7, w3_)));
  EXPECT_TRUE(Is(Admission::kStale, 8, fence_->Admit(1, w3_)));
  EXPECT_TRUE(w3_.resolves.empty());
  FenceSnapshot s = fence_->Snapshot();
  EXPECT_EQ(s.waiting, 1u);
  EXPECT_EQ(s.inflight, 1u);
  EXPECT_EQ(s.max_token, 5u);
  EXPECT_EQ(s.pending, 8u);
}

TEST_F(FenceTest, EqualToPendingJoinsTheWaitersAndAllGoTogether) {
  ASSERT_TRUE(Is(Admission::kAdmitted, 5, fence_->Admit(5, w1_)));
  EXPECT_TRUE(Is(Admission::kWaiting, 8, fence_->Admit(8, w2_)));
  EXPECT_TRUE(Is(Admission::kWaiting, 8, fence_->Admit(8, w3_)));
  EXPECT_EQ(fence_->Snapshot().waiting, 2u);
  fence_->Release();
  // Joining while the write is under way is the same as joining before it.
  EXPECT_TRUE(Is(Admission::kWaiting, 8, fence_->Admit(8, w4_)));
  EXPECT_EQ(persister_.calls, std::vector<uint64_t>{8}) << "one raise, one write, however many carry it";
  persister_.Complete(true);
  EXPECT_TRUE(ResolvedOnce(w2_, Admission::kAdmitted, 8));
  EXPECT_TRUE(ResolvedOnce(w3_, Admission::kAdmitted, 8));
  EXPECT_TRUE(ResolvedOnce(w4_, Admission::kAdmitted, 8));
  EXPECT_EQ(fence_->Snapshot().inflight, 3u);
}

TEST_F(FenceTest, HigherTokenWhilePendingRejectsOlderWaitersAndTakesOver) {
  ASSERT_TRUE(Is(Admission::kAdmitted, 5, fence_->Admit(5, w1_)));
  ASSERT_TRUE(Is(Admission::kWaiting, 8, fence_->Admit(8, w2_)));
  ASSERT_TRUE(Is(Admission::kWaiting, 8, fence_->Admit(8, w3_)));
  EXPECT_TRUE(Is(Admission::kWaiting, 9, fence_->Admit(9, w4_)));
  // Holder 8 lost the lock to holder 9 before anything of 8 was forwarded.
  EXPECT_TRUE(ResolvedOnce(w2_, Admission::kStale, 9));
  EXPECT_TRUE(ResolvedOnce(w3_, Admission::kStale, 9));
  EXPECT_TRUE(Is(Admission::kStale, 9, fence_->Admit(8, w1_)));
  FenceSnapshot s = fence_->Snapshot();
  EXPECT_EQ(s.pending, 9u);
  EXPECT_EQ(s.waiting, 1u);
  fence_->Release();
  EXPECT_EQ(persister_.calls, std::vector<uint64_t>{9}) << "8 is skipped: nobody carries it any more";
  persister_.Complete(true);
  EXPECT_TRUE(ResolvedOnce(w4_, Admission::kAdmitted, 9));
  EXPECT_EQ(w2_.resolves.size(), 1u) << "a rejected waiter is not resolved again";
}

TEST_F(FenceTest, HigherTokenDuringAPersistIsPersistedNext) {
  ASSERT_TRUE(Is(Admission::kWaiting, 7, fence_->Admit(7, w1_)));
  ASSERT_EQ(persister_.calls, std::vector<uint64_t>{7});
  EXPECT_TRUE(Is(Admission::kWaiting, 9, fence_->Admit(9, w2_)));
  EXPECT_TRUE(ResolvedOnce(w1_, Admission::kStale, 9));
  EXPECT_EQ(persister_.calls.size(), 1u) << "a second write started while the first is under way";
  EXPECT_TRUE(Is(Admission::kStale, 9, fence_->Admit(7, w3_)));
  EXPECT_TRUE(Is(Admission::kStale, 9, fence_->Admit(8, w3_)));

  persister_.Complete(true);  // 7 is durable; nobody carries it, and 9 goes to disk next
  EXPECT_EQ(persister_.calls, (std::vector<uint64_t>{7, 9}));
  FenceSnapshot s = fence_->Snapshot();
  EXPECT_EQ(s.max_token, 7u);
  EXPECT_EQ(s.pending, 9u);
  EXPECT_EQ(s.inflight, 0u);
  EXPECT_TRUE(w2_.resolves.empty()) << "9 forwarded before it was durable";

  persister_.Complete(true);
  EXPECT_TRUE(ResolvedOnce(w2_, Admission::kAdmitted, 9));
  EXPECT_EQ(fence_->Snapshot().max_token, 9u);
  EXPECT_EQ(persister_.overlapping_persists, 0);
}

TEST_F(FenceTest, FailedPersistFailsTheWaitersAndTurnsFencedWritesOff) {
  ASSERT_TRUE(Is(Admission::kWaiting, 7, fence_->Admit(7, w1_)));
  ASSERT_TRUE(Is(Admission::kWaiting, 7, fence_->Admit(7, w2_)));
  // As the registry does: the flag is set before the fence hears of the failure.
  state_failed_ = true;
  persister_.Complete(false);
  EXPECT_TRUE(ResolvedOnce(w1_, Admission::kFailed, 7));
  EXPECT_TRUE(ResolvedOnce(w2_, Admission::kFailed, 7));
  FenceSnapshot s = fence_->Snapshot();
  EXPECT_EQ(s.max_token, 5u) << "a raise that is not durable never counts";
  EXPECT_EQ(s.pending, 0u);
  EXPECT_EQ(s.waiting, 0u);
  EXPECT_EQ(s.inflight, 0u);
  // Every token is refused now, even the durable max: no retrying on a file that failed a sync.
  EXPECT_EQ(fence_->Admit(5, w3_).admission, Admission::kFailed);
  EXPECT_EQ(fence_->Admit(9, w3_).admission, Admission::kFailed);
  EXPECT_EQ(fence_->Admit(1, w3_).admission, Admission::kFailed);
  EXPECT_EQ(persister_.calls.size(), 1u);
  EXPECT_TRUE(w3_.resolves.empty());
}

TEST_F(FenceTest, FailedPersistOfOneTokenAlsoFailsTheHigherPendingOne) {
  ASSERT_TRUE(Is(Admission::kWaiting, 7, fence_->Admit(7, w1_)));
  ASSERT_TRUE(Is(Admission::kWaiting, 9, fence_->Admit(9, w2_)));
  state_failed_ = true;
  persister_.Complete(false);
  EXPECT_TRUE(ResolvedOnce(w1_, Admission::kStale, 9));
  EXPECT_TRUE(ResolvedOnce(w2_, Admission::kFailed, 9));
  EXPECT_EQ(persister_.calls.size(), 1u) << "9 must not be written to a file that failed";
  EXPECT_FALSE(persister_.outstanding.has_value());
  EXPECT_EQ(fence_->Snapshot().max_token, 5u);
}

TEST_F(FenceTest, FailedStateRefusesEvenTheCurrentMax) {
  state_failed_ = true;
  AdmitResult r = fence_->Admit(5, w1_);
  EXPECT_EQ(r.admission, Admission::kFailed);
  EXPECT_EQ(r.max_token, 5u);
  EXPECT_EQ(fence_->Snapshot().inflight, 0u);
}

TEST_F(FenceTest, InFlightWritesStillReleaseAfterAFailure) {
  ASSERT_TRUE(Is(Admission::kAdmitted, 5, fence_->Admit(5, w1_)));
  ASSERT_TRUE(Is(Admission::kWaiting, 6, fence_->Admit(6, w2_)));
  state_failed_ = true;
  fence_->Release();  // the drain completes; the raise is attempted and the store reports failure
  ASSERT_EQ(persister_.calls, std::vector<uint64_t>{6});
  persister_.Complete(false);
  EXPECT_TRUE(ResolvedOnce(w2_, Admission::kFailed, 6));
  EXPECT_EQ(fence_->Snapshot().inflight, 0u);
}

TEST_F(FenceTest, AbandonRemovesAStillWaitingWaiterOnly) {
  ASSERT_TRUE(Is(Admission::kAdmitted, 5, fence_->Admit(5, w1_)));
  ASSERT_TRUE(Is(Admission::kWaiting, 6, fence_->Admit(6, w2_)));
  ASSERT_TRUE(Is(Admission::kWaiting, 6, fence_->Admit(6, w3_)));
  EXPECT_TRUE(fence_->Abandon(w2_));
  EXPECT_FALSE(fence_->Abandon(w2_)) << "abandoned twice";
  EXPECT_FALSE(fence_->Abandon(w4_)) << "never waited";
  EXPECT_EQ(fence_->Snapshot().waiting, 1u);
  fence_->Release();
  persister_.Complete(true);
  EXPECT_TRUE(w2_.resolves.empty()) << "an abandoned waiter must not be resolved (it may be gone)";
  EXPECT_TRUE(ResolvedOnce(w3_, Admission::kAdmitted, 6));
  EXPECT_FALSE(fence_->Abandon(w3_)) << "already resolved";
  EXPECT_EQ(fence_->Snapshot().inflight, 1u) << "only the waiter that stayed holds an admission";
}

TEST_F(FenceTest, AbandonAfterAStaleResolveReturnsFalse) {
  ASSERT_TRUE(Is(Admission::kWaiting, 7, fence_->Admit(7, w1_)));
  ASSERT_TRUE(Is(Admission::kWaiting, 8, fence_->Admit(8, w2_)));
  ASSERT_TRUE(ResolvedOnce(w1_, Admission::kStale, 8));
  EXPECT_FALSE(fence_->Abandon(w1_));
}

// Every waiter of a raise giving up does not undo the raise: the holder of that token exists,
// and making it durable only rejects older holders sooner.
TEST_F(FenceTest, RaiseCompletesEvenIfAllItsWaitersAbandoned) {
  ASSERT_TRUE(Is(Admission::kWaiting, 7, fence_->Admit(7, w1_)));
  ASSERT_TRUE(fence_->Abandon(w1_));
  persister_.Complete(true);
  FenceSnapshot s = fence_->Snapshot();
  EXPECT_EQ(s.max_token, 7u);
  EXPECT_EQ(s.pending, 0u);
  EXPECT_EQ(s.inflight, 0u);
  EXPECT_TRUE(w1_.resolves.empty());
}

// Resolve runs with no fence lock held: a waiter may call straight back into the fence.
TEST_F(FenceTest, ResolveMayCallBackIntoTheFence) {
  FenceSnapshot seen;
  w1_.on_resolve = [&](Admission a, uint64_t) {
    seen = fence_->Snapshot();
    if (a == Admission::kAdmitted) fence_->Release();  // e.g. the backend failed at once
  };
  ASSERT_TRUE(Is(Admission::kWaiting, 7, fence_->Admit(7, w1_)));
  persister_.Complete(true);
  ASSERT_TRUE(ResolvedOnce(w1_, Admission::kAdmitted, 7));
  EXPECT_EQ(seen.max_token, 7u);
  EXPECT_EQ(seen.inflight, 1u);
  EXPECT_EQ(fence_->Snapshot().inflight, 0u);
}

// A persister may complete inside Persist; the waiter is then resolved before Admit returns,
// and Admit still reports kWaiting (the caller must cope with that order).
TEST_F(FenceTest, SynchronousPersisterResolvesBeforeAdmitReturns) {
  persister_.synchronous = true;
  EXPECT_TRUE(Is(Admission::kWaiting, 7, fence_->Admit(7, w1_)));
  EXPECT_TRUE(ResolvedOnce(w1_, Admission::kAdmitted, 7));
  FenceSnapshot s = fence_->Snapshot();
  EXPECT_EQ(s.max_token, 7u);
  EXPECT_EQ(s.inflight, 1u);
  EXPECT_EQ(s.pending, 0u);
}

TEST_F(FenceTest, SynchronousPersisterRaisesFromRelease) {
  persister_.synchronous = true;
  ASSERT_TRUE(Is(Admission::kAdmitted, 5, fence_->Admit(5, w1_)));
  ASSERT_TRUE(Is(Admission::kWaiting, 6, fence_->Admit(6, w2_)));
  EXPECT_TRUE(w2_.resolves.empty());
  fence_->Release();
  EXPECT_TRUE(ResolvedOnce(w2_, Admission::kAdmitted, 6));
}

TEST_F(FenceTest, LargestTokenCanBeRaisedTo) {
  constexpr uint64_t kMax = std::numeric_limits<uint64_t>::max();
  ASSERT_TRUE(Is(Admission::kWaiting, kMax, fence_->Admit(kMax, w1_)));
  persister_.Complete(true);
  EXPECT_TRUE(ResolvedOnce(w1_, Admission::kAdmitted, kMax));
  EXPECT_TRUE(Is(Admission::kStale, kMax, fence_->Admit(kMax - 1, w2_)));
  EXPECT_TRUE(Is(Admission::kAdmitted, kMax, fence_->Admit(kMax, w2_)));
}

TEST_F(FenceTest, SnapshotTracksEachPhase) {
  auto snap = [&] {
    FenceSnapshot s = fence_->Snapshot();
    return std::vector<uint64_t>{s.max_token, s.pending, s.inflight, s.waiting};
  };
  EXPECT_EQ(snap(), (std::vector<uint64_t>{5, 0, 0, 0}));
  fence_->Admit(5, w1_);
  EXPECT_EQ(snap(), (std::vector<uint64_t>{5, 0, 1, 0}));
  fence_->Admit(6, w2_);
  fence_->Admit(6, w3_);
  EXPECT_EQ(snap(), (std::vector<uint64_t>{5, 6, 1, 2}));
  fence_->Release();
  EXPECT_EQ(snap(), (std::vector<uint64_t>{5, 6, 0, 2}));  // pending while the write is under way
  persister_.Complete(true);
  EXPECT_EQ(snap(), (std::vector<uint64_t>{6, 0, 2, 0}));
  fence_->Release();
  fence_->Release();
  EXPECT_EQ(snap(), (std::vector<uint64_t>{6, 0, 0, 0}));
}

TEST_F(FenceTest, MetricsMeasureRaiseWaitOnTheInjectedClock) {
  TestFenceMetrics m;
  auto fence = MakeFence(5, &m);
  EXPECT_EQ(m.max_token, 5.0) << "the gauge starts at the recovered max";

  ASSERT_TRUE(Is(Admission::kAdmitted, 5, fence->Admit(5, w1_)));
  now_ = 110.0;
  ASSERT_TRUE(Is(Admission::kWaiting, 6, fence->Admit(6, w2_)));  // the drain starts at 110
  now_ = 111.0;
  ASSERT_TRUE(Is(Admission::kWaiting, 7, fence->Admit(7, w3_)));  // a takeover keeps the start
  now_ = 112.5;
  fence->Release();  // the drain ends at 112.5
  EXPECT_EQ(m.wait_count(), 1u);
  EXPECT_DOUBLE_EQ(m.wait_sum(), 2.5);
  EXPECT_EQ(m.max_token, 5.0) << "the gauge moved before the raise was durable";
  EXPECT_EQ(m.raises, 0.0);

  now_ = 200.0;  // time spent writing is state_sync_seconds, not raise wait
  persister_.Complete(true);
  EXPECT_EQ(m.max_token, 7.0);
  EXPECT_EQ(m.raises, 1.0);
  EXPECT_EQ(m.wait_count(), 1u);

  // A raise with nothing in flight waits for nothing.
  fence->Release();
  ASSERT_TRUE(Is(Admission::kWaiting, 8, fence->Admit(8, w4_)));
  EXPECT_EQ(m.wait_count(), 2u);
  EXPECT_DOUBLE_EQ(m.wait_sum(), 2.5);
  persister_.Complete(true);
  EXPECT_EQ(m.raises, 2.0);
  EXPECT_EQ(m.max_token, 8.0);
}

TEST_F(FenceTest, FailedRaiseIsNotCountedNorShownAsMax) {
  TestFenceMetrics m;
  auto fence = MakeFence(5, &m);
  ASSERT_TRUE(Is(Admission::kWaiting, 9, fence->Admit(9, w1_)));
  state_failed_ = true;
  persister_.Complete(false);
  EXPECT_EQ(m.raises, 0.0);
  EXPECT_EQ(m.max_token, 5.0);
}

// ------------------------------------------------------------------ seeded random schedules

// How often each path was taken over all seeds: a schedule that never reaches a path proves
// nothing about it.
struct Coverage {
  uint64_t admitted = 0, stale = 0, waiting = 0, waited_behind_inflight = 0, failed = 0;
  uint64_t resolved_admitted = 0, resolved_stale = 0, resolved_failed = 0;
  uint64_t abandoned = 0, abandon_refused = 0, persists = 0, max_events = 0;
};

// One schedule: a few hundred random events against one fence, with every invariant of the order
// guarantee checked after each event and at the moments that matter (Persist, Resolve).
class Schedule {
 public:
  Schedule(uint32_t seed, Coverage& coverage) : seed_(seed), rng_(seed), cov_(coverage) {
    // Some seeds start near the top of the token range, some complete writes inside Persist,
    // and one in seven lets a write fail now and then.
    start_ = seed % 10 == 0 ? std::numeric_limits<uint64_t>::max() - 5000 : rng_() % 4;
    persister_.synchronous = seed % 5 == 1;
    may_fail_ = seed % 7 == 3;
    durable_ = start_;
    fence_ = std::make_unique<Fence>("f", start_, persister_, state_failed_, [this] { return now_; },
                                     seed % 2 ? &metrics_ : nullptr);
    persister_.before_persist = [this](uint64_t token) {
      // (c) the drain barrier: nothing admitted may run while the max changes under it.
      Check(admitted_.empty(), "Persist called with requests admitted");
      Check(token > durable_, "Persist of a token that is not a raise");
      ++persists_;
      ++cov_.persists;
    };
    persister_.on_durable = [this](uint64_t token) { durable_ = std::max(durable_, token); };
  }

  void Run(int events) {
    for (step_ = 0; step_ < events && !::testing::Test::HasFatalFailure(); ++step_) {
      int roll = static_cast<int>(rng_() % 100);
      if (roll < 40) {
        AdmitOne();
      } else if (roll < 65) {
        ReleaseOne();
      } else if (roll < 82) {
        CompletePersist();
      } else if (roll < 92) {
        AbandonOne();
      } else {
        now_ += static_cast<double>(rng_() % 1000) / 100.0;
      }
      CheckState();
      ++cov_.max_events;
    }
    if (failed_) {
      Check(fence_->Admit(durable_, spare_).admission == Admission::kFailed, "admitted after a failed sync");
    }
    Drain();
  }

 private:
  struct Waiter final : FakeWaiter {
    uint64_t token = 0;
    int id = 0;
    bool waiting = false;  // registered with the fence and not yet resolved
    bool abandoned = false;
  };

  void Check(bool ok, const char* what) {
    if (!ok) {
      ADD_FAILURE() << "seed " << seed_ << " step " << step_ << ": " << what;
      ++failures_seen_;
    }
  }

  uint64_t PickToken() {
    FenceSnapshot s = fence_->Snapshot();
    uint64_t top = std::max(s.max_token, s.pending);
    switch (rng_() % 6) {
      case 0: return top > 0 ? top - 1 - rng_() % std::min<uint64_t>(top, 3) : 0;  // below
      case 1: return s.max_token;  // the durable max: stale if a raise is pending
      case 2:
      case 3: return top;          // equal: joins or is admitted
      case 4: return top + 1;
      default: return top + 1 + rng_() % 5;
    }
  }

  void Admitted(int id, uint64_t token) {
    // (f) forwarded only once durable; and in order: never a lower token after a higher one.
    Check(token <= durable_, "admitted a token before it was durable");
    Check(token >= last_admitted_, "admitted a lower token after a higher one");
    last_admitted_ = token;
    admitted_.emplace(id, token);
  }

  void AdmitOne() {
    uint64_t token = PickToken();
    FenceSnapshot before = fence_->Snapshot();
    auto w = std::make_unique<Waiter>();
    Waiter* raw = w.get();
    raw->token = token;
    raw->id = next_id_++;
    raw->waiting = true;  // before Admit: a synchronous persister resolves inside it
    raw->on_resolve = [this, raw](Admission a, uint64_t max) {
      Check(!raw->abandoned, "an abandoned waiter was resolved");
      Check(raw->resolves.size() == 1, "a waiter was resolved twice");  // (e)
      raw->waiting = false;
      switch (a) {
        case Admission::kAdmitted:
          Check(max == raw->token, "admitted with a different token");
          Admitted(raw->id, raw->token);
          ++cov_.resolved_admitted;
          break;
        case Admission::kStale:
          Check(max > raw->token, "a waiter went stale to a token that is not higher");
          ++cov_.resolved_stale;
          break;
        case Admission::kFailed:
          Check(state_failed_.load(), "a waiter failed while the state is healthy");
          ++cov_.resolved_failed;
          break;
        case Admission::kWaiting:
        case Admission::kTooFar:  // only ever a direct answer, and only with a max_jump
        case Admission::kKeyLimit:  // a keyed fence's answer, never a Fence's
        case Admission::kUnavailable:  // only with a shared store's gate (fence_remote_test)
          Check(false, "resolved as waiting, too far, key limit or unavailable");
          break;
      }
    };
    waiters_.push_back(std::move(w));

    AdmitResult r = fence_->Admit(token, *raw);
    uint64_t top = std::max(before.max_token, before.pending);
    if (r.admission != Admission::kWaiting) {
      Check(raw->resolves.empty(), "a direct answer was also resolved");
      raw->waiting = false;
    }
    switch (r.admission) {
      case Admission::kAdmitted:
        Check(token == before.max_token && before.pending == 0, "admitted without being the max");
        Admitted(raw->id, token);
        ++cov_.admitted;
        break;
      case Admission::kStale:
        Check(token < top && r.max_token == top, "stale answer does not match the effective max");
        ++cov_.stale;
        break;
      case Admission::kWaiting:
        Check(token >= top && token > before.max_token && r.max_token == token, "waiting on the wrong token");
        ++cov_.waiting;
        if (before.inflight > 0) ++cov_.waited_behind_inflight;
        break;
      case Admission::kFailed:
        Check(state_failed_.load(), "failed while the state is healthy");
        ++cov_.failed;
        break;
      case Admission::kTooFar:
        Check(false, "too far without a max_jump");
        break;
      case Admission::kKeyLimit:
        Check(false, "a Fence answered with the key limit");
        break;
      case Admission::kUnavailable:
        Check(false, "unavailable without a shared store's gate");
        break;
    }
  }

  void ReleaseOne() {
    if (admitted_.empty()) return;
    auto it = admitted_.begin();
    std::advance(it, rng_() % admitted_.size());
    admitted_.erase(it);  // erased first: the release may start a Persist that checks (c)
    fence_->Release();
  }

  void CompletePersist() {
    if (!persister_.outstanding) return;
    bool ok = !(may_fail_ && rng_() % 50 == 0);
    if (!ok) {
      state_failed_ = true;  // as the registry does, before telling the fence
      failed_ = true;
    }
    persister_.Complete(ok);
  }

  void AbandonOne() {
    if (waiters_.empty()) return;
    Waiter& w = *waiters_[rng_() % waiters_.size()];
    bool was_waiting = w.waiting;
    bool removed = fence_->Abandon(w);
    Check(removed == was_waiting, "Abandon disagrees with whether the waiter was waiting");
    if (removed) {
      w.waiting = false;
      w.abandoned = true;
      ++cov_.abandoned;
    } else {
      ++cov_.abandon_refused;
    }
  }

  void CheckState() {
    // (a) one token at a time, and (b) it is the durable max: no stale write is in flight.
    for (const auto& [id, token] : admitted_) {
      Check(token == admitted_.begin()->second, "admitted requests carry different tokens");
      Check(token >= durable_, "an admitted token is below the durable max");
    }
    FenceSnapshot s = fence_->Snapshot();
    // (d) the max never goes down, and it is exactly what was made durable.
    Check(s.max_token >= last_max_, "max_token decreased");
    Check(s.max_token == durable_, "max_token differs from the durable max");
    last_max_ = s.max_token;
    Check(s.inflight == admitted_.size(), "inflight differs from the admitted requests");
    size_t waiting = 0;
    for (const auto& w : waiters_) waiting += w->waiting;
    Check(s.waiting == waiting, "waiting count differs from the waiters not yet resolved");
    Check(s.pending == 0 || s.pending > s.max_token, "pending raise is not above the max");
    Check(persister_.overlapping_persists == 0, "two writes under way at once");
  }

  // Lets every request finish and every write complete, then checks that nobody was forgotten.
  void Drain() {
    for (int guard = 0; guard < 10000 && (!admitted_.empty() || persister_.outstanding); ++guard) {
      if (!admitted_.empty()) {
        admitted_.erase(admitted_.begin());
        fence_->Release();
      } else {
        persister_.Complete(true);
      }
      CheckState();
    }
    // Waiters admitted during the drain hold admissions too; release them.
    while (!admitted_.empty()) {
      admitted_.erase(admitted_.begin());
      fence_->Release();
    }
    CheckState();
    for (const auto& w : waiters_) {
      // (e) exactly once unless abandoned (and never once abandoned, checked in Resolve).
      if (w->abandoned) continue;
      bool direct = w->resolves.empty() && !w->waiting;
      if (!direct) Check(w->resolves.size() == 1, "a waiter was never resolved");
    }
    FenceSnapshot s = fence_->Snapshot();
    Check(s.inflight == 0 && s.waiting == 0 && s.pending == 0, "the fence is not idle after the drain");
    if (metrics_used()) {
      Check(metrics_.wait_count() == persists_, "one raise_wait observation per write");
      Check(metrics_.wait_sum() >= 0, "negative raise wait");
      Check(metrics_.max_token == static_cast<double>(s.max_token), "max_token gauge is off");
    }
  }

  bool metrics_used() const { return seed_ % 2; }

 public:
  int failures_seen() const { return failures_seen_; }

 private:
  uint32_t seed_;
  std::mt19937 rng_;
  Coverage& cov_;
  uint64_t start_ = 0;
  bool may_fail_ = false;
  bool failed_ = false;
  int step_ = 0;
  int next_id_ = 0;
  int failures_seen_ = 0;
  uint64_t persists_ = 0;
  double now_ = 0;
  uint64_t durable_ = 0;
  uint64_t last_max_ = 0;
  uint64_t last_admitted_ = 0;
  FakePersister persister_;
  std::atomic<bool> state_failed_{false};
  TestFenceMetrics metrics_;
  std::unique_ptr<Fence> fence_;
  std::map<int, uint64_t> admitted_;  // request id -> token
  std::vector<std::unique_ptr<Waiter>> waiters_;
  FakeWaiter spare_;
};

TEST(FenceScheduleTest, RandomSchedulesKeepTheOrderGuarantee) {
  Coverage cov;
  for (uint32_t seed = 1; seed <= 3000; ++seed) {
    Schedule schedule(seed, cov);
    schedule.Run(300);
    // Stop at the first bad seed: its messages say what broke, and the seed reproduces it.
    ASSERT_EQ(schedule.failures_seen(), 0) << "first failing seed: " << seed;
  }
  // Every path was exercised many times, not just the easy ones.
  EXPECT_EQ(cov.max_events, 3000u * 300u);
  for (auto [count, what] : std::vector<std::pair<uint64_t, const char*>>{
           {cov.admitted, "direct admissions"},
           {cov.stale, "stale rejections"},
           {cov.waiting, "waits"},
           {cov.waited_behind_inflight, "waits behind in-flight writes"},
           {cov.failed, "admissions refused after a failure"},
           {cov.resolved_admitted, "waiters admitted"},
           {cov.resolved_stale, "waiters overtaken"},
           {cov.resolved_failed, "waiters failed"},
           {cov.abandoned, "abandons"},
           {cov.abandon_refused, "refused abandons"},
           {cov.persists, "persists"}}) {
    EXPECT_GE(count, 100u) << what;
  }
  std::printf("coverage: admitted %llu stale %llu waiting %llu (behind in-flight %llu) failed %llu; "
              "resolved admitted %llu stale %llu failed %llu; abandoned %llu refused %llu; persists %llu\n",
              (unsigned long long)cov.admitted, (unsigned long long)cov.stale, (unsigned long long)cov.waiting,
              (unsigned long long)cov.waited_behind_inflight, (unsigned long long)cov.failed,
              (unsigned long long)cov.resolved_admitted, (unsigned long long)cov.resolved_stale,
              (unsigned long long)cov.resolved_failed, (unsigned long long)cov.abandoned,
              (unsigned long long)cov.abandon_refused, (unsigned long long)cov.persists);
}

// max_token_jump: a raise too far above the max is refused at once; the first raise of a fence
// (max 0) is not measured; a raise within the limit waits as usual.
TEST(FenceJumpTest, RaiseTooFarAboveTheMaxIsRefused) {
  struct NoPersist : FencePersister {
    std::vector<uint64_t> tokens;
    void Persist(Fence&, uint64_t token) override { tokens.push_back(token); }
  } persister;
  struct Waiter : RaiseWaiter {
    void Resolve(Admission, uint64_t) override {}
  } waiter;
  std::atomic<bool> failed{false};
  Fence fresh("f", 0, persister, failed, [] { return 0.0; }, nullptr);
  EXPECT_EQ(fresh.Admit(5'000'000'000, waiter, 1000).admission, Admission::kWaiting)
      << "a fence's first raise is not measured";

  Fence fence("g", 100, persister, failed, [] { return 0.0; }, nullptr);
  AdmitResult far = fence.Admit(1101, waiter, 1000);
  EXPECT_EQ(far.admission, Admission::kTooFar);
  EXPECT_EQ(far.max_token, 100u);
  EXPECT_EQ(fence.Snapshot().pending, 0u) << "a refused jump leaves no pending raise";
  EXPECT_EQ(fence.Admit(1100, waiter, 1000).admission, Admission::kWaiting) << "exactly the limit is allowed";
  EXPECT_EQ(fence.Admit(2101, waiter, 1000).admission, Admission::kTooFar) << "measured from the pending raise";
  EXPECT_EQ(fence.Admit(2101, waiter, 0).admission, Admission::kWaiting) << "0 means no limit";
}

}  // namespace
}  // namespace fencing
