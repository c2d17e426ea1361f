#pragma once
// Keeps the client listener's TLS context current without a restart (contract "Transport
// security"): the certificate, key and client CAs are read again whenever their bytes change and
// on SIGHUP. New handshakes take the new context; a connection keeps the one it began with. Files
// that do not load (half a file, a key that does not belong to the certificate) leave the running
// context in place, are logged once per change, and counted (ServerTlsObserver).
//
// Nothing here watches or waits: Reload() is the seam. In the proxy a FileWatcher (common/
// file_watcher.h) calls it when the files' directories change (a Kubernetes Secret volume swaps
// its "..data" symlink) and every few seconds in any case, and SIGHUP calls it with force; unit
// tests call it directly.

#include "config/config.h"
#include "tls/server_context.h"
#include "tls/server_observer.h"

#include <atomic>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace fencing::tls {

class ServerTlsReloader {
 public:
  // Reads and loads the files of config.tls (which must be set); null and *error, positioned at
  // the key that names the file to blame, when they do not load. observer may be null.
  static std::unique_ptr<ServerTlsReloader> Create(const ProxyConfig& config, const ServerTlsObserver* observer,
                                                   ConfigError* error);

  // The context for a new connection. Any thread.
  std::shared_ptr<const ServerContext> Current() const { return current_.load(std::memory_order_acquire); }

  // Reads the files; when their bytes differ from the last read (or `force`), builds a context of
  // them and makes it the current one. A file that cannot be read or does not load keeps the
  // current context; the same failure is reported once, not at every call. Returns whether the
  // current context changed. Any thread; calls are serialised.
  bool Reload(std::string_view trigger, bool force);

  // The directories of the files: where a change shows first.
  std::vector<std::string> Directories() const;

 private:
  ServerTlsReloader(ListenTlsConfig config, const ServerTlsObserver* observer)
      : config_(std::move(config)), observer_(observer) {}
  void Use(std::shared_ptr<const ServerContext> context);
  void Failed(std::string_view trigger, const std::string& why);

  const ListenTlsConfig config_;
  const ServerTlsObserver* const observer_;
  std::atomic<std::shared_ptr<const ServerContext>> current_;
  std::mutex mu_;                         // serialises Reload
  std::optional<ServerFiles> last_read_;  // the bytes of the last complete read
  std::string last_failure_;              // the last failure reported; empty after a success
};

}  // namespace fencing::tls
