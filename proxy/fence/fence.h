#pragma once
// One fence: a durable max_token plus the writes admitted under it. This is the order guarantee:
//
//   token <  max (or < a pending raise)      -> stale, rejected at once (never waits)
//   token == max, no raise pending           -> admitted, no disk I/O
//   token >  max (and >= any pending raise)  -> becomes the pending raise; waits until every
//                                               admitted write has completed, is made durable,
//                                               then its waiters are admitted together
//   token <  floor                            -> stale (shared store only: the floor is the
//                                               highest raise given up in etcd; the tokens it
//                                               refused while pending stay refused)
//   max < token < a raise of ours not yet in   -> (shared store only) doubtful: waits until that
//         etcd, and not below anything etcd       raise is written (then stale) or given up (then
//         holds                                   considered again): a token answered 409 never
//                                               becomes the max, through any proxy
//   token >  a raise the shared store has     -> becomes the pending raise; the older raise's
//            under way (ours or acknowledged)     waiters, and new requests carrying it, wait for
//                                               the store's answer: admitted if it commits
//                                               (before the new raise drains), else stale
//   a raise that commits while this proxy's    -> (shared store only) its requests are held: they
//         membership has lapsed (gate closed)     may not go, nor be told the raise failed (it did
//                                               not). Once the gate opens: admitted if the token
//                                               is still the max with nothing pending, else stale.
//                                               Still closed at the session's bound: 503
//
// So at any moment every admitted write of a fence carries the same token, and the backend never
// sees a lower token after (or while) it sees a higher one. The class knows nothing of sockets,
// threads or files: persistence and wake-ups go through small interfaces, so tests can drive it
// with a virtual clock and seeded schedules.

#include "fence/fence_observer.h"

#include <algorithm>
#include <atomic>
#include <cstdint>
#include <functional>
#include <mutex>
#include <string>
#include <utility>
#include <vector>

namespace fencing {

enum class Admission {
  kAdmitted,  // forward now; call Release() when the exchange with the backend has ended
  kWaiting,   // a raise is pending; the waiter will be told the result
  kStale,     // reject with 409; max_token says what to report
  kFailed,    // the state store has failed: reject with 503, fenced writes are off
  kTooFar,    // a raise further above the max than the route allows: reject with 409
  kKeyLimit,  // (FenceKeys only, never a Fence) a new key beyond max_keys: reject with 503
  // The shared fence store cannot promise the order now: this proxy's membership may have
  // lapsed (fenced writes are off until it is renewed), or a raise could not be committed in
  // etcd. Reject with 503 and Retry-After; nothing is terminal.
  kUnavailable,
};

// What became of a raise the persister was asked to make durable.
enum class PersistResult {
  kDurable,     // written (and, shared, every other member has drained): the raise is the max
  kNotDurable,  // not this time (shared store: etcd unreachable, acks missing, superseded);
                // its waiters get kUnavailable, the fence goes on
  kFailed,      // the store can no longer be trusted (a failed fsync): its waiters get kFailed
};

// Whether fenced writes may be admitted now. With the shared fence store, only while this
// proxy's membership is sure to be alive: the store moves the deadline forward after every
// renewal, measured on CLOCK_BOOTTIME (it keeps counting while the machine sleeps or the VM is
// frozen), and a check after it refuses. Without one (the state file), always.
class MembershipGate {
 public:
  static int64_t NowNanos();  // CLOCK_BOOTTIME
  // A clock of the caller's instead of CLOCK_BOOTTIME (the simulation's virtual one).
  using Clock = int64_t (*)(const void* context);
  MembershipGate() = default;
  MembershipGate(Clock clock, const void* context) : clock_(clock), context_(context) {}
  int64_t Now() const { return clock_ ? clock_(context_) : NowNanos(); }

  bool Open() const { return Now() < deadline_ns_.load(std::memory_order_acquire); }
  void OpenUntil(int64_t deadline_ns) { deadline_ns_.store(deadline_ns, std::memory_order_release); }
  void Close() { deadline_ns_.store(0, std::memory_order_release); }
  // Nanoseconds left; <= 0 when closed.
  int64_t Left() const { return deadline_ns_.load(std::memory_order_acquire) - Now(); }

 private:
  const Clock clock_ = nullptr;
  const void* const context_ = nullptr;
  std::atomic<int64_t> deadline_ns_{0};
};

struct AdmitResult {
  Admission admission;
  // The effective max: the durable max, or the pending raise if there is one. A stale token lost
  // to it; from Check and AdmitWithoutWaiting, a token above it is a new raise (the one a
  // verified route confirms with its lock service first) and one equal to it is not.
  uint64_t max_token;
};

// A request waiting for a raise. Resolve is called exactly once, on any thread, with no fence
// lock held; kAdmitted means the request now holds an admission and must Release() it.
class RaiseWaiter {
 public:
  virtual void Resolve(Admission admission, uint64_t max_token) = 0;

 protected:
  ~RaiseWaiter() = default;
};

class Fence;

// Makes a raise durable; must later call fence.OnPersisted(token, ok) exactly once, on any thread
// (it may call it before Persist returns).
class FencePersister {
 public:
  virtual void Persist(Fence& fence, uint64_t token) = 0;

 protected:
  ~FencePersister() = default;
};

struct FenceSnapshot {
  uint64_t max_token = 0;
  uint64_t pending = 0;  // 0: no raise pending
  uint64_t inflight = 0;
  uint64_t waiting = 0;
  uint64_t floor = 0;  // 0: none above the max
};

class Fence {
 public:
  using Clock = std::function<double()>;  // seconds, monotonic; injectable for tests

  // state_failed is shared by every fence: one failed sync stops all fenced writes. observer
  // may be null (no reports); gate too (always open).
  Fence(std::string name, uint64_t max_token, FencePersister& persister,
        const std::atomic<bool>& state_failed, Clock clock, const FenceObserver* observer,
        const MembershipGate* gate = nullptr);

  const std::string& name() const { return name_; }

  // max_jump: refuse (kTooFar) a raise more than this above the current max; 0 = no limit.
  AdmitResult Admit(uint64_t token, RaiseWaiter& waiter, uint64_t max_jump = 0);
  // Admit for every case that needs no waiting (equal token, stale, failed, too far), with no
  // waiter to set up. kWaiting means it would wait and nothing has changed: call Admit.
  AdmitResult AdmitWithoutWaiting(uint64_t token, uint64_t max_jump = 0);
  // The refusals Admit would make now (kStale, kFailed, kTooFar), or kAdmitted if it would admit
  // or raise. Changes nothing and holds nothing: a request whose body is still to be read is
  // refused on its head this way, and admitted (Admit) only once its body is in.
  AdmitResult Check(uint64_t token, uint64_t max_jump = 0) const;
  void Release();                             // one admitted write has completed or was aborted
  void OnPersisted(uint64_t token, bool ok);  // from the persister: kDurable or kFailed
  void OnPersisted(uint64_t token, PersistResult result);

  // The shared fence store (several proxies, one fence): what the other members do. Each is a
  // no-op when it tells the fence nothing new.
  //
  //   RemotePending(T)    another member is raising to T: tokens below T are stale from now, as
  //                       for a raise of our own; once our admitted writes have drained, the
  //                       fence asks the persister for T (which acknowledges it), and requests
  //                       here that carry T wait for it like any raise's waiters
  //   RemoteCommitted(T)  T is the committed max (raised elsewhere): waiters carrying T go,
  //                       lower ones are stale; a higher pending raise stays pending
  //   RemoteWithdrawn(T)  the raise to T was given up: T is the floor (tokens below it stay
  //                       stale, T itself raises again); requests here carrying T raise it
  //                       themselves once drained, a lower raise here is stale
  //
  // A raise of ours that ends kNotDurable and was in etcd is withdrawn there: the store tells
  // the fence (RemoteWithdrawn), its token is the floor. One that never reached etcd refused
  // nothing (below).
  void RemotePending(uint64_t token);
  void RemoteCommitted(uint64_t token);
  void RemoteWithdrawn(uint64_t token);
  //   PendingWritten(T)   our raise to T is in etcd now (its pending written): tokens below it
  //                       can no longer commit anywhere, and are stale here from now
  void PendingWritten(uint64_t token);
  // A waiter that gives up (its deadline passed). True if it was still waiting and is now
  // removed; false if its Resolve is already under way, or (shared store) its raise is in the
  // store's hands, which answers within its own bound. With the shared store, the last waiter of
  // a raise of ours that gives up takes the raise with it before it reaches the store: a raise
  // answered 503 never becomes the max later.
  //
  // (Shared store) A waiter whose raise committed as the gate closed is held (the table above):
  // false while the gate stays closed, so the session asks again; with `final` (the session's
  // last word) it is removed and true. Once the gate has opened it is resolved (false).
  bool Abandon(RaiseWaiter& waiter, bool final = false);

  FenceSnapshot Snapshot() const;
  // Nothing admitted, pending, being written or waiting: the fence is its max and nothing more
  // (a keyed fence may fold it back into a slot, fence_keys.h).
  bool Idle() const;
  uint64_t max_token() const;

 private:
  struct Wakeup {
    RaiseWaiter* waiter;
    Admission admission;
    uint64_t max_token;
  };
  // Admit, or with no waiter only the decisions that need none.
  AdmitResult AdmitOrProbe(uint64_t token, RaiseWaiter* waiter, uint64_t max_jump);
  AdmitResult AdmitLocked(uint64_t token, RaiseWaiter* waiter, uint64_t max_jump, std::vector<Wakeup>& wakeups,
                          uint64_t& to_persist);
  // With mu_ held: the refusal (kFailed, kStale, kTooFar) a token gets now, else kAdmitted.
  AdmitResult RefusalLocked(uint64_t token, uint64_t max_jump) const;
  // (confirmed_: nothing below a raise etcd holds can commit, even one this fence no longer has
  // pending, e.g. another's raise that a raise of ours superseded here and then failed.)
  uint64_t EffectiveMaxLocked() const { return std::max({max_token_, pending_, floor_, confirmed_}); }
  // (Shared store) what etcd is known to hold: the max, a withdrawn raise (the floor), another's
  // pending raise or ours once written. Nothing below it can commit any more.
  uint64_t ConfirmedLocked() const { return std::max({max_token_, floor_, confirmed_}); }
  // (Shared store) token is refused only by a raise of ours not yet in etcd: whether it is stale
  // is known once that raise is written (stale) or given up (not): it waits until then.
  bool DoubtfulLocked(uint64_t token) const { return gate_ && token > max_token_ && token >= ConfirmedLocked(); }
  void SettleDoubtfulLocked(std::vector<Wakeup>& wakeups);  // those now below what etcd holds: stale
  void ReconsiderDoubtfulLocked();  // no raise pending: the highest doubtful token is the raise
  // (Shared store) A request whose raise to token committed: admitted, or held if the gate is
  // closed.
  void AdmitCommittedLocked(RaiseWaiter* waiter, uint64_t token, std::vector<Wakeup>& wakeups);
  void ReleaseHeldLocked(std::vector<Wakeup>& wakeups);  // the gate is open: held_ resolved
  bool AbandonLocked(RaiseWaiter& waiter, bool final, uint64_t& to_persist);
  // (Shared store) token is a raise the store has under way, superseded here by a higher one:
  // its requests wait for the store's answer (superseded_) instead of being stale at once.
  bool SupersededLocked(uint64_t token) const {
    return gate_ && persisting_ != 0 && token == persisting_ && pending_ > persisting_;
  }
  // Both called with mu_ held; return what to do once it is released.
  uint64_t TakeRaiseToPersist();
  void RejectWaiters(Admission admission, uint64_t max_token, std::vector<Wakeup>& wakeups);
  void Finish(uint64_t persist_token, std::vector<Wakeup>& wakeups);
  // The raise to token the store has answered: what its superseded waiters get.
  void ResolveSuperseded(uint64_t token, PersistResult result, std::vector<Wakeup>& wakeups);

  const std::string name_;
  FencePersister& persister_;
  const std::atomic<bool>& state_failed_;
  const Clock clock_;
  const FenceObserver* observer_;
  const MembershipGate* gate_;

  mutable std::mutex mu_;
  uint64_t max_token_;            // durable
  uint64_t inflight_ = 0;         // admitted writes (all carry max_token_)
  uint64_t pending_ = 0;          // highest token waiting to be raised to; 0 if none
  uint64_t floor_ = 0;            // tokens below it are stale (a given-up raise's token)
  bool pending_remote_ = false;   // pending_ is another member's raise (RemotePending)
  uint64_t persisting_ = 0;       // the token the persister is writing now; 0 if none
  double pending_since_ = 0;      // when the current drain began (raise_wait_seconds)
  std::vector<RaiseWaiter*> waiters_;  // requests carrying pending_
  // (Shared store) requests carrying persisting_, superseded here by a higher token while the
  // store had it: admitted if it commits, else stale.
  std::vector<RaiseWaiter*> superseded_;
  // (Shared store) requests whose token only a raise of ours not yet in etcd refuses, and their
  // tokens (DoubtfulLocked).
  std::vector<std::pair<RaiseWaiter*, uint64_t>> doubtful_;
  uint64_t confirmed_ = 0;  // the highest pending raise etcd is known to hold (ConfirmedLocked)
  // (Shared store) requests whose raise committed while the gate was closed, and their token
  // (AdmitCommittedLocked): resolved once it opens (ReleaseHeldLocked), or given up (Abandon).
  std::vector<std::pair<RaiseWaiter*, uint64_t>> held_;
};

}  // namespace fencing
