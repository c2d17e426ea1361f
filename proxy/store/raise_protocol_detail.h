#pragma once
// What the raise protocol's parts share (raise_protocol.cpp: the view's and the membership's
// events; our_raises.cpp: our own raises and acknowledgements; raise_targets.cpp: the targets and
// their fences); not for other code.

#include "store/layout.h"

#include <cstdint>
#include <string>

namespace fencing::store::raise_detail {

constexpr int64_t kMillisecond = 1'000'000;
constexpr int kMaxAttempts = 5;

inline double Seconds(int64_t ns) { return double(ns) / 1e9; }

// A target's fence and key ("orders" -> "orders", ""; "objects/k17" -> "objects", "k17"), by
// layout.h's SplitTarget (targets here came from Layout::Classify, so they split).
inline std::string FenceOf(const std::string& target) {
  std::string fence, key;
  SplitTarget(target, &fence, &key);
  return fence;
}
inline std::string KeyOf(const std::string& target) {
  std::string fence, key;
  SplitTarget(target, &fence, &key);
  return key;
}

}  // namespace fencing::store::raise_detail
