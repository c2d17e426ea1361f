#pragma once
// This proxy's membership of the prefix (concurrency/session.go's job in etcd's client), and
// its view of the other members (the roster).
//
//   register    lease := Grant(member_ttl); members/<id> (with the lease) and roster/<id>
//               (without) in one txn; then the view reads everything (Listener::OnRegistered)
//               and only then does the gate open (SetViewCurrent)
//   renew       KeepAliveOnce every third of the TTL; the gate stays open until the last good
//               renewal's send time + TTL − margin (margin: a fifth of the TTL, at least 0.5 s)
//   lost        a renewal says the lease is gone: the gate closes, OnLost, register again with
//               a new id (the old one is a former self: its writes were this process's own)
//   roster      a member whose key has gone is waited for until timeouts.request after we saw
//               it go (its admitted writes may still run); then any member takes it off the
//               roster (a txn that compares its member key absent)
//
// Whether a raise still waits for a member it found on the roster (WaitFor):
//   acknowledged, a former self of ours, off the roster, or gone for timeouts.request -> no
//   gone less long                                                                      -> until then
//   alive, or not yet seen by the view (it may lag the raise's revision)                -> yes

#include "etcd/kv.h"
#include "fence/fence.h"
#include "store/layout.h"
#include "store/reporter.h"
#include "store/scheduler.h"

#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <set>
#include <string>

namespace fencing::store {

class Membership {
 public:
  struct Options {
    int64_t ttl_seconds = 10;
    int64_t request_timeout_ns = 0;  // timeouts.request
  };
  class Listener {
   public:
    virtual void OnRegistered() = 0;  // a new id: read everything, then SetViewCurrent(true)
    virtual void OnLost() = 0;        // the lease has ended; the gate is closed
    // Each good renewal: etcd's revision then, and whether the renewals before it failed (the
    // watch may have missed events without noticing).
    virtual void OnRenewed(int64_t revision, bool after_failures) = 0;
    virtual void OnMembersChanged() = 0;  // a member gone, off the roster, or free now

   protected:
    ~Listener() = default;
  };

  Membership(const Layout& layout, etcd::Kv& kv, etcd::Lease& lease, Scheduler& scheduler, MembershipGate& gate,
             Options options, Listener& listener, Reporter& reporter);

  void Start();
  // Closes the gate; with left_cleanly (every admitted write has ended) takes this member off
  // the roster first; revokes the lease; then done. Nothing runs after it.
  void Stop(bool left_cleanly, std::function<void()> done);

  bool registered() const { return lease_ != 0; }
  int64_t lease() const { return lease_; }
  const std::string& id() const { return id_; }
  bool IsSelf(const std::string& member) const { return member == id_ || former_.contains(member); }
  bool renewal_failing() const { return renewal_failing_; }
  bool open() const { return lease_ != 0 && gate_.Open(); }  // the gate: fenced writes admitted
  // The view has everything up to the current revision (after a full read): the gate may open.
  void SetViewCurrent(bool current);

  // ---- the roster, as the view reads it
  void ApplyLoad(const std::set<std::string>& members, const std::set<std::string>& roster, int64_t revision);
  void OnMemberPut(const std::string& member);
  void OnMemberDeleted(const std::string& member);
  void OnRosterDeleted(const std::string& member);
  void NoteRevision(int64_t revision);  // the view has applied everything up to it

  // Until when a raise written at raise_revision waits for member m (not acknowledged):
  // 0: no more; INT64_MAX: until it acknowledges; else a time (Scheduler nanoseconds).
  int64_t WaitFor(const std::string& member, int64_t raise_revision) const;
  bool Alive(const std::string& member) const;
  int64_t alive() const;

 private:
  struct Member {
    bool alive = true;
    int64_t gone_at = 0;
    bool cleaning = false;
  };
  void Register();
  void OnGranted(const etcd::Status& status, int64_t id, int64_t ttl, int64_t sent);
  void ScheduleRenewal(int64_t after_ns);
  void Renew();
  void OnRenewal(const etcd::Status& status, int64_t ttl, int64_t revision, int64_t sent, int64_t lease);
  void OpenGate();
  void CleanRoster();
  void Gone(Member& m);
  void Counted();
  int64_t Period() const;

  const Layout& layout_;
  etcd::Kv& kv_;
  etcd::Lease& lease_api_;
  Scheduler& scheduler_;
  MembershipGate& gate_;
  const Options options_;
  Listener& listener_;
  Reporter& reporter_;

  int64_t lease_ = 0;
  int64_t ttl_ = 0;
  std::string id_;
  std::set<std::string> former_;  // our earlier ids (a lease that ended)
  int64_t renewed_sent_ = 0;      // when the last good renewal was sent
  bool renewal_failing_ = false;
  bool view_current_ = false;
  bool stopping_ = false;
  uint64_t epoch_ = 0;  // answers for an earlier registration are dropped
  std::unique_ptr<Scheduler::Timer> renewal_timer_, retry_timer_;
  std::map<std::string, Member> members_;  // on the roster, as last seen
  int64_t view_revision_ = 0;
};

}  // namespace fencing::store
