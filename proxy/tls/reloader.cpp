#include "tls/reloader.h"

#include "common/file_watcher.h"
#include "common/log.h"

#include <chrono>
#include <set>

namespace fencing::tls {
namespace {

int64_t UnixNow() {
  return std::chrono::duration_cast<std::chrono::seconds>(std::chrono::system_clock::now().time_since_epoch()).count();
}

}  // namespace

std::unique_ptr<ServerTlsReloader> ServerTlsReloader::Create(const ProxyConfig& config,
                                                             const ServerTlsObserver* observer, ConfigError* error) {
  LoadError load_error;
  std::optional<ServerFiles> files = ReadServerFiles(*config.tls, &load_error);
  std::shared_ptr<const ServerContext> context;
  if (files) context = ServerContext::Build(*config.tls, *files, &load_error);
  if (!context) {
    *error = ToConfigError(config, load_error);
    return nullptr;
  }
  std::unique_ptr<ServerTlsReloader> reloader(new ServerTlsReloader(*config.tls, observer));
  reloader->last_read_ = std::move(files);
  reloader->Use(std::move(context));
  return reloader;
}

bool ServerTlsReloader::Reload(std::string_view trigger, bool force) {
  std::lock_guard lock(mu_);
  LoadError error;
  std::optional<ServerFiles> files = ReadServerFiles(config_, &error);
  if (!files) {
    last_read_.reset();  // whatever comes back is news
    if (force || error.message != last_failure_) Failed(trigger, error.message);
    return false;
  }
  if (!force && last_read_ && *files == *last_read_) return false;
  last_read_ = files;
  std::shared_ptr<const ServerContext> context = ServerContext::Build(config_, *files, &error);
  if (!context) {
    if (force || error.message != last_failure_) Failed(trigger, error.message);
    return false;
  }
  last_failure_.clear();
  Use(std::move(context));
  if (observer_) observer_->TlsReloaded(true);
  LogInfo("TLS certificate reloaded: new handshakes use it",
          {{"trigger", trigger}, {"cert_file", config_.cert_file}, {"serial", Current()->serial()}});
  return true;
}

void ServerTlsReloader::Use(std::shared_ptr<const ServerContext> context) {
  if (observer_) {
    observer_->TlsCertificateExpiry(config_.cert_file, context->not_after());
    if (context->client_ca_not_after()) observer_->TlsCertificateExpiry(config_.client_ca_file, *context->client_ca_not_after());
  }
  if (context->not_after() < UnixNow()) {
    LogWarn("the listener's TLS certificate has expired; clients will refuse it",
            {{"cert_file", config_.cert_file}, {"serial", context->serial()}});
  }
  current_.store(std::move(context), std::memory_order_release);
}

void ServerTlsReloader::Failed(std::string_view trigger, const std::string& why) {
  last_failure_ = why;
  if (observer_) observer_->TlsReloaded(false);
  LogError("TLS files not reloaded; the running certificate keeps serving", {{"trigger", trigger}, {"error", why}});
}

std::vector<std::string> ServerTlsReloader::Directories() const {
  std::set<std::string> directories{DirectoryOf(config_.cert_file), DirectoryOf(config_.key_file)};
  if (config_.asks_client_certificate()) directories.insert(DirectoryOf(config_.client_ca_file));
  return {directories.begin(), directories.end()};
}

}  // namespace fencing::tls
