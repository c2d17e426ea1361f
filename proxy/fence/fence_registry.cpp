#include "fence/fence_registry.h"

#include "common/log.h"

#include <chrono>

namespace fencing {
namespace {

double SteadySeconds() {
  return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count();
}

}  // namespace

FenceRegistry::FenceRegistry(const FenceMaxima& maxima, StateWriter& writer, FenceRegistryObserver& observer)
    : writer_(writer), observer_(observer) {
  FencePersister& persister = *this;
  for (const auto& [name, max_token] : maxima) {
    fences_.emplace(name, std::make_unique<Fence>(name, max_token, persister, state_failed_, SteadySeconds,
                                                  &observer_.ForFence(name)));
  }
}

Fence& FenceRegistry::GetOrCreate(std::string_view name) {
  std::lock_guard lock(mu_);
  if (auto it = fences_.find(name); it != fences_.end()) return *it->second;
  std::string key(name);
  FencePersister& persister = *this;
  auto fence = std::make_unique<Fence>(key, 0, persister, state_failed_, SteadySeconds, &observer_.ForFence(key));
  return *fences_.emplace(std::move(key), std::move(fence)).first->second;
}

std::vector<FenceRegistry::Entry> FenceRegistry::Snapshot() const {
  std::lock_guard lock(mu_);
  std::vector<Entry> entries;
  entries.reserve(fences_.size());
  for (const auto& [name, fence] : fences_) entries.push_back({name, fence->Snapshot()});
  return entries;
}

void FenceRegistry::MarkStateFailed(std::string_view why) {
  if (state_failed_.exchange(true, std::memory_order_acq_rel)) return;
  observer_.StateWriteFailed();
  LogError("state file failed: fenced writes are refused until the proxy is restarted", {{"reason", why}});
}

void FenceRegistry::Persist(Fence& fence, uint64_t token) {
  writer_.Submit(fence.name(), token, [this, &fence, token](bool ok) {
    if (!ok) MarkStateFailed("a raise could not be made durable (fence " + fence.name() + ")");
    fence.OnPersisted(token, ok);
  });
}

}  // namespace fencing
