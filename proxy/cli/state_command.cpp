#include "cli/state_command.h"

#include "http/rules.h"
#include "state/state_log.h"
#include "state/state_store.h"

#include <boost/json/object.hpp>
#include <boost/json/serialize.hpp>

#include <iostream>
#include <memory>

namespace fencing {
namespace {

constexpr int kExitOk = 0;
constexpr int kExitFailure = 1;
constexpr int kExitUsage = 2;

// The same rule as the token header: 1-20 ASCII digits, at most 2^64-1.
bool ParseToken(const std::string& text, uint64_t* token) {
  return text.size() <= kMaxU64Digits && ParseDecimalU64(text, token);
}

}  // namespace

int RunStateShow(const std::string& state_file) {
  OpenOptions options;
  options.create_if_missing = false;
  options.lock = false;  // a running proxy holds the lock; reading beside it is safe
  options.read_only = true;
  std::unique_ptr<StateStore> store;
  Status status = StateStore::Open(state_file, options, &store);
  if (!status.ok()) {
    std::cerr << "fencing-proxy state show: " << status.message() << "\n";
    return kExitFailure;
  }
  boost::json::object fences;  // keeps insertion order: the map's sorted order
  for (const auto& [fence, max] : store->maxima()) fences[fence] = max;
  boost::json::object out;
  out["fences"] = std::move(fences);
  std::cout << boost::json::serialize(out) << "\n" << std::flush;
  return kExitOk;
}

int RunStateSet(const std::string& state_file, const std::string& fence, const std::string& token) {
  if (!IsValidFenceName(fence)) {
    std::cerr << "fencing-proxy state set: invalid fence name \"" << fence
              << "\": use 1 to 64 characters of a-z, 0-9, '_' and '-'\n";
    return kExitUsage;
  }
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
  auto it = maxima.find(fence);
  const std::string old_text = it == maxima.end() ? "none" : std::to_string(it->second);
  if (it == maxima.end() || it->second != new_max) {
    maxima[fence] = new_max;
    // Replay keeps the maximum, so lowering needs a rewrite; a snapshot serves raising too.
    // The old file's lock is held until the rename is durable.
    status = WriteSnapshot(state_file, maxima, nullptr);
    if (!status.ok()) {
      std::cerr << "fencing-proxy state set: " << status.message() << "\n";
      return kExitFailure;
    }
  }
  std::cout << fence << ": " << old_text << " -> " << new_max << "\n" << std::flush;
  return kExitOk;
}

}  // namespace fencing
