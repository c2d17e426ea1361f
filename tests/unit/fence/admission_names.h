#pragma once
// An Admission by name, for test failure messages; gtest prints one through PrintTo (found by
// argument-dependent lookup, so in namespace fencing itself).

#include "fence/fence.h"

#include <ostream>

namespace fencing {

inline const char* Name(Admission a) {
  switch (a) {
    case Admission::kAdmitted: return "admitted";
    case Admission::kWaiting: return "waiting";
    case Admission::kStale: return "stale";
    case Admission::kFailed: return "failed";
    case Admission::kTooFar: return "too far";
    case Admission::kKeyLimit: return "key limit";
    case Admission::kUnavailable: return "unavailable";
  }
  return "?";
}

inline void PrintTo(Admission a, std::ostream* os) { *os << Name(a); }

}  // namespace fencing
