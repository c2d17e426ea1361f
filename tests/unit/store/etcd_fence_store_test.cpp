// EtcdFenceStore (the layout's rules: layout_test.cpp): two or three members in this one
// process, each its own store and FenceRegistry on the same etcd and prefix, driven through their
// Fences as the request path drives them (Admit, AdmitWithoutWaiting, Check, Release). A real etcd
// (etcd/etcd_process.h): the suite's for most tests, one of its own for the test that kills it.
// Without etcd the real-server tests skip, unless FP_REQUIRE_LOCK_SERVICES=1 makes that a failure.

#include "store/etcd_fence_store.h"

#include "etcd/etcd_process.h"
#include "fence/admission_names.h"
#include "fence/fence_registry.h"
#include "test_files.h"

#include <gtest/gtest.h>

#include <chrono>
#include <cstdint>
#include <filesystem>
#include <future>
#include <memory>
#include <optional>
#include <ostream>
#include <string>
#include <thread>
#include <utility>
#include <vector>

namespace fencing {


namespace {

using namespace std::chrono_literals;
using Clock = std::chrono::steady_clock;

constexpr auto kMemberTtl = 2s;       // the least the route file allows
constexpr auto kEtcdTimeout = 1000ms;  // per etcd call
constexpr auto kRequestTimeout = 1000ms;  // timeouts.request: how long a dead member's writes may run

}  // namespace

// ------------------------------------------------------------------------------- helpers

// The registry's observer: nothing is measured here.
class NoMetrics final : public FenceRegistryObserver, public FenceObserver {
 public:
  const FenceObserver& ForFence(std::string_view) override { return *this; }
  void StateWriteFailed() override {}
  void MaxToken(uint64_t) const override {}
  void Raised() const override {}
  void RaiseWaited(double) const override {}
};

struct Resolution {
  Admission admission;
  uint64_t max_token;
};

// A request waiting for a raise: its one Resolve, for the test thread to wait for.
class Waiter final : public RaiseWaiter {
 public:
  Waiter() : future_(promise_.get_future().share()) {}
  void Resolve(Admission admission, uint64_t max_token) override {
    resolved_at_ = Clock::now();
    promise_.set_value({admission, max_token});
  }
  std::optional<Resolution> WaitFor(Clock::duration limit) const {
    if (future_.wait_for(limit) != std::future_status::ready) return std::nullopt;
    return future_.get();
  }
  bool resolved() const { return future_.wait_for(0s) == std::future_status::ready; }
  Clock::time_point resolved_at() const {
    future_.wait();
    return resolved_at_;
  }

 private:
  std::promise<Resolution> promise_;
  std::shared_future<Resolution> future_;
  Clock::time_point resolved_at_{};  // written before the promise is set, read after
};

// What a raise came to: the Admit answer if it did not wait, else the waiter's.
std::string Describe(const std::optional<Resolution>& r) {
  if (!r) return "no answer";
  return std::string(Name(r->admission)) + " (max " + std::to_string(r->max_token) + ")";
}

// One proxy: its store on the prefix, and the registry over it.
struct Member {
  std::unique_ptr<EtcdFenceStore> store;
  std::unique_ptr<FenceRegistry> registry;
  // The store first (its thread calls into the registry, and its targets pin the registry's
  // fences), then the registry.
  ~Member() {
    if (store) store->Stop();
    store.reset();
    registry.reset();
  }
  Fence& fence(std::string_view name) { return registry->GetOrCreate(name); }
  FenceKeys& keyed(std::string_view name) { return registry->GetOrCreateKeyed(name, KeySettings{}); }
};

FenceStoreConfig StoreConfig(const std::string& endpoint, const std::string& prefix) {
  FenceStoreConfig c;
  c.etcd.endpoints = {endpoint};
  c.etcd.timeout = kEtcdTimeout;
  c.prefix = prefix;
  c.member_ttl = kMemberTtl;
  return c;
}

// Polls f every 20 ms until it is true or limit has passed; whether it became true.
template <typename F>
bool Eventually(F f, Clock::duration limit) {
  const auto until = Clock::now() + limit;
  while (true) {
    if (f()) return true;
    if (Clock::now() >= until) return false;
    std::this_thread::sleep_for(20ms);
  }
}

// Admit(token) on fence, waiting up to limit for the raise: what it came to.
std::optional<Resolution> Raise(Fence& fence, uint64_t token, Waiter& waiter, Clock::duration limit = 5s) {
  AdmitResult r = fence.Admit(token, waiter);
  if (r.admission != Admission::kWaiting) return Resolution{r.admission, r.max_token};
  return waiter.WaitFor(limit);
}

bool StaleAt(const Fence& fence, uint64_t token, uint64_t max) {
  AdmitResult r = fence.Check(token);
  return r.admission == Admission::kStale && r.max_token == max;
}

// A member of prefix on the etcd at endpoint, attached as the proxy attaches it; null (with the
// failure) if it cannot open. metrics must outlive it.
std::unique_ptr<Member> JoinAt(const std::string& endpoint, const std::string& prefix, FenceRegistryObserver& metrics) {
  std::string error;
  auto m = std::make_unique<Member>();
  m->store = EtcdFenceStore::Open(StoreConfig(endpoint, prefix), kRequestTimeout, 5s, nullptr, &error);
  EXPECT_NE(m->store, nullptr) << error;
  if (!m->store) return nullptr;
  m->registry = std::make_unique<FenceRegistry>(m->store->maxima(), m->store->TakeKeyMaxima(), *m->store, metrics);
  m->store->Attach(*m->registry);
  EXPECT_TRUE(m->store->gate()->Open()) << "the gate opens at Attach";
  return m;
}

class EtcdFenceStoreTest : public ::testing::Test {
 protected:
  // Members A and B of one prefix, both at max 5 for fence "orders" (raised through A).
  void TwoMembersAtFive(std::unique_ptr<Member>* a, std::unique_ptr<Member>* b) {
    *a = Join();
    *b = Join();
    ASSERT_TRUE(*a && *b);
    Waiter w5;
    auto r5 = Raise((*a)->fence("orders"), 5, w5);
    ASSERT_TRUE(r5 && r5->admission == Admission::kAdmitted) << Describe(r5);
    (*a)->fence("orders").Release();
    ASSERT_TRUE(Eventually([&] { return (*b)->fence("orders").max_token() == 5; }, 2s));
  }
  static void SetUpTestSuite() {
    if (::access(kEtcd, X_OK) != 0 || ::access(kEtcdctl, X_OK) != 0) return;
    dir_ = MakeTempDir("fp_fence_store_test");
    etcd_ = new EtcdProcess;
    if (!etcd_->Start(dir_, nullptr, {}, &start_error_)) {
      delete etcd_;
      etcd_ = nullptr;
    }
  }
  static void TearDownTestSuite() {
    delete etcd_;
    etcd_ = nullptr;
    if (!dir_.empty()) std::filesystem::remove_all(dir_);
  }
  void SetUp() override {
    FP_REQUIRE_ETCD();
    ASSERT_NE(etcd_, nullptr) << start_error_;
    // A prefix of its own per test: no test sees another's fences or members.
    prefix_ = std::string("/fp-store-test/") + ::testing::UnitTest::GetInstance()->current_test_info()->name();
  }

  std::unique_ptr<Member> Join() { return JoinAt(etcd_->endpoint(), prefix_, metrics_); }

  static inline EtcdProcess* etcd_ = nullptr;
  static inline std::string dir_;
  static inline std::string start_error_;
  std::string prefix_;
  NoMetrics metrics_;  // outlives every member's registry
};

// ------------------------------------------------------------------------------- two members

TEST_F(EtcdFenceStoreTest, ARaiseOnOneMemberFencesTheOther) {
  Waiter w;  // declared before the members: the fences hold it until it is resolved
  auto a = Join(), b = Join();
  ASSERT_TRUE(a && b);
  Fence& fa = a->fence("orders");
  Fence& fb = b->fence("orders");
  EXPECT_EQ(fb.Check(5).admission, Admission::kAdmitted);

  auto r = Raise(fa, 7, w);
  ASSERT_TRUE(r && r->admission == Admission::kAdmitted) << Describe(r);
  EXPECT_EQ(r->max_token, 7u);
  // B acknowledged (its fence blocking 5) before A could commit: at A's admission B refuses
  // already. Its max follows the commit.
  EXPECT_TRUE(StaleAt(fb, 5, 7)) << "A admitted 7 while B still takes 5: " << Name(fb.Check(5).admission);
  fa.Release();
  EXPECT_EQ(fa.max_token(), 7u);
  EXPECT_TRUE(Eventually([&] { return StaleAt(fb, 5, 7); }, 2s)) << "B still takes 5: " << Name(fb.Check(5).admission);
  EXPECT_TRUE(Eventually([&] { return fb.max_token() == 7; }, 2s)) << fb.max_token();
  EXPECT_EQ(fb.AdmitWithoutWaiting(7).admission, Admission::kAdmitted) << "7 is B's max: no raise needed";
  fb.Release();
  EXPECT_EQ(a->store->status().raises, 1u);
  EXPECT_GE(b->store->status().acks, 1u);
  EXPECT_EQ(a->store->status().members, 2);
}

TEST_F(EtcdFenceStoreTest, ARaiseWaitsForTheOtherMembersAdmittedLowerWrite) {
  Waiter w5, w9;
  auto a = Join(), b = Join();
  ASSERT_TRUE(a && b);
  Fence& fa = a->fence("orders");
  Fence& fb = b->fence("orders");
  auto r5 = Raise(fb, 5, w5);
  ASSERT_TRUE(r5 && r5->admission == Admission::kAdmitted) << Describe(r5);
  fb.Release();
  ASSERT_TRUE(Eventually([&] { return fa.max_token() == 5; }, 2s)) << fa.max_token();

  // B forwards a write with 5 and holds it; A's raise to 9 must wait for it to end.
  ASSERT_EQ(fb.AdmitWithoutWaiting(5).admission, Admission::kAdmitted);
  const auto raised = Clock::now();
  ASSERT_EQ(fa.Admit(9, w9).admission, Admission::kWaiting);
  // The pending 9 reaches B: no new 5 there from now on.
  EXPECT_TRUE(Eventually([&] { return StaleAt(fb, 5, 9); }, 2s)) << Name(fb.Check(5).admission);
  // Well inside the raise's bound (member_ttl + timeouts.request + 1 s = 4 s).
  std::this_thread::sleep_until(raised + 1500ms);
  EXPECT_FALSE(w9.resolved()) << "A's 9 went while B's write with 5 was still running: "
                              << Describe(w9.WaitFor(0s));
  EXPECT_EQ(fb.Snapshot().inflight, 1u);

  const auto released = Clock::now();
  fb.Release();
  auto r9 = w9.WaitFor(1s);
  ASSERT_TRUE(r9 && r9->admission == Admission::kAdmitted) << Describe(r9);
  EXPECT_TRUE(w9.resolved_at() >= released) << "admitted "
      << std::chrono::duration<double>(released - w9.resolved_at()).count() << " s before B's release";
  fa.Release();
  EXPECT_TRUE(Eventually([&] { return fb.max_token() == 9; }, 2s)) << fb.max_token();
}

TEST_F(EtcdFenceStoreTest, ConcurrentRaisesOfOneTokenBothGoAndOfTwoTheHigherWins) {
  Waiter wa7, wb7, wa10, wb11;
  auto a = Join(), b = Join();
  ASSERT_TRUE(a && b);
  Fence& fa = a->fence("orders");
  Fence& fb = b->fence("orders");

  // The same token from both: one writes the pending, the other acknowledges it; both admitted.
  AdmitResult ra = fa.Admit(7, wa7);
  AdmitResult rb = fb.Admit(7, wb7);
  ASSERT_EQ(ra.admission, Admission::kWaiting);
  ASSERT_EQ(rb.admission, Admission::kWaiting);
  auto xa = wa7.WaitFor(5s), xb = wb7.WaitFor(5s);
  ASSERT_TRUE(xa && xa->admission == Admission::kAdmitted) << "A: " << Describe(xa);
  ASSERT_TRUE(xb && xb->admission == Admission::kAdmitted) << "B: " << Describe(xb);
  fa.Release();
  fb.Release();
  EXPECT_EQ(fa.max_token(), 7u);
  EXPECT_EQ(fb.max_token(), 7u);

  // Two tokens at once: B never acknowledges the lower one (its own 11 is pending there), so A's
  // 10 cannot commit; 11 overwrites it and goes.
  ASSERT_EQ(fa.Admit(10, wa10).admission, Admission::kWaiting);
  ASSERT_EQ(fb.Admit(11, wb11).admission, Admission::kWaiting);
  auto x11 = wb11.WaitFor(6s);
  ASSERT_TRUE(x11 && x11->admission == Admission::kAdmitted) << "11: " << Describe(x11);
  fb.Release();
  auto x10 = wa10.WaitFor(6s);
  ASSERT_TRUE(x10) << "10 never answered";
  EXPECT_TRUE(x10->admission == Admission::kStale || x10->admission == Admission::kUnavailable) << Describe(x10);
  if (x10->admission == Admission::kAdmitted) fa.Release();
  EXPECT_TRUE(Eventually([&] { return fa.max_token() == 11 && fb.max_token() == 11; }, 2s))
      << fa.max_token() << " " << fb.max_token();
  EXPECT_TRUE(StaleAt(fa, 10, 11));
}

TEST_F(EtcdFenceStoreTest, AKeysRaiseFencesThatKeyOnTheOtherMemberAndNoOther) {
  Waiter w;
  auto a = Join(), b = Join();
  ASSERT_TRUE(a && b);
  FenceKeys& ka = a->keyed("tenants");
  FenceKeys& kb = b->keyed("tenants");
  {
    KeyLookup b1 = kb.Acquire("k1", 5);
    KeyLookup b2 = kb.Acquire("k2", 5);
    ASSERT_TRUE(b1.fence && b2.fence);
  }
  KeyLookup a1 = ka.Acquire("k1", 7);
  ASSERT_TRUE(a1.fence);
  auto r = Raise(*a1.fence, 7, w);
  ASSERT_TRUE(r && r->admission == Admission::kAdmitted) << Describe(r);
  a1.fence->Release();

  EXPECT_TRUE(Eventually([&] {
    KeyLookup b1 = kb.Acquire("k1", 5);
    return b1.fence && StaleAt(*b1.fence, 5, 7);
  }, 2s)) << "B's k1 still takes 5";
  KeyLookup b2 = kb.Acquire("k2", 5);
  ASSERT_TRUE(b2.fence);
  EXPECT_EQ(b2.fence->Check(5).admission, Admission::kAdmitted) << "k2 was never raised";
  EXPECT_EQ(b2.fence->max_token(), 0u);
  EXPECT_EQ(kb.floor(), 0u) << "a key's raise is not the fence's floor";
  // A key B had never seen is made at its committed max.
  Waiter w3;
  KeyLookup a3 = ka.Acquire("k3", 4);
  ASSERT_TRUE(a3.fence);
  auto r3 = Raise(*a3.fence, 4, w3);
  ASSERT_TRUE(r3 && r3->admission == Admission::kAdmitted) << Describe(r3);
  a3.fence->Release();
  EXPECT_TRUE(Eventually([&] {
    auto s = kb.Find("k3");
    return s && s->max_token == 4;
  }, 2s));
}

TEST_F(EtcdFenceStoreTest, AStoppedMembersWritesGetTimeoutsRequestBeforeTheRaiseGoes) {
  Waiter w9;
  std::unique_ptr<Member> a, b;
  ASSERT_NO_FATAL_FAILURE(TwoMembersAtFive(&a, &b));
  Fence& fa = a->fence("orders");
  Fence& fb = b->fence("orders");

  // B holds a write with 5 and never acknowledges 9; then it stops (its lease revoked).
  ASSERT_EQ(fb.AdmitWithoutWaiting(5).admission, Admission::kAdmitted);
  ASSERT_EQ(fa.Admit(9, w9).admission, Admission::kWaiting);
  ASSERT_TRUE(Eventually([&] { return StaleAt(fb, 5, 9); }, 2s));
  std::this_thread::sleep_for(300ms);
  ASSERT_FALSE(w9.resolved()) << Describe(w9.WaitFor(0s));
  const auto stopped = Clock::now();
  b->store->Stop();
  EXPECT_FALSE(b->store->gate()->Open());
  auto r9 = w9.WaitFor(kRequestTimeout + 2s);
  ASSERT_TRUE(r9 && r9->admission == Admission::kAdmitted) << Describe(r9);
  const auto waited = w9.resolved_at() - stopped;
  // B's member key went at once; its write with 5 may still run for timeouts.request.
  EXPECT_GE(waited, kRequestTimeout - 200ms) << std::chrono::duration<double>(waited).count() << " s";
  EXPECT_LE(waited, kRequestTimeout + 1500ms) << std::chrono::duration<double>(waited).count() << " s";
  fa.Release();
  EXPECT_EQ(a->store->status().members, 1);
}

// A member whose key went just before the raise is not in the members the pending write reads,
// but its admitted writes may still run for timeouts.request (contract "Shared fences": "or its
// membership lease has expired and timeouts.request has passed since"): the raise reads the
// roster, which still has it.
TEST_F(EtcdFenceStoreTest, AMemberThatStoppedJustBeforeARaiseIsStillWaitedFor) {
  Waiter w9;
  std::unique_ptr<Member> a, b;
  ASSERT_NO_FATAL_FAILURE(TwoMembersAtFive(&a, &b));
  Fence& fa = a->fence("orders");
  Fence& fb = b->fence("orders");

  // B's write with 5 is still running when B's membership ends (a crash, or a lease that lapsed:
  // the contract lets it run for timeouts.request). A raise right after must still wait.
  ASSERT_EQ(fb.AdmitWithoutWaiting(5).admission, Admission::kAdmitted);
  b->store->Stop();
  ASSERT_TRUE(Eventually([&] { return a->store->status().members == 1; }, 2s));
  const auto stopped = Clock::now();
  auto r9 = Raise(fa, 9, w9, kRequestTimeout + 3s);
  ASSERT_TRUE(r9 && r9->admission == Admission::kAdmitted) << Describe(r9);
  const auto waited = w9.resolved_at() - stopped;
  EXPECT_GE(waited, kRequestTimeout - 200ms)
      << "the raise went " << std::chrono::duration<double>(waited).count()
      << " s after B left, while B's write with 5 may still run";
  fa.Release();
}

TEST_F(EtcdFenceStoreTest, AMemberThatLeftCleanlyIsNotWaitedFor) {
  Waiter w9;
  std::unique_ptr<Member> a, b;
  ASSERT_NO_FATAL_FAILURE(TwoMembersAtFive(&a, &b));
  Fence& fa = a->fence("orders");
  // A shutdown that drained every write (the proxy's SIGTERM path) leaves the roster too.
  b->store->Stop(/*left_cleanly=*/true);
  ASSERT_TRUE(Eventually([&] { return a->store->status().members == 1; }, 2s));
  const auto stopped = Clock::now();
  auto r9 = Raise(fa, 9, w9, kRequestTimeout + 3s);
  ASSERT_TRUE(r9 && r9->admission == Admission::kAdmitted) << Describe(r9);
  EXPECT_LT(w9.resolved_at() - stopped, kRequestTimeout / 2) << "waited for a member that had left cleanly";
  fa.Release();
}

TEST_F(EtcdFenceStoreTest, AMemberOpenedLaterReadsTheCommittedMaxima) {
  Waiter w1, w2;
  {
    auto a = Join(), b = Join();
    ASSERT_TRUE(a && b);
    auto r = Raise(a->fence("orders"), 7, w1);
    ASSERT_TRUE(r && r->admission == Admission::kAdmitted) << Describe(r);
    a->fence("orders").Release();
    KeyLookup k1 = b->keyed("tenants").Acquire("k1", 8);
    ASSERT_TRUE(k1.fence);
    auto rk = Raise(*k1.fence, 8, w2);
    ASSERT_TRUE(rk && rk->admission == Admission::kAdmitted) << Describe(rk);
    k1.fence->Release();
  }
  // Both gone (leases revoked): a third member finds the maxima in etcd, and nobody to wait for.
  std::string error;
  auto c = EtcdFenceStore::Open(StoreConfig(etcd_->endpoint(), prefix_), kRequestTimeout, 5s, nullptr, &error);
  ASSERT_NE(c, nullptr) << error;
  EXPECT_EQ(c->maxima(), (FenceMaxima{{"orders", 7}}));
  FenceKeyMaxima keys = c->TakeKeyMaxima();
  ASSERT_EQ(keys.size(), 1u);
  ASSERT_TRUE(keys.contains("tenants"));
  ASSERT_EQ(keys["tenants"].size(), 1u);
  EXPECT_EQ(keys["tenants"]["k1"], 8u);
  EXPECT_EQ(c->status().members, 1);
  c->Stop();
}

// ------------------------------------------------------------------------------- etcd down

TEST(EtcdFenceStoreDown, ARaiseWhileEtcdIsDownIsUnavailableTheGateClosesAndBothComeBack) {
  FP_REQUIRE_ETCD();
  const std::string dir = MakeTempDir("fp_fence_store_down");
  Waiter w3, w9, w10;
  NoMetrics metrics;
  EtcdProcess etcd;
  std::string error;
  ASSERT_TRUE(etcd.Start(dir, nullptr, {}, &error)) << error;
  auto a = JoinAt(etcd.endpoint(), "/fp-store-test/down", metrics);
  auto b = JoinAt(etcd.endpoint(), "/fp-store-test/down", metrics);
  ASSERT_TRUE(a && b);
  Fence& fa = a->fence("orders");
  Fence& fb = b->fence("orders");
  auto r3 = Raise(fa, 3, w3);
  ASSERT_TRUE(r3 && r3->admission == Admission::kAdmitted) << Describe(r3);
  fa.Release();

  etcd.Kill();
  const auto killed = Clock::now();
  // Refused at once (the gate has closed already) or once the pending write fails: never admitted.
  auto r9 = Raise(fa, 9, w9, kEtcdTimeout + 1s);
  ASSERT_TRUE(r9) << "no answer within the etcd timeout + 1 s";
  EXPECT_EQ(r9->admission, Admission::kUnavailable) << Describe(r9);
  EXPECT_TRUE(Eventually([&] { return !a->store->gate()->Open() && !b->store->gate()->Open(); }, kMemberTtl))
      << "a gate still open " << std::chrono::duration<double>(Clock::now() - killed).count() << " s after etcd died";
  EXPECT_EQ(fb.Check(3).admission, Admission::kUnavailable) << "even an equal token: the membership may have lapsed";
  EXPECT_FALSE(a->store->status().last_error.empty());

  ASSERT_TRUE(etcd.Restart(&error)) << error;
  EXPECT_TRUE(Eventually([&] { return a->store->gate()->Open() && b->store->gate()->Open(); }, 10s))
      << "the gates stayed closed after etcd came back: A " << a->store->status().last_error << "; B "
      << b->store->status().last_error;
  auto r10 = Raise(fa, 10, w10, 8s);
  ASSERT_TRUE(r10 && r10->admission == Admission::kAdmitted) << Describe(r10);
  fa.Release();
  EXPECT_TRUE(Eventually([&] { return fb.max_token() == 10; }, 2s)) << fb.max_token();
  EXPECT_TRUE(StaleAt(fb, 9, 10));
  a.reset();
  b.reset();
  etcd.Kill();
  std::filesystem::remove_all(dir);
}

}  // namespace fencing
