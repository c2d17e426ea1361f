#pragma once
// Every fence the proxy knows: those in the state file (kept even when no route names them any
// more) and those the routes name. Raises are made durable through the StateWriter.

#include "fence/fence.h"
#include "fence/fence_observer.h"
#include "state/state_writer.h"

#include <atomic>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <string_view>
#include <vector>

namespace fencing {

class FenceRegistry : private FencePersister {
 public:
  // maxima: as replayed from the state file. writer: where raises go. observer: the metrics.
  FenceRegistry(const FenceMaxima& maxima, StateWriter& writer, FenceRegistryObserver& observer);

  // The fence named `name`, created at max_token 0 if new. Pointers stay valid for the
  // registry's lifetime (fences are never removed: a fence's max must outlive its routes).
  Fence& GetOrCreate(std::string_view name);

  // False once a state write or sync has failed: fenced writes are refused, /readyz fails.
  bool healthy() const { return !state_failed_.load(std::memory_order_acquire); }
  // The state file can no longer be trusted (a failed write or sync anywhere, including a
  // compaction's): every fenced write is refused from now on. Idempotent, any thread.
  void MarkStateFailed(std::string_view why);

  struct Entry {
    std::string name;
    FenceSnapshot snapshot;
  };
  std::vector<Entry> Snapshot() const;

 private:
  void Persist(Fence& fence, uint64_t token) override;

  StateWriter& writer_;
  FenceRegistryObserver& observer_;
  std::atomic<bool> state_failed_{false};
  mutable std::mutex mu_;
  std::map<std::string, std::unique_ptr<Fence>, std::less<>> fences_;
};

}  // namespace fencing
