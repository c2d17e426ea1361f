#pragma once
// A real etcd for the unit tests that talk to one (the etcd client's, the shared fence store's):
// Debian's /usr/bin/etcd on free 127.0.0.1 ports with a temporary data directory, as
// tests/integration/lockservices.py starts it. Without etcd those tests skip, unless
// FP_REQUIRE_LOCK_SERVICES=1 makes that a failure (FP_REQUIRE_ETCD).

#include "test_files.h"

#include <gtest/gtest.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include <arpa/inet.h>
#include <netinet/in.h>
#include <signal.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

namespace fencing {

inline constexpr const char* kEtcd = "/usr/bin/etcd";
inline constexpr const char* kEtcdctl = "/usr/bin/etcdctl";

inline bool RequireLockServices() {
  const char* v = std::getenv("FP_REQUIRE_LOCK_SERVICES");
  return v != nullptr && std::string(v) != "" && std::string(v) != "0";
}

// A port nobody listens on now (the kernel's pick, released at once).
inline uint16_t FreePort() {
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

// Runs a command through the shell; its output (stdout and stderr) and exit status.
inline std::pair<int, std::string> Shell(const std::string& command) {
  std::string out;
  FILE* p = ::popen((command + " 2>&1").c_str(), "r");
  if (p == nullptr) return {-1, "popen failed"};
  char buf[4096];
  size_t n;
  while ((n = fread(buf, 1, sizeof buf, p)) > 0) out.append(buf, n);
  int status = ::pclose(p);
  return {WIFEXITED(status) ? WEXITSTATUS(status) : -1, out};
}

inline std::string MakeTempDir(const char* name) {
  std::string tmpl = (std::filesystem::temp_directory_path() / (std::string(name) + "_XXXXXX")).string();
  if (::mkdtemp(tmpl.data()) == nullptr) return "";
  return tmpl;
}

struct EtcdTls {
  std::string cert_file, key_file, ca_file;
};

// One etcd member on free 127.0.0.1 ports.
class EtcdProcess {
 public:
  // extra: more flags. True: running and healthy; else *error says why (with the log's start).
  bool Start(const std::string& dir, const EtcdTls* tls, std::vector<std::string> extra, std::string* error) {
    dir_ = dir;
    tls_ = tls ? *tls : EtcdTls{};
    port_ = FreePort();
    const uint16_t peer = FreePort();
    std::string scheme = tls ? "https" : "http";
    endpoint_ = scheme + "://127.0.0.1:" + std::to_string(port_);
    std::string peer_url = "http://127.0.0.1:" + std::to_string(peer);
    args_ = {kEtcd, "--name", "fp-test", "--data-dir", dir + "/data",
             "--listen-client-urls", endpoint_, "--advertise-client-urls", endpoint_,
             "--listen-peer-urls", peer_url, "--initial-advertise-peer-urls", peer_url,
             "--initial-cluster", "fp-test=" + peer_url, "--initial-cluster-state", "new",
             "--heartbeat-interval", "50", "--election-timeout", "500",
             "--logger", "zap", "--log-outputs", "stderr"};
    if (tls) {
      for (std::string a : {"--cert-file", tls->cert_file.c_str(), "--key-file", tls->key_file.c_str()})
        args_.push_back(a);
    }
    args_.insert(args_.end(), extra.begin(), extra.end());
    return Launch(error);
  }

  // After Kill: the same member again, on the same data directory and ports (what a restarted
  // etcd looks like to its clients: the same endpoint, the same keys and leases).
  bool Restart(std::string* error) {
    Kill();
    return Launch(error);
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
  // Returns once etcd is stopped: SIGSTOP reaches a busy process's threads a little later, and one
  // of them could still answer a request sent right after kill().
  void Pause() {
    ::kill(pid_, SIGSTOP);
    int status = 0;
    ::waitpid(pid_, &status, WUNTRACED);
  }
  void Resume() { ::kill(pid_, SIGCONT); }
  ~EtcdProcess() { Kill(); }

  const std::string& endpoint() const { return endpoint_; }

 private:
  bool Launch(std::string* error) {
    using namespace std::chrono_literals;
    // Appended to, so that a restart's log follows the first run's.
    std::string log = dir_ + "/etcd.log";
    pid_ = ::fork();
    if (pid_ == 0) {
      ::setpgid(0, 0);
      FILE* f = std::freopen(log.c_str(), "a", stderr);
      (void)f;
      ::dup2(2, 1);
      std::vector<char*> argv;
      for (auto& a : args_) argv.push_back(a.data());
      argv.push_back(nullptr);
      ::execv(kEtcd, argv.data());
      ::_exit(127);
    }
    auto until = std::chrono::steady_clock::now() + 20s;
    while (std::chrono::steady_clock::now() < until) {
      if (Ctl("endpoint health").first == 0) return true;
      int status;
      if (::waitpid(pid_, &status, WNOHANG) == pid_) {
        pid_ = -1;
        break;
      }
      std::this_thread::sleep_for(100ms);
    }
    std::string text = ReadBytes(log);
    *error = "etcd did not become healthy; log:\n" + text.substr(text.size() > 3000 ? text.size() - 3000 : 0);
    Kill();
    return false;
  }

  std::string dir_;
  EtcdTls tls_;
  uint16_t port_ = 0;
  std::string endpoint_;
  std::vector<std::string> args_;
  pid_t pid_ = -1;
};

}  // namespace fencing

// Skip (or, when the services are required, fail) the test without etcd.
#define FP_REQUIRE_ETCD()                                                                          \
  do {                                                                                             \
    if (::access(::fencing::kEtcd, X_OK) != 0 || ::access(::fencing::kEtcdctl, X_OK) != 0) {       \
      if (::fencing::RequireLockServices()) FAIL() << "FP_REQUIRE_LOCK_SERVICES is set but etcd is missing"; \
      GTEST_SKIP() << "etcd/etcdctl missing (apt-get install etcd-server etcd-client)";            \
    }                                                                                              \
  } while (0)
