#pragma once
// Reloading the route file: on SIGHUP, when the file's directory changes (a Kubernetes ConfigMap
// volume swaps a "..data" symlink, which a watch on the file itself would miss), and by a
// periodic content check as a fallback. The backend's TLS files (backend_tls) count as part of
// the file: a rotated client certificate or CA reloads too. A new file is validated completely before it replaces
// the running one; an invalid one is logged with file:line:col and the old routes keep running.
// Fence state is never touched by a reload.

#include "common/file_watcher.h"
#include "common/status.h"
#include "config/config.h"

#include <atomic>
#include <chrono>
#include <functional>
#include <memory>
#include <mutex>
#include <string>

namespace fencing {

class Metrics;

class ConfigReloader {
 public:
  // Puts a validated configuration in force, or says why it cannot (a file it names, such as a
  // backend_tls certificate, that does not load): then the running one is kept.
  using Apply = std::function<Status(std::shared_ptr<const ProxyConfig>)>;

  ConfigReloader(std::string path, std::shared_ptr<const ProxyConfig> running, Metrics& metrics, Apply apply);
  ~ConfigReloader();

  // Loads the file and applies it when it is valid, changes nothing that needs a restart, and
  // Apply takes it. Returns whether the running configuration is now the file's.
  // Safe to call from any thread; reloads are serialised.
  bool Reload(std::string_view trigger);

  // Watches the file's directory (common/file_watcher.h) and checks the content every
  // poll_interval; reloads when the content changed.
  void StartWatching(std::chrono::milliseconds poll_interval);
  void Stop();

  std::shared_ptr<const ProxyConfig> running() const;

 private:
  bool ContentChanged();

  const std::string path_;
  Metrics& metrics_;
  const Apply apply_;
  mutable std::mutex mu_;
  std::shared_ptr<const ProxyConfig> running_;
  std::string last_content_;  // what the file (and its backend TLS files) held at the last load attempt
  std::unique_ptr<FileWatcher> watcher_;
};

// The first restart-only key (ConfigKey::restart_only: bound to sockets, threads or files at
// start-up) on which the two differ, as its path ("listen", "limits.max_connections"); for a
// fence's key settings, on a fence both have, with the fence ("routes[].max_keys of fence
// 'objects'"); "" if none.
std::string RestartOnlyChange(const ProxyConfig& running, const ProxyConfig& loaded);

}  // namespace fencing
