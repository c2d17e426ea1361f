// Our raises and acknowledgements (the table in raise_protocol.h, rows "our fence asks" and "our
// raise pending"): the pending written under a compare, the members waited for, the commit,
// giving up; and the acknowledgement of another's raise, kept until it is decided.
#include "store/our_raises.h"

#include "fence/fence_registry.h"
#include "store/raise_protocol_detail.h"

#include <algorithm>
#include <climits>
#include <optional>

namespace fencing::store {

using namespace raise_detail;

namespace {

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

OurRaises::OurRaises(const Layout& layout, etcd::Kv& kv, Scheduler& scheduler, Membership& membership,
                     Reporter& reporter, RaiseTargets& targets, Options options)
    : layout_(layout),
      kv_(kv),
      scheduler_(scheduler),
      membership_(membership),
      reporter_(reporter),
      targets_(targets),
      options_(options) {}

// ------------------------------------------------------------------------------ our persists
void OurRaises::Persist(const std::string& name, uint64_t token, RaiseStore::Done done) {
  if (targets_.stopping() || !targets_.attached()) {
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
  if (t.pending && targets_.Others(*t.pending) && t.pending->value.token >= token) {
    if (t.pending->value.token == token) {
      StartAck(name, t);
      return;
    }
    targets_.ApplyPending(name, t);
    targets_.Complete(t, PersistResult::kNotDurable);
    targets_.Prune(name);
    return;
  }
  op.kind = Op::Kind::kRaise;
  if (!membership_.open() || membership_.renewal_failing()) {
    // Not a member now, or etcd did not answer the last renewal: a raise would only time out.
    targets_.Complete(t, PersistResult::kNotDurable);
    targets_.Prune(name);
    return;
  }
  op.deadline = scheduler_.After(options_.ttl_ns + options_.request_timeout_ns + 1000 * kMillisecond,
                                 [this, name, id = op.id] { OnDeadline(name, id); });
  PendingTxn(name, op.id, 0, t.pending ? t.pending->revision : 0);
}

// Never ended while the pending stands: the raiser may commit on it, so the fence stays blocked.
void OurRaises::StartAck(const std::string& name, Target& t) {
  Op& op = *t.op;
  op.kind = Op::Kind::kAck;
  op.deadline.reset();
  op.pending_revision = t.pending->revision;
  PutAck(name, op.id);
}

void OurRaises::PutAck(const std::string& name, uint64_t op_id) {
  Op* op = targets_.FindOp(name, op_id);
  if (!op || !membership_.registered()) return;  // written again once registered
  const int64_t lease = membership_.lease();
  kv_.Put(layout_.Ack(membership_.id(), name), AckText(op->token, op->pending_revision), lease,
          [this, name, op_id, lease](etcd::Status s, int64_t) {
            if (targets_.stopping()) return;
            if (s.ok()) {
              reporter_.Add(Reporter::Count::kAcked);
              return;
            }
            reporter_.Error("cannot acknowledge a raise of " + name + ": " + s.error);
            Target* t = targets_.Find(name);
            if (!t || !targets_.FindOp(name, op_id) || lease != membership_.lease()) return;
            t->retry = scheduler_.After(200 * kMillisecond, [this, name, op_id] { PutAck(name, op_id); });
          });
}

// pending := "T me", if max and pending are as we believe; the roster read in the same txn.
void OurRaises::PendingTxn(const std::string& name, uint64_t op_id, int64_t max_revision, int64_t pending_revision) {
  Op* op = targets_.FindOp(name, op_id);
  etcd::TxnRequest txn;
  txn.compare = {{layout_.Max(name), max_revision}, {layout_.Pending(name), pending_revision}};
  // The roster, not only the members: one whose lease ended a moment ago may still have writes
  // in flight, and is waited for like any member whose key is gone.
  txn.success = {etcd::Op::Put(layout_.Pending(name), PendingText({op->token, membership_.id(), false})),
                 etcd::Op::Range(layout_.roster_dir(), etcd::PrefixRangeEnd(layout_.roster_dir()))};
  txn.failure = {etcd::Op::Range(layout_.Max(name)), etcd::Op::Range(layout_.Pending(name))};
  const int64_t sent = scheduler_.NowNanos();
  kv_.Txn(std::move(txn), [this, name, op_id, sent, token = op->token](etcd::Status s, etcd::TxnResponse r) {
    if (targets_.stopping()) return;
    if (s.ok()) reporter_.Observe("txn", Seconds(scheduler_.NowNanos() - sent));
    if (!targets_.FindOp(name, op_id)) {
      // The raise ended meanwhile (given up, superseded): a pending it wrote is withdrawn.
      if (s.ok() && r.succeeded) targets_.Withdraw(name, targets_[name], r.revision, token);
      return;
    }
    OnPendingTxn(name, op_id, s, r);
  });
}

void OurRaises::OnPendingTxn(const std::string& name, uint64_t op_id, const etcd::Status& s,
                             const etcd::TxnResponse& r) {
  Op* op = targets_.FindOp(name, op_id);
  if (!op) return;
  Target& t = targets_[name];
  if (!s.ok()) {
    // It may have been written all the same: a pending of ours that no raise owns is withdrawn
    // when the view shows it (RaiseProtocol::OnPending), and is the floor from then on.
    reporter_.Error("cannot write the pending raise of " + name + ": " + s.error);
    if (t.pending && !t.pending->value.withdrawn && membership_.IsSelf(t.pending->value.member)) {
      // Shown by the view already (it waited for this answer): it is in etcd, where the others
      // refuse below it. Withdrawn, and the floor here at once, before the raise ends: a lower
      // token of ours must not raise over it before the withdrawal lands.
      targets_.WithdrawOurs(name, t, t.pending->revision, t.pending->value.token);
    }
    // Not shown: no floor; it may not have been written, and then it refused nothing.
    targets_.Complete(t, PersistResult::kNotDurable);
    targets_.Prune(name);
    return;
  }
  if (!r.succeeded) {
    uint64_t max = 0;
    int64_t max_revision = 0, pending_revision = 0;
    std::optional<PendingValue> pending;
    if (!ReadCurrent(r, &max, &max_revision, &pending, &pending_revision) || ++op->attempts > kMaxAttempts) {
      reporter_.Error("cannot write the pending raise of " + name + ": the keys kept changing or were unreadable");
      targets_.Complete(t, PersistResult::kNotDurable);
      targets_.Prune(name);
      return;
    }
    if (max >= op->token) {
      if (max > op->token) targets_.registry().SharedCommitted(FenceOf(name), KeyOf(name), max);
      targets_.Complete(t, max == op->token ? PersistResult::kDurable : PersistResult::kNotDurable);
      targets_.Prune(name);
      return;
    }
    if (pending && pending_revision > t.seen) {
      t.seen = pending_revision;
      t.pending = Pending{*pending, pending_revision};
    }
    if (pending && pending->withdrawn && pending->token > op->token) {
      targets_.ApplyFloor(name, t, pending->token);  // below a given-up raise: stale
      targets_.Complete(t, PersistResult::kNotDurable);
      targets_.Prune(name);
      return;
    }
    if (pending && !pending->withdrawn && membership_.IsSelf(pending->member) && pending->token > op->token) {
      // A higher pending of ours that no raise owns (an answer lost): withdrawn, and it is in
      // etcd, so ours below it is stale.
      targets_.WithdrawOurs(name, t, pending_revision, pending->token);
      targets_.Complete(t, PersistResult::kNotDurable);
      targets_.Prune(name);
      return;
    }
    if (pending && !pending->withdrawn && !membership_.IsSelf(pending->member) && pending->token >= op->token) {
      if (pending->token == op->token) {
        StartAck(name, t);
      } else {
        targets_.ApplyPending(name, t);
        targets_.Complete(t, PersistResult::kNotDurable);
        targets_.Prune(name);
      }
      return;
    }
    // Lower, given up at or below ours, or a leftover of ours: replaced.
    PendingTxn(name, op_id, max_revision, pending ? pending_revision : 0);
    return;
  }
  if (r.responses.size() != 2) {
    reporter_.Error("unreadable member list in the pending raise's answer");
    targets_.WithdrawOurs(name, t, r.revision, op->token);
    targets_.Complete(t, PersistResult::kNotDurable);
    targets_.Prune(name);
    return;
  }
  op->revision = r.revision;
  if (r.revision > t.seen) {
    t.seen = r.revision;
    t.pending = Pending{{op->token, membership_.id(), false}, r.revision};
  }
  targets_.ApplyWritten(name, t, op->token);
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

void OurRaises::CheckRaise(const std::string& name, Target& t) {
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
      if (targets_.FindOp(name, id)) CheckRaise(name, targets_[name]);
    });
  }
}

// max := T and the pending deleted, if the pending is still ours.
void OurRaises::Commit(const std::string& name, uint64_t op_id) {
  Op* op = targets_.FindOp(name, op_id);
  if (!op) return;
  op->committing = true;
  op->deadline.reset();  // a commit is never given up
  etcd::TxnRequest txn;
  txn.compare = {{layout_.Pending(name), op->revision}};
  txn.success = {etcd::Op::Put(layout_.Max(name), TokenText(op->token)), etcd::Op::Delete(layout_.Pending(name))};
  txn.failure = {etcd::Op::Range(layout_.Max(name)), etcd::Op::Range(layout_.Pending(name))};
  kv_.Txn(std::move(txn), [this, name, op_id](etcd::Status s, etcd::TxnResponse r) {
    if (targets_.stopping()) return;
    Op* op = targets_.FindOp(name, op_id);
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
        if (targets_.Others(*t.pending) && pending->token > op->token) targets_.ApplyPending(name, t);
        if (pending->withdrawn) targets_.ApplyFloor(name, t, pending->token);
      }
    }
    if (max == op->token) {
      reporter_.Observe("raise", Seconds(scheduler_.NowNanos() - op->started));
      reporter_.Add(Reporter::Count::kRaised);
      if (t.pending && t.pending->revision == op->revision) t.pending.reset();
      targets_.Complete(t, PersistResult::kDurable);
    } else {
      if (max > op->token) targets_.registry().SharedCommitted(FenceOf(name), KeyOf(name), max);
      targets_.Complete(t, PersistResult::kNotDurable);
    }
    targets_.Prune(name);
  });
}

void OurRaises::OnDeadline(const std::string& name, uint64_t op_id) {
  Op* op = targets_.FindOp(name, op_id);
  if (!op || op->committing || op->kind != Op::Kind::kRaise) return;
  Target& t = targets_[name];
  reporter_.Error("a raise of " + name + " was given up: not every member acknowledged it within member_ttl + "
                  "timeouts.request");
  if (op->revision != 0) {  // (one never written refused nothing: no floor)
    targets_.WithdrawOurs(name, t, op->revision, op->token);
  }
  targets_.Complete(t, PersistResult::kNotDurable);
  targets_.Prune(name);
}

}  // namespace fencing::store
