// A Fence under the shared store (several proxies, one fence): what another member's raise does
// here (RemotePending, RemoteCommitted, RemoteWithdrawn), a raise the store could not commit
// (PersistResult::kNotDurable), and the membership gate. The store's side (etcd) is tested with
// real processes in tests/integration/test_shared.py; here the Fence alone, with a fake persister.

#include <gtest/gtest.h>

#include <atomic>
#include <cstdint>
#include <optional>
#include <utility>
#include <vector>

#include "fence/fence.h"

namespace fencing {
namespace {

// The store: records what the fence asks for; the test answers.
class FakeStore : public FencePersister {
 public:
  void Persist(Fence& fence, uint64_t token) override {
    EXPECT_FALSE(outstanding.has_value()) << "two persists at once";
    asked.push_back(token);
    outstanding = token;
    fence_ = &fence;
  }
  void Answer(PersistResult result) {
    ASSERT_TRUE(outstanding.has_value());
    uint64_t token = *outstanding;
    outstanding.reset();
    fence_->OnPersisted(token, result);
  }
  std::vector<uint64_t> asked;
  std::optional<uint64_t> outstanding;

 private:
  Fence* fence_ = nullptr;
};

class Waiter final : public RaiseWaiter {
 public:
  void Resolve(Admission admission, uint64_t max_token) override { resolves.emplace_back(admission, max_token); }
  bool Is(Admission admission, uint64_t max) const {
    return resolves.size() == 1 && resolves[0].first == admission && resolves[0].second == max;
  }
  std::vector<std::pair<Admission, uint64_t>> resolves;
};

class FenceRemoteTest : public testing::Test {
 protected:
  void SetUp() override { OpenGate(); }
  void OpenGate() { gate_.OpenUntil(MembershipGate::NowNanos() + 3600'000'000'000); }
  // w raises to 9, and the raise commits as this proxy's membership lapses.
  void CommitAsTheGateCloses(Waiter& w) {
    ASSERT_EQ(fence_.Admit(9, w).admission, Admission::kWaiting);
    gate_.Close();
    store_.Answer(PersistResult::kDurable);
  }

  FakeStore store_;
  std::atomic<bool> failed_{false};
  MembershipGate gate_;
  Fence fence_{"orders", 5, store_, failed_, [] { return 0.0; }, nullptr, &gate_};
};

TEST_F(FenceRemoteTest, AnotherMembersRaiseMakesLowerTokensStaleAtOnce) {
  fence_.RemotePending(9);
  EXPECT_EQ(fence_.AdmitWithoutWaiting(5).admission, Admission::kStale);
  EXPECT_EQ(fence_.AdmitWithoutWaiting(8).max_token, 9u);
  EXPECT_EQ(fence_.Check(7).admission, Admission::kStale);
  // Nothing was in flight: the fence asks the store for 9 at once (the store acknowledges it).
  EXPECT_EQ(store_.asked, std::vector<uint64_t>{9});
}

TEST_F(FenceRemoteTest, AcknowledgesOnlyAfterItsAdmittedWritesDrained) {
  ASSERT_EQ(fence_.AdmitWithoutWaiting(5).admission, Admission::kAdmitted);
  ASSERT_EQ(fence_.AdmitWithoutWaiting(5).admission, Admission::kAdmitted);
  fence_.RemotePending(9);
  EXPECT_TRUE(store_.asked.empty());
  fence_.Release();
  EXPECT_TRUE(store_.asked.empty()) << "acknowledged with a write of token 5 still at the backend";
  fence_.Release();
  EXPECT_EQ(store_.asked, std::vector<uint64_t>{9});
}

TEST_F(FenceRemoteTest, RequestsHereWithTheSameTokenGoWhenItIsCommitted) {
  fence_.RemotePending(9);
  Waiter w;
  EXPECT_EQ(fence_.Admit(9, w).admission, Admission::kWaiting);
  EXPECT_TRUE(w.resolves.empty());
  store_.Answer(PersistResult::kDurable);  // the raiser committed 9: the store saw the max
  EXPECT_TRUE(w.Is(Admission::kAdmitted, 9));
  EXPECT_EQ(fence_.max_token(), 9u);
  EXPECT_EQ(fence_.AdmitWithoutWaiting(9).admission, Admission::kAdmitted);
}

TEST_F(FenceRemoteTest, CommittedElsewhereBeforeTheDrainEndedAdmitsItsWaitersAndStalesLowerOnes) {
  ASSERT_EQ(fence_.AdmitWithoutWaiting(5).admission, Admission::kAdmitted);
  Waiter mine;
  ASSERT_EQ(fence_.Admit(7, mine).admission, Admission::kWaiting);  // a raise of ours, draining
  fence_.RemoteCommitted(9);  // another member committed 9 (this proxy's lease had lapsed)
  EXPECT_TRUE(mine.Is(Admission::kStale, 9));
  EXPECT_EQ(fence_.max_token(), 9u);
  EXPECT_EQ(fence_.AdmitWithoutWaiting(7).admission, Admission::kStale);
  fence_.Release();
  EXPECT_TRUE(store_.asked.empty()) << "nothing is left to raise";
}

TEST_F(FenceRemoteTest, CommittedMaxWithAHigherRaisePendingKeepsThePendingRaise) {
  ASSERT_EQ(fence_.AdmitWithoutWaiting(5).admission, Admission::kAdmitted);
  Waiter w;
  ASSERT_EQ(fence_.Admit(12, w).admission, Admission::kWaiting);
  fence_.RemoteCommitted(9);
  EXPECT_TRUE(w.resolves.empty());
  EXPECT_EQ(fence_.Snapshot().pending, 12u);
  EXPECT_EQ(fence_.max_token(), 9u);
  fence_.Release();
  EXPECT_EQ(store_.asked, std::vector<uint64_t>{12});
  store_.Answer(PersistResult::kDurable);
  EXPECT_TRUE(w.Is(Admission::kAdmitted, 12));
}

TEST_F(FenceRemoteTest, ACommittedMaxBelowOursChangesNothing) {
  fence_.RemoteCommitted(3);
  EXPECT_EQ(fence_.max_token(), 5u);
  EXPECT_EQ(fence_.AdmitWithoutWaiting(5).admission, Admission::kAdmitted);
}

TEST_F(FenceRemoteTest, AHigherRemoteRaiseStalesTheWaitersOfALowerOne) {
  ASSERT_EQ(fence_.AdmitWithoutWaiting(5).admission, Admission::kAdmitted);
  Waiter w7;
  ASSERT_EQ(fence_.Admit(7, w7).admission, Admission::kWaiting);
  fence_.RemotePending(9);
  EXPECT_TRUE(w7.Is(Admission::kStale, 9));
  fence_.RemotePending(8);  // lower than what is pending: nothing new
  EXPECT_EQ(fence_.Snapshot().pending, 9u);
}

TEST_F(FenceRemoteTest, AWithdrawnRaiseLeavesItsTokenAsTheFloor) {
  ASSERT_EQ(fence_.AdmitWithoutWaiting(5).admission, Admission::kAdmitted);
  fence_.RemotePending(9);
  EXPECT_EQ(fence_.AdmitWithoutWaiting(5).admission, Admission::kStale);  // answered 409 ...
  fence_.RemoteWithdrawn(9);
  EXPECT_EQ(fence_.Snapshot().pending, 0u);
  EXPECT_EQ(fence_.Snapshot().floor, 9u);
  // ... and it stays refused: a token answered 409 never becomes the max later.
  AdmitResult refused = fence_.AdmitWithoutWaiting(5);
  EXPECT_EQ(refused.admission, Admission::kStale);
  EXPECT_EQ(refused.max_token, 9u);
  EXPECT_FALSE(fence_.Idle()) << "a key with a floor above its max is never folded away";
  fence_.Release();
  EXPECT_TRUE(store_.asked.empty());
  // The holder of 9 tries again: a raise like any other.
  Waiter w;
  ASSERT_EQ(fence_.Admit(9, w).admission, Admission::kWaiting);
  EXPECT_EQ(store_.asked, std::vector<uint64_t>{9});
  store_.Answer(PersistResult::kDurable);
  EXPECT_TRUE(w.Is(Admission::kAdmitted, 9));
  EXPECT_EQ(fence_.Snapshot().floor, 0u);
}

TEST_F(FenceRemoteTest, AWithdrawnRaiseTriedAgainElsewhereIsAcknowledgedHere) {
  fence_.RemotePending(9);
  EXPECT_EQ(store_.asked, std::vector<uint64_t>{9});
  fence_.RemoteWithdrawn(9);                  // the store saw it given up
  store_.Answer(PersistResult::kNotDurable);  // and so the acknowledgement ended
  EXPECT_EQ(fence_.Snapshot().floor, 9u);
  fence_.RemotePending(9);  // its holder, through another proxy
  EXPECT_EQ(fence_.Snapshot().pending, 9u);
  EXPECT_EQ(store_.asked, (std::vector<uint64_t>{9, 9})) << "acknowledged again";
}

TEST_F(FenceRemoteTest, AWithdrawnHigherRaiseStalesALowerOneWaitingHere) {
  ASSERT_EQ(fence_.AdmitWithoutWaiting(5).admission, Admission::kAdmitted);
  Waiter w7;
  ASSERT_EQ(fence_.Admit(7, w7).admission, Admission::kWaiting);
  fence_.RemoteWithdrawn(9);  // seen only as given up (a reload after it happened)
  EXPECT_TRUE(w7.Is(Admission::kStale, 9));
  EXPECT_EQ(fence_.Snapshot().pending, 0u);
  fence_.Release();
  EXPECT_TRUE(store_.asked.empty());
}

TEST_F(FenceRemoteTest, WithdrawnWithRequestsHereCarryingItRaisesItHere) {
  ASSERT_EQ(fence_.AdmitWithoutWaiting(5).admission, Admission::kAdmitted);
  fence_.RemotePending(9);
  Waiter w;
  ASSERT_EQ(fence_.Admit(9, w).admission, Admission::kWaiting);
  fence_.RemoteWithdrawn(9);
  EXPECT_EQ(fence_.Snapshot().pending, 9u) << "a holder of 9 is waiting here";
  EXPECT_EQ(fence_.AdmitWithoutWaiting(5).admission, Admission::kStale);
  fence_.Release();
  EXPECT_EQ(store_.asked, std::vector<uint64_t>{9});
}

TEST_F(FenceRemoteTest, ARaiseNotCommittedRefusesOnlyItsWaitersAndTheFenceGoesOn) {
  Waiter w;
  ASSERT_EQ(fence_.Admit(9, w).admission, Admission::kWaiting);
  fence_.PendingWritten(9);
  fence_.RemoteWithdrawn(9);  // given up in etcd: the store tells the fence first
  store_.Answer(PersistResult::kNotDurable);
  EXPECT_TRUE(w.Is(Admission::kUnavailable, 9));
  EXPECT_EQ(fence_.Snapshot().pending, 0u);
  EXPECT_FALSE(failed_.load()) << "not terminal";
  EXPECT_EQ(fence_.AdmitWithoutWaiting(5).admission, Admission::kStale) << "9's floor";
  Waiter again;
  ASSERT_EQ(fence_.Admit(9, again).admission, Admission::kWaiting);  // the client's retry
  store_.Answer(PersistResult::kDurable);
  EXPECT_TRUE(again.Is(Admission::kAdmitted, 9));
}

TEST_F(FenceRemoteTest, ARaiseSupersededByAHigherOneAsksForTheHigherOneNext) {
  Waiter w9;
  ASSERT_EQ(fence_.Admit(9, w9).admission, Admission::kWaiting);
  ASSERT_EQ(store_.asked, std::vector<uint64_t>{9});
  fence_.RemotePending(12);  // another member's higher raise replaced ours in etcd
  EXPECT_TRUE(w9.Is(Admission::kStale, 12));
  store_.Answer(PersistResult::kNotDurable);
  EXPECT_EQ(fence_.Snapshot().pending, 12u);
  EXPECT_EQ(store_.asked, (std::vector<uint64_t>{9, 12})) << "12 is acknowledged next";
  EXPECT_EQ(fence_.AdmitWithoutWaiting(9).admission, Admission::kStale);
}

// A raise in the store's hands may be committing when a higher token arrives here: its waiters
// are not told 409 until the store says (a token answered 409 never becomes the max).
TEST_F(FenceRemoteTest, ARaiseOfOursSupersededHereGoesIfTheStoreCommitsIt) {
  Waiter w9, w12;
  ASSERT_EQ(fence_.Admit(9, w9).admission, Admission::kWaiting);
  fence_.PendingWritten(9);
  ASSERT_EQ(fence_.Admit(12, w12).admission, Admission::kWaiting);
  EXPECT_TRUE(w9.resolves.empty()) << "answered before the store said whether 9 commits";
  EXPECT_FALSE(fence_.Abandon(w9)) << "the store answers it, within its own bound";
  EXPECT_EQ(fence_.Snapshot().waiting, 2u);
  EXPECT_EQ(fence_.AdmitWithoutWaiting(8).admission, Admission::kStale);
  EXPECT_EQ(fence_.Check(9).admission, Admission::kAdmitted) << "9 may still commit";
  Waiter later9;
  ASSERT_EQ(fence_.Admit(9, later9).admission, Admission::kWaiting) << "9 may still commit";
  store_.Answer(PersistResult::kDurable);
  EXPECT_TRUE(w9.Is(Admission::kAdmitted, 9));
  EXPECT_TRUE(later9.Is(Admission::kAdmitted, 9));
  fence_.Release();
  EXPECT_EQ(fence_.AdmitWithoutWaiting(9).admission, Admission::kStale) << "12 is pending here";
  EXPECT_EQ(fence_.max_token(), 9u);
  EXPECT_EQ(store_.asked, std::vector<uint64_t>{9}) << "12 asked for with 9's write still in flight";
  fence_.Release();
  EXPECT_EQ(store_.asked, (std::vector<uint64_t>{9, 12}));
  store_.Answer(PersistResult::kDurable);
  EXPECT_TRUE(w12.Is(Admission::kAdmitted, 12));
}

TEST_F(FenceRemoteTest, ARaiseOfOursSupersededHereIsStaleIfTheStoreGivesItUp) {
  Waiter w9, w12;
  ASSERT_EQ(fence_.Admit(9, w9).admission, Admission::kWaiting);
  fence_.PendingWritten(9);
  ASSERT_EQ(fence_.Admit(12, w12).admission, Admission::kWaiting);
  Waiter later9;
  ASSERT_EQ(fence_.Admit(9, later9).admission, Admission::kWaiting);
  fence_.RemoteWithdrawn(9);
  store_.Answer(PersistResult::kNotDurable);
  // 9 was given up in etcd, and its holder may raise it again elsewhere until 12 is there.
  EXPECT_TRUE(w9.resolves.empty());
  EXPECT_EQ(fence_.AdmitWithoutWaiting(9).admission, Admission::kWaiting);
  EXPECT_EQ(store_.asked, (std::vector<uint64_t>{9, 12}));
  fence_.PendingWritten(12);
  EXPECT_TRUE(w9.Is(Admission::kStale, 12));
  EXPECT_TRUE(later9.Is(Admission::kStale, 12));
  EXPECT_EQ(fence_.AdmitWithoutWaiting(9).admission, Admission::kStale);
  store_.Answer(PersistResult::kDurable);
  EXPECT_TRUE(w12.Is(Admission::kAdmitted, 12));
  EXPECT_TRUE(fence_.Idle() || fence_.Snapshot().inflight == 1u);
}

TEST_F(FenceRemoteTest, AnAcknowledgedRaiseSupersededHereGoesIfItsRaiserCommitsIt) {
  fence_.RemotePending(9);
  ASSERT_EQ(store_.asked, std::vector<uint64_t>{9});  // the acknowledgement
  Waiter w9, w12;
  ASSERT_EQ(fence_.Admit(9, w9).admission, Admission::kWaiting);
  ASSERT_EQ(fence_.Admit(12, w12).admission, Admission::kWaiting);
  EXPECT_TRUE(w9.resolves.empty());
  store_.Answer(PersistResult::kDurable);  // the raiser committed 9
  EXPECT_TRUE(w9.Is(Admission::kAdmitted, 9));
  fence_.Release();
  EXPECT_EQ(store_.asked, (std::vector<uint64_t>{9, 12}));
}

TEST_F(FenceRemoteTest, ASupersededRaiseThatFailsTheStoreFailsItsWaiters) {
  Waiter w9, w12;
  ASSERT_EQ(fence_.Admit(9, w9).admission, Admission::kWaiting);
  ASSERT_EQ(fence_.Admit(12, w12).admission, Admission::kWaiting);
  store_.Answer(PersistResult::kFailed);
  EXPECT_TRUE(w9.Is(Admission::kFailed, 9));
  EXPECT_TRUE(w12.Is(Admission::kFailed, 12));
}

TEST_F(FenceRemoteTest, ARaiseThatNeverReachedEtcdLeavesNoFloor) {
  Waiter w;
  ASSERT_EQ(fence_.Admit(9, w).admission, Admission::kWaiting);
  store_.Answer(PersistResult::kNotDurable);  // its pending was never written
  EXPECT_TRUE(w.Is(Admission::kUnavailable, 9));
  EXPECT_EQ(fence_.Snapshot().floor, 0u);
  EXPECT_EQ(fence_.AdmitWithoutWaiting(5).admission, Admission::kAdmitted) << "9 refused nothing";
}

// Between the max and a raise of ours that is not in etcd yet, a token may still commit through
// another proxy: it is not answered 409 until that raise is in etcd.
TEST_F(FenceRemoteTest, ATokenBelowARaiseNotYetInEtcdWaitsAndIsStaleOnceItIsWritten) {
  ASSERT_EQ(fence_.AdmitWithoutWaiting(5).admission, Admission::kAdmitted);
  Waiter w12, w9, w7;
  ASSERT_EQ(fence_.Admit(12, w12).admission, Admission::kWaiting);  // drains the 5 first
  EXPECT_EQ(fence_.Check(9).admission, Admission::kAdmitted) << "its head is not refused";
  EXPECT_EQ(fence_.AdmitWithoutWaiting(9).admission, Admission::kWaiting);
  ASSERT_EQ(fence_.Admit(9, w9).admission, Admission::kWaiting);
  ASSERT_EQ(fence_.Admit(7, w7).admission, Admission::kWaiting);
  EXPECT_EQ(fence_.AdmitWithoutWaiting(5).admission, Admission::kStale) << "the max itself";
  EXPECT_EQ(fence_.Snapshot().waiting, 3u);
  fence_.RemotePending(8);  // another's raise, in etcd, below ours: 7 can no longer commit
  EXPECT_TRUE(w7.Is(Admission::kStale, 12));
  EXPECT_TRUE(w9.resolves.empty());
  fence_.Release();
  ASSERT_EQ(store_.asked, std::vector<uint64_t>{12});
  fence_.PendingWritten(12);
  EXPECT_TRUE(w9.Is(Admission::kStale, 12));
  store_.Answer(PersistResult::kDurable);
  EXPECT_TRUE(w12.Is(Admission::kAdmitted, 12));
}

TEST_F(FenceRemoteTest, ATokenBelowARaiseThatNeverReachedEtcdIsRaisedNext) {
  Waiter w12, w9, w7;
  ASSERT_EQ(fence_.Admit(12, w12).admission, Admission::kWaiting);
  ASSERT_EQ(fence_.Admit(9, w9).admission, Admission::kWaiting);
  ASSERT_EQ(fence_.Admit(7, w7).admission, Admission::kWaiting);
  store_.Answer(PersistResult::kNotDurable);  // 12 never reached etcd
  EXPECT_TRUE(w12.Is(Admission::kUnavailable, 12));
  EXPECT_EQ(store_.asked, (std::vector<uint64_t>{12, 9})) << "the highest doubtful token raises";
  EXPECT_TRUE(w7.resolves.empty()) << "still below a raise not in etcd";
  fence_.PendingWritten(9);
  EXPECT_TRUE(w7.Is(Admission::kStale, 9));
  store_.Answer(PersistResult::kDurable);
  EXPECT_TRUE(w9.Is(Admission::kAdmitted, 9));
}

TEST_F(FenceRemoteTest, WhenTheRaiseAboveThemIsAbandonedDoubtfulTokensAreConsideredAgain) {
  ASSERT_EQ(fence_.AdmitWithoutWaiting(5).admission, Admission::kAdmitted);
  Waiter w12, w9;
  ASSERT_EQ(fence_.Admit(12, w12).admission, Admission::kWaiting);  // waits for the 5 to drain
  ASSERT_EQ(fence_.Admit(9, w9).admission, Admission::kWaiting);
  EXPECT_TRUE(fence_.Abandon(w12));  // its client gave up before 12 reached the store
  EXPECT_EQ(fence_.Snapshot().pending, 9u);
  EXPECT_EQ(fence_.Snapshot().floor, 0u);
  fence_.Release();
  EXPECT_EQ(store_.asked, std::vector<uint64_t>{9});
  Waiter w10;
  ASSERT_EQ(fence_.Admit(10, w10).admission, Admission::kWaiting);
  EXPECT_TRUE(fence_.Abandon(w10) || !w10.resolves.empty());
}

TEST_F(FenceRemoteTest, AClosedGateRefusesEveryFencedWriteAndAnOpenOneAdmitsAgain) {
  gate_.Close();
  EXPECT_EQ(fence_.AdmitWithoutWaiting(5).admission, Admission::kUnavailable);
  EXPECT_EQ(fence_.Check(9).admission, Admission::kUnavailable);
  Waiter w;
  EXPECT_EQ(fence_.Admit(9, w).admission, Admission::kUnavailable);
  EXPECT_TRUE(store_.asked.empty());
  gate_.OpenUntil(MembershipGate::NowNanos() + 1'000'000'000);
  EXPECT_EQ(fence_.AdmitWithoutWaiting(5).admission, Admission::kAdmitted);
}

TEST_F(FenceRemoteTest, TheGateClosesByItselfAtItsDeadline) {
  gate_.OpenUntil(MembershipGate::NowNanos() + 50'000'000);
  EXPECT_EQ(fence_.AdmitWithoutWaiting(5).admission, Admission::kAdmitted);
  fence_.Release();
  while (gate_.Open()) {
  }
  EXPECT_LE(gate_.Left(), 0);
  EXPECT_EQ(fence_.AdmitWithoutWaiting(5).admission, Admission::kUnavailable);
}

// A raise that commits as this proxy's membership lapses: its requests may not go with the gate
// closed, nor be told the raise failed (it did not). They are held until the gate opens.
TEST_F(FenceRemoteTest, WaitersOfARaiseCommittedAfterTheGateClosedAreHeldAndGoOnceItOpens) {
  Waiter w;
  CommitAsTheGateCloses(w);
  EXPECT_TRUE(w.resolves.empty()) << "held, not refused: the raise committed";
  EXPECT_EQ(fence_.max_token(), 9u) << "the max is the store's word all the same";
  EXPECT_FALSE(fence_.Abandon(w)) << "still held while the gate is closed";
  EXPECT_FALSE(fence_.Idle());
  OpenGate();
  EXPECT_FALSE(fence_.Abandon(w)) << "resolved, not given up";
  EXPECT_TRUE(w.Is(Admission::kAdmitted, 9));
  EXPECT_EQ(fence_.Snapshot().inflight, 1u);
}

TEST_F(FenceRemoteTest, HeldRequestsGoWithTheFirstRequestAfterTheGateOpens) {
  Waiter w;
  CommitAsTheGateCloses(w);
  OpenGate();
  EXPECT_EQ(fence_.AdmitWithoutWaiting(9).admission, Admission::kAdmitted);
  EXPECT_TRUE(w.Is(Admission::kAdmitted, 9));
  EXPECT_EQ(fence_.Snapshot().inflight, 2u);
}

TEST_F(FenceRemoteTest, HeldRequestsAreStaleIfAHigherRaiseStoodInEtcdMeanwhile) {
  Waiter w;
  CommitAsTheGateCloses(w);
  fence_.RemotePending(12);  // read on registering again: its raiser need not wait for us
  OpenGate();
  EXPECT_FALSE(fence_.Abandon(w));
  EXPECT_TRUE(w.Is(Admission::kStale, 12)) << "a newer holder exists: they lost the lock";
  EXPECT_EQ(fence_.Snapshot().inflight, 0u);
}

TEST_F(FenceRemoteTest, AHeldRequestGivenUpAtTheSessionsLastWordGoesNowhere) {
  Waiter w;
  CommitAsTheGateCloses(w);
  EXPECT_TRUE(fence_.Abandon(w, /*final=*/true));
  EXPECT_TRUE(w.resolves.empty());
  OpenGate();
  EXPECT_EQ(fence_.AdmitWithoutWaiting(9).admission, Admission::kAdmitted);
  EXPECT_TRUE(w.resolves.empty()) << "given up: never resolved";
  EXPECT_EQ(fence_.Snapshot().inflight, 1u);
}

}  // namespace
}  // namespace fencing
