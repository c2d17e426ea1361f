#pragma once
// What the shared fence store reports (metrics/metrics.h implements it): apart from the store, so
// that what reports it need not link the store.

#include <cstdint>
#include <string_view>

namespace fencing {

// Metrics: fence_store_members, fence_store_seconds{op}. Called on the store's thread.
class FenceStoreObserver {
 public:
  virtual void Members(int64_t members) const = 0;
  // op: raise (pending written to committed, as the raiser sees it), ack (acknowledged to
  // committed or withdrawn), txn (one etcd transaction), keepalive, load (a full read).
  virtual void Observe(std::string_view op, double seconds) const = 0;

 protected:
  ~FenceStoreObserver() = default;
};

}  // namespace fencing
