#include "fence/fence_registry.h"

#include "common/log.h"
#include "common/memory.h"

#include <algorithm>
#include <chrono>

namespace fencing {
namespace {

double SteadySeconds() {
  return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count();
}

// The state file as a RaiseStore: a failed write or sync is terminal.
class StateWriterStore final : public RaiseStore {
 public:
  explicit StateWriterStore(StateWriter& writer) : writer_(writer) {}
  void Persist(FenceRecord record, Done done) override {
    writer_.Submit(std::move(record), [done = std::move(done)](bool ok) {
      done(ok ? PersistResult::kDurable : PersistResult::kFailed);
    });
  }

 private:
  StateWriter& writer_;
};

}  // namespace

FenceRegistry::FenceRegistry(const FenceMaxima& maxima, StateWriter& writer, FenceRegistryObserver& observer)
    : FenceRegistry(maxima, FenceKeyMaxima{}, writer, observer) {}

FenceRegistry::FenceRegistry(const FenceMaxima& maxima, FenceKeyMaxima keys, StateWriter& writer,
                             FenceRegistryObserver& observer)
    : FenceRegistry(maxima, std::move(keys), *new StateWriterStore(writer), observer) {
  own_store_.reset(&store_);
}

FenceRegistry::FenceRegistry(const FenceMaxima& maxima, FenceKeyMaxima keys, RaiseStore& store,
                             FenceRegistryObserver& observer)
    : store_(store), gate_(store.gate()), observer_(observer), unclaimed_keys_(std::move(keys)) {
  FencePersister& persister = *this;
  for (const auto& [name, max_token] : maxima) {
    if (unclaimed_keys_.contains(name)) {
      unclaimed_floors_[name] = max_token;  // keyed: whether it stays keyed is the routes' to say
      continue;
    }
    fences_.emplace(name, std::make_unique<Fence>(name, max_token, persister, state_failed_, SteadySeconds,
                                                  &observer_.ForFence(name), gate_));
  }
}

FenceRegistry::~FenceRegistry() { StopSweeper(); }

Fence& FenceRegistry::GetOrCreate(std::string_view name) {
  std::lock_guard lock(mu_);
  if (auto it = fences_.find(name); it != fences_.end()) return *it->second;
  // A fence that was keyed and is not any more: nothing its keys accepted may pass again.
  uint64_t max_token = 0;
  if (auto it = unclaimed_keys_.find(name); it != unclaimed_keys_.end()) {
    max_token = unclaimed_floors_[it->first];
    for (const auto& [key, key_max] : it->second) max_token = std::max(max_token, key_max);
    unclaimed_floors_.erase(it->first);
    unclaimed_keys_.erase(it);
  }
  if (auto it = keyed_.find(name); it != keyed_.end()) max_token = std::max(max_token, it->second->Highest());
  std::string key(name);
  FencePersister& persister = *this;
  auto fence = std::make_unique<Fence>(key, max_token, persister, state_failed_, SteadySeconds,
                                       &observer_.ForFence(key), gate_);
  return *fences_.emplace(std::move(key), std::move(fence)).first->second;
}

FenceKeys& FenceRegistry::GetOrCreateKeyed(std::string_view name, const KeySettings& settings) {
  std::lock_guard lock(mu_);
  if (auto it = keyed_.find(name); it != keyed_.end()) return *it->second;
  std::string fence_name(name);
  uint64_t floor = 0;
  KeyMaxima keys;
  if (auto it = unclaimed_keys_.find(name); it != unclaimed_keys_.end()) {
    keys = std::move(it->second);
    unclaimed_keys_.erase(it);
    floor = unclaimed_floors_[fence_name];
    unclaimed_floors_.erase(fence_name);
  }
  if (auto it = fences_.find(name); it != fences_.end()) {
    // It was one fence: its max is where every key starts. No route uses the unkeyed fence
    // (a change of fence_key is a restart), so it goes.
    floor = std::max(floor, it->second->max_token());
    fences_.erase(it);
  }
  KeyPersister& persister = *this;
  auto keyed = std::make_unique<FenceKeys>(fence_name, floor, std::move(keys), settings, persister, state_failed_,
                                           SteadySeconds, &observer_.ForFence(fence_name), gate_);
  return *keyed_.emplace(std::move(fence_name), std::move(keyed)).first->second;
}

FenceKeys* FenceRegistry::FindKeyed(std::string_view name) const {
  std::lock_guard lock(mu_);
  auto it = keyed_.find(name);
  return it == keyed_.end() ? nullptr : it->second.get();
}

std::vector<FenceRegistry::Entry> FenceRegistry::Snapshot() const {
  std::lock_guard lock(mu_);
  std::vector<Entry> entries;
  entries.reserve(fences_.size() + keyed_.size() + unclaimed_keys_.size());
  for (const auto& [name, fence] : fences_) entries.push_back({name, fence->Snapshot(), std::nullopt});
  for (const auto& [name, keyed] : keyed_) entries.push_back({name, {}, keyed->Snapshot()});
  for (const auto& [name, keys] : unclaimed_keys_) {
    KeyedFenceSnapshot unclaimed;
    unclaimed.keys = keys.size();
    if (auto it = unclaimed_floors_.find(name); it != unclaimed_floors_.end()) unclaimed.floor = it->second;
    entries.push_back({name, {}, unclaimed});
  }
  std::sort(entries.begin(), entries.end(), [](const Entry& a, const Entry& b) { return a.name < b.name; });
  return entries;
}

void FenceRegistry::MarkStateFailed(std::string_view why) {
  if (state_failed_.exchange(true, std::memory_order_acq_rel)) return;
  observer_.StateWriteFailed();
  LogError("state file failed: fenced writes are refused until the proxy is restarted", {{"reason", why}});
}

void FenceRegistry::OnResult(PersistResult result, const std::string& what) {
  if (result == PersistResult::kFailed) MarkStateFailed(what + " could not be made durable");
}

void FenceRegistry::Persist(Fence& fence, uint64_t token) {
  store_.Persist(FenceRecord(fence.name(), token), [this, &fence, token](PersistResult result) {
    // The description only when it is needed: a raise that went well allocates no string.
    if (result == PersistResult::kFailed) OnResult(result, "a raise (fence " + fence.name() + ")");
    fence.OnPersisted(token, result);
  });
}

void FenceRegistry::PersistKey(FenceRecord record, std::function<void(PersistResult)> done) {
  std::string what = "a key's record (fence " + record.fence + ", key " + record.key + ")";
  store_.Persist(std::move(record), [this, what = std::move(what), done = std::move(done)](PersistResult result) {
    OnResult(result, what);
    done(result);
  });
}

FenceRef FenceRegistry::ForShared(std::string_view fence, std::string_view key, uint64_t token) {
  if (key.empty()) {
    {
      std::lock_guard lock(mu_);
      if (keyed_.contains(fence)) return FenceRef();  // its floor: no request admits under it
    }
    return FenceRef(&GetOrCreate(fence));
  }
  FenceKeys* keyed = FindKeyed(fence);
  if (!keyed) return FenceRef();
  KeyLookup lookup = keyed->Acquire(key, token);
  return std::move(lookup.fence);
}

void FenceRegistry::SharedCommitted(std::string_view fence, std::string_view key, uint64_t max) {
  if (key.empty()) {
    {
      std::lock_guard lock(mu_);
      if (keyed_.contains(fence)) return;  // a keyed fence's floor moves only by forgetting
      if (auto it = unclaimed_floors_.find(std::string(fence)); it != unclaimed_floors_.end()) {
        it->second = std::max(it->second, max);
        return;
      }
    }
    GetOrCreate(fence).RemoteCommitted(max);
    return;
  }
  if (FenceKeys* keyed = FindKeyed(fence)) {
    keyed->NoteCommitted(key, max);
    return;
  }
  std::lock_guard lock(mu_);
  auto& keys = unclaimed_keys_[std::string(fence)];
  auto [it, added] = keys.emplace(std::string(key), max);
  if (!added) it->second = std::max(it->second, max);
}

void FenceRegistry::Sweep() {
  std::vector<FenceKeys*> keyed;
  {
    std::lock_guard lock(mu_);
    for (const auto& [name, fence] : keyed_) keyed.push_back(fence.get());
  }
  const double now = SteadySeconds();
  bool release = false;
  for (FenceKeys* fence : keyed) release = fence->Sweep(now) || release;
  // After a burst of forgetting: on this thread, never a request's or the state writer's.
  if (release) ReleaseFreeMemoryGradually();
}

void FenceRegistry::StartSweeper(std::chrono::milliseconds period) {
  StopSweeper();
  sweeper_stop_ = false;
  sweeper_ = std::thread([this, period] {
    std::unique_lock lock(sweeper_mu_);
    while (!sweeper_cv_.wait_for(lock, period, [this] { return sweeper_stop_; })) {
      lock.unlock();
      Sweep();
      lock.lock();
    }
  });
}

void FenceRegistry::StopSweeper() {
  {
    std::lock_guard lock(sweeper_mu_);
    sweeper_stop_ = true;
  }
  sweeper_cv_.notify_all();
  if (sweeper_.joinable()) sweeper_.join();
}

}  // namespace fencing
