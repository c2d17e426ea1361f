#pragma once
// What this member knows of each target of the raise protocol (raise_protocol.h has the state
// table), and the steps on a target that the protocol's two deciding parts share: RaiseProtocol
// (the view's and the membership's events) and OurRaises (our raises and acknowledgements).
//   - the state: the pending as last read, the persist of ours under way (Op), a withdrawal under
//     way; a target is forgotten (Prune) once nothing is left to do on it
//   - its fence, told through the registry: another's raise stands (ApplyPending; with no fence
//     here that could admit under it, acknowledged at once), a floor (ApplyFloor), our pending
//     written (ApplyWritten)
//   - a persist ended (Complete); a pending withdrawn (Withdraw: "T withdrawn" under a compare,
//     retried until etcd answers)

#include "etcd/kv.h"
#include "fence/fence_keys.h"
#include "fence/raise_store.h"
#include "store/layout.h"
#include "store/membership.h"
#include "store/reporter.h"
#include "store/scheduler.h"

#include <cstdint>
#include <map>
#include <memory>
#include <optional>
#include <set>
#include <string>
#include <vector>

namespace fencing {
class FenceRegistry;
}

namespace fencing::store {

class RaiseTargets {
 public:
  struct Pending {
    PendingValue value;
    int64_t revision = 0;
  };
  // A persist under way: a raise of ours, or the acknowledgement of another's (our_raises.h).
  struct Op {
    enum class Kind { kRaise, kAck } kind = Kind::kRaise;
    uint64_t token = 0;
    RaiseStore::Done done;
    uint64_t id = 0;
    int64_t started = 0;
    std::unique_ptr<Scheduler::Timer> deadline, recheck;
    int attempts = 0;
    // kRaise
    int64_t revision = 0;  // of our pending, once written
    std::vector<std::string> awaiting;
    std::set<std::string> acked;
    std::map<std::string, int64_t> early_acks;  // before our txn's answer: member -> revision
    bool committing = false;
    // kAck
    int64_t pending_revision = 0;
  };
  struct Target {
    std::optional<Pending> pending;  // as last known (a withdrawn one too)
    int64_t seen = 0;                // the newest revision of the pending key we know
    FenceRef fence;                  // pinned while another's raise stands or a persist runs
    std::unique_ptr<Op> op;
    int64_t withdrawing = 0;  // the pending revision we are turning into "withdrawn"
    std::unique_ptr<Scheduler::Timer> retry;           // an acknowledgement's or a commit's
    std::unique_ptr<Scheduler::Timer> withdraw_retry;  // the withdrawal's, until etcd answers it
  };
  using Map = std::map<std::string, Target>;

  RaiseTargets(const Layout& layout, etcd::Kv& kv, Scheduler& scheduler, Membership& membership, Reporter& reporter);

  // The fences: none before Attach (what the view reads then only builds the maxima).
  void Attach(FenceRegistry& registry) { registry_ = &registry; }
  bool attached() const { return registry_ != nullptr; }
  FenceRegistry& registry() const { return *registry_; }
  bool stopping() const { return stopping_; }
  void Stop();  // every persist under way ends (kNotDurable); every target is forgotten

  // ---- the targets, by name ("orders", "objects/k17")
  Target& operator[](const std::string& name) { return targets_[name]; }
  Target* Find(const std::string& name);
  Op* FindOp(const std::string& name, uint64_t id);  // the persist with that id, if it still runs
  std::vector<std::string> Names() const;
  Map::iterator begin() { return targets_.begin(); }
  Map::iterator end() { return targets_.end(); }
  Map::const_iterator begin() const { return targets_.begin(); }
  Map::const_iterator end() const { return targets_.end(); }
  // Forgets the target once nothing is left to do on it (no persist, no withdrawal, no raise of
  // another standing).
  void Prune(const std::string& name);

  bool Others(const Pending& p) const;  // a raise of another member (not withdrawn, not ours)
  // The persist under way on t (if any) ends with result.
  void Complete(Target& t, PersistResult result);

  // ---- what the target's fence is told
  void ApplyPending(const std::string& name, Target& t);  // another's raise stands
  void ApplyFloor(const std::string& name, Target& t, uint64_t token);
  void ApplyWritten(const std::string& name, Target& t, uint64_t token);  // our pending is in etcd

  // pending := "T withdrawn" if it is still the one at revision (retried until etcd answers).
  // A pending of ours at revision, given up or owned by no raise of ours: withdrawn, and the floor here.
  void WithdrawOurs(const std::string& name, Target& t, int64_t revision, uint64_t token);
  void Withdraw(const std::string& name, Target& t, int64_t revision, uint64_t token);

 private:
  // The target's fence (pinned, or made if need be) hears what(token).
  void Tell(const std::string& name, Target& t, uint64_t token, void (Fence::*what)(uint64_t));

  const Layout& layout_;
  etcd::Kv& kv_;
  Scheduler& scheduler_;
  Membership& membership_;
  Reporter& reporter_;
  FenceRegistry* registry_ = nullptr;
  bool stopping_ = false;
  Map targets_;
};

}  // namespace fencing::store
