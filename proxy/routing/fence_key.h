#pragma once
// Where a keyed route's request names its lock (contract "Fence keys"): the Nth path segment
// after the route's prefix, or one header field. Pure, no allocation: the key is a view into the
// request, taken as written (never percent-decoded, never case-folded), so one key has exactly
// one spelling and the backend receives the very bytes the fence was chosen by.

#include "config/config.h"
#include "http/rules.h"

#include "http/request_head.h"

#include <string_view>

namespace fencing {

enum class FenceKeyStatus {
  kOk,         // key is a valid fence key (IsValidFenceKey)
  kMissing,    // 400 missing-fence-key: the path has too few segments, or the header is absent
  kMalformed,  // 400 bad-fence-key: reason says what is wrong
};

struct FenceKeyResult {
  FenceKeyStatus status = FenceKeyStatus::kMissing;
  std::string_view key;     // kOk: a view into the path or the header value
  const char* reason = "";  // kMissing / kMalformed: for the problem's detail
};

// The route's key settings as extraction needs them.
struct FenceKeySource {
  const FenceKeySpec* spec;
  std::string_view prefix;  // the route's prefix, as configured
  bool case_insensitive;    // the route's path_case_insensitive
};

// The key of a request on the route. path is the path CheckRequestTarget accepted (before '?')
// and the route matched. With spec kNone: kMissing (callers ask only on keyed routes).
FenceKeyResult ExtractFenceKey(const FenceKeySource& source, std::string_view path,
                               const RequestHead& head);

// The two halves, for callers without a whole head (and the fuzzer).
FenceKeyResult PathSegmentKey(unsigned segment, std::string_view prefix, bool case_insensitive, std::string_view path);
// count: how many fields carry the key header; first: the first one's value.
FenceKeyResult HeaderKey(size_t count, std::string_view first);

}  // namespace fencing
