// ConfigReloader on real files: a valid file is swapped in, an invalid one or one that changes a
// restart-only setting keeps the running configuration and says so in the metrics.

#include <gtest/gtest.h>

#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <iterator>
#include <mutex>
#include <thread>
#include <map>
#include <set>
#include <memory>
#include <string>
#include <vector>

#include "metrics/metrics.h"
#include "config/config.h"
#include "config/keys.h"
#include "reload/config_reloader.h"
#include "test_files.h"

namespace fencing {
namespace {

const std::string kBase =
    "listen: \"127.0.0.1:18080\"\n"
    "admin_listen: \"127.0.0.1:19901\"\n"
    "backend: \"http://127.0.0.1:18081\"\n"
    "state_file: ./fences.log\n"
    "routes:\n"
    "  - name: orders\n"
    "    prefix: /orders\n";

class ConfigReloaderTest : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = std::filesystem::temp_directory_path() /
           ("config_reloader_test." + std::to_string(::getpid()) + "." +
            ::testing::UnitTest::GetInstance()->current_test_info()->name());
    std::filesystem::remove_all(dir_);
    std::filesystem::create_directories(dir_);
    path_ = (dir_ / "routes.yaml").string();
    WriteBytes(path_, kBase);
    ConfigResult initial = LoadConfigFile(path_);
    ASSERT_TRUE(initial.ok());
    initial_ = initial.config;
    reloader_ = std::make_unique<ConfigReloader>(path_, initial_, metrics_, [this](std::shared_ptr<const ProxyConfig> c) {
      applied_.push_back(std::move(c));
      return Status::Ok();
    });
  }
  void TearDown() override {
    reloader_.reset();
    std::filesystem::remove_all(dir_);
  }

  double Successful() { return metrics_.config_last_reload_successful().Value(); }

  std::filesystem::path dir_;
  std::string path_;
  Metrics metrics_;
  std::shared_ptr<const ProxyConfig> initial_;
  std::vector<std::shared_ptr<const ProxyConfig>> applied_;
  std::unique_ptr<ConfigReloader> reloader_;
};

TEST_F(ConfigReloaderTest, AValidFileIsSwappedIn) {
  EXPECT_EQ(Successful(), 1);
  WriteBytes(path_, kBase + "  - name: notes\n    prefix: /notes\n    mode: observe\n");
  EXPECT_TRUE(reloader_->Reload("test"));
  ASSERT_EQ(applied_.size(), 1u);
  EXPECT_EQ(reloader_->running(), applied_[0]);
  ASSERT_EQ(applied_[0]->routes.size(), 2u);
  EXPECT_EQ(applied_[0]->routes[1].name, "notes");
  EXPECT_EQ(applied_[0]->routes[1].mode, FenceMode::kObserve);
  EXPECT_EQ(Successful(), 1);
  EXPECT_EQ(metrics_.config_reloads().Value(), 1);
  EXPECT_EQ(metrics_.config_reloads_failed().Value(), 0);
  EXPECT_GT(metrics_.config_last_reload_success_timestamp_seconds().Value(), 0);
}

TEST_F(ConfigReloaderTest, AnInvalidFileKeepsTheRunningConfig) {
  WriteBytes(path_, kBase + "  - name: Bad Name\n    prefix: orders-without-slash\n");
  EXPECT_FALSE(reloader_->Reload("test"));
  EXPECT_TRUE(applied_.empty());
  EXPECT_EQ(reloader_->running(), initial_);
  EXPECT_EQ(Successful(), 0);
  EXPECT_EQ(metrics_.config_reloads_failed().Value(), 1);
  EXPECT_EQ(metrics_.config_reloads().Value(), 0);

  // Broken YAML too.
  WriteBytes(path_, "routes: [\n");
  EXPECT_FALSE(reloader_->Reload("test"));
  EXPECT_EQ(reloader_->running(), initial_);
  EXPECT_EQ(metrics_.config_reloads_failed().Value(), 2);

  // A fixed file then goes in, and the gauge says so again.
  WriteBytes(path_, kBase + "  - name: notes\n    prefix: /notes\n");
  EXPECT_TRUE(reloader_->Reload("test"));
  EXPECT_EQ(Successful(), 1);
  ASSERT_EQ(applied_.size(), 1u);
  EXPECT_EQ(reloader_->running()->routes.size(), 2u);
}

TEST_F(ConfigReloaderTest, AMissingFileKeepsTheRunningConfig) {
  std::filesystem::remove(path_);
  EXPECT_FALSE(reloader_->Reload("test"));
  EXPECT_EQ(reloader_->running(), initial_);
  EXPECT_EQ(Successful(), 0);
}

TEST_F(ConfigReloaderTest, RestartOnlyChangesAreRefused) {
  struct Change {
    std::string from, to, key;
  };
  const std::vector<Change> changes = {
      {"listen: \"127.0.0.1:18080\"", "listen: \"127.0.0.1:18090\"", "listen"},
      {"admin_listen: \"127.0.0.1:19901\"", "admin_listen: \"127.0.0.1:19902\"", "admin_listen"},
      {"backend: \"http://127.0.0.1:18081\"", "backend: \"http://127.0.0.1:18082\"", "backend"},
      {"state_file: ./fences.log", "state_file: ./other.log", "state_file"},
  };
  for (const Change& c : changes) {
    std::string text = kBase;
    text.replace(text.find(c.from), c.from.size(), c.to);
    text += "  - name: notes\n    prefix: /notes\n";  // a change that alone would be applied
    WriteBytes(path_, text);
    ConfigResult loaded = LoadConfigFile(path_);
    ASSERT_TRUE(loaded.ok()) << c.key;
    EXPECT_EQ(RestartOnlyChange(*initial_, *loaded.config), c.key);
    EXPECT_FALSE(reloader_->Reload("test")) << c.key;
    EXPECT_EQ(reloader_->running(), initial_) << c.key;
    EXPECT_EQ(Successful(), 0) << c.key;
  }
  EXPECT_TRUE(applied_.empty());
  EXPECT_EQ(metrics_.config_reloads_failed().Value(), static_cast<double>(changes.size()));
  EXPECT_EQ(RestartOnlyChange(*initial_, *initial_), "");
}

// A valid value other than the default, from the key's type alone.
std::string OtherValue(const ConfigKey& key) {
  const std::string_view type = key.type;
  if (type == "duration") return "7s";
  if (type == "size") return "32KiB";
  if (type.starts_with("integer")) return "7";
  if (type == "address") return "\"127.0.0.1:18085\"";
  if (type == "URL") return "\"http://127.0.0.1:18089\"";
  if (type == "path") return "/other";
  if (type == "header name") return "X-Other-Token";
  if (type == "string") return "other";
  if (key.name == "writers") return "[\"spiffe://td/w\"]";
  if (type == "list") return key.section == KeySection::kRoute ? "[GET]" : "";  // not routes itself
  if (const size_t bar = type.find(" | "); bar != std::string_view::npos) {
    const std::string first(type.substr(0, bar));
    return first != key.default_value ? first : std::string(type.substr(bar + 3, type.find(" | ", bar + 3) - bar - 3));
  }
  return "";  // a mapping: its keys are in the table on their own
}

// A route file from section -> key -> value (top-level keys under "").
std::string RouteFile(const std::map<std::string, std::map<std::string, std::string>>& keys) {
  std::string text;
  for (const auto& [section, values] : keys) {
    if (section.empty()) {
      for (const auto& [name, value] : values) text += name + ": " + value + "\n";
    } else if (section == "routes") {
      text += "routes:\n";
      const char* dash = "  - ";
      for (const auto& [name, value] : values) {
        text += dash + name + ": " + value + "\n";
        dash = "    ";
      }
    } else {
      text += section + ":\n";
      for (const auto& [name, value] : values) text += "  " + name + ": " + value + "\n";
    }
  }
  return text;
}

// Every key of the table, changed alone: a restart-only one is refused by name and keeps the
// running configuration, any other one is applied.
TEST_F(ConfigReloaderTest, EachKeyOfTheTableFollowsItsRestartRule) {
  const std::map<std::string, std::map<std::string, std::string>> base = {
      {"", {{"listen", "\"127.0.0.1:18080\""}, {"admin_listen", "\"127.0.0.1:19901\""},
            {"backend", "\"http://127.0.0.1:18081\""}, {"state_file", "./fences.log"}}},
      {"routes", {{"name", "orders"}, {"prefix", "/orders"}}}};
  WriteBytes(path_, RouteFile(base));
  // The settings of a fence's keys need a keyed route (and forgetting, token_order: global) in
  // both files: the one key changes alone.
  auto base_for = [&](const ConfigKey& key) {
    auto b = base;
    if (key.name == "max_keys" || key.name == "token_order" || key.name == "forget_idle_keys_after") {
      b["routes"]["fence_key"] = "{path_segment: 1}";
    }
    if (key.name == "forget_idle_keys_after") b["routes"]["token_order"] = "global";
    // TLS on listen for its own keys, plain_listen (beside it) and writers (client certificates).
    if (key.section == KeySection::kTls || key.name == "plain_listen" || key.name == "writers") {
      b["tls"] = {{"cert_file", "/c"}, {"key_file", "/k"}, {"client_ca_file", "/ca"}};
    }
    return b;
  };
  size_t checked = 0;
  for (const ConfigKey& key : ConfigKeys()) {
    const std::string value = OtherValue(key);
    if (value.empty()) continue;
    SCOPED_TRACE(key.Path() + ": " + value);
    Metrics metrics;
    const auto base = base_for(key);
    WriteBytes(path_, RouteFile(base));
    ConfigResult running = LoadConfigFile(path_);
    ASSERT_TRUE(running.ok());
    ConfigReloader reloader(path_, running.config, metrics, [](std::shared_ptr<const ProxyConfig>) { return Status::Ok(); });

    auto changed = base;
    changed[std::string(SectionName(key.section))][std::string(key.name)] = value;
    WriteBytes(path_, RouteFile(changed));
    ConfigResult loaded = LoadConfigFile(path_);
    ASSERT_TRUE(loaded.ok()) << RouteFile(changed) << (loaded.errors.empty() ? "" : loaded.errors[0].ToString());
    if (key.restart_only) {
      const std::string fence = key.section == KeySection::kRoute ? " of fence 'orders'" : "";
      EXPECT_EQ(RestartOnlyChange(*running.config, *loaded.config), key.Path() + fence);
      EXPECT_FALSE(reloader.Reload("test"));
      EXPECT_EQ(reloader.running(), running.config);
    } else {
      EXPECT_EQ(RestartOnlyChange(*running.config, *loaded.config), "");
      EXPECT_TRUE(reloader.Reload("test"));
      EXPECT_NE(reloader.running(), running.config);
    }
    ++checked;
  }
  // All but timeouts, limits, routes themselves, fence_key (a mapping: FenceKeysOfARunningFence),
  // lock_services and verify (mappings: LockServicesAndVerify), fence_store (FenceStore), tls
  // (ListenerTlsIsRestartOnly) and backend_tls (BackendTls).
  EXPECT_GE(checked, ConfigKeys().size() - 9);
}

// TLS on listen comes and goes with a restart only: a reload adding or removing the block is
// refused naming tls (a change inside it names the key: EachKeyOfTheTableFollowsItsRestartRule).
TEST_F(ConfigReloaderTest, ListenerTlsIsRestartOnly) {
  const std::string with_tls = kBase + "tls: {cert_file: /c, key_file: /k}\n";
  ConfigResult plain = ParseConfig(kBase, "a.yaml");
  ConfigResult tls = ParseConfig(with_tls, "b.yaml");
  ASSERT_TRUE(plain.ok());
  ASSERT_TRUE(tls.ok());
  EXPECT_EQ(RestartOnlyChange(*plain.config, *tls.config), "tls");
  EXPECT_EQ(RestartOnlyChange(*tls.config, *plain.config), "tls");
  WriteBytes(path_, with_tls);
  EXPECT_FALSE(reloader_->Reload("test"));
  EXPECT_EQ(reloader_->running(), initial_);
}

// A fence the running routes have keeps its key settings until a restart: the registry holds its
// keys as they shaped them. A new keyed fence, or a keyed route taking its key from elsewhere,
// is applied.
TEST_F(ConfigReloaderTest, FenceKeysOfARunningFence) {
  const std::string keyed = kBase + "    fence_key: {path_segment: 1}\n";
  struct Case {
    std::string running, loaded, refused;  // refused: the key RestartOnlyChange names, "" = applied
  };
  const std::vector<Case> cases = {
      {kBase, keyed, "routes[].fence_key of fence 'orders'"},
      {keyed, kBase, "routes[].fence_key of fence 'orders'"},
      {keyed, keyed + "    max_keys: 10\n", "routes[].max_keys of fence 'orders'"},
      // Another route naming the fence, keyed while the running one is not.
      {kBase, kBase + "  - name: orders-v2\n    prefix: /v2/orders\n    fence: orders\n",  ""},
      {keyed, keyed + "  - name: objects\n    prefix: /objects\n    fence_key: {header: X-Key}\n    max_keys: 5\n", ""},
      {keyed, kBase + "    fence_key: {path_segment: 2}\n", ""},
      {keyed, kBase + "    fence_key: {header: X-Order}\n", ""},
      // The fence dropped and another one keyed: nothing running changes.
      {keyed, "listen: \"127.0.0.1:18080\"\nadmin_listen: \"127.0.0.1:19901\"\nbackend: \"http://127.0.0.1:18081\"\n"
              "state_file: ./fences.log\nroutes:\n  - name: orders\n    prefix: /orders\n    fence: orders2\n"
              "    fence_key: {path_segment: 1}\n    max_keys: 3\n", ""},
  };
  for (const Case& c : cases) {
    SCOPED_TRACE(c.loaded);
    WriteBytes(path_, c.running);
    ConfigResult running = LoadConfigFile(path_);
    ASSERT_TRUE(running.ok()) << running.errors[0].ToString();
    Metrics metrics;
    ConfigReloader reloader(path_, running.config, metrics, [](std::shared_ptr<const ProxyConfig>) { return Status::Ok(); });
    WriteBytes(path_, c.loaded);
    ConfigResult loaded = LoadConfigFile(path_);
    ASSERT_TRUE(loaded.ok()) << loaded.errors[0].ToString();
    EXPECT_EQ(RestartOnlyChange(*running.config, *loaded.config), c.refused);
    EXPECT_EQ(reloader.Reload("test"), c.refused.empty());
    EXPECT_EQ(reloader.running() == running.config, !c.refused.empty());
  }
}

// The lock-service clients are built at start-up: a file that adds, removes or changes one is
// refused. A route's verify is applied, even on a running fence: it only decides which later
// raises pass, and the max stays durable either way.
TEST_F(ConfigReloaderTest, LockServicesAndVerify) {
  const std::string head =
      "listen: \"127.0.0.1:18080\"\nadmin_listen: \"127.0.0.1:19901\"\nbackend: \"http://127.0.0.1:18081\"\n"
      "state_file: ./fences.log\n";
  const std::string etcd = "  e1: {etcd: {endpoints: [\"http://127.0.0.1:2379\"]}}\n";
  const std::string zk = "  z1: {zookeeper: {hosts: \"127.0.0.1:2181\"}}\n";
  auto file = [&](const std::string& services, const std::string& verify) {
    return head + "lock_services:\n" + services +
           "routes:\n  - name: orders\n    prefix: /orders\n    fence_key: {path_segment: 1}\n" + verify;
  };
  const std::string to_e1 = "    verify: {service: e1, lock: \"/locks/{key}\"}\n";
  const std::string to_z1 = "    verify: {service: z1, lock: \"/locks/{key}\"}\n";
  struct Case {
    std::string running, loaded, refused;  // refused: the key RestartOnlyChange names, "" = applied
  };
  const std::vector<Case> cases = {
      {file(etcd, ""), file(etcd + zk, ""), "lock_services"},
      {file(etcd + zk, ""), file(etcd, ""), "lock_services"},
      {file(etcd, ""), file("  e1: {etcd: {endpoints: [\"http://127.0.0.1:2380\"]}}\n", ""), "lock_services"},
      {file(etcd, ""), file("  e1: {etcd: {endpoints: [\"http://127.0.0.1:2379\"], timeout: 2s}}\n", ""),
       "lock_services"},
      {file(zk, ""), file("  z1: {zookeeper: {hosts: \"127.0.0.1:2181\", session_timeout: 20s}}\n", ""),
       "lock_services"},
      {file(etcd, ""), file("  e2: {etcd: {endpoints: [\"http://127.0.0.1:2379\"]}}\n", ""), "lock_services"},
      // Written another way, the services are the same.
      {file(etcd, ""), file("  e1:\n    etcd:\n      endpoints: [\"http://127.0.0.1:2379\"]\n      timeout: 1s\n", ""),
       ""},
      {file(etcd + zk, ""), file(etcd + zk, to_e1), ""},
      {file(etcd + zk, to_e1), file(etcd + zk, to_z1), ""},
      {file(etcd + zk, to_e1), file(etcd + zk, "    verify: {service: e1, lock: \"/other/{key}\"}\n"), ""},
      {file(etcd + zk, to_e1), file(etcd + zk, ""), ""},
  };
  for (const Case& c : cases) {
    SCOPED_TRACE(c.running + "->\n" + c.loaded);
    WriteBytes(path_, c.running);
    ConfigResult running = LoadConfigFile(path_);
    ASSERT_TRUE(running.ok()) << running.errors[0].ToString();
    Metrics metrics;
    ConfigReloader reloader(path_, running.config, metrics, [](std::shared_ptr<const ProxyConfig>) { return Status::Ok(); });
    WriteBytes(path_, c.loaded);
    ConfigResult loaded = LoadConfigFile(path_);
    ASSERT_TRUE(loaded.ok()) << loaded.errors[0].ToString();
    EXPECT_EQ(RestartOnlyChange(*running.config, *loaded.config), c.refused);
    EXPECT_EQ(reloader.Reload("test"), c.refused.empty());
    EXPECT_EQ(reloader.running() == running.config, !c.refused.empty());
  }
}

// The fence store is set up at start-up (membership, watch, the fences loaded from etcd): a file
// that adds, removes or changes it, or moves the fences between a state file and etcd, is refused
// naming fence_store. Written another way, it is the same store.
TEST_F(ConfigReloaderTest, FenceStore) {
  const std::string head =
      "listen: \"127.0.0.1:18080\"\nadmin_listen: \"127.0.0.1:19901\"\nbackend: \"http://127.0.0.1:18081\"\n";
  const std::string routes = "routes:\n  - name: orders\n    prefix: /orders\n";
  auto store = [&](const std::string& etcd) { return head + "fence_store:\n  etcd: {" + etcd + "}\n" + routes; };
  const std::string base = "endpoints: [\"http://127.0.0.1:2379\"], prefix: /fp/orders";
  const std::string state = head + "state_file: ./fences.log\n" + routes;
  struct Case {
    std::string running, loaded, refused;  // refused: the key RestartOnlyChange names, "" = applied
  };
  const std::vector<Case> cases = {
      {state, store(base), "fence_store"},
      {store(base), state, "fence_store"},
      {store(base), store("endpoints: [\"http://127.0.0.1:2379\"], prefix: /fp/other"), "fence_store"},
      {store(base), store(base + ", member_ttl: 20s"), "fence_store"},
      {store(base), store(base + ", timeout: 2s"), "fence_store"},
      {store(base), store("endpoints: [\"http://127.0.0.1:2379\", \"http://127.0.0.1:22379\"], prefix: /fp/orders"),
       "fence_store"},
      {store(base), store(base + ", username: u, password_file: /p"), "fence_store"},
      // The same store: written with its defaults, or with another route.
      {store(base), store(base + ", member_ttl: 10s, timeout: 1s"), ""},
      {store(base), store(base) + "  - name: notes\n    prefix: /notes\n", ""},
  };
  for (const Case& c : cases) {
    SCOPED_TRACE(c.running + "->\n" + c.loaded);
    WriteBytes(path_, c.running);
    ConfigResult running = LoadConfigFile(path_);
    ASSERT_TRUE(running.ok()) << running.errors[0].ToString();
    Metrics metrics;
    ConfigReloader reloader(path_, running.config, metrics, [](std::shared_ptr<const ProxyConfig>) { return Status::Ok(); });
    WriteBytes(path_, c.loaded);
    ConfigResult loaded = LoadConfigFile(path_);
    ASSERT_TRUE(loaded.ok()) << loaded.errors[0].ToString();
    EXPECT_EQ(RestartOnlyChange(*running.config, *loaded.config), c.refused);
    EXPECT_EQ(reloader.Reload("test"), c.refused.empty());
    EXPECT_EQ(reloader.running() == running.config, !c.refused.empty());
    EXPECT_EQ(metrics.config_last_reload_successful().Value(), c.refused.empty() ? 1 : 0);
  }
}

// backend_tls is applied on reload (new connections use it); the scheme is backend's, which
// needs a restart.
TEST_F(ConfigReloaderTest, BackendTls) {
  const std::string head = "listen: \"127.0.0.1:18080\"\nadmin_listen: \"127.0.0.1:19901\"\nstate_file: ./fences.log\n";
  const std::string https = head + "backend: \"https://db.internal:8443\"\n";
  struct Case {
    std::string running, loaded, refused;
  };
  const std::vector<Case> cases = {
      {https, https + "backend_tls: {ca_file: /ca.pem}\n", ""},
      {https + "backend_tls: {ca_file: /ca.pem}\n", https + "backend_tls: {ca_file: /other.pem}\n", ""},
      {https + "backend_tls: {ca_file: /ca.pem}\n", https + "backend_tls: {server_name: db.example}\n", ""},
      {https, https + "backend_tls: {cert_file: /c.pem, key_file: /k.pem}\n", ""},
      {head + "backend: \"http://db.internal:8443\"\n", https, "backend"},
  };
  for (const Case& c : cases) {
    SCOPED_TRACE(c.running + "->\n" + c.loaded);
    WriteBytes(path_, c.running);
    ConfigResult running = LoadConfigFile(path_);
    ASSERT_TRUE(running.ok()) << running.errors[0].ToString();
    WriteBytes(path_, c.loaded);
    ConfigResult loaded = LoadConfigFile(path_);
    ASSERT_TRUE(loaded.ok()) << loaded.errors[0].ToString();
    EXPECT_EQ(RestartOnlyChange(*running.config, *loaded.config), c.refused);
  }
}

// A configuration the server cannot put in force (a file it names does not load) is a failed
// reload: the running one stays, and the metrics say so.
TEST_F(ConfigReloaderTest, AnApplyThatFailsKeepsTheRunningConfig) {
  Metrics metrics;
  ConfigReloader reloader(path_, initial_, metrics, [](std::shared_ptr<const ProxyConfig>) {
    return Status::Error("routes.yaml:9:12: backend_tls.ca_file: cannot read /ca.pem");
  });
  WriteBytes(path_, kBase + "  - name: notes\n    prefix: /notes\n");
  EXPECT_FALSE(reloader.Reload("test"));
  EXPECT_EQ(reloader.running(), initial_);
  EXPECT_EQ(metrics.config_last_reload_successful().Value(), 0);
  EXPECT_EQ(metrics.config_reloads_failed().Value(), 1);
}

// Which keys need a restart is a promise to operators (config/README.md); a key leaving or
// joining the set is a decision, not a side effect of editing the table.
TEST(RestartOnlyKeysTest, AreTheSocketThreadAndFileSettings) {
  std::set<std::string> paths;
  for (const ConfigKey& key : ConfigKeys()) {
    if (key.restart_only) paths.insert(key.Path());
  }
  EXPECT_EQ(paths, (std::set<std::string>{"listen", "admin_listen", "backend", "state_file", "threads",
                                          "timeouts.connect", "limits.max_connections", "routes[].fence_key",
                                          "routes[].max_keys", "routes[].token_order",
                                          "routes[].forget_idle_keys_after", "lock_services", "fence_store", "tls",
                                          "tls.cert_file", "tls.key_file", "tls.client_ca_file",
                                          "tls.client_certificate", "tls.min_version", "plain_listen",
                                          "backend_protocol"}));
}

TEST_F(ConfigReloaderTest, WatcherReloadsAChangedFile) {
  reloader_->StartWatching(std::chrono::milliseconds(20));
  WriteBytes(path_, kBase + "  - name: notes\n    prefix: /notes\n");
  const auto end = std::chrono::steady_clock::now() + std::chrono::milliseconds(1500);
  while (reloader_->running() == initial_ && std::chrono::steady_clock::now() < end) {
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  }
  EXPECT_EQ(reloader_->running()->routes.size(), 2u);
  reloader_->Stop();
}

}  // namespace
}  // namespace fencing

namespace fencing {
namespace {

// The backend's TLS files are watched with the route file: a rotated CA (or client certificate)
// with the route file unchanged is a reload, whose Apply builds the backend's TLS from it. The
// watch is a bound for a hang, not a wait: each step waits for the reload it expects.
TEST_F(ConfigReloaderTest, WatcherReloadsWhenABackendTlsFileChanges) {
  const std::string ca = (dir_ / "tls" / "ca.pem").string();
  std::filesystem::create_directories(dir_ / "tls");
  WriteBytes(ca, "first CA");
  WriteBytes(path_, "listen: \"127.0.0.1:18080\"\nadmin_listen: \"127.0.0.1:19901\"\nstate_file: ./fences.log\n"
                    "backend: \"https://db.internal:8443\"\nbackend_tls: {ca_file: " + ca + "}\n");
  ConfigResult running = LoadConfigFile(path_);
  ASSERT_TRUE(running.ok()) << running.errors[0].ToString();
  std::vector<std::string> seen;  // the CA file's content at each Apply
  std::mutex mu;
  Metrics metrics;
  ConfigReloader reloader(path_, running.config, metrics, [&](std::shared_ptr<const ProxyConfig> c) {
    std::lock_guard lock(mu);
    std::ifstream in(c->backend_tls.ca_file);
    seen.emplace_back(std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>());
    return Status::Ok();
  });
  reloader.StartWatching(std::chrono::milliseconds(20));
  auto applied = [&] {
    std::lock_guard lock(mu);
    return seen;
  };
  auto wait_for = [&](size_t n) {
    const auto end = std::chrono::steady_clock::now() + std::chrono::seconds(10);
    while (applied().size() < n && std::chrono::steady_clock::now() < end) {
      std::this_thread::sleep_for(std::chrono::milliseconds(5));
    }
  };
  // A Secret's rotation: the new file written aside and renamed over the old one.
  WriteBytes(ca + ".new", "second CA");
  std::filesystem::rename(ca + ".new", ca);
  wait_for(1);
  EXPECT_EQ(applied(), std::vector<std::string>{"second CA"});
  // Unchanged files: no further reload, however often the periodic check looks.
  std::this_thread::sleep_for(std::chrono::milliseconds(100));
  EXPECT_EQ(applied().size(), 1u);
  reloader.Stop();
}

}  // namespace
}  // namespace fencing
