#include "store/raise_protocol.h"

#include "fence/fence_registry.h"

#include <algorithm>
#include <climits>

namespace fencing::store {

namespace {

constexpr int64_t kMillisecond = 1'000'000;
constexpr int kMaxAttempts = 5;

double Seconds(int64_t ns) { return double(ns) / 1e9; }

// A target's fence and key ("orders", "objects/k17").
std::string FenceOf(const std::string& target) { return target.substr(0, target.find('/')); }
std::string KeyOf(const std::string& target) {
  const size_t slash = target.find('/');
  return slash == std::string::npos ? std::string() : target.substr(slash + 1);
}

// The max and the pending of a txn's two ranges (a failed compare's answer). False: unreadable.
bool ReadCurrent(const etcd::TxnResponse& r, uint64_t* max, int64_t* max_revision, std::optional<PendingValue>* pending,
                 int64_t* pending_revision) {
  *max = 0;
  *max_revision = 0;
  *pending_revision = 0;
  pending->reset();
  if (r.responses.size() != 2) return false;
  if (!r.responses[0].kvs.empty()) {
    if (!ParseToken(r.responses[0].kvs[0].value, max)) return false;
    *max_revision = r.responses[0].kvs[0].mod_revision;
  }
  if (!r.responses[1].kvs.empty()) {
    PendingValue p;
    if (!ParsePending(r.responses[1].kvs[0].value, &p)) return false;
    *pending = p;
    *pending_revision = r.responses[1].kvs[0].mod_revision;
  }
  return true;
}

}  // namespace

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
  if (!registry_) return;
  if (t.fence) {
    t.fence->RemoteWithdrawn(token);
    return;
  }
  if (FenceRef fence = registry_->ForShared(FenceOf(name), KeyOf(name), token)) fence->RemoteWithdrawn(token);
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
    if (t.op->revision != 0) Withdraw(name, t, t.op->revision, t.op->token);
    ApplyFloor(name, t, t.op->token);
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

// ------------------------------------------------------------------------------ our persists
void RaiseProtocol::Persist(const std::string& name, uint64_t token, RaiseStore::Done done) {
  if (stopping_ || !registry_) {
    done(PersistResult::kNotDurable);
    return;
  }
  Target& t = targets_[name];
  if (t.op) {  // one persist per Fence at a time: never
    done(PersistResult::kNotDurable);
    return;
  }
  t.op = std::make_unique<Op>();
  Op& op = *t.op;
  op.token = token;
  op.done = std::move(done);
  op.id = ++next_op_;
  op.started = scheduler_.NowNanos();
  if (t.pending && Others(*t.pending) && t.pending->value.token >= token) {
    if (t.pending->value.token == token) {
      StartAck(name, t);
      return;
    }
    ApplyPending(name, t);
    Complete(t, PersistResult::kNotDurable);
    Prune(name);
    return;
  }
  op.kind = Op::Kind::kRaise;
  if (!membership_.open() || membership_.renewal_failing()) {
    // Not a member now, or etcd did not answer the last renewal: a raise would only time out.
    Complete(t, PersistResult::kNotDurable);
    Prune(name);
    return;
  }
  op.deadline = scheduler_.After(options_.ttl_ns + options_.request_timeout_ns + 1000 * kMillisecond,
                                 [this, name, id = op.id] { OnDeadline(name, id); });
  PendingTxn(name, op.id, 0, t.pending ? t.pending->revision : 0);
}

// Never ended while the pending stands: the raiser may commit on it, so the fence stays blocked.
void RaiseProtocol::StartAck(const std::string& name, Target& t) {
  Op& op = *t.op;
  op.kind = Op::Kind::kAck;
  op.deadline.reset();
  op.pending_revision = t.pending->revision;
  PutAck(name, op.id);
}

void RaiseProtocol::PutAck(const std::string& name, uint64_t op_id) {
  Op* op = FindOp(name, op_id);
  if (!op || !membership_.registered()) return;  // written again once registered
  const int64_t lease = membership_.lease();
  kv_.Put(layout_.Ack(membership_.id(), name), AckText(op->token, op->pending_revision), lease,
          [this, name, op_id, lease](etcd::Status s, int64_t) {
            if (stopping_) return;
            if (s.ok()) {
              reporter_.Add(Reporter::Count::kAcked);
              return;
            }
            reporter_.Error("cannot acknowledge a raise of " + name + ": " + s.error);
            auto it = targets_.find(name);
            if (it == targets_.end() || !FindOp(name, op_id) || lease != membership_.lease()) return;
            it->second.retry = scheduler_.After(200 * kMillisecond, [this, name, op_id] { PutAck(name, op_id); });
          });
}

// pending := "T me", if max and pending are as we believe; the roster read in the same txn.
void RaiseProtocol::PendingTxn(const std::string& name, uint64_t op_id, int64_t max_revision,
                               int64_t pending_revision) {
  Op* op = FindOp(name, op_id);
  etcd::TxnRequest txn;
  txn.compare = {{layout_.Max(name), max_revision}, {layout_.Pending(name), pending_revision}};
  // The roster, not only the members: one whose lease ended a moment ago may still have writes
  // in flight, and is waited for like any member whose key is gone.
  txn.success = {etcd::Op::Put(layout_.Pending(name), PendingText({op->token, membership_.id(), false})),
                 etcd::Op::Range(layout_.roster_dir(), etcd::PrefixRangeEnd(layout_.roster_dir()))};
  txn.failure = {etcd::Op::Range(layout_.Max(name)), etcd::Op::Range(layout_.Pending(name))};
  const int64_t sent = scheduler_.NowNanos();
  kv_.Txn(std::move(txn), [this, name, op_id, sent, token = op->token](etcd::Status s, etcd::TxnResponse r) {
    if (stopping_) return;
    if (s.ok()) reporter_.Observe("txn", Seconds(scheduler_.NowNanos() - sent));
    if (!FindOp(name, op_id)) {
      // The raise ended meanwhile (given up, superseded): a pending it wrote is withdrawn.
      if (s.ok() && r.succeeded) Withdraw(name, targets_[name], r.revision, token);
      return;
    }
    OnPendingTxn(name, op_id, s, r);
  });
}

void RaiseProtocol::OnPendingTxn(const std::string& name, uint64_t op_id, const etcd::Status& s,
                                 const etcd::TxnResponse& r) {
  Op* op = FindOp(name, op_id);
  if (!op) return;
  Target& t = targets_[name];
  if (!s.ok()) {
    // It may have been written all the same: a pending of ours that no raise owns is withdrawn
    // when the view shows it.
    reporter_.Error("cannot write the pending raise of " + name + ": " + s.error);
    ApplyFloor(name, t, op->token);
    Complete(t, PersistResult::kNotDurable);
    // Shown by the view already (it waited for this answer): withdrawn now.
    if (t.pending && !t.pending->value.withdrawn && membership_.IsSelf(t.pending->value.member)) {
      Withdraw(name, t, t.pending->revision, t.pending->value.token);
    }
    Prune(name);
    return;
  }
  if (!r.succeeded) {
    uint64_t max = 0;
    int64_t max_revision = 0, pending_revision = 0;
    std::optional<PendingValue> pending;
    if (!ReadCurrent(r, &max, &max_revision, &pending, &pending_revision) || ++op->attempts > kMaxAttempts) {
      reporter_.Error("cannot write the pending raise of " + name + ": the keys kept changing or were unreadable");
      Complete(t, PersistResult::kNotDurable);
      Prune(name);
      return;
    }
    if (max >= op->token) {
      if (max > op->token) registry_->SharedCommitted(FenceOf(name), KeyOf(name), max);
      Complete(t, max == op->token ? PersistResult::kDurable : PersistResult::kNotDurable);
      Prune(name);
      return;
    }
    if (pending && pending_revision > t.seen) {
      t.seen = pending_revision;
      t.pending = Pending{*pending, pending_revision};
    }
    if (pending && pending->withdrawn && pending->token > op->token) {
      ApplyFloor(name, t, pending->token);  // below a given-up raise: stale
      Complete(t, PersistResult::kNotDurable);
      Prune(name);
      return;
    }
    if (pending && !pending->withdrawn && !membership_.IsSelf(pending->member) && pending->token >= op->token) {
      if (pending->token == op->token) {
        StartAck(name, t);
      } else {
        ApplyPending(name, t);
        Complete(t, PersistResult::kNotDurable);
        Prune(name);
      }
      return;
    }
    // Lower, given up at or below ours, or a leftover of ours: replaced.
    PendingTxn(name, op_id, max_revision, pending ? pending_revision : 0);
    return;
  }
  if (r.responses.size() != 2) {
    reporter_.Error("unreadable member list in the pending raise's answer");
    Withdraw(name, t, r.revision, op->token);
    ApplyFloor(name, t, op->token);
    Complete(t, PersistResult::kNotDurable);
    Prune(name);
    return;
  }
  op->revision = r.revision;
  if (r.revision > t.seen) {
    t.seen = r.revision;
    t.pending = Pending{{op->token, membership_.id(), false}, r.revision};
  }
  for (const auto& [member, revision] : op->early_acks) {
    if (revision == op->revision) op->acked.insert(member);
  }
  op->early_acks.clear();
  for (const etcd::KeyValue& kv : r.responses[1].kvs) {
    std::string member = kv.key.substr(layout_.roster_dir().size());
    if (!membership_.IsSelf(member)) op->awaiting.push_back(std::move(member));
  }
  CheckRaise(name, t);
}

void RaiseProtocol::CheckRaise(const std::string& name, Target& t) {
  if (!t.op || t.op->kind != Op::Kind::kRaise || t.op->revision == 0 || t.op->committing) return;
  Op& op = *t.op;
  int64_t recheck = INT64_MAX;
  bool ready = true;
  for (const std::string& m : op.awaiting) {
    if (op.acked.contains(m)) continue;
    const int64_t until = membership_.WaitFor(m, op.revision);
    if (until == 0) continue;
    ready = false;
    recheck = std::min(recheck, until);
  }
  if (ready) {
    Commit(name, op.id);
    return;
  }
  if (recheck != INT64_MAX) {
    op.recheck = scheduler_.At(recheck, [this, name, id = op.id] {
      if (FindOp(name, id)) CheckRaise(name, targets_[name]);
    });
  }
}

// max := T and the pending deleted, if the pending is still ours.
void RaiseProtocol::Commit(const std::string& name, uint64_t op_id) {
  Op* op = FindOp(name, op_id);
  if (!op) return;
  op->committing = true;
  op->deadline.reset();  // a commit is never given up
  etcd::TxnRequest txn;
  txn.compare = {{layout_.Pending(name), op->revision}};
  txn.success = {etcd::Op::Put(layout_.Max(name), TokenText(op->token)), etcd::Op::Delete(layout_.Pending(name))};
  txn.failure = {etcd::Op::Range(layout_.Max(name)), etcd::Op::Range(layout_.Pending(name))};
  kv_.Txn(std::move(txn), [this, name, op_id](etcd::Status s, etcd::TxnResponse r) {
    if (stopping_) return;
    Op* op = FindOp(name, op_id);
    if (!op) return;
    Target& t = targets_[name];
    if (!s.ok()) {
      // Perhaps committed: the compare makes a second try safe, and its answer says. The others
      // may already admit T, so the fence stays blocked until it knows.
      reporter_.Error("cannot commit the raise of " + name + ": " + s.error);
      t.retry = scheduler_.After(100 * kMillisecond, [this, name, op_id] { Commit(name, op_id); });
      return;
    }
    uint64_t max = op->token;
    if (!r.succeeded) {
      int64_t max_revision = 0, pending_revision = 0;
      std::optional<PendingValue> pending;
      if (!ReadCurrent(r, &max, &max_revision, &pending, &pending_revision)) max = 0;
      if (pending && pending_revision > t.seen) {
        t.seen = pending_revision;
        t.pending = Pending{*pending, pending_revision};
        if (Others(*t.pending) && pending->token > op->token) ApplyPending(name, t);
        if (pending->withdrawn) ApplyFloor(name, t, pending->token);
      }
    }
    if (max == op->token) {
      reporter_.Observe("raise", Seconds(scheduler_.NowNanos() - op->started));
      reporter_.Add(Reporter::Count::kRaised);
      if (t.pending && t.pending->revision == op->revision) t.pending.reset();
      Complete(t, PersistResult::kDurable);
    } else {
      if (max > op->token) registry_->SharedCommitted(FenceOf(name), KeyOf(name), max);
      Complete(t, PersistResult::kNotDurable);
    }
    Prune(name);
  });
}

void RaiseProtocol::OnDeadline(const std::string& name, uint64_t op_id) {
  Op* op = FindOp(name, op_id);
  if (!op || op->committing || op->kind != Op::Kind::kRaise) return;
  Target& t = targets_[name];
  reporter_.Error("a raise of " + name + " was given up: not every member acknowledged it within member_ttl + "
                  "timeouts.request");
  if (op->revision != 0) Withdraw(name, t, op->revision, op->token);
  ApplyFloor(name, t, op->token);
  Complete(t, PersistResult::kNotDurable);
  Prune(name);
}

// pending := "T withdrawn", if it is still the one at revision: T is the floor from now on.
// Retried until etcd answers.
void RaiseProtocol::Withdraw(const std::string& name, Target& t, int64_t revision, uint64_t token) {
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
    t.withdrawing = 0;
    if (s.ok()) {
      Prune(name);
      return;
    }
    reporter_.Error("cannot withdraw the pending raise of " + name + ": " + s.error);
    t.retry = scheduler_.After(500 * kMillisecond, [this, name, revision, token] {
      auto it = targets_.find(name);
      if (it != targets_.end() && (!it->second.pending || it->second.pending->revision == revision)) {
        Withdraw(name, it->second, revision, token);
      }
    });
  });
}

}  // namespace fencing::store
