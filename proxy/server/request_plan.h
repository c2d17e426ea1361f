#pragma once
// The decision on a request head, as pure functions: everything the proxy decides before it
// reads a body byte, except the fence's own answer (which can wait on a raise). The session
// executes a plan; tests and fuzzers call these directly.

#include "metrics/metrics.h"
#include "fence/fence.h"
#include "http/problem.h"
#include "server/runtime.h"
#include "tls/server_identity.h"

#include "http/request_head.h"

#include <cstdint>
#include <string_view>

namespace fencing {

struct RequestPlan {
  enum class Action {
    kReject,   // answer with `problem`, count `outcome`
    kForward,  // forward without asking a fence, count `outcome`
    kFence,    // ask route->fence to admit `token`, then ApplyAdmission
  };
  Action action = Action::kReject;
  Outcome outcome = Outcome::kRejectedRequest;
  Problem problem;                   // kReject
  bool close = false;                // kReject: the connection cannot be trusted for another request
                                     // (every 400, and CONNECT)
  const RouteRuntime* route = nullptr;  // null: no route matched
  uint64_t token = 0;                // kFence
  std::string_view key;              // kFence on a keyed route: the fence key (a view into the head)
  std::string_view origin_target;    // path and query to send upstream (views into the head)
  std::string_view host;             // Host to send upstream instead of the client's (an absolute-form
                                     // target's authority, RFC 9112 section 3.2.2); empty: the client's
  std::string_view drop_header;      // header not to forward as the client wrote it (the token)
  bool rewrite_token = false;        // kFence: drop_header goes on as `token` in plain decimal

  const RouteMetrics& metrics(const Runtime& runtime) const {
    return route ? *route->metrics : runtime.unmatched_metrics();
  }
};

// Framing, method, target, route, writer, token: in that order, the first refusal wins.
// identity: who the client is (its verified certificate's; kNoIdentity on a plain listener or
// without a certificate). A route with writers refuses a fenced method from anyone else before
// its token is read.
RequestPlan PlanRequest(const RequestHead& head, const Runtime& runtime, const ClientIdentity& identity = kNoIdentity);

// Turns the fence's answer into a reject or a forward (observe mode forwards what enforce
// would refuse). Admission::kWaiting here means the raise did not finish in time.
void ApplyAdmission(RequestPlan& plan, Admission admission, uint64_t max_token);

// Whether the fence's answer (Check or AdmitWithoutWaiting) makes plan.token a raise its route
// must have confirmed first: a verified route, and a token above the effective max.
bool NeedsVerification(const RequestPlan& plan, const AdmitResult& result);

// A verified route's raise: not verified -> 409 token-not-verified; the service did not answer
// -> 503 lock-service-unavailable with Retry-After (observe mode forwards both, the max kept).
// Verified: the plan is unchanged and the raise goes to the fence.
void ApplyVerification(RequestPlan& plan, const Verification& verification, std::string_view service,
                       std::string_view lock);

}  // namespace fencing
