#pragma once
// Every key of the route file, declared once: where it goes, its type and default as the
// reference documents them, whether a change needs a restart, and what the loader does with it.
// The loader's known-key lists and dispatch, the reloader's restart rule and the docs test are
// all read from this table, so a new key is one entry here.

#include <span>
#include <string>
#include <string_view>

#include "config/config.h"

namespace fencing {

namespace config_internal {
class Loader;  // the YAML walk (loader.cpp)
struct Entry;  // one key: value of a mapping
}  // namespace config_internal

enum class KeySection { kTop, kTimeouts, kLimits, kTls, kRoute };

struct ConfigKey {
  KeySection section;
  std::string_view name;
  // For the docs: "duration", "size", "integer", "address", or the allowed words "a | b".
  std::string_view type;
  // The default as config/examples/reference.yaml writes it; empty when there is none to write
  // (a required key, a mapping or list, or a default derived from another key).
  std::string_view default_value;
  // Missing, it is an error: "missing required key 'NAME'" plus " (HINT)" when there is one.
  bool required = false;
  std::string_view required_hint;
  // For a required key: another key of its section that, written, stands in for it, so that this
  // one is no longer required (state_file's is fence_store; the loader refuses the two together).
  std::string_view required_unless;
  // Bound to sockets, threads or files at start-up (or, for a route key, to a fence's keys): a
  // reload that changes it is refused.
  bool restart_only = false;
  // For restart-only keys: whether two configurations agree on it.
  bool (*same)(const ProxyConfig& a, const ProxyConfig& b) = nullptr;
  // For restart-only route keys instead: whether a fence that both configurations have keeps the
  // setting (every route naming one fence agrees on it, so any of them stands for the fence). A
  // fence new in the loaded file is free to take any value.
  bool (*same_fence)(const RouteConfig& a, const RouteConfig& b) = nullptr;
  // Parses the value and stores it (or reports what is wrong). path is the key as messages name
  // it: "threads", "timeouts.connect", "routes[2].prefix".
  void (*load)(config_internal::Loader& loader, const config_internal::Entry& entry, const std::string& path) =
      nullptr;

  // "listen", "timeouts.connect", "limits.max_connections", "tls.cert_file", "routes[].prefix".
  std::string Path() const;
};

// The whole table, grouped by section in the order top level, timeouts, limits, route; within a
// section in the order "known keys" messages list them.
std::span<const ConfigKey> ConfigKeys();

// The keys of a mapping inside a key's value that is not a section of the table (a route's
// fence_key and verify, a lock service and its etcd, tls and zookeeper blocks, the fence store
// and its etcd block): the loader's known-key lists, read by the docs test too.
struct NestedConfigKeys {
  std::string_view path;  // as messages name it, NAME for a name the file chooses: "lock_services.NAME.etcd"
  std::span<const std::string_view> names;
};
std::span<const NestedConfigKeys> NestedKeys();

// "" for the top level, else "timeouts", "limits", "tls", "routes".
std::string_view SectionName(KeySection section);

}  // namespace fencing
