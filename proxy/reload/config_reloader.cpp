#include "reload/config_reloader.h"

#include "metrics/metrics.h"
#include "common/log.h"
#include "config/keys.h"

#include <algorithm>
#include <fstream>
#include <map>
#include <sstream>
#include <vector>

namespace fencing {
namespace {

std::string ReadAll(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  std::ostringstream content;
  content << in.rdbuf();
  return in ? content.str() : std::string();
}

// The backend's TLS files the configuration names: a new certificate from cert-manager reloads
// the backend's TLS as a change of the route file does (new connections use it; pooled ones made
// with the old settings are closed, not reused).
std::vector<std::string> BackendTlsFiles(const ProxyConfig& config) {
  std::vector<std::string> files;
  for (const std::string* file : {&config.backend_tls.ca_file, &config.backend_tls.cert_file, &config.backend_tls.key_file}) {
    if (!file->empty()) files.push_back(*file);
  }
  return files;
}

// What a reload depends on: the route file's bytes, then each backend TLS file's, each with its
// length (so no two contents run together into the same string).
std::string Watched(const std::string& path, const ProxyConfig& running) {
  std::string all = ReadAll(path);
  all = std::to_string(all.size()) + ":" + all;
  for (const std::string& file : BackendTlsFiles(running)) {
    std::string content = ReadAll(file);
    all += std::to_string(content.size()) + ":" + content;
  }
  return all;
}

double UnixSeconds() {
  return std::chrono::duration<double>(std::chrono::system_clock::now().time_since_epoch()).count();
}

// A route that keeps its name but names another fence starts from that fence's max_token: a
// token the old fence had refused may pass. Worth a warning, not a refusal.
void WarnAboutFenceChanges(const ProxyConfig& running, const ProxyConfig& loaded) {
  std::map<std::string, const RouteConfig*> by_name;
  std::map<std::string, const RouteConfig*> by_prefix;
  for (const RouteConfig& r : running.routes) {
    by_name[r.name] = &r;
    by_prefix[r.prefix] = &r;
  }
  for (const RouteConfig& r : loaded.routes) {
    const RouteConfig* old = nullptr;
    if (auto it = by_name.find(r.name); it != by_name.end()) {
      old = it->second;
    } else if (auto it = by_prefix.find(r.prefix); it != by_prefix.end()) {
      old = it->second;  // renamed route, same prefix
    }
    if (old && old->fence != r.fence) {
      LogWarn("reload: a route now uses another fence; its writes are checked against that fence's max_token",
              {{"route", r.name}, {"prefix", r.prefix}, {"old_fence", old->fence}, {"new_fence", r.fence}});
    }
  }
}

}  // namespace

std::string RestartOnlyChange(const ProxyConfig& running, const ProxyConfig& loaded) {
  for (const ConfigKey& key : ConfigKeys()) {
    if (key.restart_only && key.same && !key.same(running, loaded)) return key.Path();
  }
  // Per fence: the routes of one fence agree on these (the loader checks), so the first route
  // naming a fence stands for it. A fence only the loaded file has is new and takes them at once.
  std::map<std::string_view, const RouteConfig*> running_fences;
  for (const RouteConfig& r : running.routes) running_fences.emplace(r.fence, &r);
  for (const RouteConfig& r : loaded.routes) {
    auto it = running_fences.find(r.fence);
    if (it == running_fences.end()) continue;
    for (const ConfigKey& key : ConfigKeys()) {
      if (key.restart_only && key.same_fence && !key.same_fence(*it->second, r)) {
        return key.Path() + " of fence '" + r.fence + "'";
      }
    }
  }
  return "";
}

ConfigReloader::ConfigReloader(std::string path, std::shared_ptr<const ProxyConfig> running, Metrics& metrics,
                               Apply apply)
    : path_(std::move(path)), metrics_(metrics), apply_(std::move(apply)), running_(std::move(running)) {
  last_content_ = Watched(path_, *running_);
  metrics_.config_last_reload_successful().Set(1);
  metrics_.config_last_reload_success_timestamp_seconds().Set(UnixSeconds());
}

ConfigReloader::~ConfigReloader() { Stop(); }

std::shared_ptr<const ProxyConfig> ConfigReloader::running() const {
  std::lock_guard lock(mu_);
  return running_;
}

bool ConfigReloader::Reload(std::string_view trigger) {
  std::lock_guard lock(mu_);
  ConfigResult loaded = LoadConfigFile(path_);
  // (a failed load keeps the running files' contents as the reference: a fix to either is a change)
  last_content_ = Watched(path_, loaded.ok() ? *loaded.config : *running_);
  auto fail = [&](std::string_view why, boost::json::object fields) {
    fields["trigger"] = trigger;
    LogError(why, std::move(fields));
    metrics_.config_last_reload_successful().Set(0);
    metrics_.config_reloads_failed().Increment();
    return false;
  };
  if (!loaded.ok()) {
    boost::json::array errors;
    for (const ConfigError& e : loaded.errors) errors.emplace_back(e.ToString());
    return fail("reload failed: invalid route file; the running routes are kept", {{"errors", errors}});
  }
  if (std::string key = RestartOnlyChange(*running_, *loaded.config); !key.empty()) {
    return fail("reload refused: this setting needs a restart; the running routes are kept", {{"key", key}});
  }
  if (Status applied = apply_(loaded.config); !applied.ok()) {
    return fail("reload failed: the route file names a file that does not load; the running routes are kept",
                {{"error", applied.message()}});
  }
  WarnAboutFenceChanges(*running_, *loaded.config);
  running_ = loaded.config;
  metrics_.config_last_reload_successful().Set(1);
  metrics_.config_last_reload_success_timestamp_seconds().Set(UnixSeconds());
  metrics_.config_reloads().Increment();
  LogInfo("route file reloaded", {{"trigger", trigger}, {"routes", running_->routes.size()}});
  return true;
}

bool ConfigReloader::ContentChanged() {
  std::lock_guard lock(mu_);
  return Watched(path_, *running_) != last_content_;
}

void ConfigReloader::StartWatching(std::chrono::milliseconds poll_interval) {
  // The route file's directory and the backend TLS files' (a Secret volume's `..data` swap);
  // files named only by a later reload are caught by the periodic check.
  std::vector<std::string> directories{DirectoryOf(path_)};
  for (const std::string& file : BackendTlsFiles(*running())) {
    std::string directory = DirectoryOf(file);
    if (std::find(directories.begin(), directories.end(), directory) == directories.end()) {
      directories.push_back(std::move(directory));
    }
  }
  watcher_ = std::make_unique<FileWatcher>(std::move(directories), poll_interval,
                                           [this](std::string_view trigger) {
                                             if (ContentChanged()) Reload(trigger);
                                           });
}

void ConfigReloader::Stop() { watcher_.reset(); }

}  // namespace fencing
