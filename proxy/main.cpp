// fencing-proxy: the command line, start-up, signals and shutdown.

#include "admin/admin_server.h"
#include "metrics/metrics.h"
#include "cli/state_command.h"
#include "common/access_log.h"
#include "common/file_watcher.h"
#include "common/log.h"
#include "common/memory.h"
#include "common/version.h"
#include "config/config.h"
#include "fence/fence_registry.h"
#include "lockservice/lock_services.h"
#include "reload/config_reloader.h"
#include "server/proxy_server.h"
#include "state/state_store.h"
#include "state/state_writer.h"
#include "store/etcd_fence_store.h"
#include "tls/client_context.h"
#include "tls/reloader.h"

#include <CLI/CLI.hpp>

#include <csignal>
#include <cstdlib>
#include <iostream>
#include <memory>
#include <pthread.h>

namespace fencing {
namespace {

constexpr int kExitOk = 0;
constexpr int kExitFailure = 1;
// The fallback check of the route file's content, for file systems where inotify sees nothing.
constexpr auto kConfigPollInterval = std::chrono::seconds(5);
// The fallback check of the listener's TLS files (a change in their directories is seen at once):
// a rotated certificate is in use within this.
constexpr auto kTlsPollInterval = std::chrono::seconds(5);
// How often keyed fences fold idle keys back and look for keys to forget.
constexpr auto kFenceSweepInterval = std::chrono::seconds(1);

void PrintConfigErrors(const ConfigResult& result) {
  for (const ConfigError& error : result.errors) std::cerr << error.ToString() << "\n";
}

void LogConfigErrors(std::string_view message, const ConfigResult& result) {
  for (const ConfigError& error : result.errors) LogError(message, {{"error", error.ToString()}});
}

// The listener's TLS context from the files config.tls names: null without tls. A file that
// does not load is one error of the route file, at the key that names it.
std::unique_ptr<tls::ServerTlsReloader> LoadListenerTls(ConfigResult& result, const ServerTlsObserver* observer) {
  if (!result.ok() || !result.config->tls) return nullptr;
  ConfigError error;
  std::unique_ptr<tls::ServerTlsReloader> reloader = tls::ServerTlsReloader::Create(*result.config, observer, &error);
  if (!reloader) {
    result.config.reset();
    result.errors.push_back(std::move(error));
  }
  return reloader;
}

int RunCheck(const std::string& config_path) {
  ConfigResult result = LoadConfigFile(config_path);
  // The TLS files are read as the start would read them: one that is missing or does not load
  // fails the check.
  std::unique_ptr<tls::ServerTlsReloader> listener_tls = LoadListenerTls(result, nullptr);
  if (!result.ok()) {
    PrintConfigErrors(result);
    std::cerr << config_path << ": invalid (" << result.errors.size() << " error"
              << (result.errors.size() == 1 ? "" : "s") << ")\n";
    return kExitFailure;
  }
  const ProxyConfig& config = *result.config;
  // The files the route file names for the backend's TLS load, as they will at start.
  std::shared_ptr<TlsClientContext> backend_tls;
  if (ConfigError error; !MakeBackendTls(config, &backend_tls, &error)) {
    std::cerr << error.ToString() << "\n" << config_path << ": invalid (1 error)\n";
    return kExitFailure;
  }
  std::string state_summary;
  if (config.fence_store) {
    // The fences are in etcd: there is no state file to open, and --check does not connect (as
    // it does not for lock services), so it stays an offline check of the file.
    std::string endpoints;
    for (const std::string& endpoint : config.fence_store->etcd.endpoints) {
      endpoints += (endpoints.empty() ? "" : ",") + endpoint;
    }
    state_summary = "fence store etcd " + endpoints + " prefix " + config.fence_store->prefix;
  } else {
    state_summary = "state file " + config.state_file + " not created yet";
  }
  std::unique_ptr<StateStore> store;
  OpenOptions options{.create_if_missing = false, .lock = false, .read_only = true};
  if (!config.fence_store && ::access(config.state_file.c_str(), F_OK) == 0) {
    if (Status s = StateStore::Open(config.state_file, options, &store); !s.ok()) {
      std::cerr << s.message() << "\n";
      return kExitFailure;
    }
    state_summary = "state file " + config.state_file + " holds " + std::to_string(store->maxima().size()) + " fence" +
                    (store->maxima().size() == 1 ? "" : "s");
  }
  std::string listeners = "listen " + config.listen.ToString();
  if (listener_tls) listeners += " (TLS, certificate serial " + listener_tls->Current()->serial() + ")";
  if (config.plain_listen) listeners += ", plain_listen " + config.plain_listen->ToString();
  std::cout << config_path << ": ok: " << config.routes.size() << " route" << (config.routes.size() == 1 ? "" : "s")
            << ", " << listeners << ", backend " << config.backend_url << ", " << state_summary << "\n";
  return kExitOk;
}

int RunProxy(const std::string& config_path) {
  Metrics metrics;
  ConfigResult loaded = LoadConfigFile(config_path);
  if (loaded.ok() && loaded.config->tls) metrics.EnableListenerTls();
  // Before anything is opened: a TLS file that is missing or does not load stops the start.
  std::unique_ptr<tls::ServerTlsReloader> listener_tls = LoadListenerTls(loaded, &metrics);
  if (!loaded.ok()) {
    PrintConfigErrors(loaded);
    LogConfigErrors("invalid route file; not starting", loaded);
    return kExitFailure;
  }
  std::shared_ptr<const ProxyConfig> config = loaded.config;

  // Signals are taken by this thread alone (sigwait below); every thread started from here on
  // inherits the mask.
  sigset_t signals;
  sigemptyset(&signals);
  sigaddset(&signals, SIGTERM);
  sigaddset(&signals, SIGINT);
  sigaddset(&signals, SIGHUP);
  pthread_sigmask(SIG_BLOCK, &signals, nullptr);
  std::signal(SIGPIPE, SIG_IGN);

  std::unique_ptr<FenceRegistry> registry;
  // Where raises become durable: the state file (its store and writer), or etcd shared with the
  // other proxies of the prefix.
  std::unique_ptr<StateStore> store;
  std::unique_ptr<StateWriter> writer;
  std::unique_ptr<EtcdFenceStore> shared;
  FenceMaxima maxima;
  FenceKeyMaxima keys;
  if (config->fence_store) {
    std::string error;
    // Long enough for an etcd that is just starting beside the proxy (a pod's first seconds).
    const auto wait = std::max<std::chrono::milliseconds>(std::chrono::seconds(10), 3 * config->fence_store->etcd.timeout);
    shared = EtcdFenceStore::Open(*config->fence_store, config->timeouts.request, wait, &metrics, &error);
    if (!shared) {
      LogError("cannot reach the shared fence store; not starting", {{"error", error}});
      return kExitFailure;
    }
    maxima = shared->maxima();
    keys = shared->TakeKeyMaxima();
  } else {
    if (Status s = StateStore::Open(config->state_file, OpenOptions{}, &store); !s.ok()) {
      LogError("cannot open the state file; not starting", {{"error", s.message()}});
      return kExitFailure;
    }
    // Read now: the writer owns the store from here. The keys move out of the store (at a
    // million keys the registry holds the only copy in memory).
    maxima = store->maxima();
    keys = store->TakeKeyMaxima();
  }
  // A replay of a large file freed its maps even when no key is left (a burst of forgetting
  // leaves a million key records and as many forget records): that memory goes back too.
  constexpr uint64_t kReleaseAfterReplayBytes = 1 << 20;
  const bool replayed_keys = !keys.empty() || (store && store->file_bytes() >= kReleaseAfterReplayBytes);
  const size_t fences_at_start = maxima.size();

  if (shared) {
    registry = std::make_unique<FenceRegistry>(maxima, std::move(keys), *shared, metrics);
    shared->Attach(*registry);
  } else {
    writer = std::make_unique<StateWriter>(
        *store, [&metrics](double seconds) { metrics.state_sync_seconds().Observe(seconds); },
        [&](bool ok, double) {
          metrics.state_compactions(ok).Increment();
          metrics.state_compaction_stall_seconds().Set(writer->longest_compaction_stall_seconds());
          if (!ok && writer->failed()) registry->MarkStateFailed("a compaction could not be made durable");
        });
    registry = std::make_unique<FenceRegistry>(maxima, std::move(keys), *writer, metrics);
  }
  registry->StartSweeper(kFenceSweepInterval);
  // The lock services the routes verify raises with (restart-only: a reload keeps these). Their
  // clients connect in the background: a lock service that is down at start only makes raises
  // on its routes answer 503 until it is back.
  auto lock_services = std::make_unique<LockServiceSet>(
      config->lock_services, MakeLockService,
      [&metrics](std::string_view service) -> const LockServiceObserver* { return &metrics.ForLockService(service); });
  if (!lock_services->error().empty()) {
    LogError("cannot start; exiting", {{"error", lock_services->error()}});
    return kExitFailure;
  }
  auto server = std::make_unique<ProxyServer>(config, *registry, metrics, *lock_services, listener_tls.get());
  // The lock-service clients stop while the workers' io_contexts still exist: a verification
  // still under way ends as unavailable and posts its answer to a stopped (not a freed) worker.
  bool drained = false;  // every connection ended at shutdown: no admitted write is left
  auto stop_serving = [&] {
    server->Stop();
    FlushAccessLog();  // the workers handed their last lines over as they stopped
    lock_services->Stop();
    // The membership goes last: until the workers have stopped, another proxy's raise must
    // still wait for this one.
    if (shared) shared->Stop(drained);
  };
  if (Status s = server->Start(); !s.ok()) {
    LogError("cannot start; exiting", {{"error", s.message()}});
    stop_serving();
    return kExitFailure;
  }
  // The routes' keyed fences now hold the replayed keys in their own tables, and the replay's
  // maps are freed: at a million keys that is some 40 MB the allocator would otherwise keep
  // resident for good (an idle sidecar's memory limit counts RSS). Only then: without keys (or a
  // large file replayed) there is nothing to give back.
  if (replayed_keys) ReleaseFreeMemory();
  // /readyz ignores the lock services: equal tokens are served without them, so an outage must
  // not take the pod out of its Service.
  auto admin = std::make_unique<AdminServer>(
      config->admin_listen, metrics, *registry,
      [&] { return !server->draining() && registry->healthy() && (!shared || shared->gate()->Open()); },
      lock_services.get(), shared.get());
  if (Status s = admin->Start(); !s.ok()) {
    LogError("cannot start; exiting", {{"error", s.message()}});
    stop_serving();
    return kExitFailure;
  }
  LogInfo("fencing-proxy started",
          {{"version", Version()},
           {"config", config_path},
           {shared ? "fence_store" : "state_file", shared ? config->fence_store->prefix : config->state_file},
           {"fences", fences_at_start}});

  ConfigReloader reloader(config_path, config, metrics,
                          [&server](std::shared_ptr<const ProxyConfig> loaded) { return server->Reload(std::move(loaded)); });
  reloader.StartWatching(kConfigPollInterval);
  // The TLS files are watched on their own: a Secret rotates them without touching the route file.
  std::unique_ptr<FileWatcher> tls_watcher;
  if (listener_tls) {
    tls_watcher = std::make_unique<FileWatcher>(
        listener_tls->Directories(), kTlsPollInterval,
        [&listener_tls](std::string_view trigger) { listener_tls->Reload(trigger, /*force=*/false); });
  }

  for (;;) {
    int signal = 0;
    if (sigwait(&signals, &signal) != 0) continue;
    if (signal == SIGHUP) {
      reloader.Reload("SIGHUP");
      if (listener_tls) listener_tls->Reload("SIGHUP", /*force=*/true);
      continue;
    }
    break;  // SIGTERM or SIGINT
  }
  tls_watcher.reset();
  reloader.Stop();
  config = reloader.running();

  LogInfo("shutting down: not ready, no new connections, draining in-flight requests",
          {{"timeout_ms", config->timeouts.shutdown.count()}});
  server->BeginShutdown();
  drained = server->WaitDrained(config->timeouts.shutdown);
  if (!drained) {
    LogWarn("shutdown timeout reached with connections still open", {{"connections", server->connections()}});
  }
  stop_serving();
  admin->Stop();
  registry->StopSweeper();  // it submits forget records: not to a writer that is gone
  writer.reset();  // completes the raises already submitted; no I/O thread runs to submit more
  LogInfo("stopped");
  // Leave without destroying the sessions still parked on the stopped workers: tearing them down
  // would release admissions into fences whose writer is gone. Nothing is left to flush: every
  // raise that was acknowledged is already durable, and the access log was flushed above.
  std::_Exit(kExitOk);
}

}  // namespace
}  // namespace fencing

int main(int argc, char** argv) {
  using namespace fencing;
  CLI::App app{"fencing-proxy: stops stale writes to a backend that cannot check fencing tokens"};
  app.require_subcommand(0, 1);

  std::string config_path;
  if (const char* from_env = std::getenv("FENCING_PROXY_CONFIG")) config_path = from_env;
  bool check = false;
  bool version = false;
  std::string log_level = "info";
  app.add_option("--config", config_path, "route file (or FENCING_PROXY_CONFIG)");
  app.add_flag("--check", check,
               "validate the route file and the state file (none with a fence_store), then exit (0 valid, 1 invalid)");
  app.add_flag("--version", version, "print the version and exit");
  app.add_option("--log-level", log_level, "debug, info, warn or error")->check(CLI::IsMember({"debug", "info", "warn", "error"}));

  CLI::App* state = app.add_subcommand("state", "inspect or repair a state file offline");
  state->require_subcommand(1);
  std::string state_file;
  CLI::App* show = state->add_subcommand("show", "print every fence's max_token (and key counts) as JSON");
  StateShowOptions show_options;
  show->add_option("--state-file", state_file, "the state file")->required();
  show->add_option("--fence", show_options.fence, "print this fence only (max or floor, key count)");
  show->add_option("--key", show_options.key, "with --fence: print this key's max (exit 1 if unknown)");
  show->add_flag("--keys", show_options.keys, "with --fence: list every key of the fence");
  CLI::App* set = state->add_subcommand(
      "set", "set one fence's max_token, a keyed fence's floor, or one key's max (refused while a proxy holds the file)");
  std::string fence_name;
  std::string token;
  std::string key_name;
  set->add_option("--state-file", state_file, "the state file")->required();
  set->add_option("FENCE", fence_name, "fence name")->required();
  set->add_option("TOKEN", token, "new max_token")->required();
  set->add_option("--key", key_name, "set this key's max instead of the fence's");

  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    return app.exit(e);
  }

  LogLevel level = LogLevel::kInfo;
  ParseLogLevel(log_level, &level);
  SetLogLevel(level);

  if (version) {
    std::cout << "fencing-proxy " << Version() << " (revision " << Revision() << ")\n";
    return 0;
  }
  // An empty --key is a bad key, not "no key".
  if ((show->parsed() && show->count("--key") > 0 && show_options.key.empty()) ||
      (set->parsed() && set->count("--key") > 0 && key_name.empty())) {
    std::cerr << "fencing-proxy state: invalid fence key \"\": use 1 to 128 characters of A-Z, a-z, 0-9, '-', '.', "
                 "'_' and '~'\n";
    return 2;
  }
  if (show->parsed()) return RunStateShow(state_file, show_options);
  if (set->parsed()) return RunStateSet(state_file, fence_name, token, key_name);
  if (config_path.empty()) {
    std::cerr << "fencing-proxy: --config FILE (or FENCING_PROXY_CONFIG) is required\n" << app.help();
    return 2;
  }
  if (check) return RunCheck(config_path);
  // Only the long-running proxy needs it (the offline commands exit at once).
  ApplyAllocatorSettings(argv);  // may re-execute the binary with the allocator's setting
  return RunProxy(config_path);
}
