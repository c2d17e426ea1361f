#include "server/admission.h"

#include "lockservice/raise_verifier.h"
#include "server/raise_wait.h"

#include <memory>
#include <string>
#include <utility>

namespace fencing {

namespace {

using Clock = std::chrono::steady_clock;
using io::kTuple;

// How often a raise's request past its deadline asks its fence again (WaitForRaise).
constexpr auto kHeldRecheck = std::chrono::milliseconds(100);

}  // namespace

FenceRef AcquireFence(RequestPlan& plan, bool verified) {
  if (plan.action != RequestPlan::Action::kFence) return {};
  const RouteRuntime& route = *plan.route;
  if (!route.keys) return FenceRef(route.fence);
  KeyLookup found = route.keys->Acquire(plan.key, plan.token, verified || !route.verifier);
  if (!found.fence && !found.unknown) ApplyAdmission(plan, found.refusal, found.max_token);
  return std::move(found.fence);
}

io::Awaitable<bool> VerifyToken(RequestPlan& plan) {
  const RouteRuntime& route = *plan.route;
  const std::string lock = route.config->verify.LockFor(plan.key);
  Verification verification = co_await VerifyRaise(*route.verifier, lock, plan.token);
  ApplyVerification(plan, verification, route.verifier->name(), lock);
  co_return verification.verdict == Verdict::kVerified;
}

io::Awaitable<Admission> WaitForRaise(io::Executor executor, RaiseInbox& inbox, Fence& fence, uint64_t token,
                                      uint64_t max_jump, uint64_t* max_token, std::chrono::milliseconds deadline,
                                      std::chrono::milliseconds held_wait) {
  auto wait = std::make_shared<RaiseWait>(std::move(executor), inbox);
  AdmitResult result = fence.Admit(token, *wait, max_jump);
  *max_token = result.max_token;
  if (result.admission != Admission::kWaiting) co_return result.admission;

  // Resolved already if the raise was settled on this thread while Admit ran (a persister
  // that answers at once): a waiter resolved on its own thread is resolved in place.
  if (!wait->resolved()) wait->timer().expires_after(deadline);
  // Past the deadline, a request whose raise committed as this proxy's membership lapsed is
  // held until the membership is renewed (fence.h): asked again until held_wait has passed too.
  const auto last_word = Clock::now() + deadline + held_wait;
  while (!wait->resolved()) {
    co_await wait->timer().async_wait(kTuple);
    if (wait->resolved()) break;
    if (fence.Abandon(*wait, Clock::now() >= last_word)) {
      *max_token = result.max_token;
      co_return Admission::kWaiting;  // gave up: no admission is held
    }
    // The resolution is on its way to this thread, or the store or the gate has it.
    wait->timer().expires_after(kHeldRecheck);
  }
  *max_token = wait->max_token();
  co_return wait->admission();
}

io::Awaitable<Fence*> Admit(const AdmitContext& context, RequestPlan& plan, Fence& fence, bool verified) {
  const RouteConfig& route = *plan.route->config;
  // Most requests carry the current max: decided here, without a waiter or a coroutine.
  AdmitResult result = fence.AdmitWithoutWaiting(plan.token, route.max_token_jump);
  uint64_t max_token = result.max_token;
  Admission admission = result.admission;
  // A raise on a verified route is confirmed before it can become pending (so before it can
  // hold anyone up); joining a pending raise, which was confirmed, is not a raise.
  if (!verified && NeedsVerification(plan, result)) {
    co_await VerifyToken(plan);
  }
  if (plan.action != RequestPlan::Action::kFence) co_return nullptr;
  if (admission == Admission::kWaiting) {
    const ProxyConfig& config = context.config;
    if (context.waiting_until) context.waiting_until(Clock::now() + config.RaiseWait() + config.HeldWait());
    admission = co_await WaitForRaise(context.executor, context.inbox, fence, plan.token, route.max_token_jump,
                                      &max_token, config.RaiseWait(), config.HeldWait());
    // Given up waiting: with the shared store, that store could not promise the order in time.
    if (admission == Admission::kWaiting && config.fence_store) admission = Admission::kUnavailable;
  }
  ApplyAdmission(plan, admission, max_token);
  co_return admission == Admission::kAdmitted ? &fence : nullptr;
}

}  // namespace fencing
