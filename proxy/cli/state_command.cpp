#include "cli/state_command.h"

#include "http/rules.h"
#include "state/state_log.h"
#include "state/state_store.h"

#include <boost/json/object.hpp>
#include <boost/json/serialize.hpp>
#include <boost/json/string.hpp>

#include <algorithm>
#include <iostream>
#include <memory>
#include <string_view>
#include <vector>

namespace fencing {
namespace {

constexpr int kExitOk = 0;
constexpr int kExitFailure = 1;
constexpr int kExitUsage = 2;

constexpr std::string_view kNameRule = "use 1 to 64 characters of a-z, 0-9, '_' and '-'";
constexpr std::string_view kKeyRule = "use 1 to 128 characters of A-Z, a-z, 0-9, '-', '.', '_' and '~'";

// The same rule as the token header: 1-20 ASCII digits, at most 2^64-1.
bool ParseToken(const std::string& text, uint64_t* token) {
  return text.size() <= kMaxU64Digits && ParseDecimalU64(text, token);
}

std::string Quoted(std::string_view text) { return boost::json::serialize(boost::json::string(text)); }

// Checks the fence and key given on the command line; prints the one-line error if not.
bool CheckNames(const char* command, const std::string& fence, const std::string& key) {
  if (!IsValidFenceName(fence)) {
    std::cerr << "fencing-proxy " << command << ": invalid fence name " << Quoted(fence) << ": " << kNameRule << "\n";
    return false;
  }
  if (!key.empty() && !IsValidFenceKey(key)) {
    std::cerr << "fencing-proxy " << command << ": invalid fence key " << Quoted(key) << ": " << kKeyRule << "\n";
    return false;
  }
  return true;
}

const KeyMaxima* KeysOf(const FenceKeyMaxima& keys, const std::string& fence) {
  auto it = keys.find(fence);
  return it == keys.end() ? nullptr : &it->second;
}

int ShowAll(const StateStore& store) {
  boost::json::object fences;  // keeps insertion order: the map's sorted order
  for (const auto& [fence, max] : store.maxima()) fences[fence] = max;
  boost::json::object out;
  out["fences"] = std::move(fences);
  if (!store.key_maxima().empty()) {
    boost::json::object keys;
    for (const auto& [fence, fence_keys] : store.key_maxima()) {
      auto floor = store.maxima().find(fence);
      keys[fence] = boost::json::object{{"count", fence_keys.size()},
                                        {"floor", floor == store.maxima().end() ? 0 : floor->second}};
    }
    out["keys"] = std::move(keys);
  }
  std::cout << boost::json::serialize(out) << "\n" << std::flush;
  return kExitOk;
}

int ShowFence(const StateStore& store, const std::string& state_file, const StateShowOptions& options) {
  auto it = store.maxima().find(options.fence);
  if (it == store.maxima().end()) {
    std::cerr << "fencing-proxy state show: fence " << Quoted(options.fence) << " is not in " << state_file << "\n";
    return kExitFailure;
  }
  const uint64_t max = it->second;
  const KeyMaxima* keys = KeysOf(store.key_maxima(), options.fence);
  if (!options.key.empty()) {
    const auto key = keys == nullptr ? KeyMaxima::const_iterator{} : keys->find(options.key);
    if (keys == nullptr || key == keys->end()) {
      std::cout << "{\"fence\":" << Quoted(options.fence) << ",\"key\":" << Quoted(options.key)
                << ",\"known\":false,\"floor\":" << max << "}\n"
                << std::flush;
      std::cerr << "fencing-proxy state show: key " << Quoted(options.key) << " of fence " << Quoted(options.fence)
                << " is unknown: it starts at the fence's floor, " << max << "\n";
      return kExitFailure;
    }
    std::cout << "{\"fence\":" << Quoted(options.fence) << ",\"key\":" << Quoted(options.key)
              << ",\"max\":" << key->second << "}\n"
              << std::flush;
    return kExitOk;
  }
  const size_t count = keys == nullptr ? 0 : keys->size();
  std::cout << "{\"fence\":" << Quoted(options.fence) << (count > 0 ? ",\"floor\":" : ",\"max\":") << max
            << ",\"key_count\":" << count;
  if (options.keys) {
    // Streamed, one key at a time, sorted so that two runs compare: only pointers are sorted.
    std::vector<const KeyMaxima::value_type*> sorted;
    if (keys != nullptr) {
      sorted.reserve(keys->size());
      for (const auto& entry : *keys) sorted.push_back(&entry);
    }
    std::sort(sorted.begin(), sorted.end(), [](auto* a, auto* b) { return a->first < b->first; });
    std::cout << ",\"keys\":{";
    bool first = true;
    for (const auto* entry : sorted) {
      std::cout << (first ? "" : ",") << Quoted(entry->first) << ":" << entry->second;
      first = false;
    }
    std::cout << "}";
  }
  std::cout << "}\n" << std::flush;
  return kExitOk;
}

}  // namespace

int RunStateShow(const std::string& state_file, const StateShowOptions& options) {
  if (options.fence.empty() && (!options.key.empty() || options.keys)) {
    std::cerr << "fencing-proxy state show: --key and --keys need --fence NAME\n";
    return kExitUsage;
  }
  if (!options.key.empty() && options.keys) {
    std::cerr << "fencing-proxy state show: give --key KEY or --keys, not both\n";
    return kExitUsage;
  }
  if (!options.fence.empty() && !CheckNames("state show", options.fence, options.key)) return kExitUsage;

  OpenOptions open;
  open.create_if_missing = false;
  open.lock = false;  // a running proxy holds the lock; reading beside it is safe
  open.read_only = true;
  std::unique_ptr<StateStore> store;
  Status status = StateStore::Open(state_file, open, &store);
  if (!status.ok()) {
    std::cerr << "fencing-proxy state show: " << status.message() << "\n";
    return kExitFailure;
  }
  return options.fence.empty() ? ShowAll(*store) : ShowFence(*store, state_file, options);
}

int RunStateSet(const std::string& state_file, const std::string& fence, const std::string& token,
                const std::string& key) {
  if (!CheckNames("state set", fence, key)) return kExitUsage;
  uint64_t new_max = 0;
  if (!ParseToken(token, &new_max)) {
    std::cerr << "fencing-proxy state set: invalid token \"" << token
              << "\": use 1 to 20 ASCII digits, at most 18446744073709551615\n";
    return kExitUsage;
  }

  OpenOptions options;
  options.create_if_missing = false;  // a mistyped path must not become a new, empty state file
  options.lock = true;                // refuse beside a running proxy
  options.read_only = false;
  std::unique_ptr<StateStore> store;
  Status status = StateStore::Open(state_file, options, &store);
  if (!status.ok()) {
    std::cerr << "fencing-proxy state set: " << status.message() << "\n";
    return kExitFailure;
  }

  FenceMaxima maxima = store->maxima();
  FenceKeyMaxima keys = store->TakeKeyMaxima();  // moved, not copied: there may be a million
  auto fence_it = maxima.find(fence);
  std::string label = fence;
  std::string old_text;
  bool changed = false;
  if (key.empty()) {
    // A keyed fence's own max is the floor its unknown keys start at.
    if (KeysOf(keys, fence) != nullptr) label += " floor";
    old_text = fence_it == maxima.end() ? "none" : std::to_string(fence_it->second);
    changed = fence_it == maxima.end() || fence_it->second != new_max;
    maxima[fence] = new_max;
  } else {
    label += " key " + key;
    KeyMaxima& fence_keys = keys[fence];
    auto key_it = fence_keys.find(key);
    if (key_it != fence_keys.end()) {
      old_text = std::to_string(key_it->second);
    } else {
      old_text = "none (floor " + std::to_string(fence_it == maxima.end() ? 0 : fence_it->second) + ")";
    }
    changed = key_it == fence_keys.end() || key_it->second != new_max;
    fence_keys[key] = new_max;
    maxima.try_emplace(fence, 0);  // a key makes its fence exist
  }
  if (changed) {
    // Replay keeps the maximum, so lowering needs a rewrite; a snapshot serves raising too.
    // The old file's lock is held until the rename is durable.
    status = WriteSnapshot(state_file, maxima, keys, nullptr);
    if (!status.ok()) {
      std::cerr << "fencing-proxy state set: " << status.message() << "\n";
      return kExitFailure;
    }
  }
  std::cout << label << ": " << old_text << " -> " << new_max << "\n" << std::flush;
  return kExitOk;
}

}  // namespace fencing
