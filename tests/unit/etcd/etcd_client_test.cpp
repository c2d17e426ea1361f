// EtcdClient and EtcdLockService: the gateway's small rules as tables, then the client against a
// real etcd (Debian's /usr/bin/etcd on free 127.0.0.1 ports, a temporary data directory), plain
// HTTP once per suite, and https with auth in a suite of its own (certificates made by openssl).
// Without etcd the real-server tests skip, unless FP_REQUIRE_LOCK_SERVICES=1 makes that a failure.

#include "etcd/etcd_client.h"
#include "lockservice/etcd_lock_service.h"

#include "test_files.h"

#include <boost/json.hpp>
#include <gtest/gtest.h>

#include <algorithm>
#include <chrono>
#include <cstdlib>
#include <cstdio>
#include <filesystem>
#include <future>
#include <memory>
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

constexpr const char* kEtcd = "/usr/bin/etcd";
constexpr const char* kEtcdctl = "/usr/bin/etcdctl";

// ------------------------------------------------------------------------------- pure rules

TEST(EtcdRules, Base64RoundTripsAndRejectsBadText) {
  const std::vector<std::pair<std::string, std::string>> cases = {
      {"", ""}, {"f", "Zg=="}, {"fo", "Zm8="}, {"foo", "Zm9v"}, {"foob", "Zm9vYg=="},
      {"/locks/a/", "L2xvY2tzL2Ev"}, {std::string("\xff\x00\xfe", 3), "/wD+"}};
  for (const auto& [bytes, text] : cases) {
    EXPECT_EQ(etcd::Base64Encode(bytes), text);
    std::string decoded;
    ASSERT_TRUE(etcd::Base64Decode(text, &decoded)) << text;
    EXPECT_EQ(decoded, bytes);
  }
  for (const char* bad : {"Zg=", "Z===", "Zg==Zg==", "Zm9v!", "Zg=a", "====", "Zm 9"}) {
    std::string out;
    EXPECT_FALSE(etcd::Base64Decode(bad, &out)) << bad;
  }
}

TEST(EtcdRules, PrefixRangeEndIsClientv3s) {
  EXPECT_EQ(etcd::PrefixRangeEnd("/locks/a/"), "/locks/a0");
  EXPECT_EQ(etcd::PrefixRangeEnd("a\xff"), "b");
  EXPECT_EQ(etcd::PrefixRangeEnd("a\xfe"), "a\xff");
  EXPECT_EQ(etcd::PrefixRangeEnd("\xff\xff"), std::string(1, '\0'));
  EXPECT_EQ(etcd::PrefixRangeEnd(""), std::string(1, '\0'));
}

TEST(EtcdRules, ReadInt64TakesStringsAndNumbersAndAbsence) {
  json::object o = {{"s", "12345678901234"}, {"n", 7}, {"neg", "-3"}, {"bad", "12x"}, {"b", true},
                    {"empty", ""}, {"huge", "99999999999999999999"}};
  int64_t v = -1;
  std::string error;
  ASSERT_TRUE(etcd::ReadInt64(o, "s", &v, &error));
  EXPECT_EQ(v, 12345678901234);
  ASSERT_TRUE(etcd::ReadInt64(o, "n", &v, &error));
  EXPECT_EQ(v, 7);
  ASSERT_TRUE(etcd::ReadInt64(o, "neg", &v, &error));
  EXPECT_EQ(v, -3);
  ASSERT_TRUE(etcd::ReadInt64(o, "absent", &v, &error));
  EXPECT_EQ(v, 0);
  for (const char* bad : {"bad", "b", "empty", "huge"}) {
    error.clear();
    EXPECT_FALSE(etcd::ReadInt64(o, bad, &v, &error)) << bad;
    EXPECT_TRUE(Contains(error, bad));
  }
}

TEST(EtcdRules, ParseEndpoint) {
  etcd::Endpoint ep;
  std::string error;
  ASSERT_TRUE(etcd::ParseEndpoint("http://127.0.0.1:2379", &ep, &error)) << error;
  EXPECT_FALSE(ep.tls);
  EXPECT_EQ(ep.host, "127.0.0.1");
  EXPECT_EQ(ep.port, 2379);
  ASSERT_TRUE(etcd::ParseEndpoint("https://etcd.example:2379/", &ep, &error)) << error;
  EXPECT_TRUE(ep.tls);
  EXPECT_EQ(ep.host, "etcd.example");
  ASSERT_TRUE(etcd::ParseEndpoint("http://[::1]:2379", &ep, &error)) << error;
  EXPECT_EQ(ep.host, "::1");
  for (const char* bad : {"127.0.0.1:2379", "grpc://h:1", "http://h", "http://h:0", "http://h:65536",
                          "http://:2379", "http://h:2379/v3", "http://u@h:2379", "http://[::1]2379", "http://h:x"}) {
    error.clear();
    EXPECT_FALSE(etcd::ParseEndpoint(bad, &ep, &error)) << bad;
    EXPECT_TRUE(Contains(error, bad)) << error;
  }
}

TEST(EtcdRules, HolderRequestIsALinearizableSortedRangeOfOneKey) {
  json::object r = EtcdLockService::HolderRequest("/locks/a");
  EXPECT_EQ(r.at("key"), json::value(etcd::Base64Encode("/locks/a/")));
  EXPECT_EQ(r.at("range_end"), json::value(etcd::Base64Encode("/locks/a0")));
  EXPECT_EQ(r.at("limit"), "1");
  EXPECT_EQ(r.at("sort_order"), "ASCEND");
  EXPECT_EQ(r.at("sort_target"), "CREATE");
  EXPECT_EQ(r.at("keys_only"), true);
  EXPECT_FALSE(r.contains("serializable"));
}

EtcdResult Ok(json::object response) { return EtcdResult{std::move(response), "", -1}; }

TEST(EtcdRules, HolderFromRange) {
  const std::string lock = "/locks/a";
  auto key = [](const std::string& k) { return etcd::Base64Encode(k); };

  HolderAnswer free = EtcdLockService::HolderFromRange(lock, Ok({{"header", json::object{}}}));
  EXPECT_EQ(free.status, Status::kFree);
  EXPECT_EQ(EtcdLockService::HolderFromRange(lock, Ok({{"kvs", json::array{}}})).status, Status::kFree);

  HolderAnswer held = EtcdLockService::HolderFromRange(
      lock, Ok({{"kvs", json::array{json::object{{"key", key("/locks/a/h1")}, {"create_revision", "42"}}}}}));
  EXPECT_EQ(held.status, Status::kHeld);
  EXPECT_EQ(held.token, 42u);
  EXPECT_EQ(held.holder, "/locks/a/h1");

  // Fail closed on anything broken: never a guessed holder.
  const std::vector<json::object> broken = {
      {{"kvs", "x"}},
      {{"kvs", json::array{1}}},
      {{"kvs", json::array{json::object{{"create_revision", "42"}}}}},
      {{"kvs", json::array{json::object{{"key", "%%%"}, {"create_revision", "42"}}}}},
      {{"kvs", json::array{json::object{{"key", key("/locks/ab/x")}, {"create_revision", "42"}}}}},
      {{"kvs", json::array{json::object{{"key", key("/locks/a/h")}, {"create_revision", "x"}}}}},
      {{"kvs", json::array{json::object{{"key", key("/locks/a/h")}}}}},
  };
  for (const auto& response : broken) {
    HolderAnswer a = EtcdLockService::HolderFromRange(lock, Ok(response));
    EXPECT_EQ(a.status, Status::kUnavailable) << json::serialize(response);
    EXPECT_TRUE(Contains(a.error, "/locks/a/"));
  }
  HolderAnswer down = EtcdLockService::HolderFromRange(lock, EtcdResult{{}, "connect: refused", -1});
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

TEST(EtcdClientCreate, CallAfterStopCompletesAtOnce) {
  std::string error;
  auto client = EtcdClient::Create(Config({"http://127.0.0.1:1"}), &error);
  ASSERT_NE(client, nullptr) << error;
  client->Stop();
  EtcdResult got;
  client->Call("/v3/kv/range", {}, [&](EtcdResult r) { got = std::move(r); });
  EXPECT_TRUE(Contains(got.error, "stopped"));
}

// ------------------------------------------------------------------------------- helpers

bool RequireLockServices() {
  const char* v = std::getenv("FP_REQUIRE_LOCK_SERVICES");
  return v != nullptr && std::string(v) != "" && std::string(v) != "0";
}

uint16_t FreePort() {
  int fd = ::socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  a.sin_port = 0;
  ::bind(fd, reinterpret_cast<sockaddr*>(&a), sizeof a);
  socklen_t len = sizeof a;
  ::getsockname(fd, reinterpret_cast<sockaddr*>(&a), &len);
  ::close(fd);
  return ntohs(a.sin_port);
}

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

// Runs a command through the shell; its output (stdout and stderr) and exit status.
std::pair<int, std::string> Shell(const std::string& command) {
  std::string out;
  FILE* p = ::popen((command + " 2>&1").c_str(), "r");
  if (p == nullptr) return {-1, "popen failed"};
  char buf[4096];
  size_t n;
  while ((n = fread(buf, 1, sizeof buf, p)) > 0) out.append(buf, n);
  int status = ::pclose(p);
  return {WIFEXITED(status) ? WEXITSTATUS(status) : -1, out};
}

struct EtcdTls {
  std::string cert_file, key_file, ca_file;
};

// One etcd member on free 127.0.0.1 ports, as tests/integration/lockservices.py starts it.
class EtcdProcess {
 public:
  // extra: more flags. Empty error: running and healthy.
  bool Start(const std::string& dir, const EtcdTls* tls, std::vector<std::string> extra, std::string* error) {
    dir_ = dir;
    tls_ = tls ? *tls : EtcdTls{};
    port_ = FreePort();
    uint16_t peer = FreePort();
    std::string scheme = tls ? "https" : "http";
    endpoint_ = scheme + "://127.0.0.1:" + std::to_string(port_);
    std::string peer_url = "http://127.0.0.1:" + std::to_string(peer);
    std::vector<std::string> args = {kEtcd, "--name", "fp-test", "--data-dir", dir + "/data",
                                     "--listen-client-urls", endpoint_, "--advertise-client-urls", endpoint_,
                                     "--listen-peer-urls", peer_url, "--initial-advertise-peer-urls", peer_url,
                                     "--initial-cluster", "fp-test=" + peer_url, "--initial-cluster-state", "new",
                                     "--heartbeat-interval", "50", "--election-timeout", "500",
                                     "--logger", "zap", "--log-outputs", "stderr"};
    if (tls) {
      for (std::string a : {"--cert-file", tls->cert_file.c_str(), "--key-file", tls->key_file.c_str()})
        args.push_back(a);
    }
    args.insert(args.end(), extra.begin(), extra.end());
    std::string log = dir + "/etcd.log";
    pid_ = ::fork();
    if (pid_ == 0) {
      ::setpgid(0, 0);
      FILE* f = std::freopen(log.c_str(), "w", stderr);
      (void)f;
      ::dup2(2, 1);
      std::vector<char*> argv;
      for (auto& a : args) argv.push_back(a.data());
      argv.push_back(nullptr);
      ::execv(kEtcd, argv.data());
      ::_exit(127);
    }
    auto until = Clock::now() + 20s;
    while (Clock::now() < until) {
      if (Ctl("endpoint health").first == 0) return true;
      int status;
      if (::waitpid(pid_, &status, WNOHANG) == pid_) {
        pid_ = -1;
        break;
      }
      std::this_thread::sleep_for(100ms);
    }
    *error = "etcd did not become healthy; log:\n" + ReadBytes(log).substr(0, 3000);
    Kill();
    return false;
  }

  std::pair<int, std::string> Ctl(const std::string& args, const std::string& user = "") const {
    std::string cmd = std::string("ETCDCTL_API=3 ") + kEtcdctl + " --endpoints=" + endpoint_ + " --dial-timeout=2s";
    if (!tls_.ca_file.empty()) cmd += " --cacert=" + tls_.ca_file;
    if (!user.empty()) cmd += " --user=" + user;
    return Shell(cmd + " " + args);
  }

  void Kill() {
    if (pid_ <= 0) return;
    ::kill(pid_, SIGCONT);
    ::kill(pid_, SIGKILL);
    ::waitpid(pid_, nullptr, 0);
    pid_ = -1;
  }
  void Pause() { ::kill(pid_, SIGSTOP); }
  void Resume() { ::kill(pid_, SIGCONT); }
  ~EtcdProcess() { Kill(); }

  const std::string& endpoint() const { return endpoint_; }

 private:
  std::string dir_;
  EtcdTls tls_;
  uint16_t port_ = 0;
  std::string endpoint_;
  pid_t pid_ = -1;
};

std::string MakeTempDir(const char* name) {
  std::string tmpl = (std::filesystem::temp_directory_path() / (std::string(name) + "_XXXXXX")).string();
  if (::mkdtemp(tmpl.data()) == nullptr) return "";
  return tmpl;
}

// Skip (or, when the services are required, fail) the suite without etcd.
#define FP_REQUIRE_ETCD()                                                                    \
  do {                                                                                       \
    if (::access(kEtcd, X_OK) != 0 || ::access(kEtcdctl, X_OK) != 0) {                       \
      if (RequireLockServices()) FAIL() << "FP_REQUIRE_LOCK_SERVICES is set but etcd is missing"; \
      GTEST_SKIP() << "etcd/etcdctl missing (apt-get install etcd-server etcd-client)";      \
    }                                                                                        \
  } while (0)

EtcdResult CallSync(EtcdClient& client, const std::string& path, json::object request) {
  std::promise<EtcdResult> p;
  client.Call(path, std::move(request), [&](EtcdResult r) { p.set_value(std::move(r)); });
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
int64_t Put(EtcdClient& client, const std::string& key, int64_t lease = 0) {
  json::object put = {{"key", etcd::Base64Encode(key)}, {"value", etcd::Base64Encode("holder")}};
  if (lease != 0) put["lease"] = std::to_string(lease);
  EtcdResult r = CallSync(client, "/v3/kv/put", put);
  EXPECT_TRUE(r.ok()) << r.error;
  int64_t revision = 0;
  std::string error;
  // A put of a new key creates it at the revision the put made.
  EXPECT_TRUE(etcd::ReadInt64(r.response.at("header").as_object(), "revision", &revision, &error)) << error;
  return revision;
}

void Delete(EtcdClient& client, const std::string& key) {
  EtcdResult r = CallSync(client, "/v3/kv/deleterange", {{"key", etcd::Base64Encode(key)}});
  ASSERT_TRUE(r.ok()) << r.error;
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
    client_ = EtcdClient::Create(Config({etcd_->endpoint()}), &error);
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
  EtcdResult grant = CallSync(*client_, "/v3/lease/grant", {{"TTL", "30"}});
  ASSERT_TRUE(grant.ok()) << grant.error;
  int64_t lease = 0;
  std::string error;
  ASSERT_TRUE(etcd::ReadInt64(grant.response, "ID", &lease, &error)) << error;
  ASSERT_NE(lease, 0);

  int64_t first = Put(*client_, "/locks/handover/a-first", lease);
  int64_t second = Put(*client_, "/locks/handover/0-second");  // sorts first by key, not by revision
  ASSERT_LT(first, second);

  Timed t = FindSync(*service_, "/locks/handover");
  ASSERT_EQ(t.answer.status, Status::kHeld) << t.answer.error;
  EXPECT_EQ(t.answer.token, uint64_t(first));
  EXPECT_EQ(t.answer.holder, "/locks/handover/a-first");

  // The holder's session ends (its lease is revoked): the contender holds, with its own number.
  EtcdResult revoke = CallSync(*client_, "/v3/lease/revoke", {{"ID", std::to_string(lease)}});
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

TEST_F(EtcdTest, AnEtcdErrorIsReadable) {
  EtcdResult r = CallSync(*client_, "/v3/lease/revoke", {{"ID", "12345"}});
  ASSERT_FALSE(r.ok());
  EXPECT_TRUE(Contains(r.error, "lease not found")) << r.error;
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
  const json::object request = EtcdLockService::HolderRequest("/locks/bench");
  for (int i = 0; i < 50; ++i) ASSERT_TRUE(CallSync(*client, "/v3/kv/range", request).ok());  // warm up
  std::vector<double> micros;
  for (int i = 0; i < n; ++i) {
    auto start = Clock::now();
    EtcdResult r = CallSync(*client, "/v3/kv/range", request);
    micros.push_back(std::chrono::duration<double, std::micro>(Clock::now() - start).count());
    ASSERT_TRUE(r.ok()) << r.error;
    ASSERT_EQ(EtcdLockService::HolderFromRange("/locks/bench", r).status, Status::kHeld);
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
