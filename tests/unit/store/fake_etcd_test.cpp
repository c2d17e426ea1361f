// The simulation's model of etcd, on its own: the virtual scheduler's order, then FakeEtcd's MVCC,
// txn, leases and watches as etcd has them, its faults, and that a seed replays exactly (and
// another seed does not).

#include "fake_etcd.h"
#include "sim_scheduler.h"

#include <gtest/gtest.h>

#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <random>
#include <string>
#include <utility>
#include <vector>

namespace fencing::sim {
namespace {

using etcd::Status;
using etcd::WatchEnd;
using etcd::WatchEvent;

constexpr int64_t kMs = 1'000'000;
constexpr int64_t kSecond = 1'000 * kMs;

// ------------------------------------------------------------------------------- scheduler

TEST(SimSchedulerTest, RunsByTimeThenByOrderOfQueueing) {
  SimScheduler s;
  const int64_t t0 = s.NowNanos();
  EXPECT_GT(t0, 0);
  std::vector<std::string> ran;
  auto late = s.At(t0 + 10, [&] { ran.push_back("late"); });
  auto early = s.At(t0 + 5, [&] {
    ran.push_back("early");
    s.Post([&] { ran.push_back("posted by early"); });  // after what is already due at t0 + 5
  });
  auto also_early = s.At(t0 + 5, [&] { ran.push_back("also early"); });
  s.Post([&] { ran.push_back("posted"); });
  auto past = s.At(t0 - 100, [&] { ran.push_back("past"); });  // runs now, after "posted"
  EXPECT_EQ(s.Pending(), 5u);
  EXPECT_TRUE(ran.empty());  // nothing runs inside Post or At

  s.RunUntil(t0 + 5);
  EXPECT_EQ(ran, (std::vector<std::string>{"posted", "past", "early", "also early", "posted by early"}));
  EXPECT_EQ(s.NowNanos(), t0 + 5);
  s.RunFor(100);
  EXPECT_EQ(ran.back(), "late");
  EXPECT_EQ(s.NowNanos(), t0 + 105);
  EXPECT_FALSE(s.Step());
}

TEST(SimSchedulerTest, ACancelledOrDroppedTimerNeverRuns) {
  SimScheduler s;
  int ran = 0;
  auto cancelled = s.At(s.NowNanos() + 1, [&] { ++ran; });
  cancelled->Cancel();
  cancelled->Cancel();  // idempotent
  s.At(s.NowNanos() + 1, [&] { ++ran; });  // the handle dropped at once
  auto kept = s.At(s.NowNanos() + 2, [&] { ran += 10; });
  EXPECT_EQ(s.Pending(), 1u);
  while (s.Step()) {
  }
  EXPECT_EQ(ran, 10);
  EXPECT_EQ(s.NowNanos(), SimScheduler::kStartNanos + 2);
  kept->Cancel();  // after it ran: nothing
}

// A timer may outlive its scheduler.
TEST(SimSchedulerTest, ATimerOutlivesItsScheduler) {
  std::unique_ptr<store::Scheduler::Timer> timer;
  {
    SimScheduler s;
    timer = s.After(kSecond, [] {});
  }
  timer->Cancel();
  timer.reset();
}

// ------------------------------------------------------------------------------- FakeEtcd

// A cluster, its clients, and calls made as if synchronous: each steps the scheduler until its
// answer came.
class FakeEtcdTest : public ::testing::Test {
 protected:
  explicit FakeEtcdTest(FakeEtcdOptions options = {}, uint64_t seed = 1) : etcd_(scheduler_, seed, options) {}

  void Await(const bool& done) {
    while (!done) ASSERT_TRUE(scheduler_.Step()) << "nothing left to run and no answer";
  }
  Status Put(FakeEtcdClient& c, const std::string& key, const std::string& value, int64_t lease = 0,
             int64_t* revision = nullptr) {
    bool done = false;
    Status status;
    c.Put(key, value, lease, [&](Status s, int64_t rev) {
      EXPECT_FALSE(done) << "called twice";
      status = std::move(s);
      if (revision != nullptr) *revision = rev;
      done = true;
    });
    EXPECT_FALSE(done) << "called inside the call";
    Await(done);
    return status;
  }
  Status Range(FakeEtcdClient& c, etcd::RangeRequest request, etcd::RangeResponse* response) {
    bool done = false;
    Status status;
    c.Range(std::move(request), [&](Status s, etcd::RangeResponse r) {
      status = std::move(s);
      *response = std::move(r);
      done = true;
    });
    Await(done);
    return status;
  }
  Status Txn(FakeEtcdClient& c, etcd::TxnRequest request, etcd::TxnResponse* response) {
    bool done = false;
    Status status;
    c.Txn(std::move(request), [&](Status s, etcd::TxnResponse r) {
      status = std::move(s);
      *response = std::move(r);
      done = true;
    });
    Await(done);
    return status;
  }
  int64_t Grant(FakeEtcdClient& c, int64_t ttl, int64_t* granted = nullptr) {
    bool done = false;
    int64_t lease = 0;
    c.Grant(ttl, [&](Status s, int64_t id, int64_t t) {
      EXPECT_TRUE(s.ok()) << s.error;
      lease = id;
      if (granted != nullptr) *granted = t;
      done = true;
    });
    Await(done);
    return lease;
  }
  // ttl, or -1 on an error.
  int64_t KeepAlive(FakeEtcdClient& c, int64_t lease, int64_t* revision = nullptr) {
    bool done = false;
    int64_t ttl = -1;
    c.KeepAliveOnce(lease, [&](Status s, int64_t t, int64_t rev) {
      if (s.ok()) ttl = t;
      if (revision != nullptr) *revision = rev;
      done = true;
    });
    Await(done);
    return ttl;
  }
  Status Revoke(FakeEtcdClient& c, int64_t lease) {
    bool done = false;
    Status status;
    c.Revoke(lease, [&](Status s) {
      status = std::move(s);
      done = true;
    });
    Await(done);
    return status;
  }

  SimScheduler scheduler_;
  FakeEtcd etcd_;
};

// What one watch delivered, with the virtual time of each message.
struct WatchLog {
  struct Message {
    int64_t time_ns, revision;
    std::vector<WatchEvent> events;
  };
  std::vector<Message> messages;
  std::optional<WatchEnd> end;
  int64_t end_time_ns = 0;
  std::shared_ptr<etcd::WatchHandle> handle;

  // Every event's key and revision, "key@rev", in delivery order.
  std::vector<std::string> Events() const {
    std::vector<std::string> out;
    for (const Message& m : messages) {
      for (const WatchEvent& e : m.events) {
        out.push_back(std::string(e.type == WatchEvent::Type::kDelete ? "-" : "") + e.kv.key + "@" +
                      std::to_string(e.kv.mod_revision));
      }
    }
    return out;
  }
};

std::shared_ptr<WatchLog> StartWatch(SimScheduler& s, FakeEtcdClient& c, std::string key, std::string range_end,
                                     int64_t start_revision) {
  auto log = std::make_shared<WatchLog>();
  etcd::WatchOptions options;
  options.key = std::move(key);
  options.range_end = std::move(range_end);
  options.start_revision = start_revision;
  log->handle = c.Watch(
      options,
      [&s, log](int64_t revision, std::vector<WatchEvent> events) {
        EXPECT_FALSE(log->end) << "an event after the end";
        log->messages.push_back({s.NowNanos(), revision, std::move(events)});
      },
      [&s, log](WatchEnd end) {
        EXPECT_FALSE(log->end) << "ended twice";
        log->end = std::move(end);
        log->end_time_ns = s.NowNanos();
      });
  return log;
}

TEST_F(FakeEtcdTest, PutsTakeRevisionsAndKeepHistory) {
  auto a = etcd_.Connect("a");
  EXPECT_EQ(etcd_.Revision(), 1);
  int64_t rev = 0;
  ASSERT_TRUE(Put(*a, "k/1", "one", 0, &rev).ok());
  EXPECT_EQ(rev, 2);
  ASSERT_TRUE(Put(*a, "k/2", "two", 0, &rev).ok());
  ASSERT_TRUE(Put(*a, "k/1", "uno", 0, &rev).ok());
  EXPECT_EQ(rev, 4);
  ASSERT_TRUE(Put(*a, "l/1", "other prefix").ok());

  etcd::RangeResponse r;
  ASSERT_TRUE(Range(*a, {"k/", "k0", 0, 0}, &r).ok());  // the prefix k/
  EXPECT_EQ(r.revision, 5);
  ASSERT_EQ(r.kvs.size(), 2u);
  EXPECT_EQ(r.kvs[0].key, "k/1");
  EXPECT_EQ(r.kvs[0].value, "uno");
  EXPECT_EQ(r.kvs[0].create_revision, 2);
  EXPECT_EQ(r.kvs[0].mod_revision, 4);
  EXPECT_EQ(r.kvs[0].version, 2);
  EXPECT_FALSE(r.more);

  ASSERT_TRUE(Range(*a, {"k/", "k0", 3, 0}, &r).ok());  // as it was at revision 3
  EXPECT_EQ(r.revision, 5) << "the header says the store's revision, as etcd's does";
  ASSERT_EQ(r.kvs.size(), 2u);
  EXPECT_EQ(r.kvs[0].value, "one");
  EXPECT_EQ(r.kvs[0].version, 1);

  ASSERT_TRUE(Range(*a, {"k/", "k0", 0, 1}, &r).ok());  // limit
  ASSERT_EQ(r.kvs.size(), 1u);
  EXPECT_TRUE(r.more);
  ASSERT_TRUE(Range(*a, {"k/", std::string("\0", 1), 0, 0}, &r).ok());  // "\0": every key from k/ on
  EXPECT_EQ(r.kvs.size(), 3u);
  ASSERT_TRUE(Range(*a, {"k/2", "", 0, 0}, &r).ok());  // one key
  ASSERT_EQ(r.kvs.size(), 1u);
  EXPECT_EQ(r.kvs[0].value, "two");

  // Sorted by create revision (k/0 is the newest), the limit after the sort; keys only.
  ASSERT_TRUE(Put(*a, "k/0", "zero").ok());
  etcd::RangeRequest by_creation{"k/", "k0", 0, 2};
  by_creation.sort_by = etcd::RangeRequest::SortBy::kCreateRevision;
  by_creation.keys_only = true;
  ASSERT_TRUE(Range(*a, by_creation, &r).ok());
  ASSERT_EQ(r.kvs.size(), 2u);
  EXPECT_EQ(r.kvs[0].key, "k/1");
  EXPECT_EQ(r.kvs[1].key, "k/2");
  EXPECT_EQ(r.kvs[0].value, "");
  EXPECT_EQ(r.kvs[0].mod_revision, 4);
  EXPECT_TRUE(r.more);

  Status future = Range(*a, {"k/1", "", 99, 0}, &r);
  EXPECT_EQ(future.grpc_code, 11) << future.error;
}

TEST_F(FakeEtcdTest, TxnComparesModRevisionAndTakesOneBranch) {
  auto a = etcd_.Connect("a");
  int64_t rev = 0;
  ASSERT_TRUE(Put(*a, "max", "1", 0, &rev).ok());

  // Succeeds: two writes and a read of one of them, all at one new revision.
  etcd::TxnResponse t;
  ASSERT_TRUE(Txn(*a,
                  {{{"max", rev}, {"pending", 0}},
                   {etcd::Op::Put("max", "2"), etcd::Op::Put("pending", "p"), etcd::Op::Range("max")},
                   {etcd::Op::Range("max")}},
                  &t)
                  .ok());
  EXPECT_TRUE(t.succeeded);
  EXPECT_EQ(t.revision, rev + 1);
  ASSERT_EQ(t.responses.size(), 3u);
  ASSERT_EQ(t.responses[2].kvs.size(), 1u);
  EXPECT_EQ(t.responses[2].kvs[0].value, "2") << "a txn's read sees its own writes";
  EXPECT_EQ(etcd_.Get("pending")->mod_revision, rev + 1);
  EXPECT_EQ(etcd_.Get("max")->mod_revision, rev + 1);

  // Fails (a stale mod_revision): the failure branch, no new revision.
  ASSERT_TRUE(Txn(*a, {{{"max", rev}}, {etcd::Op::Put("max", "3")}, {etcd::Op::Range("max")}}, &t).ok());
  EXPECT_FALSE(t.succeeded);
  EXPECT_EQ(t.revision, rev + 1);
  ASSERT_EQ(t.responses.size(), 1u);
  ASSERT_EQ(t.responses[0].kvs.size(), 1u);
  EXPECT_EQ(t.responses[0].kvs[0].value, "2");
  EXPECT_EQ(t.responses[0].kvs[0].version, 2);

  // A delete in the failure branch writes; deleting an absent key does not.
  ASSERT_TRUE(Txn(*a, {{{"max", 1}}, {}, {etcd::Op::Delete("pending")}}, &t).ok());
  EXPECT_FALSE(t.succeeded);
  EXPECT_EQ(t.revision, rev + 2);
  EXPECT_FALSE(etcd_.Get("pending"));
  ASSERT_TRUE(Txn(*a, {{{"pending", 0}}, {etcd::Op::Delete("pending")}, {}}, &t).ok());
  EXPECT_TRUE(t.succeeded);
  EXPECT_EQ(t.revision, rev + 2);

  // Two writes of one key in one branch: refused, nothing applied.
  Status dup = Txn(*a, {{}, {etcd::Op::Put("x", "1"), etcd::Op::Delete("x")}, {}}, &t);
  EXPECT_EQ(dup.grpc_code, 3) << dup.error;
  EXPECT_EQ(etcd_.Revision(), rev + 2);
}

TEST_F(FakeEtcdTest, LeaseExpiryDeletesItsKeysAtOneRevision) {
  auto a = etcd_.Connect("a");
  int64_t ttl = 0;
  const int64_t asked_at = scheduler_.NowNanos();  // granted a little later, when it reached etcd
  const int64_t lease = Grant(*a, 1, &ttl);
  EXPECT_EQ(ttl, 2) << "etcd's least TTL";
  ASSERT_TRUE(Put(*a, "members/a", "x", lease).ok());
  ASSERT_TRUE(Put(*a, "ack/a", "y", lease).ok());
  ASSERT_TRUE(Put(*a, "max/f", "z").ok());
  const int64_t before = etcd_.Revision();

  scheduler_.RunUntil(asked_at + 2 * kSecond);
  EXPECT_TRUE(etcd_.LeaseAlive(lease));
  EXPECT_EQ(etcd_.Revision(), before);
  scheduler_.RunUntil(asked_at + 2 * kSecond + 10 * kMs);
  EXPECT_FALSE(etcd_.LeaseAlive(lease));
  EXPECT_FALSE(etcd_.Get("members/a"));
  EXPECT_FALSE(etcd_.Get("ack/a"));
  EXPECT_TRUE(etcd_.Get("max/f"));
  EXPECT_EQ(etcd_.Revision(), before + 1) << "both deletes at one revision";
  const auto& log = etcd_.Log();
  ASSERT_GE(log.size(), 2u);
  EXPECT_EQ(log[log.size() - 2].event.kv.key, "ack/a");
  EXPECT_EQ(log[log.size() - 1].event.kv.key, "members/a");
  for (size_t i = log.size() - 2; i < log.size(); ++i) {
    EXPECT_EQ(log[i].event.type, WatchEvent::Type::kDelete);
    EXPECT_EQ(log[i].event.kv.mod_revision, before + 1);
  }

  int64_t rev = 0;
  EXPECT_EQ(KeepAlive(*a, lease, &rev), 0) << "gone: ttl 0, not an error";
  EXPECT_EQ(rev, before + 1);
  Status put = Put(*a, "members/a", "again", lease);
  EXPECT_EQ(put.grpc_code, 5) << put.error;
  EXPECT_EQ(Revoke(*a, lease).grpc_code, 5);
}

TEST_F(FakeEtcdTest, KeepAliveAndLeaderChangeExtendALease) {
  auto a = etcd_.Connect("a");
  const int64_t lease = Grant(*a, 3);
  ASSERT_TRUE(Put(*a, "members/a", "x", lease).ok());
  for (int i = 0; i < 5; ++i) {  // renewed every 2 s: alive after 10 s
    scheduler_.RunFor(2 * kSecond);
    ASSERT_EQ(KeepAlive(*a, lease), 3) << i;
  }
  scheduler_.RunFor(2 * kSecond);
  etcd_.LeaderChange();  // 3 s again from here
  scheduler_.RunFor(2900 * kMs);
  EXPECT_TRUE(etcd_.LeaseAlive(lease));
  scheduler_.RunFor(200 * kMs);
  EXPECT_FALSE(etcd_.LeaseAlive(lease));
  EXPECT_FALSE(etcd_.Get("members/a"));

  const int64_t other = Grant(*a, 5);
  ASSERT_TRUE(Put(*a, "members/b", "x", other).ok());
  ASSERT_TRUE(Put(*a, "members/b", "unleased").ok());  // a put without the lease detaches the key
  ASSERT_TRUE(Revoke(*a, other).ok());
  EXPECT_TRUE(etcd_.Get("members/b"));
}

// etcd revokes an expired lease on its next sweep; a keep-alive in between does not save it.
TEST(FakeEtcdSweepTest, AnExpiredLeaseIsRevokedOnTheSweepAndCannotBeKeptAlive) {
  SimScheduler s;
  FakeEtcdOptions o;
  o.latency_min_ns = o.latency_max_ns = 1 * kMs;
  o.expiry_sweep_max_ns = 500 * kMs;
  FakeEtcd etcd(s, 5, o);
  auto a = etcd.Connect("a");
  int64_t lease = 0;
  a->Grant(2, [&](Status, int64_t id, int64_t) { lease = id; });
  s.RunFor(2 * kMs);  // granted at +1 ms: expires at +2001 ms
  ASSERT_NE(lease, 0);
  s.RunUntil(SimScheduler::kStartNanos + 2001 * kMs);
  std::optional<int64_t> ttl;
  a->KeepAliveOnce(lease, [&](Status, int64_t t, int64_t) { ttl = t; });
  s.RunFor(2 * kMs);
  EXPECT_EQ(ttl, 0);
  int64_t revoked_at = 0;
  while (etcd.LeaseAlive(lease)) {
    ASSERT_TRUE(s.Step());
    revoked_at = s.NowNanos();
  }
  EXPECT_GT(revoked_at, SimScheduler::kStartNanos + 2002 * kMs) << "after the keep-alive reached etcd";
  EXPECT_LE(revoked_at, SimScheduler::kStartNanos + 2501 * kMs);
}

TEST_F(FakeEtcdTest, AnUnavailableClusterRefusesEverythingAndKeepsItsLeases) {
  auto a = etcd_.Connect("a");
  const int64_t lease = Grant(*a, 2);
  ASSERT_TRUE(Put(*a, "members/a", "x", lease).ok());
  const int64_t rev = etcd_.Revision();
  etcd_.SetUnavailable(true);
  Status put = Put(*a, "max/f", "1");
  EXPECT_EQ(put.grpc_code, 14) << put.error;
  EXPECT_EQ(KeepAlive(*a, lease), -1);
  scheduler_.RunFor(10 * kSecond);
  EXPECT_TRUE(etcd_.LeaseAlive(lease)) << "nothing expires without a leader";
  EXPECT_EQ(etcd_.Revision(), rev);
  etcd_.SetUnavailable(false);  // the new leader gives each lease its TTL again
  scheduler_.RunFor(1900 * kMs);
  EXPECT_TRUE(etcd_.LeaseAlive(lease));
  scheduler_.RunFor(200 * kMs);
  EXPECT_FALSE(etcd_.LeaseAlive(lease));
}

TEST_F(FakeEtcdTest, AWatchReplaysFromAnOldRevisionThenFollows) {
  auto a = etcd_.Connect("a");
  auto b = etcd_.Connect("b");
  ASSERT_TRUE(Put(*a, "f/1", "1").ok());  // 2
  ASSERT_TRUE(Put(*a, "g/1", "x").ok());  // 3: not watched
  etcd::TxnResponse t;
  ASSERT_TRUE(Txn(*a, {{}, {etcd::Op::Put("f/2", "2"), etcd::Op::Delete("f/1")}, {}}, &t).ok());  // 4
  auto w = StartWatch(scheduler_, *b, "f/", "f0", 2);
  scheduler_.RunFor(100 * kMs);
  ASSERT_FALSE(w->end);
  ASSERT_EQ(w->messages.size(), 3u);
  EXPECT_TRUE(w->messages[0].events.empty()) << "created comes first";
  EXPECT_EQ(w->messages[0].revision, 4);
  EXPECT_EQ(w->messages[1].revision, 2);
  EXPECT_EQ(w->messages[2].revision, 4);
  EXPECT_EQ(w->Events(), (std::vector<std::string>{"f/1@2", "f/2@4", "-f/1@4"}));
  EXPECT_EQ(w->messages[2].events[1].kv.value, "") << "a delete carries key and revision alone";

  ASSERT_TRUE(Put(*a, "f/3", "3").ok());  // 5, live
  ASSERT_TRUE(Put(*a, "g/2", "y").ok());
  scheduler_.RunFor(100 * kMs);
  EXPECT_EQ(w->Events().back(), "f/3@5");
  EXPECT_EQ(w->messages.size(), 4u);

  // From revision 0: only what comes next.
  auto next = StartWatch(scheduler_, *b, "f/", "f0", 0);
  scheduler_.RunFor(100 * kMs);
  ASSERT_TRUE(Put(*a, "f/4", "4").ok());
  scheduler_.RunFor(100 * kMs);
  EXPECT_EQ(next->Events(), (std::vector<std::string>{"f/4@7"}));
}

TEST_F(FakeEtcdTest, CompactedRevisionsCannotBeReadOrWatched) {
  auto a = etcd_.Connect("a");
  for (int i = 0; i < 5; ++i) ASSERT_TRUE(Put(*a, "k", std::to_string(i)).ok());  // 2..6
  etcd_.Compact(4);
  etcd::RangeResponse r;
  Status old = Range(*a, {"k", "", 3, 0}, &r);
  EXPECT_EQ(old.grpc_code, 11);
  EXPECT_NE(old.error.find("mvcc: required revision has been compacted"), std::string::npos) << old.error;
  ASSERT_TRUE(Range(*a, {"k", "", 4, 0}, &r).ok()) << "the compact revision itself is kept";
  EXPECT_EQ(r.kvs.at(0).value, "2");

  auto compacted = StartWatch(scheduler_, *a, "k", "", 3);
  auto kept = StartWatch(scheduler_, *a, "k", "", 4);
  scheduler_.RunFor(100 * kMs);
  ASSERT_TRUE(compacted->end);
  EXPECT_EQ(compacted->end->reason, WatchEnd::Reason::kCompacted);
  EXPECT_EQ(compacted->end->compact_revision, 4);
  EXPECT_EQ(compacted->messages.size(), 1u) << "created, then the end";
  EXPECT_FALSE(kept->end);
  EXPECT_EQ(kept->Events(), (std::vector<std::string>{"k@4", "k@5", "k@6"}));
}

TEST_F(FakeEtcdTest, ALaggingWatchDeliversLateAndInOrder) {
  auto a = etcd_.Connect("a");
  auto b = etcd_.Connect("b");
  auto w = StartWatch(scheduler_, *b, "k/", "k0", 0);
  scheduler_.RunFor(100 * kMs);
  b->SetWatchLag(500 * kMs);
  std::vector<int64_t> put_times;
  int answered = 0;
  for (int i = 0; i < 20; ++i) {  // 20 puts in flight at once: applied in a seeded order
    a->Put("k/" + std::to_string(i), "v", 0, [&](Status s, int64_t) {
      EXPECT_TRUE(s.ok());
      ++answered;
    });
  }
  const int64_t sent = scheduler_.NowNanos();
  scheduler_.RunFor(400 * kMs);
  EXPECT_EQ(answered, 20);
  EXPECT_EQ(w->messages.size(), 1u) << "only created yet";
  scheduler_.RunFor(200 * kMs);
  ASSERT_EQ(w->messages.size(), 21u);
  for (size_t i = 1; i < w->messages.size(); ++i) {
    if (i >= 2) {
      EXPECT_EQ(w->messages[i].revision, w->messages[i - 1].revision + 1);
    }
    EXPECT_GE(w->messages[i].time_ns, sent + 500 * kMs);
    EXPECT_GE(w->messages[i].time_ns, w->messages[i - 1].time_ns);
  }
  EXPECT_EQ(w->messages[1].revision, 2);
}

TEST_F(FakeEtcdTest, CancelEndsAWatchLaterAndNothingFollows) {
  auto a = etcd_.Connect("a");
  auto w = StartWatch(scheduler_, *a, "k", "", 0);
  scheduler_.RunFor(100 * kMs);
  a->Put("k", "1", 0, [](Status, int64_t) {});
  w->handle->Cancel();
  EXPECT_FALSE(w->end) << "not inside Cancel";
  w->handle->Cancel();
  scheduler_.RunFor(100 * kMs);
  ASSERT_TRUE(w->end);
  EXPECT_EQ(w->end->reason, WatchEnd::Reason::kCancelled);
  EXPECT_TRUE(w->Events().empty());
  EXPECT_EQ(a->Watches(), 0u);
  w->handle->Cancel();  // after the end: nothing

  // etcd's own cancel comes after what it had sent.
  auto v = StartWatch(scheduler_, *a, "k", "", 0);
  scheduler_.RunFor(100 * kMs);
  a->Put("k", "2", 0, [](Status, int64_t) {});
  scheduler_.RunFor(4 * kMs);  // applied (perhaps delivered too)
  a->CancelWatches();
  scheduler_.RunFor(100 * kMs);
  EXPECT_EQ(v->Events(), (std::vector<std::string>{"k@3"}));
  ASSERT_TRUE(v->end);
  EXPECT_EQ(v->end->reason, WatchEnd::Reason::kError);
}

// A cluster whose seeded choices always go one way.
class FakeEtcdChoiceTest : public FakeEtcdTest, public ::testing::WithParamInterface<bool> {
 protected:
  FakeEtcdChoiceTest() : FakeEtcdTest(Options(GetParam())) {}
  static FakeEtcdOptions Options(bool yes) {
    FakeEtcdOptions o;
    o.partition_applied_percent = yes ? 100 : 0;
    o.unstall_resume_percent = yes ? 100 : 0;
    return o;
  }
};

TEST_P(FakeEtcdChoiceTest, AStalledWatchResumesOrBreaks) {
  const bool resumes = GetParam();
  auto a = etcd_.Connect("a");
  auto b = etcd_.Connect("b");
  auto w = StartWatch(scheduler_, *b, "k", "", 0);
  scheduler_.RunFor(100 * kMs);
  b->SetWatchStalled(true);
  ASSERT_TRUE(Put(*a, "k", "1").ok());
  ASSERT_TRUE(Put(*b, "k", "2").ok()) << "unary calls still work";
  scheduler_.RunFor(10 * kSecond);
  EXPECT_EQ(w->messages.size(), 1u);
  EXPECT_FALSE(w->end);
  b->SetWatchStalled(false);
  scheduler_.RunFor(100 * kMs);
  if (resumes) {
    EXPECT_EQ(w->Events(), (std::vector<std::string>{"k@2", "k@3"}));
    EXPECT_FALSE(w->end);
  } else {
    EXPECT_TRUE(w->Events().empty());
    ASSERT_TRUE(w->end);
    EXPECT_EQ(w->end->reason, WatchEnd::Reason::kError);
  }
}

TEST_P(FakeEtcdChoiceTest, APartitionedCallTimesOutAndMayHaveBeenApplied) {
  const bool applied = GetParam();
  auto a = etcd_.Connect("a");
  auto w = StartWatch(scheduler_, *a, "k", "", 0);
  scheduler_.RunFor(100 * kMs);
  a->SetPartitioned(true);
  const int64_t sent = scheduler_.NowNanos();
  Status put = Put(*a, "k", "1");
  EXPECT_FALSE(put.ok());
  EXPECT_EQ(put.grpc_code, -1);
  EXPECT_NE(put.error.find("timed out"), std::string::npos) << put.error;
  EXPECT_EQ(scheduler_.NowNanos(), sent + FakeEtcd::kDefaultCallTimeoutNanos);
  EXPECT_EQ(etcd_.Get("k").has_value(), applied);
  EXPECT_TRUE(w->Events().empty()) << "nothing comes through a partition";
  scheduler_.RunFor(5 * kSecond);
  ASSERT_TRUE(w->end) << "a partitioned watch ends";
  EXPECT_EQ(w->end->reason, WatchEnd::Reason::kError);
  EXPECT_TRUE(w->Events().empty());
  a->SetPartitioned(false);
  EXPECT_TRUE(Put(*a, "k", "2").ok());
}

INSTANTIATE_TEST_SUITE_P(Choice, FakeEtcdChoiceTest, ::testing::Bool());

TEST_F(FakeEtcdTest, AShortPartitionDelaysAWatchWithoutEndingIt) {
  auto a = etcd_.Connect("a");
  auto b = etcd_.Connect("b");
  auto w = StartWatch(scheduler_, *b, "k", "", 0);
  scheduler_.RunFor(100 * kMs);
  b->SetPartitioned(true);
  ASSERT_TRUE(Put(*a, "k", "1").ok());
  scheduler_.RunFor(900 * kMs);  // less than partition_watch_end_min_ns
  EXPECT_TRUE(w->Events().empty());
  b->SetPartitioned(false);
  scheduler_.RunFor(10 * kMs);
  EXPECT_EQ(w->Events(), (std::vector<std::string>{"k@2"}));
  scheduler_.RunFor(10 * kSecond);
  EXPECT_FALSE(w->end);
}

TEST(FakeEtcdTimeoutTest, ALateAnswerIsDroppedAfterTheDeadlineButTheWriteHappened) {
  SimScheduler s;
  FakeEtcdOptions o;
  o.latency_min_ns = 600 * kMs;  // a round trip takes 1.2 s at least
  o.latency_max_ns = 700 * kMs;
  FakeEtcd etcd(s, 3, o);
  auto a = etcd.Connect("a", 1 * kSecond);
  int calls = 0;
  Status status;
  a->Put("k", "v", 0, [&](Status st, int64_t) {
    ++calls;
    status = std::move(st);
  });
  s.RunFor(5 * kSecond);
  EXPECT_EQ(calls, 1);
  EXPECT_NE(status.error.find("timed out after 1000 ms"), std::string::npos) << status.error;
  EXPECT_TRUE(etcd.Get("k"));
  EXPECT_EQ(a->PendingCalls(), 0u);
}

// A partition that starts while the answer is on its way: applied, and the caller times out.
TEST(FakeEtcdTimeoutTest, AnAnswerDueDuringAPartitionIsLost) {
  SimScheduler s;
  FakeEtcdOptions o;
  o.latency_min_ns = o.latency_max_ns = 10 * kMs;
  FakeEtcd etcd(s, 3, o);
  auto a = etcd.Connect("a", 1 * kSecond);
  std::optional<Status> status;
  const int64_t sent = s.NowNanos();
  a->Put("k", "v", 0, [&](Status st, int64_t) { status = std::move(st); });
  s.RunFor(15 * kMs);  // applied at 10 ms, the answer due at 20 ms
  EXPECT_TRUE(etcd.Get("k"));
  a->SetPartitioned(true);
  s.RunFor(10 * kMs);
  a->SetPartitioned(false);
  s.RunUntil(sent + kSecond - 1);
  EXPECT_FALSE(status);
  s.RunUntil(sent + kSecond);
  ASSERT_TRUE(status);
  EXPECT_NE(status->error.find("timed out"), std::string::npos) << status->error;
}

TEST_F(FakeEtcdTest, StopEndsEverythingWithAnErrorAndADestroyedClientsWritesStillLand) {
  auto a = etcd_.Connect("a");
  auto w = StartWatch(scheduler_, *a, "k", "", 0);
  int answered = 0;
  std::string error;
  a->Put("k", "1", 0, [&](Status s, int64_t) {
    ++answered;
    error = s.error;
  });
  a->Stop();
  EXPECT_EQ(answered, 0) << "not inside Stop";
  scheduler_.RunFor(2 * kSecond);
  EXPECT_EQ(answered, 1);
  EXPECT_EQ(error, "etcd client stopped");
  ASSERT_TRUE(w->end);
  EXPECT_EQ(w->end->error, "etcd client stopped");
  EXPECT_TRUE(etcd_.Get("k")) << "the request had left";

  auto b = etcd_.Connect("b");
  bool called = false;
  b->Put("crashed", "1", 0, [&](Status, int64_t) { called = true; });
  b.reset();  // a member that crashed with a write on its way
  scheduler_.RunFor(2 * kSecond);
  EXPECT_FALSE(called);
  EXPECT_TRUE(etcd_.Get("crashed"));
}

// ------------------------------------------------------------------------------- determinism

// Three members doing seeded work against one cluster with every fault in play; the trace of
// (time, what happened) is the run.
std::vector<std::pair<int64_t, std::string>> RunSeed(uint64_t seed) {
  std::vector<std::pair<int64_t, std::string>> trace;
  SimScheduler s;
  FakeEtcdOptions o;
  o.slow_one_in = 50;
  o.progress_interval_ns = 700 * kMs;
  FakeEtcd etcd(s, seed, o);
  etcd.SetTrace([&](int64_t now, const std::string& line) { trace.emplace_back(now, line); });
  std::mt19937_64 driver(seed ^ 0x5eed);
  std::vector<std::unique_ptr<FakeEtcdClient>> members;
  std::vector<int64_t> leases(3, 0);
  for (int i = 0; i < 3; ++i) members.push_back(etcd.Connect("m" + std::to_string(i)));
  auto note = [&](std::string line) { trace.emplace_back(s.NowNanos(), std::move(line)); };
  for (int step = 0; step < 400; ++step) {
    const size_t m = driver() % 3;
    FakeEtcdClient& c = *members[m];
    const std::string key = "k/" + std::to_string(driver() % 5);
    switch (driver() % 10) {
      case 0:
        c.Grant(2, [&leases, m](Status st, int64_t id, int64_t) {
          if (st.ok()) leases[m] = id;
        });
        break;
      case 1:
        c.KeepAliveOnce(leases[m], [note](Status st, int64_t ttl, int64_t) {
          note("keepalive " + std::to_string(ttl) + " " + st.error);
        });
        break;
      case 2:
        c.Watch({"k/", "k0", static_cast<int64_t>(driver() % 8), true},
                [note](int64_t rev, std::vector<WatchEvent> ev) {
                  note("events @" + std::to_string(rev) + " x" + std::to_string(ev.size()));
                },
                [note](WatchEnd end) { note("end " + end.error); });
        break;
      case 3: {
        const int64_t expected = static_cast<int64_t>(driver() % 10);
        c.Txn({{{key, expected}}, {etcd::Op::Put(key, "t", leases[m])}, {etcd::Op::Range(key)}},
              [note](Status st, etcd::TxnResponse r) {
                note("txn " + std::to_string(r.succeeded) + " @" + std::to_string(r.revision) + " " + st.error);
              });
        break;
      }
      case 4:
        switch (driver() % 6) {
          case 0: c.SetPartitioned(driver() % 2 == 0); break;
          case 1: c.SetWatchStalled(driver() % 2 == 0); break;
          case 2: c.SetWatchLag(static_cast<int64_t>(driver() % 300) * kMs); break;
          case 3: c.CancelWatches(); break;
          case 4: etcd.SetUnavailable(driver() % 2 == 0); break;
          default: etcd.Compact(etcd.Revision() - 3); break;
        }
        break;
      default:
        c.Put(key, std::to_string(step), 0, [note](Status st, int64_t rev) {
          note("put @" + std::to_string(rev) + " " + st.error);
        });
    }
    s.RunFor(static_cast<int64_t>(driver() % 50) * kMs);
  }
  s.RunFor(30 * kSecond);
  return trace;
}

TEST(FakeEtcdDeterminismTest, ASeedReplaysExactlyAndAnotherSeedDiffers) {
  const auto first = RunSeed(7);
  const auto again = RunSeed(7);
  const auto other = RunSeed(8);
  EXPECT_GT(first.size(), 1000u);
  ASSERT_EQ(first.size(), again.size());
  for (size_t i = 0; i < first.size(); ++i) ASSERT_EQ(first[i], again[i]) << "at line " << i;
  EXPECT_NE(first, other);
  // The run saw the faults it was meant to.
  auto saw = [&](const std::string& what) {
    for (const auto& [t, line] : first) {
      if (line.find(what) != std::string::npos) return true;
    }
    return false;
  };
  EXPECT_TRUE(saw("answer lost"));
  EXPECT_TRUE(saw("timed out"));
  EXPECT_TRUE(saw("no leader"));
  EXPECT_TRUE(saw("expired"));
  EXPECT_TRUE(saw("ended"));
}

}  // namespace
}  // namespace fencing::sim
