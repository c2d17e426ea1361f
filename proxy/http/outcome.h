#pragma once
// The `outcome` label of fencing_proxy_requests_total (and the access log's "decision"). Each
// request counts exactly once. Enum and label come from one list, so reordering or adding an
// outcome cannot give a counter another outcome's name.

#include <cstddef>
#include <iterator>
#include <string_view>

namespace fencing {

#define FENCING_OUTCOMES(X)                                                                              \
  X(kForwarded, "forwarded")                  /* a fenced write admitted, answered by the backend */   \
  X(kUnfenced, "unfenced")                    /* method not fenced, or no token with allow */           \
  X(kRejectedStale, "rejected_stale")         /* 409 */                                                 \
  X(kRejectedMissing, "rejected_missing")     /* 428 */                                                 \
  X(kRejectedMalformed, "rejected_malformed") /* 400: bad token */                                      \
  X(kObservedStale, "observed_stale")         /* observe mode: would have been 409, forwarded */        \
  X(kObservedMissing, "observed_missing")     /* observe mode: would have been 428, forwarded */        \
  X(kObservedMalformed, "observed_malformed") /* observe mode: would have been 400, forwarded */        \
  X(kRaiseFailed, "raise_failed")             /* 503: the state file could not be written or synced */  \
  X(kUpstreamError, "upstream_error")         /* 502/504: backend unreachable, its TLS failed, or too slow */ \
  X(kRejectedPath, "rejected_path")           /* 400: a path that could reach another route */          \
  X(kUnmatched, "unmatched")                  /* no route matched (forwarded, or 404) */                \
  X(kRejectedRequest, "rejected_request")     /* 4xx for the request itself: framing, limits, methods */ \
  X(kRejectedJump, "rejected_jump")           /* 409: a raise further than max_token_jump */            \
  X(kObservedJump, "observed_jump")           /* observe mode: would have been refused for its jump */ \
  X(kRejectedKey, "rejected_key")             /* 400: a keyed route's key missing or malformed */      \
  X(kRejectedKeyLimit, "rejected_key_limit")  /* 503: a new key beyond the fence's max_keys */           \
  X(kRejectedUnverified, "rejected_unverified") /* 409: a raise the lock service did not confirm */      \
  X(kObservedUnverified, "observed_unverified") /* observe mode: a raise not confirmed, forwarded, max kept */ \
  X(kLockServiceUnavailable, "lock_service_unavailable") /* 503: a raise the lock service could not check */ \
  X(kFenceStoreUnavailable, "fence_store_unavailable") /* 503: the shared fence store cannot promise the order now */ \
  X(kRejectedWriter, "rejected_writer")       /* 403: a fenced request from a client not among the route's writers */

enum class Outcome {
#define FENCING_OUTCOME_ENUM(name, label) name,
  FENCING_OUTCOMES(FENCING_OUTCOME_ENUM)
#undef FENCING_OUTCOME_ENUM
  kCount
};

inline constexpr std::string_view kOutcomeNames[] = {
#define FENCING_OUTCOME_NAME(name, label) label,
    FENCING_OUTCOMES(FENCING_OUTCOME_NAME)
#undef FENCING_OUTCOME_NAME
};
static_assert(std::size(kOutcomeNames) == static_cast<size_t>(Outcome::kCount));

constexpr std::string_view OutcomeName(Outcome outcome) { return kOutcomeNames[static_cast<size_t>(outcome)]; }

}  // namespace fencing
