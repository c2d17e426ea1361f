#pragma once
// One proxy's part in a shared fence store: its membership, its view of the prefix and its
// raises, wired together, on one thread (the Scheduler's), against etcd's typed interfaces. The
// proxy runs it through EtcdFenceStore (a thread, the real etcd client); the simulation runs
// several of them against a model of etcd (tests/unit/store/).

#include "etcd/kv.h"
#include "fence/fence.h"
#include "fence/raise_store.h"
#include "store/layout.h"
#include "store/membership.h"
#include "store/prefix_view.h"
#include "store/raise_protocol.h"
#include "store/reporter.h"
#include "store/scheduler.h"

#include <functional>
#include <string>

namespace fencing {
class FenceRegistry;
}

namespace fencing::store {

class Member final : private Membership::Listener {
 public:
  struct Options {
    std::string prefix;  // without the trailing slash
    int64_t ttl_seconds = 10;
    int64_t request_timeout_ns = 0;
  };
  Member(Options options, etcd::Client& etcd, Scheduler& scheduler, MembershipGate& gate, Reporter& reporter);

  // Registers and reads the prefix; started runs once, after the first read was applied (the
  // maxima are ready then).
  void Start(std::function<void()> started);
  RaiseProtocol& protocol() { return protocol_; }  // maxima, keys (before Attach)
  const Membership& membership() const { return membership_; }
  // The fences hear every raise from now on (those pending first); the watch starts; the gate
  // opens.
  void Attach(FenceRegistry& registry);
  void Persist(const FenceRecord& record, RaiseStore::Done done);
  // Every persist under way ends; the membership is given up (see Membership::Stop).
  void Stop(bool left_cleanly, std::function<void()> done);

 private:
  void OnRegistered() override;
  void OnLost() override;
  void OnRenewed(int64_t revision, bool after_failures) override;
  void OnMembersChanged() override;

  Layout layout_;
  Membership membership_;
  RaiseProtocol protocol_;
  PrefixView view_;
  std::function<void()> started_;
  bool attached_ = false;
};

}  // namespace fencing::store
