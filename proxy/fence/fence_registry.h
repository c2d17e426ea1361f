#pragma once
// Every fence the proxy knows: those in the state file (kept even when no route names them any
// more) and those the routes name, unkeyed (one Fence) or keyed (FenceKeys: one Fence per key).
// Raises are made durable through a RaiseStore (the state file's writer, or etcd shared by
// several proxies, which also tells the registry what the other proxies raise).

#include "fence/fence.h"
#include "fence/fence_keys.h"
#include "fence/fence_observer.h"
#include "fence/raise_store.h"
#include "state/state_writer.h"

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <string_view>
#include <thread>
#include <vector>

namespace fencing {

class FenceRegistry final : private FencePersister, private KeyPersister {
 public:
  // maxima, keys: as replayed from the state file or read from etcd (keys consumed). store (or
  // writer, the state file's): where raises go. observer: the metrics.
  FenceRegistry(const FenceMaxima& maxima, StateWriter& writer, FenceRegistryObserver& observer);
  FenceRegistry(const FenceMaxima& maxima, FenceKeyMaxima keys, StateWriter& writer, FenceRegistryObserver& observer);
  FenceRegistry(const FenceMaxima& maxima, FenceKeyMaxima keys, RaiseStore& store, FenceRegistryObserver& observer);
  ~FenceRegistry();

  // The unkeyed fence named `name`, created if new: at its max from the state file, or (a fence
  // that was keyed) the highest max of its floor and keys. References stay valid for the
  // registry's lifetime (a fence's max must outlive its routes).
  Fence& GetOrCreate(std::string_view name);
  // The keyed fence named `name`, created if new, with these settings (those of its first
  // creation stay: config makes a change of them a restart). A fence that was unkeyed keeps its
  // max as the floor of its keys. Same lifetime.
  FenceKeys& GetOrCreateKeyed(std::string_view name, const KeySettings& settings);
  FenceKeys* FindKeyed(std::string_view name) const;

  // The shared store: another proxy raises fence `fence`, or its key `key`, to token. The local
  // Fence to tell (RemotePending), made if need be and pinned; null when no Fence here can admit
  // writes for it: the key of a fence no route here keys, or the floor of a keyed fence.
  FenceRef ForShared(std::string_view fence, std::string_view key, uint64_t token);
  // ...and max is now its committed max: the Fence is told (RemoteCommitted), an idle key's
  // max raised, an unknown key made at it, a key of a fence no route here keys kept for a route
  // that keys it later.
  void SharedCommitted(std::string_view fence, std::string_view key, uint64_t max);

  // False once a state write or sync has failed: fenced writes are refused, /readyz fails.
  bool healthy() const { return !state_failed_.load(std::memory_order_acquire); }
  // The state file can no longer be trusted (a failed write or sync anywhere, including a
  // compaction's): every fenced write is refused from now on. Idempotent, any thread.
  void MarkStateFailed(std::string_view why);

  // Every keyed fence's Sweep (fence_keys.h), now; and a thread that does it every period.
  void Sweep();
  void StartSweeper(std::chrono::milliseconds period);
  void StopSweeper();  // waits for a sweep under way; also in the destructor

  struct Entry {
    std::string name;
    FenceSnapshot snapshot;                 // unkeyed
    std::optional<KeyedFenceSnapshot> keys;  // keyed (snapshot unused)
  };
  std::vector<Entry> Snapshot() const;

 private:
  void Persist(Fence& fence, uint64_t token) override;
  void PersistKey(FenceRecord record, std::function<void(PersistResult)> done) override;
  void OnResult(PersistResult result, const std::string& what);

  std::unique_ptr<RaiseStore> own_store_;  // the StateWriter constructors' adapter
  RaiseStore& store_;
  const MembershipGate* gate_;
  FenceRegistryObserver& observer_;
  std::atomic<bool> state_failed_{false};
  mutable std::mutex mu_;
  std::map<std::string, std::unique_ptr<Fence>, std::less<>> fences_;
  std::map<std::string, std::unique_ptr<FenceKeys>, std::less<>> keyed_;
  // Keyed fences of the state file that no route has asked for yet: floor and keys, as replayed.
  FenceMaxima unclaimed_floors_;
  FenceKeyMaxima unclaimed_keys_;

  std::mutex sweeper_mu_;
  std::condition_variable sweeper_cv_;
  bool sweeper_stop_ = false;
  std::thread sweeper_;
};

}  // namespace fencing
