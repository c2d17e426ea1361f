#include "fence/fence.h"

#include <algorithm>
#include <ctime>

namespace fencing {

int64_t MembershipGate::NowNanos() {
  timespec ts{};
  clock_gettime(CLOCK_BOOTTIME, &ts);
  return int64_t(ts.tv_sec) * 1000000000 + ts.tv_nsec;
}

Fence::Fence(std::string name, uint64_t max_token, FencePersister& persister,
             const std::atomic<bool>& state_failed, Clock clock, const FenceObserver* observer,
             const MembershipGate* gate)
    : name_(std::move(name)),
      persister_(persister),
      state_failed_(state_failed),
      clock_(std::move(clock)),
      observer_(observer),
      gate_(gate),
      max_token_(max_token) {
  if (observer_) observer_->MaxToken(max_token_);
}

AdmitResult Fence::Admit(uint64_t token, RaiseWaiter& waiter, uint64_t max_jump) {
  return AdmitOrProbe(token, &waiter, max_jump);
}

AdmitResult Fence::AdmitWithoutWaiting(uint64_t token, uint64_t max_jump) {
  return AdmitOrProbe(token, nullptr, max_jump);
}

AdmitResult Fence::AdmitOrProbe(uint64_t token, RaiseWaiter* waiter, uint64_t max_jump) {
  std::vector<Wakeup> wakeups;
  uint64_t to_persist = 0;
  AdmitResult result;
  {
    std::lock_guard lock(mu_);
    if (!held_.empty()) ReleaseHeldLocked(wakeups);
    result = AdmitLocked(token, waiter, max_jump, wakeups, to_persist);
  }
  for (const Wakeup& w : wakeups) w.waiter->Resolve(w.admission, w.max_token);
  if (to_persist) persister_.Persist(*this, to_persist);
  return result;
}

AdmitResult Fence::AdmitLocked(uint64_t token, RaiseWaiter* waiter, uint64_t max_jump, std::vector<Wakeup>& wakeups,
                               uint64_t& to_persist) {
  uint64_t effective_max = EffectiveMaxLocked();
  if (AdmitResult refusal = RefusalLocked(token, max_jump); refusal.admission != Admission::kAdmitted) {
    return refusal;
  }
  if (token == max_token_ && pending_ == 0) {
    ++inflight_;
    return {Admission::kAdmitted, max_token_};
  }
  if (waiter == nullptr) return {Admission::kWaiting, effective_max};  // a probe: nothing changed
  if (SupersededLocked(token)) {
    superseded_.push_back(waiter);
    return {Admission::kWaiting, effective_max};
  }
  if (token < effective_max) {  // (shared) only a raise of ours not yet in etcd refuses it
    doubtful_.push_back({waiter, token});
    return {Admission::kWaiting, effective_max};
  }
  if (token > pending_) {
    // A newer holder (or the holder of a withdrawn raise, at the floor, trying again): whoever
    // waited for an older raise has lost the lock too. Unless that raise is in the shared
    // store's hands already (ours, or another member's we acknowledged): it may commit all the
    // same, so its waiters learn its fate first (a token answered 409 never becomes the max).
    // With the shared store, until the new raise is in etcd the older one may still commit
    // elsewhere: its waiters are doubtful until then.
    if (gate_ && persisting_ != 0 && persisting_ == pending_) {
      superseded_.insert(superseded_.end(), waiters_.begin(), waiters_.end());
      waiters_.clear();
    } else if (gate_ && pending_ != 0 && DoubtfulLocked(pending_)) {
      for (RaiseWaiter* w : waiters_) doubtful_.push_back({w, pending_});
      waiters_.clear();
    }
    RejectWaiters(Admission::kStale, token, wakeups);
    if (pending_ == 0) pending_since_ = clock_();
    pending_ = token;
    pending_remote_ = false;
  }
  waiters_.push_back(waiter);
  to_persist = TakeRaiseToPersist();
  return {Admission::kWaiting, pending_};
}

AdmitResult Fence::Check(uint64_t token, uint64_t max_jump) const {
  std::lock_guard lock(mu_);
  return RefusalLocked(token, max_jump);
}

AdmitResult Fence::RefusalLocked(uint64_t token, uint64_t max_jump) const {
  uint64_t effective_max = EffectiveMaxLocked();
  if (state_failed_.load(std::memory_order_acquire)) return {Admission::kFailed, effective_max};
  if (gate_ && !gate_->Open()) return {Admission::kUnavailable, effective_max};
  if (token < effective_max && !SupersededLocked(token) && !DoubtfulLocked(token)) {
    return {Admission::kStale, effective_max};
  }
  if (token > effective_max && max_jump != 0 && effective_max != 0 && token - effective_max > max_jump) {
    return {Admission::kTooFar, effective_max};
  }
  return {Admission::kAdmitted, effective_max};
}

void Fence::Release() {
  uint64_t to_persist = 0;
  {
    std::lock_guard lock(mu_);
    --inflight_;
    to_persist = TakeRaiseToPersist();
  }
  if (to_persist) persister_.Persist(*this, to_persist);
}

uint64_t Fence::TakeRaiseToPersist() {
  ReconsiderDoubtfulLocked();  // (no raise pending: the highest doubtful token is the raise)
  // A raise is written only when nothing older is still in flight: that is the drain barrier.
  if (pending_ == 0 || persisting_ != 0 || inflight_ != 0) return 0;
  persisting_ = pending_;
  if (observer_) observer_->RaiseWaited(clock_() - pending_since_);
  return persisting_;
}

void Fence::RejectWaiters(Admission admission, uint64_t max_token, std::vector<Wakeup>& wakeups) {
  for (RaiseWaiter* w : waiters_) wakeups.push_back({w, admission, max_token});
  waiters_.clear();
}

void Fence::OnPersisted(uint64_t token, bool ok) {
  OnPersisted(token, ok ? PersistResult::kDurable : PersistResult::kFailed);
}

void Fence::OnPersisted(uint64_t token, PersistResult result) {
  std::vector<Wakeup> wakeups;
  uint64_t to_persist = 0;
  {
    std::lock_guard lock(mu_);
    persisting_ = 0;
    ResolveSuperseded(token, result, wakeups);
    if (result == PersistResult::kFailed) {
      RejectWaiters(Admission::kFailed, std::max(max_token_, pending_), wakeups);
      for (const auto& [w, t] : doubtful_) wakeups.push_back({w, Admission::kFailed, std::max(max_token_, pending_)});
      doubtful_.clear();
      pending_ = 0;
    } else if (result == PersistResult::kNotDurable) {
      // Only this raise is lost. A higher one that arrived meanwhile (another member's, or a
      // newer holder here) stays pending and is asked for next. (If it was in etcd, the store
      // has made it the floor already: RemoteWithdrawn. If not, it refused nothing: the tokens
      // below it waited as doubtful, and are considered again now.)
      if (pending_ == token) {
        RejectWaiters(Admission::kUnavailable, pending_, wakeups);
        pending_ = 0;
      }
      to_persist = TakeRaiseToPersist();
    } else {
      Finish(token, wakeups);
      to_persist = TakeRaiseToPersist();
    }
  }
  for (const Wakeup& w : wakeups) w.waiter->Resolve(w.admission, w.max_token);
  if (to_persist) persister_.Persist(*this, to_persist);
}

void Fence::ResolveSuperseded(uint64_t token, PersistResult result, std::vector<Wakeup>& wakeups) {
  if (superseded_.empty()) return;
  Admission admission = Admission::kStale;
  if (result == PersistResult::kFailed) {
    admission = Admission::kFailed;
  } else if (result == PersistResult::kDurable && std::max(max_token_, token) == token) {
    // Committed: they go, before the higher raise (which waits for them to drain); held if the
    // gate has closed meanwhile.
    for (RaiseWaiter* w : superseded_) AdmitCommittedLocked(w, token, wakeups);
    superseded_.clear();
    return;
  }
  const uint64_t max = admission == Admission::kStale ? EffectiveMaxLocked() : std::max(max_token_, token);
  for (RaiseWaiter* w : superseded_) {
    // (Given up, but only a raise of ours not yet in etcd is above it: doubtful, not stale.)
    if (admission == Admission::kStale && DoubtfulLocked(token)) {
      doubtful_.push_back({w, token});
    } else {
      wakeups.push_back({w, admission, max});
    }
  }
  superseded_.clear();
}

void Fence::Finish(uint64_t persisted, std::vector<Wakeup>& wakeups) {
  max_token_ = std::max(max_token_, persisted);
  SettleDoubtfulLocked(wakeups);
  if (observer_) {
    observer_->MaxToken(max_token_);
    observer_->Raised();
  }
  if (pending_ == persisted) {
    // Everyone carrying the new max goes at once; they are all equal tokens. Unless this proxy's
    // membership lapsed meanwhile: then they are held until it is renewed.
    pending_ = 0;
    for (RaiseWaiter* w : waiters_) AdmitCommittedLocked(w, max_token_, wakeups);
    waiters_.clear();
  } else if (pending_ > persisted) {
    // A higher token arrived while this one was being written; its drain starts now.
    pending_since_ = clock_();
  } else if (pending_ != 0) {
    // (RemoteCommitted) another member's higher raise was committed: ours lost.
    RejectWaiters(Admission::kStale, max_token_, wakeups);
    pending_ = 0;
  }
}

void Fence::RemotePending(uint64_t token) {
  std::vector<Wakeup> wakeups;
  uint64_t to_persist = 0;
  {
    std::lock_guard lock(mu_);
    confirmed_ = std::max(confirmed_, token);  // in etcd: nothing below it commits any more
    SettleDoubtfulLocked(wakeups);
    // (At the floor too: a withdrawn raise tried again must be acknowledged here.)
    if (token > max_token_ && token > pending_) {
      // As a higher token arriving here: whoever waited for a lower raise has lost the lock.
      RejectWaiters(Admission::kStale, token, wakeups);
      if (pending_ == 0) pending_since_ = clock_();
      pending_ = token;
      pending_remote_ = true;
      to_persist = TakeRaiseToPersist();
    }
  }
  for (const Wakeup& w : wakeups) w.waiter->Resolve(w.admission, w.max_token);
  if (to_persist) persister_.Persist(*this, to_persist);
}

void Fence::PendingWritten(uint64_t token) {
  std::vector<Wakeup> wakeups;
  {
    std::lock_guard lock(mu_);
    confirmed_ = std::max(confirmed_, token);
    SettleDoubtfulLocked(wakeups);
  }
  for (const Wakeup& w : wakeups) w.waiter->Resolve(w.admission, w.max_token);
}

void Fence::RemoteCommitted(uint64_t token) {
  std::vector<Wakeup> wakeups;
  uint64_t to_persist = 0;
  {
    std::lock_guard lock(mu_);
    if (token > max_token_) {
      // A persist of ours under way (an acknowledgement, or a raise that lost) ends through
      // OnPersisted; the max is the store's word already.
      if (pending_ != 0 && pending_ <= token) {
        Finish(token, wakeups);
      } else {
        max_token_ = token;
        if (observer_) observer_->MaxToken(max_token_);
        SettleDoubtfulLocked(wakeups);
      }
    }
    to_persist = TakeRaiseToPersist();
  }
  for (const Wakeup& w : wakeups) w.waiter->Resolve(w.admission, w.max_token);
  if (to_persist) persister_.Persist(*this, to_persist);
}

void Fence::RemoteWithdrawn(uint64_t token) {
  std::vector<Wakeup> wakeups;
  uint64_t to_persist = 0;
  {
    std::lock_guard lock(mu_);
    floor_ = std::max(floor_, token);
    if (pending_ != 0 && pending_ < token) {
      // A raise here below the withdrawn one: its holder has lost the lock. (A persist of it
      // under way ends through OnPersisted, which then finds nothing pending.)
      RejectWaiters(Admission::kStale, token, wakeups);
      pending_ = 0;
    } else if (pending_ == token && persisting_ == 0 && waiters_.empty()) {
      pending_ = 0;
    }
    SettleDoubtfulLocked(wakeups);
    to_persist = TakeRaiseToPersist();
  }
  for (const Wakeup& w : wakeups) w.waiter->Resolve(w.admission, w.max_token);
  if (to_persist) persister_.Persist(*this, to_persist);
}

void Fence::SettleDoubtfulLocked(std::vector<Wakeup>& wakeups) {
  if (doubtful_.empty()) return;
  const uint64_t confirmed = ConfirmedLocked();
  std::erase_if(doubtful_, [&](const std::pair<RaiseWaiter*, uint64_t>& d) {
    if (d.second > max_token_ && d.second >= confirmed) return false;
    if (d.second == max_token_ && pending_ == max_token_) {
      waiters_.push_back(d.first);  // committed elsewhere as we commit it here: they go together
    } else if (d.second == max_token_ && pending_ == 0) {
      // Committed through another proxy, and nothing above it here: an equal token now.
      AdmitCommittedLocked(d.first, max_token_, wakeups);
    } else {
      wakeups.push_back({d.first, Admission::kStale, EffectiveMaxLocked()});
    }
    return true;
  });
}

void Fence::ReconsiderDoubtfulLocked() {
  if (doubtful_.empty()) return;
  if (pending_ != 0) {  // those carrying the raise pending now wait for it
    std::erase_if(doubtful_, [&](const std::pair<RaiseWaiter*, uint64_t>& d) {
      if (d.second != pending_) return false;
      waiters_.push_back(d.first);
      return true;
    });
    return;
  }
  // Nothing refuses the highest of them now: it is the raise, and the others stay doubtful
  // below it until it is in etcd.
  uint64_t highest = 0;
  for (const auto& [w, token] : doubtful_) highest = std::max(highest, token);
  pending_ = highest;
  pending_remote_ = false;
  pending_since_ = clock_();
  std::erase_if(doubtful_, [&](const std::pair<RaiseWaiter*, uint64_t>& d) {
    if (d.second != highest) return false;
    waiters_.push_back(d.first);
    return true;
  });
}

bool Fence::Abandon(RaiseWaiter& waiter, bool final) {
  std::vector<Wakeup> wakeups;
  uint64_t to_persist = 0;
  bool removed = false;
  {
    std::lock_guard lock(mu_);
    if (!held_.empty()) ReleaseHeldLocked(wakeups);
    removed = AbandonLocked(waiter, final, to_persist);
  }
  for (const Wakeup& w : wakeups) w.waiter->Resolve(w.admission, w.max_token);
  if (to_persist) persister_.Persist(*this, to_persist);
  return removed;
}

bool Fence::AbandonLocked(RaiseWaiter& waiter, bool final, uint64_t& to_persist) {
  auto is = [&](const auto& e) { return e.first == &waiter; };
  if (auto d = std::find_if(doubtful_.begin(), doubtful_.end(), is); d != doubtful_.end()) {
    doubtful_.erase(d);
    return true;
  }
  if (auto h = std::find_if(held_.begin(), held_.end(), is); h != held_.end()) {
    if (!final) return false;  // the gate is still closed: asked again
    held_.erase(h);
    return true;
  }
  auto it = std::find(waiters_.begin(), waiters_.end(), &waiter);
  if (it == waiters_.end()) return false;  // (or superseded: the store answers, in its bound)
  if (gate_ && persisting_ != 0 && persisting_ == pending_) return false;  // the store answers, in its bound
  waiters_.erase(it);
  if (gate_ && waiters_.empty() && pending_ != 0 && !pending_remote_) {
    // Nobody here waits for this raise any more: it is given up before it reaches the store,
    // so that a raise answered 503 never becomes the max later. It refused nothing (the tokens
    // below it are doubtful, not stale): they are considered again.
    pending_ = 0;
    to_persist = TakeRaiseToPersist();
  }
  return true;
}

void Fence::AdmitCommittedLocked(RaiseWaiter* waiter, uint64_t token, std::vector<Wakeup>& wakeups) {
  if (gate_ && !gate_->Open()) {
    held_.push_back({waiter, token});
    return;
  }
  ++inflight_;
  wakeups.push_back({waiter, Admission::kAdmitted, token});
}

void Fence::ReleaseHeldLocked(std::vector<Wakeup>& wakeups) {
  if (!gate_->Open()) return;
  // Their token committed and nothing etcd holds is above it: they go as equal tokens do. A raise
  // of ours above it that is not in etcd yet (nor being written) waits for them to drain, as a
  // superseded raise's requests go before the higher raise. Anything else: they lost the lock.
  const bool failed = state_failed_.load(std::memory_order_acquire);
  for (const auto& [w, token] : held_) {
    if (failed) {
      wakeups.push_back({w, Admission::kFailed, EffectiveMaxLocked()});
    } else if (token == max_token_ && ConfirmedLocked() == token && persisting_ == 0 &&
               (pending_ == 0 || !pending_remote_)) {
      ++inflight_;
      wakeups.push_back({w, Admission::kAdmitted, max_token_});
    } else {
      wakeups.push_back({w, Admission::kStale, EffectiveMaxLocked()});
    }
  }
  held_.clear();
}

FenceSnapshot Fence::Snapshot() const {
  std::lock_guard lock(mu_);
  return FenceSnapshot{max_token_, pending_, inflight_,
                       waiters_.size() + superseded_.size() + doubtful_.size() + held_.size(),
                       floor_ > max_token_ ? floor_ : 0};
}

bool Fence::Idle() const {
  std::lock_guard lock(mu_);
  return inflight_ == 0 && pending_ == 0 && persisting_ == 0 && waiters_.empty() && superseded_.empty() &&
         doubtful_.empty() && held_.empty() && floor_ <= max_token_;
}

uint64_t Fence::max_token() const {
  std::lock_guard lock(mu_);
  return max_token_;
}

}  // namespace fencing
