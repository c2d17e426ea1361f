// The targets of the raise protocol: their state, what their fences are told (the table in
// raise_protocol.h: another's raise standing, rows "withdrawn at T" and "our pending written at
// T"), and withdrawing a pending ("T withdrawn" under a compare).
#include "store/raise_targets.h"

#include "fence/fence_registry.h"
#include "store/raise_protocol_detail.h"

namespace fencing::store {

using namespace raise_detail;

RaiseTargets::RaiseTargets(const Layout& layout, etcd::Kv& kv, Scheduler& scheduler, Membership& membership,
                           Reporter& reporter)
    : layout_(layout), kv_(kv), scheduler_(scheduler), membership_(membership), reporter_(reporter) {}

bool RaiseTargets::Others(const Pending& p) const {
  return !p.value.withdrawn && !membership_.IsSelf(p.value.member);
}

RaiseTargets::Target* RaiseTargets::Find(const std::string& name) {
  auto it = targets_.find(name);
  return it == targets_.end() ? nullptr : &it->second;
}

RaiseTargets::Op* RaiseTargets::FindOp(const std::string& name, uint64_t id) {
  auto it = targets_.find(name);
  if (it == targets_.end() || !it->second.op || it->second.op->id != id) return nullptr;
  return it->second.op.get();
}

std::vector<std::string> RaiseTargets::Names() const {
  std::vector<std::string> names;
  for (const auto& [name, t] : targets_) names.push_back(name);
  return names;
}

void RaiseTargets::Prune(const std::string& name) {
  auto it = targets_.find(name);
  if (it == targets_.end()) return;
  Target& t = it->second;
  if (t.op || t.withdrawing != 0 || (t.pending && Others(*t.pending))) return;
  if (!registry_ && t.pending) return;  // before Attach: kept for it
  targets_.erase(it);
}

void RaiseTargets::Complete(Target& t, PersistResult result) {
  if (!t.op) return;
  std::unique_ptr<Op> op = std::move(t.op);
  if (result != PersistResult::kDurable) reporter_.Add(Reporter::Count::kRaiseRefused);
  if (op->kind == Op::Kind::kAck) reporter_.Observe("ack", Seconds(scheduler_.NowNanos() - op->started));
  op->done(result);
}

void RaiseTargets::Stop() {
  stopping_ = true;
  for (auto& [name, t] : targets_) Complete(t, PersistResult::kNotDurable);
  targets_.clear();
}

// ------------------------------------------------------------------------------------ fences
// Another's raise stands: tokens below it are stale here, and the fence acknowledges it once
// drained. With no Fence here that could admit under it, at once.
void RaiseTargets::ApplyPending(const std::string& name, Target& t) {
  const Pending p = *t.pending;
  if (!t.fence) t.fence = registry_->ForShared(FenceOf(name), KeyOf(name), p.value.token);
  if (t.fence) {
    t.fence->RemotePending(p.value.token);
  } else if (membership_.registered()) {
    // Nothing here can admit under it: acknowledged at once, with no persist to keep.
    kv_.Put(layout_.Ack(membership_.id(), name), AckText(p.value.token, p.revision), membership_.lease(),
            [this](etcd::Status s, int64_t) {
              if (!s.ok() && !stopping_) reporter_.Error("cannot acknowledge a raise: " + s.error);
            });
  }
}

// Withdrawn at T: tokens below T stay stale.
void RaiseTargets::ApplyFloor(const std::string& name, Target& t, uint64_t token) {
  Tell(name, t, token, &Fence::RemoteWithdrawn);
}

// Our pending written at T: tokens below T are stale (before, they waited: they might still have
// committed elsewhere).
void RaiseTargets::ApplyWritten(const std::string& name, Target& t, uint64_t token) {
  Tell(name, t, token, &Fence::PendingWritten);
}

void RaiseTargets::Tell(const std::string& name, Target& t, uint64_t token, void (Fence::*what)(uint64_t)) {
  if (!registry_) return;
  if (t.fence) {
    (t.fence.get()->*what)(token);
  } else if (FenceRef fence = registry_->ForShared(FenceOf(name), KeyOf(name), token)) {
    (fence.get()->*what)(token);
  }
}

// ------------------------------------------------------------------------------- withdrawing
// A pending of ours in etcd that we give up, or that no raise of ours owns (an answer lost, an
// earlier ID's): withdrawn, and the floor here at once, as it is at the others, which refuse
// below it already. Without the floor, a lower raise of ours could replace it (its compare still
// matching) before the withdrawal lands.
void RaiseTargets::WithdrawOurs(const std::string& name, Target& t, int64_t revision, uint64_t token) {
  Withdraw(name, t, revision, token);
  ApplyFloor(name, t, token);
}

// pending := "T withdrawn", if it is still the one at revision: T is the floor from now on.
// Retried until etcd answers.
void RaiseTargets::Withdraw(const std::string& name, Target& t, int64_t revision, uint64_t token) {
  if (t.withdrawing == revision) return;
  t.withdrawing = revision;
  etcd::TxnRequest txn;
  txn.compare = {{layout_.Pending(name), revision}};
  txn.success = {etcd::Op::Put(layout_.Pending(name), PendingText({token, "", true}))};
  kv_.Txn(std::move(txn), [this, name, revision, token](etcd::Status s, etcd::TxnResponse) {
    if (stopping_) return;
    auto it = targets_.find(name);
    if (it == targets_.end() || it->second.withdrawing != revision) return;
    Target& t = it->second;
    if (s.ok()) {
      t.withdrawing = 0;
      Prune(name);
      return;
    }
    reporter_.Error("cannot withdraw the pending raise of " + name + ": " + s.error);
    // Still withdrawing (so Prune keeps the target), on a timer of its own: an acknowledgement's
    // or a commit's retry must not cancel this one (seed 408235: a pending left standing).
    t.withdraw_retry = scheduler_.After(500 * kMillisecond, [this, name, revision, token] {
      auto it = targets_.find(name);
      if (it == targets_.end() || it->second.withdrawing != revision) return;
      Target& t = it->second;
      t.withdrawing = 0;
      if (!t.pending || t.pending->revision == revision) {
        Withdraw(name, t, revision, token);
      } else {
        Prune(name);
      }
    });
  });
}

}  // namespace fencing::store
