#pragma once
// The fence's answer for a planned request (server/request_plan.h), whatever protocol carried
// it: the HTTP/1.1 session asks on the head and again once the body is in; an HTTP/2 stream asks
// once its head has come. The steps, in the order a session takes them:
//
//   AcquireFence     the route's fence, or its key's (made if new; refused at max_keys)
//   VerifyToken      a raise on a verified route is confirmed by the lock service first
//   Admit            the fence admits the token now, or after the raise it waits for is
//                    durable (RaiseWait on the worker's inbox), or the plan becomes a refusal
//   AdmissionGuard   holds what Admit admitted, and the in-flight gauge, until the request ends
//
// Nothing here reads a socket: a caller passes its executor, its worker's raise inbox and, for a
// wait that may be long, a hook that tells its timeout sweep (the session's deadline).

#include "common/io.h"
#include "fence/fence.h"
#include "metrics/metrics.h"
#include "server/request_plan.h"
#include "server/runtime.h"

#include <chrono>
#include <cstdint>
#include <functional>

namespace fencing {

class RaiseInbox;

// The fence a fenced request asks: the route's, or (keyed route) its key's, made if new and
// pinned for the request. A key the fence cannot take (a new one at max_keys, or an unknown one
// below the floor) is decided here like any other refusal.
// On a verified route a key is made only once the token is confirmed (verified): an unconfirmed
// client must neither fill the key table (max_keys) nor set a new key's first max. Returns no
// fence, and leaves the plan as it was, for a new key it may not make yet.
FenceRef AcquireFence(RequestPlan& plan, bool verified);

// Asks the route's lock service whether plan.token is its lock holder's (a raise on a verified
// route). Not confirmed: plan becomes a reject (or an observed forward).
io::Awaitable<bool> VerifyToken(RequestPlan& plan);

// Admits a token that has to wait (Fence::AdmitWithoutWaiting said kWaiting), with a waiter that
// gives up after `deadline` (a request held for this proxy's membership: held_wait later).
io::Awaitable<Admission> WaitForRaise(io::Executor executor, RaiseInbox& inbox, Fence& fence, uint64_t token,
                                      uint64_t max_jump, uint64_t* max_token, std::chrono::milliseconds deadline,
                                      std::chrono::milliseconds held_wait);

struct AdmitContext {
  io::Executor executor;
  RaiseInbox& inbox;
  const ProxyConfig& config;
  // Called before a wait for a raise, with the time by which the wait ends on its own: a caller
  // with a timeout sweep moves its deadline there.
  std::function<void(std::chrono::steady_clock::time_point)> waiting_until;
};

// The fence's answer for a kFence plan on `fence` (AcquireFence's), the request's body in (or not
// to be waited for): returns the fence holding the admission (give it to an AdmissionGuard), or
// null with the plan turned into a refusal (or an observed forward, which holds nothing).
// `verified`: the lock service confirmed the token already.
io::Awaitable<Fence*> Admit(const AdmitContext& context, RequestPlan& plan, Fence& fence, bool verified);

// Releases a fence admission and the in-flight gauge on every way out of an exchange.
class AdmissionGuard {
 public:
  AdmissionGuard(Fence* fence, const RouteMetrics& metrics) : fence_(fence), metrics_(metrics) {
    metrics_.inflight->Increment();
  }
  ~AdmissionGuard() {
    metrics_.inflight->Decrement();
    if (fence_) fence_->Release();
  }
  AdmissionGuard(const AdmissionGuard&) = delete;
  AdmissionGuard& operator=(const AdmissionGuard&) = delete;

 private:
  Fence* fence_;
  const RouteMetrics& metrics_;
};

}  // namespace fencing
