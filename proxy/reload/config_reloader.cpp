#include "reload/config_reloader.h"

#include "metrics/metrics.h"
#include "common/log.h"
#include "config/keys.h"

#include <fstream>
#include <map>
#include <sstream>

#include <poll.h>
#include <sys/eventfd.h>
#include <sys/inotify.h>
#include <unistd.h>

namespace fencing {
namespace {

// Lets a burst of events (a ConfigMap swap is several renames) settle before reading.
constexpr auto kSettleTime = std::chrono::milliseconds(100);

std::string ReadAll(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  std::ostringstream content;
  content << in.rdbuf();
  return in ? content.str() : std::string();
}

std::string DirectoryOf(const std::string& path) {
  size_t slash = path.rfind('/');
  if (slash == std::string::npos) return ".";
  if (slash == 0) return "/";
  return path.substr(0, slash);
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
  last_content_ = ReadAll(path_);
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
  last_content_ = ReadAll(path_);
  ConfigResult loaded = LoadConfigFile(path_);
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
  WarnAboutFenceChanges(*running_, *loaded.config);
  running_ = loaded.config;
  apply_(running_);
  metrics_.config_last_reload_successful().Set(1);
  metrics_.config_last_reload_success_timestamp_seconds().Set(UnixSeconds());
  metrics_.config_reloads().Increment();
  LogInfo("route file reloaded", {{"trigger", trigger}, {"routes", running_->routes.size()}});
  return true;
}

bool ConfigReloader::ContentChanged() {
  std::string content = ReadAll(path_);
  std::lock_guard lock(mu_);
  return content != last_content_;
}

void ConfigReloader::StartWatching(std::chrono::milliseconds poll_interval) {
  stop_fd_ = ::eventfd(0, EFD_CLOEXEC);
  watcher_ = std::thread([this, poll_interval] { Watch(poll_interval); });
}

void ConfigReloader::Stop() {
  if (!watcher_.joinable()) return;
  uint64_t one = 1;
  [[maybe_unused]] ssize_t n = ::write(stop_fd_, &one, sizeof one);
  watcher_.join();
  ::close(stop_fd_);
  stop_fd_ = -1;
}

void ConfigReloader::Watch(std::chrono::milliseconds poll_interval) {
  // The directory, not the file: a ConfigMap update replaces the file by renaming a symlink.
  int inotify_fd = ::inotify_init1(IN_CLOEXEC | IN_NONBLOCK);
  if (inotify_fd >= 0) {
    const uint32_t mask = IN_CLOSE_WRITE | IN_MOVED_TO | IN_CREATE | IN_DELETE | IN_MODIFY | IN_ATTRIB;
    if (::inotify_add_watch(inotify_fd, DirectoryOf(path_).c_str(), mask) < 0) {
      LogWarn("cannot watch the route file's directory; relying on the periodic check",
              {{"directory", DirectoryOf(path_)}, {"error", std::strerror(errno)}});
    }
  }
  for (;;) {
    pollfd fds[2] = {{stop_fd_, POLLIN, 0}, {inotify_fd, POLLIN, 0}};
    int ready = ::poll(fds, inotify_fd >= 0 ? 2 : 1, static_cast<int>(poll_interval.count()));
    if (ready < 0 && errno != EINTR) break;
    if (fds[0].revents & POLLIN) break;
    const char* trigger = "periodic check";
    if (inotify_fd >= 0 && (fds[1].revents & POLLIN)) {
      trigger = "file change";
      std::this_thread::sleep_for(kSettleTime);
      char events[4096];
      while (::read(inotify_fd, events, sizeof events) > 0) {
      }
    }
    if (ContentChanged()) Reload(trigger);
  }
  if (inotify_fd >= 0) ::close(inotify_fd);
}

}  // namespace fencing
