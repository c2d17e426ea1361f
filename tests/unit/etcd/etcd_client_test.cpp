// EtcdClient (kv.h's Range, Txn, Put, leases, watches) and EtcdLockService against a real etcd
// (etcd/etcd_process.h): plain HTTP once per suite, and https with auth in a suite of its own
// (certificates made by openssl); the lock service's pure rules first. The gateway's JSON alone is
// codec_test.cpp's. Without etcd the real-server tests skip, unless FP_REQUIRE_LOCK_SERVICES=1
// makes that a failure.

#include "etcd/codec.h"
#include "etcd/etcd_client.h"
#include "lockservice/etcd_lock_service.h"

#include "etcd/etcd_process.h"
#include "test_files.h"

#include <boost/json.hpp>
#include <gtest/gtest.h>

#include <algorithm>
#include <chrono>
#include <condition_variable>
#include <cstdlib>
#include <cstdio>
#include <filesystem>
#include <future>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include <arpa/inet.h>
#include <netinet/in.h>
#include <signal.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

namespace fencing {
namespace {

namespace json = boost::json;
using namespace std::chrono_literals;
using Clock = std::chrono::steady_clock;
using Status = HolderAnswer::Status;

// ------------------------------------------------------------------------------- pure rules

TEST(EtcdRules, HolderRequestIsALinearizableSortedRangeOfOneKey) {
  etcd::RangeRequest r = EtcdLockService::HolderRequest("/locks/a");
  EXPECT_EQ(r.key, "/locks/a/");
  EXPECT_EQ(r.range_end, "/locks/a0");
  EXPECT_EQ(r.limit, 1);
  EXPECT_EQ(r.revision, 0);
  EXPECT_EQ(r.sort_by, etcd::RangeRequest::SortBy::kCreateRevision);
  EXPECT_TRUE(r.keys_only);
  // As the gateway gets it: sorted by create revision, ascending, and never serializable.
  json::object body = etcd::ToJson(r);
  EXPECT_EQ(body.at("sort_order"), "ASCEND");
  EXPECT_EQ(body.at("sort_target"), "CREATE");
  EXPECT_EQ(body.at("keys_only"), true);
  EXPECT_EQ(body.at("limit"), "1");
  EXPECT_FALSE(body.contains("serializable"));
}

etcd::KeyValue Kv(std::string key, int64_t create_revision) {
  etcd::KeyValue kv;
  kv.key = std::move(key);
  kv.create_revision = create_revision;
  return kv;
}
etcd::RangeResponse Kvs(std::vector<etcd::KeyValue> kvs) {
  etcd::RangeResponse r;
  r.revision = 50;
  r.kvs = std::move(kvs);
  return r;
}

TEST(EtcdRules, HolderFromRange) {
  const std::string lock = "/locks/a";
  HolderAnswer free = EtcdLockService::HolderFromRange(lock, {}, Kvs({}));
  EXPECT_EQ(free.status, Status::kFree);

  HolderAnswer held = EtcdLockService::HolderFromRange(lock, {}, Kvs({Kv("/locks/a/h1", 42), Kv("/locks/a/h0", 43)}));
  EXPECT_EQ(held.status, Status::kHeld);
  EXPECT_EQ(held.token, 42u);
  EXPECT_EQ(held.holder, "/locks/a/h1");

  // Fail closed on anything unexpected: never a guessed holder.
  for (const etcd::KeyValue& kv : {Kv("/locks/ab/x", 42), Kv("/locks/a", 42), Kv("/locks/a/h", 0), Kv("/locks/a/h", -1)}) {
    HolderAnswer a = EtcdLockService::HolderFromRange(lock, {}, Kvs({kv}));
    EXPECT_EQ(a.status, Status::kUnavailable) << kv.key << " " << kv.create_revision;
    EXPECT_TRUE(Contains(a.error, "/locks/a/"));
  }
  HolderAnswer down = EtcdLockService::HolderFromRange(lock, etcd::Status{"connect: refused", -1}, Kvs({Kv("/locks/a/h", 4)}));
  EXPECT_EQ(down.status, Status::kUnavailable);
  EXPECT_TRUE(Contains(down.error, "connect: refused"));
}


// ------------------------------------------------------------------------------- start errors

EtcdClientConfig Config(std::vector<std::string> endpoints, std::chrono::milliseconds timeout = 1000ms) {
  EtcdClientConfig c;
  c.endpoints = std::move(endpoints);
  c.timeout = timeout;
  return c;
}

TEST(EtcdClientCreate, RejectsBadConfigWithAReason) {
  std::string error;
  EXPECT_EQ(EtcdClient::Create(Config({}), &error), nullptr);
  EXPECT_TRUE(Contains(error, "no endpoints"));
  EXPECT_EQ(EtcdClient::Create(Config({"127.0.0.1:2379"}), &error), nullptr);
  EXPECT_TRUE(Contains(error, "http://"));

  EtcdClientConfig c = Config({"http://127.0.0.1:2379"});
  c.username = "root";
  c.password_file = "/nonexistent/etcd-password";
  EXPECT_EQ(EtcdClient::Create(c, &error), nullptr);
  EXPECT_TRUE(Contains(error, "/nonexistent/etcd-password"));
  c.password_file.clear();
  EXPECT_EQ(EtcdClient::Create(c, &error), nullptr);
  EXPECT_TRUE(Contains(error, "password_file"));

  c = Config({"https://127.0.0.1:2379"});
  c.tls_settings.ca_file = "/nonexistent/ca.pem";
  EXPECT_EQ(EtcdClient::Create(c, &error), nullptr);
  EXPECT_TRUE(Contains(error, "/nonexistent/ca.pem"));
  c.tls_settings.ca_file.clear();
  c.tls_settings.cert_file = "/nonexistent/client.pem";
  EXPECT_EQ(EtcdClient::Create(c, &error), nullptr);
  EXPECT_TRUE(Contains(error, "key_file"));
}

TEST(EtcdClientCreate, CallsAfterStopCompleteAtOnce) {
  std::string error;
  auto client = EtcdClient::Create(Config({"http://127.0.0.1:1"}), &error);
  ASSERT_NE(client, nullptr) << error;
  client->Stop();
  etcd::Status range, txn, put, grant, keep_alive, revoke;
  client->Range({}, [&](etcd::Status s, etcd::RangeResponse) { range = std::move(s); });
  client->Txn({}, [&](etcd::Status s, etcd::TxnResponse) { txn = std::move(s); });
  client->Put("/k", "v", 0, [&](etcd::Status s, int64_t) { put = std::move(s); });
  client->Grant(5, [&](etcd::Status s, int64_t, int64_t) { grant = std::move(s); });
  client->KeepAliveOnce(1, [&](etcd::Status s, int64_t, int64_t) { keep_alive = std::move(s); });
  client->Revoke(1, [&](etcd::Status s) { revoke = std::move(s); });
  for (const etcd::Status* s : {&range, &txn, &put, &grant, &keep_alive, &revoke}) {
    EXPECT_TRUE(Contains(s->error, "etcd client stopped")) << s->error;
  }
}

// ------------------------------------------------------------------------------- helpers

// A port that accepts connections (the kernel's backlog) and never answers: a hung member.
class BlackHole {
 public:
  BlackHole() {
    fd_ = ::socket(AF_INET, SOCK_STREAM, 0);
    sockaddr_in a{};
    a.sin_family = AF_INET;
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    ::bind(fd_, reinterpret_cast<sockaddr*>(&a), sizeof a);
    ::listen(fd_, 64);
    socklen_t len = sizeof a;
    ::getsockname(fd_, reinterpret_cast<sockaddr*>(&a), &len);
    port_ = ntohs(a.sin_port);
  }
  ~BlackHole() { ::close(fd_); }
  std::string endpoint() const { return "http://127.0.0.1:" + std::to_string(port_); }

 private:
  int fd_ = -1;
  uint16_t port_ = 0;
};

// The typed calls, waited for.
struct RangeAnswer {
  etcd::Status status;
  etcd::RangeResponse range;
};
RangeAnswer RangeSync(etcd::Kv& kv, etcd::RangeRequest request) {
  std::promise<RangeAnswer> p;
  kv.Range(std::move(request), [&](etcd::Status s, etcd::RangeResponse r) { p.set_value({std::move(s), std::move(r)}); });
  return p.get_future().get();
}
etcd::RangeRequest Keys(std::string key, std::string range_end = "", int64_t revision = 0, int64_t limit = 0) {
  etcd::RangeRequest r;
  r.key = std::move(key);
  r.range_end = std::move(range_end);
  r.revision = revision;
  r.limit = limit;
  return r;
}
// The kvs of key (or of [key, range_end)), expected to be readable.
std::vector<etcd::KeyValue> KvsOf(etcd::Kv& kv, const std::string& key, const std::string& range_end = "") {
  RangeAnswer a = RangeSync(kv, Keys(key, range_end));
  EXPECT_TRUE(a.status.ok()) << a.status.error;
  return a.range.kvs;
}

struct TxnAnswer {
  etcd::Status status;
  etcd::TxnResponse txn;
};
TxnAnswer TxnSync(etcd::Kv& kv, etcd::TxnRequest request) {
  std::promise<TxnAnswer> p;
  kv.Txn(std::move(request), [&](etcd::Status s, etcd::TxnResponse t) { p.set_value({std::move(s), std::move(t)}); });
  return p.get_future().get();
}

struct PutAnswer {
  etcd::Status status;
  int64_t revision = 0;
};
PutAnswer PutSync(etcd::Kv& kv, const std::string& key, const std::string& value, int64_t lease = 0) {
  std::promise<PutAnswer> p;
  kv.Put(key, value, lease, [&](etcd::Status s, int64_t revision) { p.set_value({std::move(s), revision}); });
  return p.get_future().get();
}

struct LeaseAnswer {
  etcd::Status status;
  int64_t id = 0, ttl = 0, revision = 0;
};
LeaseAnswer GrantSync(etcd::Lease& lease, int64_t ttl) {
  std::promise<LeaseAnswer> p;
  lease.Grant(ttl, [&](etcd::Status s, int64_t id, int64_t t) { p.set_value({std::move(s), id, t, 0}); });
  return p.get_future().get();
}
LeaseAnswer KeepAliveSync(etcd::Lease& lease, int64_t id) {
  std::promise<LeaseAnswer> p;
  lease.KeepAliveOnce(id, [&](etcd::Status s, int64_t t, int64_t revision) { p.set_value({std::move(s), id, t, revision}); });
  return p.get_future().get();
}
etcd::Status RevokeSync(etcd::Lease& lease, int64_t id) {
  std::promise<etcd::Status> p;
  lease.Revoke(id, [&](etcd::Status s) { p.set_value(std::move(s)); });
  return p.get_future().get();
}

struct Timed {
  HolderAnswer answer;
  std::chrono::milliseconds took;
};
Timed FindSync(LockService& service, const std::string& lock) {
  std::promise<HolderAnswer> p;
  auto start = Clock::now();
  service.FindHolder(lock, [&](HolderAnswer a) { p.set_value(std::move(a)); });
  HolderAnswer a = p.get_future().get();
  return {std::move(a), std::chrono::duration_cast<std::chrono::milliseconds>(Clock::now() - start)};
}

// Puts key=value (under lease when not 0); the key's create revision.
// Puts key="holder" (under lease when not 0); the put's revision, the key's create revision when
// it is new.
int64_t Put(etcd::Kv& kv, const std::string& key, int64_t lease = 0) {
  PutAnswer a = PutSync(kv, key, "holder", lease);
  EXPECT_TRUE(a.status.ok()) << a.status.error;
  EXPECT_GT(a.revision, 0);
  return a.revision;
}

void Delete(etcd::Kv& kv, const std::string& key) {
  etcd::TxnRequest txn;
  txn.success = {etcd::Op::Delete(key)};
  TxnAnswer a = TxnSync(kv, std::move(txn));
  ASSERT_TRUE(a.status.ok()) << a.status.error;
  EXPECT_TRUE(a.txn.succeeded);
}

// ------------------------------------------------------------------------------- plain etcd

class EtcdTest : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    if (::access(kEtcd, X_OK) != 0 || ::access(kEtcdctl, X_OK) != 0) return;
    dir_ = MakeTempDir("fp_etcd_test");
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
    std::string error;
    // 5 s a call: a loaded machine (sanitizers, other work) is slow, not broken; the tests of a
    // call's deadline make their own clients with short ones.
    client_ = EtcdClient::Create(Config({etcd_->endpoint()}, 5000ms), &error);
    ASSERT_NE(client_, nullptr) << error;
    service_ = EtcdLockService::Create(Config({etcd_->endpoint()}), &error);
    ASSERT_NE(service_, nullptr) << error;
  }

  static inline EtcdProcess* etcd_ = nullptr;
  static inline std::string dir_;
  static inline std::string start_error_;
  std::unique_ptr<EtcdClient> client_;
  std::unique_ptr<EtcdLockService> service_;
};

TEST_F(EtcdTest, NobodyHoldsAFreshLock) {
  // Keys beside the lock are not under it: "/locks/free" itself and "/locks/free2/x".
  Put(*client_, "/locks/free");
  Put(*client_, "/locks/free2/x");
  Timed t = FindSync(*service_, "/locks/free");
  EXPECT_EQ(t.answer.status, Status::kFree) << t.answer.error << " " << t.answer.holder;
}

TEST_F(EtcdTest, TheLowestCreateRevisionHoldsAndTheNextTakesOver) {
  LeaseAnswer grant = GrantSync(*client_, 30);
  ASSERT_TRUE(grant.status.ok()) << grant.status.error;
  const int64_t lease = grant.id;
  ASSERT_NE(lease, 0);

  int64_t first = Put(*client_, "/locks/handover/a-first", lease);
  int64_t second = Put(*client_, "/locks/handover/0-second");  // sorts first by key, not by revision
  ASSERT_LT(first, second);

  Timed t = FindSync(*service_, "/locks/handover");
  ASSERT_EQ(t.answer.status, Status::kHeld) << t.answer.error;
  EXPECT_EQ(t.answer.token, uint64_t(first));
  EXPECT_EQ(t.answer.holder, "/locks/handover/a-first");

  // The holder's session ends (its lease is revoked): the contender holds, with its own number.
  etcd::Status revoke = RevokeSync(*client_, lease);
  ASSERT_TRUE(revoke.ok()) << revoke.error;
  t = FindSync(*service_, "/locks/handover");
  ASSERT_EQ(t.answer.status, Status::kHeld) << t.answer.error;
  EXPECT_EQ(t.answer.token, uint64_t(second));
  EXPECT_EQ(t.answer.holder, "/locks/handover/0-second");

  Delete(*client_, "/locks/handover/0-second");
  EXPECT_EQ(FindSync(*service_, "/locks/handover").answer.status, Status::kFree);
}

TEST_F(EtcdTest, AKeyWrittenByEtcdctlHoldsWithItsCreateRevision) {
  auto [rc, out] = etcd_->Ctl("put /locks/ctl/holder v");
  ASSERT_EQ(rc, 0) << out;
  auto [grc, got] = etcd_->Ctl("get /locks/ctl/holder -w json");
  ASSERT_EQ(grc, 0) << got;
  json::value v = json::parse(got);
  int64_t revision = v.at("kvs").at(0).at("create_revision").as_int64();

  Timed t = FindSync(*service_, "/locks/ctl");
  ASSERT_EQ(t.answer.status, Status::kHeld) << t.answer.error;
  EXPECT_EQ(t.answer.token, uint64_t(revision));
}

TEST_F(EtcdTest, ManyQuestionsAtOnceAllGetTheirAnswer) {
  int64_t revision = Put(*client_, "/locks/busy/h");
  constexpr int kCalls = 200;
  std::vector<std::promise<HolderAnswer>> promises(kCalls);
  for (auto& p : promises) service_->FindHolder("/locks/busy", [&p](HolderAnswer a) { p.set_value(std::move(a)); });
  for (auto& p : promises) {
    HolderAnswer a = p.get_future().get();
    ASSERT_EQ(a.status, Status::kHeld) << a.error;
    EXPECT_EQ(a.token, uint64_t(revision));
  }
}

// ---- Kv: Range, Txn, Put

TEST_F(EtcdTest, PutReturnsItsRevisionAndRangeReadsAtOne) {
  PutAnswer first = PutSync(*client_, "/range/a", "1");
  ASSERT_TRUE(first.status.ok()) << first.status.error;
  PutAnswer second = PutSync(*client_, "/range/a", "2");
  ASSERT_TRUE(second.status.ok()) << second.status.error;
  EXPECT_EQ(second.revision, first.revision + 1);  // nothing else writes meanwhile

  // The newest: the second put's value, read at the store's revision (the second put's).
  RangeAnswer now = RangeSync(*client_, Keys("/range/a"));
  ASSERT_TRUE(now.status.ok()) << now.status.error;
  EXPECT_EQ(now.range.revision, second.revision);
  ASSERT_EQ(now.range.kvs.size(), 1u);
  EXPECT_EQ(now.range.kvs[0].value, "2");
  EXPECT_EQ(now.range.kvs[0].create_revision, first.revision);
  EXPECT_EQ(now.range.kvs[0].mod_revision, second.revision);
  EXPECT_EQ(now.range.kvs[0].version, 2);
  EXPECT_FALSE(now.range.more);

  // At the first put's revision: its value, as it was.
  RangeAnswer then = RangeSync(*client_, Keys("/range/a", "", first.revision));
  ASSERT_TRUE(then.status.ok()) << then.status.error;
  ASSERT_EQ(then.range.kvs.size(), 1u);
  EXPECT_EQ(then.range.kvs[0].value, "1");
  EXPECT_EQ(then.range.kvs[0].mod_revision, first.revision);
  EXPECT_EQ(then.range.kvs[0].version, 1);

  // A revision not written yet is etcd's error, with its code.
  RangeAnswer future = RangeSync(*client_, Keys("/range/a", "", second.revision + 1000));
  EXPECT_FALSE(future.status.ok());
  EXPECT_EQ(future.status.grpc_code, int(etcd::GrpcCode::kOutOfRange)) << future.status.error;
  EXPECT_TRUE(Contains(future.status.error, "future revision")) << future.status.error;
  EXPECT_TRUE(future.range.kvs.empty());
}

TEST_F(EtcdTest, RangeWithALimitSaysThereIsMore) {
  for (const char* key : {"/page/c", "/page/a", "/page/b", "/pagex"}) Put(*client_, key);
  const std::string end = etcd::PrefixRangeEnd("/page/");
  RangeAnswer two = RangeSync(*client_, Keys("/page/", end, 0, 2));
  ASSERT_TRUE(two.status.ok()) << two.status.error;
  ASSERT_EQ(two.range.kvs.size(), 2u);
  EXPECT_EQ(two.range.kvs[0].key, "/page/a");  // etcd's order: by key
  EXPECT_EQ(two.range.kvs[1].key, "/page/b");
  EXPECT_EQ(two.range.kvs[0].value, "holder");
  EXPECT_TRUE(two.range.more);
  // The next page starts after the last key read, at the same revision.
  RangeAnswer rest = RangeSync(*client_, Keys(std::string("/page/b") + '\0', end, two.range.revision, 2));
  ASSERT_TRUE(rest.status.ok()) << rest.status.error;
  ASSERT_EQ(rest.range.kvs.size(), 1u);
  EXPECT_EQ(rest.range.kvs[0].key, "/page/c");
  EXPECT_FALSE(rest.range.more);
  EXPECT_EQ(rest.range.revision, two.range.revision);
  // Sorted by create revision instead (the lock service's order), keys only.
  etcd::RangeRequest oldest = Keys("/page/", end, 0, 1);
  oldest.sort_by = etcd::RangeRequest::SortBy::kCreateRevision;
  oldest.keys_only = true;
  RangeAnswer first = RangeSync(*client_, oldest);
  ASSERT_TRUE(first.status.ok()) << first.status.error;
  ASSERT_EQ(first.range.kvs.size(), 1u);
  EXPECT_EQ(first.range.kvs[0].key, "/page/c");
  EXPECT_EQ(first.range.kvs[0].value, "");
  EXPECT_TRUE(first.range.more);
}

TEST_F(EtcdTest, TxnCompareSucceedsOrFailsAndItsRangesReadBack) {
  const std::string key = "/txn/max";
  int64_t created = Put(*client_, key);
  // Compare on the revision the view has: it holds, the put and the range after it happen.
  etcd::TxnRequest txn;
  txn.compare = {etcd::Compare{key, created}};
  txn.success = {etcd::Op::Put(key, "2"), etcd::Op::Range(key)};
  txn.failure = {etcd::Op::Range(key)};
  TxnAnswer t = TxnSync(*client_, txn);
  ASSERT_TRUE(t.status.ok()) << t.status.error;
  ASSERT_TRUE(t.txn.succeeded);
  ASSERT_EQ(t.txn.responses.size(), 2u);
  EXPECT_TRUE(t.txn.responses[0].kvs.empty());  // the put's
  const etcd::RangeResponse& read = t.txn.responses[1];
  ASSERT_EQ(read.kvs.size(), 1u);
  EXPECT_EQ(read.kvs[0].value, "2");
  EXPECT_EQ(read.kvs[0].mod_revision, t.txn.revision);
  EXPECT_EQ(read.kvs[0].create_revision, created);
  EXPECT_EQ(read.revision, t.txn.revision);
  EXPECT_FALSE(read.more);
  EXPECT_GT(t.txn.revision, created);

  // The same txn again: the view is stale, the failure branch says what is there now.
  TxnAnswer again = TxnSync(*client_, txn);
  ASSERT_TRUE(again.status.ok()) << again.status.error;
  EXPECT_FALSE(again.txn.succeeded);
  ASSERT_EQ(again.txn.responses.size(), 1u);
  ASSERT_EQ(again.txn.responses[0].kvs.size(), 1u);
  EXPECT_EQ(again.txn.responses[0].kvs[0].value, "2");
  EXPECT_EQ(again.txn.responses[0].kvs[0].mod_revision, t.txn.revision);
  EXPECT_EQ(again.txn.revision, t.txn.revision);  // nothing written

  // Revision 0 compares with a key that does not exist; a delete op removes one. A range of a
  // prefix in a branch reads every key under it.
  Put(*client_, "/txn/dir/a");
  Put(*client_, "/txn/dir/b");
  etcd::TxnRequest absent;
  absent.compare = {etcd::Compare{"/txn/none", 0}};
  absent.success = {etcd::Op::Delete(key), etcd::Op::Range("/txn/dir/", etcd::PrefixRangeEnd("/txn/dir/"))};
  TxnAnswer deleted = TxnSync(*client_, absent);
  ASSERT_TRUE(deleted.status.ok()) << deleted.status.error;
  EXPECT_TRUE(deleted.txn.succeeded);
  EXPECT_GT(deleted.txn.revision, t.txn.revision);
  ASSERT_EQ(deleted.txn.responses.size(), 2u);
  ASSERT_EQ(deleted.txn.responses[1].kvs.size(), 2u);
  EXPECT_EQ(deleted.txn.responses[1].kvs[1].key, "/txn/dir/b");
  EXPECT_TRUE(KvsOf(*client_, key).empty());
  // The compare fails once the key exists; an empty failure branch has no responses.
  absent.compare = {etcd::Compare{"/txn/dir/a", 0}};
  TxnAnswer exists = TxnSync(*client_, absent);
  ASSERT_TRUE(exists.status.ok()) << exists.status.error;
  EXPECT_FALSE(exists.txn.succeeded);
  EXPECT_TRUE(exists.txn.responses.empty());
  EXPECT_EQ(exists.txn.revision, deleted.txn.revision);
}

// ---- Lease: Grant, KeepAliveOnce, Revoke

TEST_F(EtcdTest, AKeptAliveLeaseOutlivesItsTtlAndItsRevokeDeletesTheKey) {
  LeaseAnswer grant = GrantSync(*client_, 2);
  ASSERT_TRUE(grant.status.ok()) << grant.status.error;
  ASSERT_NE(grant.id, 0);
  EXPECT_EQ(grant.ttl, 2);
  const std::string key = "/lease/member";
  int64_t put = Put(*client_, key, grant.id);
  ASSERT_EQ(KvsOf(*client_, key).size(), 1u);
  EXPECT_EQ(KvsOf(*client_, key)[0].lease, grant.id);

  // 3.5 s, well past the 2 s TTL, renewed every 0.5 s; each answer has the store's revision.
  for (int i = 0; i < 7; ++i) {
    std::this_thread::sleep_for(500ms);
    LeaseAnswer k = KeepAliveSync(*client_, grant.id);
    ASSERT_TRUE(k.status.ok()) << k.status.error;
    EXPECT_EQ(k.ttl, 2);
    EXPECT_GE(k.revision, put);
  }
  ASSERT_EQ(KvsOf(*client_, key).size(), 1u);

  etcd::Status revoke = RevokeSync(*client_, grant.id);
  ASSERT_TRUE(revoke.ok()) << revoke.error;
  EXPECT_TRUE(KvsOf(*client_, key).empty());
  // Gone: a keep-alive now says TTL 0, and is not an error; its revision is the revoke's or later.
  LeaseAnswer after = KeepAliveSync(*client_, grant.id);
  ASSERT_TRUE(after.status.ok()) << after.status.error;
  EXPECT_EQ(after.ttl, 0);
  EXPECT_GT(after.revision, put);
  // Revoked twice: etcd's NOT_FOUND.
  etcd::Status twice = RevokeSync(*client_, grant.id);
  EXPECT_FALSE(twice.ok());
  EXPECT_EQ(twice.grpc_code, int(etcd::GrpcCode::kNotFound)) << twice.error;
}

TEST_F(EtcdTest, AKeepAliveOfAnUnknownLeaseSaysTtlZero) {
  LeaseAnswer k = KeepAliveSync(*client_, 123456789);
  ASSERT_TRUE(k.status.ok()) << k.status.error;
  EXPECT_EQ(k.ttl, 0);
  etcd::Status revoke = RevokeSync(*client_, 123456789);
  EXPECT_FALSE(revoke.ok());
  EXPECT_EQ(revoke.grpc_code, 5) << revoke.error;
}

TEST_F(EtcdTest, AnExpiredLeaseSaysTtlZero) {
  LeaseAnswer grant = GrantSync(*client_, 1);
  ASSERT_TRUE(grant.status.ok()) << grant.status.error;
  // A key on the lease goes when etcd's lessor expires it (it checks every 500 ms): waited for
  // by reading the key, never by renewing the lease. A lease that never expires fails at the
  // deadline.
  const std::string key = "/lease/expiring";
  Put(*client_, key, grant.id);
  const auto deadline = Clock::now() + 30s;
  while (!KvsOf(*client_, key).empty() && Clock::now() < deadline) std::this_thread::sleep_for(100ms);
  ASSERT_TRUE(KvsOf(*client_, key).empty()) << "the 1 s lease never expired";
  LeaseAnswer k = KeepAliveSync(*client_, grant.id);
  ASSERT_TRUE(k.status.ok()) << k.status.error;
  EXPECT_EQ(k.ttl, 0);
}

TEST_F(EtcdTest, CallbacksRunOnTheClientsThreadNeverInsideTheCall) {
  // On another thread than the caller's, so never inside the call; and all on one thread.
  std::promise<std::thread::id> range, put, grant;
  client_->Range(Keys("/thread/k"), [&](etcd::Status, etcd::RangeResponse) { range.set_value(std::this_thread::get_id()); });
  client_->Put("/thread/k", "v", 0, [&](etcd::Status, int64_t) { put.set_value(std::this_thread::get_id()); });
  client_->Grant(5, [&](etcd::Status, int64_t, int64_t) { grant.set_value(std::this_thread::get_id()); });
  const std::thread::id client_thread = range.get_future().get();
  EXPECT_NE(client_thread, std::this_thread::get_id());
  EXPECT_EQ(put.get_future().get(), client_thread);
  EXPECT_EQ(grant.get_future().get(), client_thread);
}

// What a watch delivered, from the client's thread.
class WatchRecorder {
 public:
  etcd::WatchEvents OnEvents() {
    return [this](int64_t revision, std::vector<etcd::WatchEvent> events) {
      std::lock_guard lock(mutex_);
      EXPECT_FALSE(ended_) << "events after the end";
      ++messages_;
      revisions_.push_back(revision);
      for (auto& e : events) events_.push_back(std::move(e));
      changed_.notify_all();
    };
  }
  etcd::WatchEnded OnEnd() {
    return [this](etcd::WatchEnd end) {
      std::lock_guard lock(mutex_);
      ++ends_;
      ended_ = true;
      end_ = std::move(end);
      changed_.notify_all();
    };
  }
  bool WaitEvents(size_t n, std::chrono::milliseconds within = 5s) {
    std::unique_lock lock(mutex_);
    return changed_.wait_for(lock, within, [&] { return events_.size() >= n || ended_; }) && events_.size() >= n;
  }
  bool WaitMessages(int n, std::chrono::milliseconds within = 5s) {
    std::unique_lock lock(mutex_);
    return changed_.wait_for(lock, within, [&] { return messages_ >= n || ended_; }) && messages_ >= n;
  }
  bool WaitEnd(std::chrono::milliseconds within = 5s) {
    std::unique_lock lock(mutex_);
    return changed_.wait_for(lock, within, [&] { return ended_; });
  }
  std::vector<etcd::WatchEvent> events() {
    std::lock_guard lock(mutex_);
    return events_;
  }
  std::vector<int64_t> revisions() {
    std::lock_guard lock(mutex_);
    return revisions_;
  }
  etcd::WatchEnd end() {
    std::lock_guard lock(mutex_);
    return end_;
  }
  int ends() {
    std::lock_guard lock(mutex_);
    return ends_;
  }

 private:
  std::mutex mutex_;
  std::condition_variable changed_;
  int messages_ = 0;
  std::vector<int64_t> revisions_;
  std::vector<etcd::WatchEvent> events_;
  bool ended_ = false;
  int ends_ = 0;
  etcd::WatchEnd end_;
};

using Reason = etcd::WatchEnd::Reason;

std::shared_ptr<etcd::WatchHandle> WatchPrefix(etcd::Watcher& client, WatchRecorder& recorder, const std::string& prefix,
                                               int64_t from = 0) {
  etcd::WatchOptions options;
  options.key = prefix;
  options.range_end = etcd::PrefixRangeEnd(prefix);
  options.start_revision = from;
  return client.Watch(options, recorder.OnEvents(), recorder.OnEnd());
}

TEST_F(EtcdTest, AWatchFromARevisionSeesPutsAndDeletesInOrder) {
  int64_t first = Put(*client_, "/watch/a");
  int64_t second = Put(*client_, "/watch/b");
  Put(*client_, "/watchers/outside");  // beside the prefix: not seen
  Delete(*client_, "/watch/a");

  WatchRecorder recorder;
  auto handle = WatchPrefix(*client_, recorder, "/watch/", first);
  ASSERT_TRUE(recorder.WaitEvents(3)) << recorder.end().error;
  // Live ones after the history.
  int64_t third = Put(*client_, "/watch/c");
  ASSERT_TRUE(recorder.WaitEvents(4)) << recorder.end().error;

  std::vector<etcd::WatchEvent> events = recorder.events();
  ASSERT_EQ(events.size(), 4u);
  EXPECT_EQ(events[0].type, etcd::WatchEvent::Type::kPut);
  EXPECT_EQ(events[0].kv.key, "/watch/a");
  EXPECT_EQ(events[0].kv.value, "holder");
  EXPECT_EQ(events[0].kv.mod_revision, first);
  EXPECT_EQ(events[1].type, etcd::WatchEvent::Type::kPut);
  EXPECT_EQ(events[1].kv.key, "/watch/b");
  EXPECT_EQ(events[1].kv.mod_revision, second);
  EXPECT_EQ(events[2].type, etcd::WatchEvent::Type::kDelete);
  EXPECT_EQ(events[2].kv.key, "/watch/a");
  EXPECT_GT(events[2].kv.mod_revision, second);
  EXPECT_EQ(events[3].type, etcd::WatchEvent::Type::kPut);
  EXPECT_EQ(events[3].kv.key, "/watch/c");
  EXPECT_EQ(events[3].kv.mod_revision, third);

  // The first message is "created", without events; the last one's revision is the put's.
  std::vector<int64_t> revisions = recorder.revisions();
  ASSERT_GE(revisions.size(), 2u);
  EXPECT_GE(revisions.front(), events[2].kv.mod_revision);
  EXPECT_EQ(revisions.back(), third);

  handle->Cancel();
  handle->Cancel();
  ASSERT_TRUE(recorder.WaitEnd());
  EXPECT_EQ(recorder.end().reason, Reason::kCancelled);
  std::this_thread::sleep_for(100ms);
  EXPECT_EQ(recorder.ends(), 1);
}

TEST_F(EtcdTest, AWatchWithoutARevisionStartsWithTheCreatedMessage) {
  std::string error;
  auto client = EtcdClient::Create(Config({etcd_->endpoint()}, 1000ms), &error);
  ASSERT_NE(client, nullptr) << error;
  WatchRecorder recorder;
  auto handle = WatchPrefix(*client, recorder, "/fresh/");
  ASSERT_TRUE(recorder.WaitMessages(1)) << recorder.end().error;
  EXPECT_TRUE(recorder.events().empty());
  EXPECT_GT(recorder.revisions().at(0), 0);
  int64_t put = Put(*client_, "/fresh/x");
  ASSERT_TRUE(recorder.WaitEvents(1)) << recorder.end().error;
  EXPECT_EQ(recorder.events()[0].kv.mod_revision, put);
  // A watch lasts past the deadline of its start (its client's timeout, 1 s here).
  std::this_thread::sleep_for(1500ms);
  Put(*client_, "/fresh/y");
  ASSERT_TRUE(recorder.WaitEvents(2)) << recorder.end().error;
  handle->Cancel();
  ASSERT_TRUE(recorder.WaitEnd());
  EXPECT_EQ(recorder.end().reason, Reason::kCancelled);
}

TEST_F(EtcdTest, AWatchFromACompactedRevisionEndsCompacted) {
  int64_t old = Put(*client_, "/compacted/k");
  int64_t now = Put(*client_, "/compacted/k");
  auto [rc, out] = etcd_->Ctl("compaction " + std::to_string(now) + " --physical");
  ASSERT_EQ(rc, 0) << out;

  WatchRecorder recorder;
  auto handle = WatchPrefix(*client_, recorder, "/compacted/", old);
  ASSERT_TRUE(recorder.WaitEnd()) << "still watching";
  EXPECT_EQ(recorder.end().reason, Reason::kCompacted) << recorder.end().error;
  EXPECT_EQ(recorder.end().compact_revision, now);
  EXPECT_TRUE(recorder.events().empty());
  handle->Cancel();  // after the end: nothing more
  std::this_thread::sleep_for(100ms);
  EXPECT_EQ(recorder.ends(), 1);
}

TEST_F(EtcdTest, AWatchOfAnUnreachableEtcdEndsWithTheReason) {
  std::string error;
  auto client = EtcdClient::Create(Config({"http://127.0.0.1:" + std::to_string(FreePort())}), &error);
  ASSERT_NE(client, nullptr) << error;
  WatchRecorder refused;
  auto start = Clock::now();
  auto handle = WatchPrefix(*client, refused, "/x/");
  ASSERT_TRUE(refused.WaitEnd());
  EXPECT_LT(Clock::now() - start, 500ms);
  EXPECT_EQ(refused.end().reason, Reason::kError);
  EXPECT_TRUE(Contains(refused.end().error, "refused")) << refused.end().error;

  // A member that never answers: the start has the client's timeout.
  BlackHole hole;
  auto hung = EtcdClient::Create(Config({hole.endpoint()}, 400ms), &error);
  ASSERT_NE(hung, nullptr) << error;
  WatchRecorder timed_out;
  start = Clock::now();
  auto handle2 = WatchPrefix(*hung, timed_out, "/x/");
  ASSERT_TRUE(timed_out.WaitEnd(2s));
  EXPECT_GE(Clock::now() - start, 350ms);
  EXPECT_EQ(timed_out.end().reason, Reason::kError);
  EXPECT_TRUE(Contains(timed_out.end().error, "timed out after 400ms")) << timed_out.end().error;
}

TEST_F(EtcdTest, TheSecondEndpointWatchesWhenTheFirstIsDown) {
  std::string error;
  auto client = EtcdClient::Create(Config({"http://127.0.0.1:" + std::to_string(FreePort()), etcd_->endpoint()}), &error);
  ASSERT_NE(client, nullptr) << error;
  WatchRecorder recorder;
  auto handle = WatchPrefix(*client, recorder, "/failover-watch/");
  ASSERT_TRUE(recorder.WaitMessages(1)) << recorder.end().error;
  Put(*client_, "/failover-watch/k");
  ASSERT_TRUE(recorder.WaitEvents(1)) << recorder.end().error;
  handle->Cancel();
  ASSERT_TRUE(recorder.WaitEnd());
}

TEST_F(EtcdTest, StopEndsEveryWatch) {
  std::string error;
  auto client = EtcdClient::Create(Config({etcd_->endpoint()}), &error);
  ASSERT_NE(client, nullptr) << error;
  WatchRecorder a, b;
  auto ha = WatchPrefix(*client, a, "/stop/a/");
  auto hb = WatchPrefix(*client, b, "/stop/b/");
  ASSERT_TRUE(a.WaitMessages(1));
  ASSERT_TRUE(b.WaitMessages(1));
  client->Stop();
  for (WatchRecorder* r : {&a, &b}) {
    ASSERT_TRUE(r->WaitEnd(0ms));  // ended within Stop
    EXPECT_EQ(r->end().reason, Reason::kError);
    EXPECT_TRUE(Contains(r->end().error, "stopped")) << r->end().error;
  }
  ha->Cancel();  // after Stop: harmless
  // A watch after Stop ends at once.
  WatchRecorder late;
  WatchPrefix(*client, late, "/stop/late/");
  ASSERT_TRUE(late.WaitEnd(0ms));
  EXPECT_TRUE(Contains(late.end().error, "stopped"));
  // A handle that outlives its client is harmless too.
  client.reset();
  hb->Cancel();
}

TEST_F(EtcdTest, AnEtcdErrorIsReadable) {
  etcd::Status r = RevokeSync(*client_, 12345);
  ASSERT_FALSE(r.ok());
  EXPECT_TRUE(Contains(r.error, "lease not found")) << r.error;
  EXPECT_TRUE(Contains(r.error, etcd_->endpoint())) << r.error;
  EXPECT_TRUE(Contains(r.error, "NOT_FOUND")) << r.error;
  EXPECT_EQ(r.grpc_code, 5);
}

TEST_F(EtcdTest, AnUnreachableEndpointIsUnavailableAtOnce) {
  std::string error;
  auto service = EtcdLockService::Create(Config({"http://127.0.0.1:" + std::to_string(FreePort())}), &error);
  ASSERT_NE(service, nullptr) << error;
  Timed t = FindSync(*service, "/locks/x");
  EXPECT_EQ(t.answer.status, Status::kUnavailable);
  EXPECT_TRUE(Contains(t.answer.error, "refused")) << t.answer.error;
  EXPECT_LT(t.took, 500ms);
}

TEST_F(EtcdTest, TheFirstEndpointDownTheSecondAnswers) {
  int64_t revision = Put(*client_, "/locks/failover/h");
  std::string error;
  auto service = EtcdLockService::Create(
      Config({"http://127.0.0.1:" + std::to_string(FreePort()), etcd_->endpoint()}), &error);
  ASSERT_NE(service, nullptr) << error;
  for (int i = 0; i < 3; ++i) {
    Timed t = FindSync(*service, "/locks/failover");
    ASSERT_EQ(t.answer.status, Status::kHeld) << t.answer.error;
    EXPECT_EQ(t.answer.token, uint64_t(revision));
  }
}

TEST_F(EtcdTest, AHungFirstMemberLeavesTimeForTheSecond) {
  int64_t revision = Put(*client_, "/locks/hung/h");
  BlackHole hole;
  std::string error;
  auto service = EtcdLockService::Create(Config({hole.endpoint(), etcd_->endpoint()}, 1000ms), &error);
  ASSERT_NE(service, nullptr) << error;
  Timed t = FindSync(*service, "/locks/hung");
  ASSERT_EQ(t.answer.status, Status::kHeld) << t.answer.error;
  EXPECT_EQ(t.answer.token, uint64_t(revision));
  EXPECT_GE(t.took, 450ms);  // the hung member had its half of the deadline
  EXPECT_LT(t.took, 1000ms);
  // The second is remembered: no more waiting for the first.
  t = FindSync(*service, "/locks/hung");
  ASSERT_EQ(t.answer.status, Status::kHeld) << t.answer.error;
  EXPECT_LT(t.took, 300ms);
}

TEST_F(EtcdTest, AHungEtcdTimesOutWithinTheDeadline) {
  std::string error;
  auto service = EtcdLockService::Create(Config({etcd_->endpoint()}, 600ms), &error);
  ASSERT_NE(service, nullptr) << error;
  ASSERT_NE(FindSync(*service, "/locks/paused").answer.status, Status::kUnavailable);  // a pooled connection
  etcd_->Pause();
  Timed t = FindSync(*service, "/locks/paused");
  etcd_->Resume();
  EXPECT_EQ(t.answer.status, Status::kUnavailable);
  EXPECT_TRUE(Contains(t.answer.error, "timed out after 600ms")) << t.answer.error;
  EXPECT_GE(t.took, 550ms);
  EXPECT_LT(t.took, 900ms);
  // And it answers again once etcd does.
  t = FindSync(*service, "/locks/paused");
  EXPECT_EQ(t.answer.status, Status::kFree) << t.answer.error;
}

TEST_F(EtcdTest, StopCompletesAPendingCall) {
  BlackHole hole;
  std::string error;
  auto service = EtcdLockService::Create(Config({hole.endpoint()}, 10000ms), &error);
  ASSERT_NE(service, nullptr) << error;
  std::promise<HolderAnswer> p;
  service->FindHolder("/locks/x", [&](HolderAnswer a) { p.set_value(std::move(a)); });
  std::this_thread::sleep_for(100ms);
  auto start = Clock::now();
  service->Stop();
  auto f = p.get_future();
  ASSERT_EQ(f.wait_for(1s), std::future_status::ready);
  HolderAnswer a = f.get();
  EXPECT_EQ(a.status, Status::kUnavailable);
  EXPECT_TRUE(Contains(a.error, "stopped")) << a.error;
  EXPECT_LT(Clock::now() - start, 1s);
}

// A measurement, not a test (bench/etcd_range_latency.py runs it): the latency of the holder's
// range through the client, one call at a time. FP_ETCD_ENDPOINT: measure that etcd instead of
// the suite's; FP_BENCH_CALLS: how many calls (default 1000).
TEST_F(EtcdTest, DISABLED_HolderRangeLatency) {
  const char* endpoint = std::getenv("FP_ETCD_ENDPOINT");
  const char* calls = std::getenv("FP_BENCH_CALLS");
  int n = calls ? std::atoi(calls) : 1000;
  std::string error;
  auto client = EtcdClient::Create(Config({endpoint ? endpoint : etcd_->endpoint()}), &error);
  ASSERT_NE(client, nullptr) << error;
  Put(*client, "/locks/bench/holder");
  const etcd::RangeRequest request = EtcdLockService::HolderRequest("/locks/bench");
  for (int i = 0; i < 50; ++i) ASSERT_TRUE(RangeSync(*client, request).status.ok());  // warm up
  std::vector<double> micros;
  for (int i = 0; i < n; ++i) {
    auto start = Clock::now();
    RangeAnswer r = RangeSync(*client, request);
    micros.push_back(std::chrono::duration<double, std::micro>(Clock::now() - start).count());
    ASSERT_TRUE(r.status.ok()) << r.status.error;
    ASSERT_EQ(EtcdLockService::HolderFromRange("/locks/bench", r.status, r.range).status, Status::kHeld);
  }
  std::sort(micros.begin(), micros.end());
  auto at = [&](double q) { return micros[std::min(micros.size() - 1, size_t(q * double(micros.size())))]; };
  std::printf("{\"client\": \"fencing-proxy EtcdClient (JSON gateway)\", \"calls\": %d, \"p50_us\": %.0f, \"p99_us\": %.0f}\n", n,
              at(0.50), at(0.99));
}

TEST(EtcdKilled, AKilledEtcdIsUnavailableAtOnce) {
  FP_REQUIRE_ETCD();
  std::string dir = MakeTempDir("fp_etcd_killed");
  EtcdProcess etcd;
  std::string error;
  ASSERT_TRUE(etcd.Start(dir, nullptr, {}, &error)) << error;
  auto service = EtcdLockService::Create(Config({etcd.endpoint()}), &error);
  ASSERT_NE(service, nullptr) << error;
  ASSERT_EQ(FindSync(*service, "/locks/k").answer.status, Status::kFree);  // leaves a pooled connection
  etcd.Kill();
  Timed t = FindSync(*service, "/locks/k");
  EXPECT_EQ(t.answer.status, Status::kUnavailable);
  EXPECT_TRUE(Contains(t.answer.error, "refused")) << t.answer.error;
  EXPECT_LT(t.took, 500ms);
  std::filesystem::remove_all(dir);
}

TEST(EtcdKilled, AWatchEndsAtOnceWhenEtcdIsKilled) {
  FP_REQUIRE_ETCD();
  std::string dir = MakeTempDir("fp_etcd_killed_watch");
  EtcdProcess etcd;
  std::string error;
  ASSERT_TRUE(etcd.Start(dir, nullptr, {}, &error)) << error;
  auto client = EtcdClient::Create(Config({etcd.endpoint()}), &error);
  ASSERT_NE(client, nullptr) << error;
  WatchRecorder recorder;
  auto handle = WatchPrefix(*client, recorder, "/killed/");
  ASSERT_TRUE(recorder.WaitMessages(1)) << recorder.end().error;
  auto start = Clock::now();
  etcd.Kill();
  ASSERT_TRUE(recorder.WaitEnd(1s)) << "the watch did not notice";
  EXPECT_LT(Clock::now() - start, 500ms);
  EXPECT_EQ(recorder.end().reason, Reason::kError);
  EXPECT_TRUE(Contains(recorder.end().error, etcd.endpoint())) << recorder.end().error;
  std::filesystem::remove_all(dir);
}

// ------------------------------------------------------------------------------- https + auth

// Certificates for 127.0.0.1 and "localhost" signed by a test CA, and a second, unrelated CA.
bool MakeCertificates(const std::string& dir, std::string* error) {
  const std::string o = "openssl ";
  std::vector<std::string> steps = {
      o + "req -x509 -newkey rsa:2048 -nodes -days 1 -subj /CN=fp-test-ca -keyout " + dir + "/ca.key -out " + dir + "/ca.pem",
      o + "req -x509 -newkey rsa:2048 -nodes -days 1 -subj /CN=fp-other-ca -keyout " + dir + "/other.key -out " + dir + "/other.pem",
      o + "req -newkey rsa:2048 -nodes -subj /CN=etcd -keyout " + dir + "/server.key -out " + dir + "/server.csr",
      "printf 'subjectAltName=IP:127.0.0.1,DNS:localhost\\n' > " + dir + "/san.ext",
      o + "x509 -req -days 1 -in " + dir + "/server.csr -CA " + dir + "/ca.pem -CAkey " + dir + "/ca.key -CAcreateserial -extfile " +
          dir + "/san.ext -out " + dir + "/server.pem",
  };
  for (const auto& step : steps) {
    auto [rc, out] = Shell(step);
    if (rc != 0) {
      *error = step + ": " + out;
      return false;
    }
  }
  return true;
}

class EtcdSecureTest : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    if (::access(kEtcd, X_OK) != 0 || ::access(kEtcdctl, X_OK) != 0) return;
    dir_ = MakeTempDir("fp_etcd_secure");
    if (!MakeCertificates(dir_, &start_error_)) return;
    tls_ = {dir_ + "/server.pem", dir_ + "/server.key", dir_ + "/ca.pem"};
    etcd_ = new EtcdProcess;
    // Simple tokens that expire after 1 s unused: the re-authentication test waits them out.
    if (!etcd_->Start(dir_, &tls_, {"--auth-token", "simple", "--auth-token-ttl", "1"}, &start_error_)) {
      delete etcd_;
      etcd_ = nullptr;
      return;
    }
    for (const char* step : {"user add root:fp-secret --interactive=false", "user grant-role root root", "auth enable"}) {
      auto [rc, out] = etcd_->Ctl(step);
      if (rc != 0) {
        start_error_ = std::string("etcdctl ") + step + ": " + out;
        return;
      }
    }
    WriteBytes(dir_ + "/password", "fp-secret\n");
    WriteBytes(dir_ + "/wrong-password", "not-it\n");
  }
  static void TearDownTestSuite() {
    delete etcd_;
    etcd_ = nullptr;
    if (!dir_.empty()) std::filesystem::remove_all(dir_);
  }
  void SetUp() override {
    FP_REQUIRE_ETCD();
    ASSERT_NE(etcd_, nullptr) << start_error_;
    ASSERT_TRUE(start_error_.empty()) << start_error_;
  }

  EtcdClientConfig SecureConfig(const std::string& password_file = "/password") {
    EtcdClientConfig c = Config({etcd_->endpoint()});
    c.tls = true;
    c.tls_settings.ca_file = tls_.ca_file;
    c.username = "root";
    c.password_file = dir_ + password_file;
    return c;
  }

  static Timed Find(const EtcdClientConfig& config, const std::string& lock) {
    std::string error;
    auto service = EtcdLockService::Create(config, &error);
    if (!service) return {HolderAnswer{Status::kUnavailable, 0, "", "create: " + error}, 0ms};
    return FindSync(*service, lock);
  }

  static inline EtcdProcess* etcd_ = nullptr;
  static inline std::string dir_;
  static inline std::string start_error_;
  static inline EtcdTls tls_;
};

TEST_F(EtcdSecureTest, TheRightUserOverVerifiedTlsGetsAnAnswer) {
  ASSERT_EQ(etcd_->Ctl("put /locks/s/h v", "root:fp-secret").first, 0);
  Timed t = Find(SecureConfig(), "/locks/s");
  ASSERT_EQ(t.answer.status, Status::kHeld) << t.answer.error;
  EXPECT_EQ(t.answer.holder, "/locks/s/h");

  // The certificate names localhost too: server_name checks that name instead of the address.
  EtcdClientConfig by_name = SecureConfig();
  by_name.tls_settings.server_name = "localhost";
  EXPECT_EQ(Find(by_name, "/locks/s").answer.status, Status::kHeld);
}

TEST_F(EtcdSecureTest, AWrongCaOrNameFailsClosed) {
  EtcdClientConfig other_ca = SecureConfig();
  other_ca.tls_settings.ca_file = dir_ + "/other.pem";
  Timed t = Find(other_ca, "/locks/s");
  EXPECT_EQ(t.answer.status, Status::kUnavailable);
  EXPECT_TRUE(Contains(t.answer.error, "certificate verify failed")) << t.answer.error;

  EtcdClientConfig wrong_name = SecureConfig();
  wrong_name.tls_settings.server_name = "etcd.elsewhere";
  t = Find(wrong_name, "/locks/s");
  EXPECT_EQ(t.answer.status, Status::kUnavailable);
  EXPECT_TRUE(Contains(t.answer.error, "certificate verify failed")) << t.answer.error;

  // Plain HTTP to the TLS port is no answer either.
  EtcdClientConfig plain = SecureConfig();
  plain.endpoints = {"http" + etcd_->endpoint().substr(5)};
  EXPECT_EQ(Find(plain, "/locks/s").answer.status, Status::kUnavailable);
}

TEST_F(EtcdSecureTest, AWrongPasswordOrNoUserIsRefused) {
  Timed t = Find(SecureConfig("/wrong-password"), "/locks/s");
  EXPECT_EQ(t.answer.status, Status::kUnavailable);
  EXPECT_TRUE(Contains(t.answer.error, "authentication failed")) << t.answer.error;

  EtcdClientConfig anonymous = SecureConfig();
  anonymous.username.clear();
  anonymous.password_file.clear();
  t = Find(anonymous, "/locks/s");
  EXPECT_EQ(t.answer.status, Status::kUnavailable);
  EXPECT_TRUE(Contains(t.answer.error, "user name is empty")) << t.answer.error;
}

TEST_F(EtcdSecureTest, AWatchOverTlsWithAuthSeesAPut) {
  std::string error;
  auto client = EtcdClient::Create(SecureConfig(), &error);
  ASSERT_NE(client, nullptr) << error;
  WatchRecorder recorder;
  auto handle = WatchPrefix(*client, recorder, "/secure-watch/");
  ASSERT_TRUE(recorder.WaitMessages(1)) << recorder.end().error;
  ASSERT_EQ(etcd_->Ctl("put /secure-watch/k v", "root:fp-secret").first, 0);
  ASSERT_TRUE(recorder.WaitEvents(1)) << recorder.end().error;
  EXPECT_EQ(recorder.events()[0].kv.key, "/secure-watch/k");
  EXPECT_EQ(recorder.events()[0].kv.value, "v");
  // A keep-alive goes the same way (TLS, token) as any call.
  LeaseAnswer grant = GrantSync(*client, 5);
  ASSERT_TRUE(grant.status.ok()) << grant.status.error;
  LeaseAnswer k = KeepAliveSync(*client, grant.id);
  ASSERT_TRUE(k.status.ok()) << k.status.error;
  EXPECT_EQ(k.ttl, 5);
  EXPECT_GT(k.revision, 0);
  handle->Cancel();
  ASSERT_TRUE(recorder.WaitEnd());
}

TEST_F(EtcdSecureTest, AnExpiredTokenIsRenewedOnce) {
  std::string error;
  auto service = EtcdLockService::Create(SecureConfig(), &error);
  ASSERT_NE(service, nullptr) << error;
  ASSERT_NE(FindSync(*service, "/locks/renew").answer.status, Status::kUnavailable);
  std::this_thread::sleep_for(2500ms);  // the 1 s simple token expires
  Timed t = FindSync(*service, "/locks/renew");
  EXPECT_EQ(t.answer.status, Status::kFree) << t.answer.error;
}

}  // namespace
}  // namespace fencing
