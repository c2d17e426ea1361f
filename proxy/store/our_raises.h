#pragma once
// What our fences ask of the raise protocol (raise_protocol.h has the state table; rows "our
// fence asks", "our raise pending"): a raise of ours (the pending written under a compare, the
// members on the roster waited for, the commit, giving up at the deadline), or, when another's
// raise to the same token stands, our acknowledgement of it, kept until that raise is decided.
// The per-target state is RaiseTargets'; the view's and the membership's events on it are
// RaiseProtocol's, which calls in here when they concern a persist of ours.

#include "etcd/kv.h"
#include "fence/raise_store.h"
#include "store/layout.h"
#include "store/membership.h"
#include "store/raise_targets.h"
#include "store/reporter.h"
#include "store/scheduler.h"

#include <cstdint>
#include <string>

namespace fencing::store {

class OurRaises {
 public:
  struct Options {
    int64_t ttl_ns = 0;              // member_ttl
    int64_t request_timeout_ns = 0;  // timeouts.request
  };
  OurRaises(const Layout& layout, etcd::Kv& kv, Scheduler& scheduler, Membership& membership, Reporter& reporter,
            RaiseTargets& targets, Options options);

  // Our fence asks for T (a raise of ours, or the acknowledgement of another's). done once.
  void Persist(const std::string& name, uint64_t token, RaiseStore::Done done);

  // Writes the acknowledgement (op_id's, on target name) under our current lease; again after a
  // new registration, and after a failed put while that lease lasts.
  void PutAck(const std::string& name, uint64_t op_id);
  // Commits our raise on t once no member on its roster is waited for any more (Membership's
  // WaitFor); else checks again when the first wait ends.
  void CheckRaise(const std::string& name, RaiseTargets::Target& t);

 private:
  using Target = RaiseTargets::Target;
  using Op = RaiseTargets::Op;
  using Pending = RaiseTargets::Pending;

  void StartAck(const std::string& name, Target& t);
  void PendingTxn(const std::string& name, uint64_t op_id, int64_t max_revision, int64_t pending_revision);
  void OnPendingTxn(const std::string& name, uint64_t op_id, const etcd::Status& s, const etcd::TxnResponse& r);
  void Commit(const std::string& name, uint64_t op_id);
  void OnDeadline(const std::string& name, uint64_t op_id);

  const Layout& layout_;
  etcd::Kv& kv_;
  Scheduler& scheduler_;
  Membership& membership_;
  Reporter& reporter_;
  RaiseTargets& targets_;
  const Options options_;
  uint64_t next_op_ = 0;
};

}  // namespace fencing::store
