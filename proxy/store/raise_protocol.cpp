// The view's and the membership's events on raises (the table in raise_protocol.h, rows about
// others' raises, withdrawals and commits); our own raises are in raise_protocol_ours.cpp.
#include "store/raise_protocol.h"

#include "fence/fence_registry.h"
#include "store/raise_protocol_detail.h"

#include <algorithm>

namespace fencing::store {

using namespace raise_detail;

RaiseProtocol::RaiseProtocol(const Layout& layout, etcd::Kv& kv, Scheduler& scheduler, Membership& membership,
                             Reporter& reporter, Options options)
    : layout_(layout), kv_(kv), scheduler_(scheduler), membership_(membership), reporter_(reporter), options_(options) {}

bool RaiseProtocol::Others(const Pending& p) const {
  return !p.value.withdrawn && !membership_.IsSelf(p.value.member);
}

RaiseProtocol::Op* RaiseProtocol::FindOp(const std::string& name, uint64_t id) {
  auto it = targets_.find(name);
  if (it == targets_.end() || !it->second.op || it->second.op->id != id) return nullptr;
  return it->second.op.get();
}

void RaiseProtocol::Prune(const std::string& name) {
  auto it = targets_.find(name);
  if (it == targets_.end()) return;
  Target& t = it->second;
  if (t.op || t.withdrawing != 0 || (t.pending && Others(*t.pending))) return;
  if (!registry_ && t.pending) return;  // before Attach: kept for it
  targets_.erase(it);
}

void RaiseProtocol::Complete(Target& t, PersistResult result) {
  if (!t.op) return;
  std::unique_ptr<Op> op = std::move(t.op);
  if (result != PersistResult::kDurable) reporter_.Add(Reporter::Count::kRaiseRefused);
  if (op->kind == Op::Kind::kAck) reporter_.Observe("ack", Seconds(scheduler_.NowNanos() - op->started));
  op->done(result);
}

// ------------------------------------------------------------------------------------ fences
void RaiseProtocol::Attach(FenceRegistry& registry) {
  registry_ = &registry;
  std::vector<std::string> names;
  for (const auto& [name, t] : targets_) names.push_back(name);
  for (const std::string& name : names) {
    Target& t = targets_[name];
    if (t.pending && t.pending->value.withdrawn) ApplyFloor(name, t, t.pending->value.token);
    if (t.pending && Others(*t.pending)) {
      ApplyPending(name, t);
      MaybeTakeOver(name, t);
    } else if (t.pending && !t.pending->value.withdrawn) {
      Withdraw(name, t, t.pending->revision, t.pending->value.token);  // ours (a former id), no raise
    }
    Prune(name);
  }
}

// Another's raise stands: tokens below it are stale here, and the fence acknowledges it once
// drained. With no Fence here that could admit under it, at once.
void RaiseProtocol::ApplyPending(const std::string& name, Target& t) {
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

void RaiseProtocol::ApplyFloor(const std::string& name, Target& t, uint64_t token) {
  Tell(name, t, token, &Fence::RemoteWithdrawn);
}

void RaiseProtocol::ApplyWritten(const std::string& name, Target& t, uint64_t token) {
  Tell(name, t, token, &Fence::PendingWritten);
}

void RaiseProtocol::Tell(const std::string& name, Target& t, uint64_t token, void (Fence::*what)(uint64_t)) {
  if (!registry_) return;
  if (t.fence) {
    (t.fence.get()->*what)(token);
  } else if (FenceRef fence = registry_->ForShared(FenceOf(name), KeyOf(name), token)) {
    (fence.get()->*what)(token);
  }
}

// ---------------------------------------------------------------------------- what others do
void RaiseProtocol::OnMax(const Layout::Key& key, uint64_t token) {
  if (!registry_) {
    if (key.key.empty()) {
      maxima[key.fence] = std::max(maxima[key.fence], token);
    } else {
      uint64_t& max = keys[key.fence][key.key];
      max = std::max(max, token);
    }
    return;
  }
  auto it = targets_.find(key.target);
  if (it != targets_.end() && it->second.op && token >= it->second.op->token) {
    Target& t = it->second;
    if (token == t.op->token && t.op->kind == Op::Kind::kRaise && t.op->committing) {
      reporter_.Observe("raise", Seconds(scheduler_.NowNanos() - t.op->started));
      reporter_.Add(Reporter::Count::kRaised);
    }
    if (token > t.op->token) registry_->SharedCommitted(key.fence, key.key, token);
    Complete(t, token == t.op->token ? PersistResult::kDurable : PersistResult::kNotDurable);
    Prune(key.target);
    return;
  }
  registry_->SharedCommitted(key.fence, key.key, token);
}

void RaiseProtocol::OnPending(const Layout::Key& key, const PendingValue& value, int64_t revision) {
  const std::string& name = key.target;
  Target& t = targets_[name];
  if (revision <= t.seen) return;  // our own txn's answer told us already
  t.seen = revision;
  t.pending = Pending{value, revision};
  if (!registry_) return;  // applied at Attach
  if (value.withdrawn) {
    if (t.op) {
      // Ours, or what we acknowledged, was given up (or ours taken over as ownerless).
      ApplyFloor(name, t, value.token);
      Complete(t, PersistResult::kNotDurable);
    } else {
      ApplyFloor(name, t, value.token);
    }
    t.fence.reset();
    Prune(name);
    return;
  }
  if (membership_.IsSelf(value.member)) {
    const bool under_way = t.op && t.op->kind == Op::Kind::kRaise && (t.op->revision == revision || t.op->revision == 0);
    if (!under_way) Withdraw(name, t, revision, value.token);  // an answer we never had, or an earlier id's
    return;
  }
  if (t.op) {
    Op& op = *t.op;
    if (op.kind == Op::Kind::kRaise && op.revision == 0 && value.token <= op.token) {
      return;  // our txn's answer decides: its compare fails, and it acknowledges or replaces this
    }
    if (op.kind == Op::Kind::kAck && op.pending_revision == revision) return;
    // Ours was replaced (only a higher raise may), or what we acknowledged was: the higher one
    // first, so that nothing below it is admitted in between; then ours ends.
    const bool higher = value.token > op.token;
    if (higher) ApplyPending(name, t);
    Complete(t, PersistResult::kNotDurable);
    if (!higher) ApplyPending(name, t);
    MaybeTakeOver(name, t);
    return;
  }
  ApplyPending(name, t);
  MaybeTakeOver(name, t);
}

void RaiseProtocol::OnPendingDeleted(const Layout::Key& key, int64_t revision) {
  auto it = targets_.find(key.target);
  if (it == targets_.end()) return;
  Target& t = it->second;
  if (revision <= t.seen) return;
  t.seen = revision;
  std::optional<Pending> p = std::move(t.pending);
  t.pending.reset();
  if (!registry_ || !p) {
    Prune(key.target);
    return;
  }
  // A commit puts the max before it deletes the pending (one txn, the max first), so a persist
  // still under way here is one whose pending went without a commit: withdrawn.
  if (t.op && (t.op->kind == Op::Kind::kAck ? t.op->pending_revision == p->revision
                                            : t.op->revision == p->revision && !t.op->committing)) {
    ApplyFloor(key.target, t, p->value.token);
    Complete(t, PersistResult::kNotDurable);
  } else if (!t.op && !p->value.withdrawn && Others(*p)) {
    ApplyFloor(key.target, t, p->value.token);
  }
  if (!t.op) t.fence.reset();
  Prune(key.target);
}

void RaiseProtocol::OnLoaded(const std::set<std::string>& pending_targets, int64_t revision) {
  std::vector<std::string> gone;
  for (const auto& [name, t] : targets_) {
    if (t.pending && !pending_targets.contains(name)) gone.push_back(name);
  }
  for (const std::string& name : gone) {
    Layout::Key key;
    key.kind = Layout::Key::Kind::kPending;
    key.target = name;
    OnPendingDeleted(key, revision);
  }
}

void RaiseProtocol::OnAck(const Layout::Key& key, uint64_t token, int64_t pending_revision) {
  auto it = targets_.find(key.target);
  if (it == targets_.end() || !it->second.op || it->second.op->kind != Op::Kind::kRaise) return;
  Op& op = *it->second.op;
  if (token != op.token) return;
  if (op.revision == 0) {
    op.early_acks[key.member] = pending_revision;  // the watch can be ahead of our txn's answer
    return;
  }
  if (pending_revision == op.revision) {
    op.acked.insert(key.member);
    CheckRaise(key.target, it->second);
  }
}

// Another's pending whose raiser is gone for good: nobody else will commit or withdraw it.
void RaiseProtocol::MaybeTakeOver(const std::string& name, Target& t) {
  if (!t.pending || !Others(*t.pending) || t.withdrawing != 0 || !membership_.registered()) return;
  if (membership_.WaitFor(t.pending->value.member, t.pending->revision) == INT64_MAX) return;  // alive, or unknown
  if (membership_.Alive(t.pending->value.member)) return;
  Withdraw(name, t, t.pending->revision, t.pending->value.token);
}

// ------------------------------------------------------------------------------ membership
void RaiseProtocol::OnRegistered() {
  for (auto& [name, t] : targets_) {
    if (t.op && t.op->kind == Op::Kind::kAck) PutAck(name, t.op->id);
  }
}

void RaiseProtocol::OnLost() {
  std::vector<std::string> names;
  for (const auto& [name, t] : targets_) names.push_back(name);
  for (const std::string& name : names) {
    Target& t = targets_[name];
    // Acknowledgements stay (their pendings still stand; written again under the new lease),
    // and so does a commit under way (it may have happened: its answer says).
    if (!t.op || t.op->kind != Op::Kind::kRaise || t.op->committing) continue;
    if (t.op->revision != 0) {  // (one never written refused nothing: no floor)
      Withdraw(name, t, t.op->revision, t.op->token);
      ApplyFloor(name, t, t.op->token);
    }
    Complete(t, PersistResult::kNotDurable);
    Prune(name);
  }
}

void RaiseProtocol::OnMembersChanged() {
  if (!registry_) return;
  std::vector<std::string> names;
  for (const auto& [name, t] : targets_) names.push_back(name);
  for (const std::string& name : names) {
    auto it = targets_.find(name);
    if (it == targets_.end()) continue;
    CheckRaise(name, it->second);
    MaybeTakeOver(name, it->second);
  }
}

void RaiseProtocol::Stop() {
  stopping_ = true;
  for (auto& [name, t] : targets_) Complete(t, PersistResult::kNotDurable);
  targets_.clear();
}

}  // namespace fencing::store
