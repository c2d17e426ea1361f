// The view's and the membership's events on raises (the table in raise_protocol.h, rows about
// others' raises, withdrawals and commits); our own raises are OurRaises' (our_raises.cpp), the
// targets' state and what their fences are told RaiseTargets' (raise_targets.cpp).
#include "store/raise_protocol.h"

#include "fence/fence_registry.h"
#include "store/raise_protocol_detail.h"

#include <algorithm>
#include <climits>
#include <vector>

namespace fencing::store {

using namespace raise_detail;

RaiseProtocol::RaiseProtocol(const Layout& layout, etcd::Kv& kv, Scheduler& scheduler, Membership& membership,
                             Reporter& reporter, Options options)
    : scheduler_(scheduler),
      membership_(membership),
      reporter_(reporter),
      targets_(layout, kv, scheduler, membership, reporter),
      ours_(layout, kv, scheduler, membership, reporter, targets_, options) {}

// ------------------------------------------------------------------------------------ fences
void RaiseProtocol::Attach(FenceRegistry& registry) {
  targets_.Attach(registry);
  for (const std::string& name : targets_.Names()) {
    Target& t = targets_[name];
    if (t.pending && t.pending->value.withdrawn) targets_.ApplyFloor(name, t, t.pending->value.token);
    if (t.pending && targets_.Others(*t.pending)) {
      targets_.ApplyPending(name, t);
      MaybeTakeOver(name, t);
    } else if (t.pending && !t.pending->value.withdrawn) {
      targets_.WithdrawOurs(name, t, t.pending->revision, t.pending->value.token);  // ours (a former id), no raise
    }
    targets_.Prune(name);
  }
}

// ---------------------------------------------------------------------------- what others do
void RaiseProtocol::OnMax(const Layout::Key& key, uint64_t token) {
  if (!targets_.attached()) {
    if (key.key.empty()) {
      maxima[key.fence] = std::max(maxima[key.fence], token);
    } else {
      uint64_t& max = keys[key.fence][key.key];
      max = std::max(max, token);
    }
    return;
  }
  Target* found = targets_.Find(key.target);
  if (found && found->op && token >= found->op->token) {
    Target& t = *found;
    if (token == t.op->token && t.op->kind == Op::Kind::kRaise && t.op->committing) {
      reporter_.Observe("raise", Seconds(scheduler_.NowNanos() - t.op->started));
      reporter_.Add(Reporter::Count::kRaised);
    }
    if (token > t.op->token) targets_.registry().SharedCommitted(key.fence, key.key, token);
    targets_.Complete(t, token == t.op->token ? PersistResult::kDurable : PersistResult::kNotDurable);
    targets_.Prune(key.target);
    return;
  }
  targets_.registry().SharedCommitted(key.fence, key.key, token);
}

void RaiseProtocol::OnPending(const Layout::Key& key, const PendingValue& value, int64_t revision) {
  const std::string& name = key.target;
  Target& t = targets_[name];
  if (revision <= t.seen) return;  // our own txn's answer told us already
  t.seen = revision;
  t.pending = Pending{value, revision};
  if (!targets_.attached()) return;  // applied at Attach
  if (value.withdrawn) {
    if (t.op) {
      // Ours, or what we acknowledged, was given up (or ours taken over as ownerless).
      targets_.ApplyFloor(name, t, value.token);
      targets_.Complete(t, PersistResult::kNotDurable);
    } else {
      targets_.ApplyFloor(name, t, value.token);
    }
    t.fence.reset();
    targets_.Prune(name);
    return;
  }
  if (membership_.IsSelf(value.member)) {
    const bool under_way = t.op && t.op->kind == Op::Kind::kRaise && (t.op->revision == revision || t.op->revision == 0);
    if (!under_way) targets_.WithdrawOurs(name, t, revision, value.token);  // an answer we never had, or an earlier id's
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
    if (higher) targets_.ApplyPending(name, t);
    targets_.Complete(t, PersistResult::kNotDurable);
    if (!higher) targets_.ApplyPending(name, t);
    MaybeTakeOver(name, t);
    return;
  }
  targets_.ApplyPending(name, t);
  MaybeTakeOver(name, t);
}

void RaiseProtocol::OnPendingDeleted(const Layout::Key& key, int64_t revision) {
  Target* found = targets_.Find(key.target);
  if (!found) return;
  Target& t = *found;
  if (revision <= t.seen) return;
  t.seen = revision;
  std::optional<Pending> p = std::move(t.pending);
  t.pending.reset();
  if (!targets_.attached() || !p) {
    targets_.Prune(key.target);
    return;
  }
  // A commit puts the max before it deletes the pending (one txn, the max first), so a persist
  // still under way here is one whose pending went without a commit: withdrawn.
  if (t.op && (t.op->kind == Op::Kind::kAck ? t.op->pending_revision == p->revision
                                            : t.op->revision == p->revision && !t.op->committing)) {
    targets_.ApplyFloor(key.target, t, p->value.token);
    targets_.Complete(t, PersistResult::kNotDurable);
  } else if (!t.op && !p->value.withdrawn && targets_.Others(*p)) {
    targets_.ApplyFloor(key.target, t, p->value.token);
  }
  if (!t.op) t.fence.reset();
  targets_.Prune(key.target);
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
  Target* t = targets_.Find(key.target);
  if (!t || !t->op || t->op->kind != Op::Kind::kRaise) return;
  Op& op = *t->op;
  if (token != op.token) return;
  if (op.revision == 0) {
    op.early_acks[key.member] = pending_revision;  // the watch can be ahead of our txn's answer
    return;
  }
  if (pending_revision == op.revision) {
    op.acked.insert(key.member);
    ours_.CheckRaise(key.target, *t);
  }
}

// Another's pending whose raiser is gone for good: nobody else will commit or withdraw it.
void RaiseProtocol::MaybeTakeOver(const std::string& name, Target& t) {
  if (!t.pending || !targets_.Others(*t.pending) || t.withdrawing != 0 || !membership_.registered()) return;
  if (membership_.WaitFor(t.pending->value.member, t.pending->revision) == INT64_MAX) return;  // alive, or unknown
  if (membership_.Alive(t.pending->value.member)) return;
  targets_.Withdraw(name, t, t.pending->revision, t.pending->value.token);
}

// ------------------------------------------------------------------------------ membership
void RaiseProtocol::OnRegistered() {
  for (auto& [name, t] : targets_) {
    if (t.op && t.op->kind == Op::Kind::kAck) ours_.PutAck(name, t.op->id);
  }
}

void RaiseProtocol::OnLost() {
  for (const std::string& name : targets_.Names()) {
    Target& t = targets_[name];
    // Acknowledgements stay (their pendings still stand; written again under the new lease),
    // and so does a commit under way (it may have happened: its answer says).
    if (!t.op || t.op->kind != Op::Kind::kRaise || t.op->committing) continue;
    if (t.op->revision != 0) {  // (one never written refused nothing: no floor)
      targets_.WithdrawOurs(name, t, t.op->revision, t.op->token);
    }
    targets_.Complete(t, PersistResult::kNotDurable);
    targets_.Prune(name);
  }
}

void RaiseProtocol::OnMembersChanged() {
  if (!targets_.attached()) return;
  for (const std::string& name : targets_.Names()) {
    Target* t = targets_.Find(name);
    if (!t) continue;
    ours_.CheckRaise(name, *t);
    MaybeTakeOver(name, *t);
  }
}

void RaiseProtocol::Stop() { targets_.Stop(); }

}  // namespace fencing::store
