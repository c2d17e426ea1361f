#pragma once
// Raises on shared fences (concurrency/mutex.go's job in etcd's client: a key written under a
// compare, waiting for the others, then released). One target is a fence or a key of a keyed
// fence (layout.h). What happens to it:
//
//   state of the target          event                            what this member does
//   ---------------------------  -------------------------------  -----------------------------------
//   idle                         our fence asks to raise to T     pending := "T me" if max and pending
//                                                                 are as we last read them (else read
//                                                                 them and try again, at most 5 times);
//                                                                 the roster at that revision is who
//                                                                 we wait for
//   our raise pending            every member on that roster      max := T, pending deleted, if the
//                                acknowledged, or is ourself      pending is still ours (compare):
//                                before (a former id), or gone    committed. A commit is never given
//                                for timeouts.request, or off     up: retried until etcd answers it
//                                the roster
//   our raise pending            member_ttl + timeouts.request    withdrawn: pending := "T withdrawn"
//                                + 1 s since the fence asked      (compare), 503; T is the floor
//   our raise pending            a higher pending replaced ours   503 to ours (409: the fence stales
//                                                                 its waiters), acknowledge the higher
//   our raise pending            our lease ended                  withdrawn, unless committing
//   another's raise to T pending our fence has drained below T    ack/<me>/<target> := "T <revision>"
//                                and asks for T                   with our lease; kept (and written
//                                                                 again under a new lease) until T is
//                                                                 committed or withdrawn: never ended
//                                                                 while it stands
//   another's raise to T pending its raiser's member key gone     withdrawn by us (compare): nobody
//                                                                 else will ever commit or withdraw it
//   a pending of ours, no raise  (an answer lost, or our earlier  floor T at once (the others refuse
//   of ours owns it              id's)                            below it; a lower raise of ours
//                                                                 must not replace it), then
//                                                                 withdrawn (compare)
//   withdrawn at T               our fence                        floor T: tokens below T stay stale
//   our pending written at T     our fence                        tokens below T are stale (before,
//                                                                 they waited: they might still have
//                                                                 committed elsewhere)
//   committed at T               our fence                        max T
//
// Events reach a target in revision order (the view's load, then its watch); an event no newer
// than what our own txn answers told us already is dropped. Everything runs on the store's
// thread (Scheduler); the fences are told through the registry.
//
// The parts, each with one job:
//   RaiseProtocol (here)            the view's and the membership's events on a target (others'
//                                   raises, withdrawals, commits, an ownerless pending taken
//                                   over, our lease lost)
//   OurRaises (our_raises.h)        what our fence asks: a raise of ours (pending, waiting,
//                                   commit, giving up) or the acknowledgement of another's
//   RaiseTargets (raise_targets.h)  what we know of each target, what its fence is told, and
//                                   withdrawing a pending

#include "etcd/kv.h"
#include "fence/raise_store.h"
#include "state/state_store.h"
#include "store/layout.h"
#include "store/membership.h"
#include "store/our_raises.h"
#include "store/raise_targets.h"
#include "store/reporter.h"
#include "store/scheduler.h"

#include <cstdint>
#include <set>
#include <string>
#include <utility>

namespace fencing {
class FenceRegistry;
}

namespace fencing::store {

class RaiseProtocol {
 public:
  using Options = OurRaises::Options;  // member_ttl, timeouts.request
  RaiseProtocol(const Layout& layout, etcd::Kv& kv, Scheduler& scheduler, Membership& membership,
                Reporter& reporter, Options options);

  // Before Attach, what the view reads only builds the maxima the registry is made from.
  FenceMaxima maxima;
  FenceKeyMaxima keys;
  // From now on the fences hear every raise (those seen before first).
  void Attach(FenceRegistry& registry);

  // Our fence asks for T (a raise of ours, or the acknowledgement of another's). done once.
  void Persist(const std::string& target, uint64_t token, RaiseStore::Done done) {
    ours_.Persist(target, token, std::move(done));
  }

  // ---- what the view reads, per key in revision order
  void OnMax(const Layout::Key& key, uint64_t token);
  void OnPending(const Layout::Key& key, const PendingValue& value, int64_t revision);
  void OnPendingDeleted(const Layout::Key& key, int64_t revision);
  void OnAck(const Layout::Key& key, uint64_t token, int64_t pending_revision);
  // After a full read at revision: the targets that had a pending then (the others' pendings
  // we knew of are gone).
  void OnLoaded(const std::set<std::string>& pending_targets, int64_t revision);

  // ---- from the membership
  void OnRegistered();
  void OnLost();
  void OnMembersChanged();

  void Stop();  // every persist under way ends (kNotDurable); nothing runs after it

 private:
  using Target = RaiseTargets::Target;
  using Op = RaiseTargets::Op;
  using Pending = RaiseTargets::Pending;

  void MaybeTakeOver(const std::string& name, Target& t);

  Scheduler& scheduler_;
  Membership& membership_;
  Reporter& reporter_;
  RaiseTargets targets_;
  OurRaises ours_;
};

}  // namespace fencing::store
