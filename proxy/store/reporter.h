#pragma once
// What the shared fence store's parts report: errors (logged, shown in /fences), timings and
// counts (metrics). The facade (etcd_fence_store.cpp) implements it; the simulation records.

#include <cstdint>
#include <string>
#include <string_view>

namespace fencing::store {

class Reporter {
 public:
  virtual void Error(const std::string& what) = 0;
  // op: raise, ack, txn, keepalive, load (as FenceStoreObserver::Observe).
  virtual void Observe(std::string_view op, double seconds) = 0;
  virtual void Members(int64_t alive) = 0;
  virtual void MemberId(const std::string& id) = 0;  // empty while not registered
  enum class Count { kRaised, kAcked, kRaiseRefused };
  virtual void Add(Count what) = 0;

 protected:
  ~Reporter() = default;
};

}  // namespace fencing::store
