#pragma once
// What fences report as they change, for the proxy's metrics. The fence module knows no metrics
// library: the caller injects these (metrics/metrics.h implements them with Prometheus objects,
// tests with plain counters).

#include <cstdint>
#include <string_view>

namespace fencing {

// One fence's reports. Called with the fence's lock held, so an implementation does a few
// atomic updates and nothing that could block or call back into the fence.
class FenceObserver {
 public:
  virtual void MaxToken(uint64_t max_token) const = 0;  // the durable max: at the start and after each raise
  virtual void Raised() const = 0;                       // one raise became durable
  virtual void RaiseWaited(double seconds) const = 0;    // how long a raise waited for older writes
  // A keyed fence's (fence_keys.h): keys it now holds more (or, negative, fewer), and keys
  // forgotten. Deltas, so that reports from several threads add up whatever their order.
  virtual void KeysChanged(int64_t /*delta*/) const {}
  virtual void KeysForgotten(uint64_t /*count*/) const {}

 protected:
  ~FenceObserver() = default;
};

// The registry's: one observer per fence (it must outlive the registry), and the first failed
// state write.
class FenceRegistryObserver {
 public:
  virtual const FenceObserver& ForFence(std::string_view fence) = 0;
  virtual void StateWriteFailed() = 0;

 protected:
  ~FenceRegistryObserver() = default;
};

}  // namespace fencing
