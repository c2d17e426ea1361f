#pragma once
// What raise_protocol.cpp (the view's and the membership's events) and raise_protocol_ours.cpp
// (our own raises and acknowledgements) share; not for other code.

#include "etcd/kv.h"
#include "store/layout.h"

#include <cstdint>
#include <optional>
#include <string>

namespace fencing::store::raise_detail {

constexpr int64_t kMillisecond = 1'000'000;
constexpr int kMaxAttempts = 5;

inline double Seconds(int64_t ns) { return double(ns) / 1e9; }

// A target's fence and key ("orders" -> "orders", ""; "objects/k17" -> "objects", "k17").
inline std::string FenceOf(const std::string& target) { return target.substr(0, target.find('/')); }
inline std::string KeyOf(const std::string& target) {
  const size_t slash = target.find('/');
  return slash == std::string::npos ? std::string() : target.substr(slash + 1);
}

// The max and the pending of a txn's two ranges (a failed compare's answer). False: unreadable.
bool ReadCurrent(const etcd::TxnResponse& r, uint64_t* max, int64_t* max_revision, std::optional<PendingValue>* pending,
                 int64_t* pending_revision);

}  // namespace fencing::store::raise_detail
