#pragma once
// Where a raise becomes durable. Two stores (proxy/store/): the state file, one proxy's own
// (StateFileStore), and etcd, shared by every proxy of a prefix (EtcdFenceStore), where durable
// also means that every other member has stopped admitting lower tokens and drained. The fences
// never learn which one they have.

#include "fence/fence.h"
#include "state/state_store.h"

#include <functional>

namespace fencing {

class RaiseStore {
 public:
  using Done = std::function<void(PersistResult)>;
  // record: a fence's max (key empty), a key's max, or a key forgotten. done exactly once, on
  // any thread, possibly before Persist returns. kFailed is terminal: every fenced write is
  // refused from then on.
  virtual void Persist(FenceRecord record, Done done) = 0;
  // The membership every admission needs (shared store), or null: always admitted.
  virtual const MembershipGate* gate() const { return nullptr; }
  virtual ~RaiseStore() = default;
};

}  // namespace fencing
