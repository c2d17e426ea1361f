#include "fence/fence_keys.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <utility>

namespace fencing {

FenceKeys::PackedKey::PackedKey(std::string_view key) : data_(new char[key.size() + 1]) {
  data_[0] = static_cast<char>(LengthByte(key, false));  // keys are 1 to 128 bytes
  std::memcpy(data_ + 1, key.data(), key.size());
}

FenceKeys::PackedKey::PackedKey(std::string_view key, char* arena_at) : data_(arena_at) {
  data_[0] = static_cast<char>(LengthByte(key, true));
  std::memcpy(data_ + 1, key.data(), key.size());
}

FenceKeys::PackedKey& FenceKeys::PackedKey::operator=(PackedKey&& other) noexcept {
  if (this != &other) {
    Free();
    data_ = other.data_;
    other.data_ = nullptr;
  }
  return *this;
}

void FenceKeys::KeyObserver::MaxToken(uint64_t max_token) const {
  // Only ever upwards: the gauge is the highest max of any key.
  uint64_t seen = highest_.load(std::memory_order_relaxed);
  while (max_token > seen) {
    if (highest_.compare_exchange_weak(seen, max_token, std::memory_order_relaxed)) {
      if (fence_) fence_->MaxToken(max_token);
      return;
    }
  }
}

void FenceKeys::KeyObserver::Raised() const {
  if (fence_) fence_->Raised();
}

void FenceKeys::KeyObserver::RaiseWaited(double seconds) const {
  if (fence_) fence_->RaiseWaited(seconds);
}

FenceKeys::FenceKeys(std::string name, uint64_t floor, KeyMaxima keys, KeySettings settings, KeyPersister& persister,
                     const std::atomic<bool>& state_failed, Clock clock, const FenceObserver* observer,
                     const MembershipGate* gate)
    : name_(std::move(name)),
      settings_(settings),
      forget_after_seconds_(static_cast<uint64_t>(std::ceil(settings.forget_idle_after.count() / 1000.0))),
      persister_(persister),
      state_failed_(state_failed),
      clock_(std::move(clock)),
      observer_(observer),
      gate_(gate),
      key_observer_(observer),
      started_(clock_()),
      floor_(floor) {
  uint64_t highest = floor;
  for (Shard& shard : shards_) shard.map.reserve(keys.size() / kShards + keys.size() / (4 * kShards));
  for (const auto& [key, max] : keys) {
    Shard& shard = ShardFor(Hash()(key));
    shard.map.emplace(PackedKey(key), Slot{max, nullptr, 0, false});
    highest = std::max(highest, max);
  }
  KeyMaxima().swap(keys);  // the replayed copy goes now, not at the end of the start-up
  uint64_t count = 0;
  for (const Shard& shard : shards_) count += shard.map.size();
  count_.store(count, std::memory_order_relaxed);
  key_observer_.MaxToken(highest);
  if (observer_) {
    if (highest == 0) observer_->MaxToken(0);
    observer_->KeysChanged(static_cast<int64_t>(count));
  }
}

FenceKeys::~FenceKeys() {
  for (Shard& shard : shards_) {
    for (Active* active : shard.active) delete active;
  }
}

uint32_t FenceKeys::Tick(double now) const {
  double since = now - started_;
  return since <= 0 ? 0 : static_cast<uint32_t>(std::min(since, 4e9));
}

KeyLookup FenceKeys::Acquire(std::string_view key, uint64_t token, bool may_create) {
  const size_t hash = Hash()(key);
  Shard& shard = ShardFor(hash);
  std::lock_guard lock(shard.mu);
  auto it = shard.map.find(HashedKey{key, hash});
  if (it == shard.map.end()) {
    const uint64_t floor = floor_.load(std::memory_order_acquire);
    // Unknown: a token below the floor is stale, and creates nothing.
    if (token < floor) return {FenceRef(), Admission::kStale, floor};
    if (!may_create) return {FenceRef(), Admission::kAdmitted, floor, true};
    // Taken before the key is made, so that shards racing for the last places never pass it.
    if (count_.fetch_add(1, std::memory_order_relaxed) >= settings_.max_keys) {
      count_.fetch_sub(1, std::memory_order_relaxed);
      return {FenceRef(), Admission::kKeyLimit, floor};
    }
    it = shard.map.emplace(PackedKey(key), Slot{floor, nullptr, 0, false}).first;
    if (observer_) observer_->KeysChanged(1);
  }
  Slot& slot = it->second;
  Active* active = slot.active ? slot.active : Activate(key, slot, shard);
  slot.last_used = Tick(clock_());
  slot.forgetting = false;
  active->pins.fetch_add(1, std::memory_order_relaxed);
  return {FenceRef(&active->fence, &active->pins), Admission::kAdmitted, 0};
}

void FenceKeys::NoteCommitted(std::string_view key, uint64_t max) {
  const size_t hash = Hash()(key);
  Shard& shard = ShardFor(hash);
  FenceRef pinned;
  {
    std::lock_guard lock(shard.mu);
    auto it = shard.map.find(HashedKey{key, hash});
    if (it == shard.map.end()) {
      if (max <= floor_.load(std::memory_order_acquire)) return;
      count_.fetch_add(1, std::memory_order_relaxed);
      shard.map.emplace(PackedKey(key), Slot{max, nullptr, Tick(clock_()), false});
      if (observer_) observer_->KeysChanged(1);
      key_observer_.MaxToken(max);
      return;
    }
    Slot& slot = it->second;
    if (!slot.active) {
      slot.max = std::max(slot.max, max);
      key_observer_.MaxToken(slot.max);
      return;
    }
    slot.active->pins.fetch_add(1, std::memory_order_relaxed);
    pinned = FenceRef(&slot.active->fence, &slot.active->pins);
  }
  // Outside the shard lock: the Fence may resolve its waiters.
  pinned->RemoteCommitted(max);
}

FenceKeys::Active* FenceKeys::Activate(std::string_view key, Slot& slot, Shard& shard) {
  FencePersister& persister = *this;
  auto* active = new Active(std::string(key), slot.max, persister, state_failed_, clock_, &key_observer_, gate_);
  slot.active = active;
  shard.active.push_back(active);
  return active;
}

void FenceKeys::Persist(Fence& fence, uint64_t token) {
  // The Fence is busy (persisting) until OnPersisted, so no sweep folds it back meanwhile.
  persister_.PersistKey(FenceRecord(name_, token, fence.name()),
                        [&fence, token](PersistResult result) { fence.OnPersisted(token, result); });
}

bool FenceKeys::Idle(const Active& active) {
  // pins first: a request pins under the shard lock (held by the caller), so once no one pins,
  // no one can start to use the Fence; then the Fence's own state (a raise being written, or
  // waiters being woken, keep it busy).
  return active.pins.load(std::memory_order_acquire) == 0 && active.fence.Idle();
}

std::optional<FenceSnapshot> FenceKeys::Find(std::string_view key) const {
  const size_t hash = Hash()(key);
  const Shard& shard = ShardFor(hash);
  std::lock_guard lock(shard.mu);
  auto it = shard.map.find(HashedKey{key, hash});
  if (it == shard.map.end()) return std::nullopt;
  if (it->second.active) return it->second.active->fence.Snapshot();
  FenceSnapshot snapshot;
  snapshot.max_token = it->second.max;
  return snapshot;
}

KeyedFenceSnapshot FenceKeys::Snapshot() const {
  KeyedFenceSnapshot snapshot;
  for (const Shard& shard : shards_) {
    std::lock_guard lock(shard.mu);
    snapshot.active += shard.active.size();
  }
  snapshot.keys = count_.load(std::memory_order_relaxed);
  snapshot.floor = floor();
  snapshot.forgotten = forgotten_.load(std::memory_order_relaxed);
  snapshot.max_keys = settings_.max_keys;
  return snapshot;
}

uint64_t FenceKeys::Highest() const {
  uint64_t highest = floor();
  for (const Shard& shard : shards_) {
    std::lock_guard lock(shard.mu);
    for (const auto& [key, slot] : shard.map) {
      highest = std::max(highest, slot.active ? slot.active->fence.max_token() : slot.max);
    }
  }
  return highest;
}

bool FenceKeys::Sweep(double now) {
  const uint32_t now_tick = Tick(now);
  // Looking for keys to forget reads every key: a tenth of forget_idle_keys_after apart (1 s to
  // 1 min), so a key is forgotten at most ~10% late, and a million keys cost little.
  bool forget = false;
  if (forget_after_seconds_ > 0 && now_tick >= next_forget_scan_) {
    forget = true;
    next_forget_scan_ = now_tick + static_cast<uint32_t>(std::clamp<uint64_t>(forget_after_seconds_ / 10, 1, 60));
  }
  std::vector<ForgetSlice> slices;
  for (Shard& shard : shards_) {
    std::lock_guard lock(shard.mu);
    FoldBack(shard, now_tick);
    if (forget) ForgetCandidates(shard, now_tick, slices);
    // A table that forgetting left mostly empty gives its memory back: a boost flat map never
    // shrinks by itself (at a million keys forgotten, some 30 MB of empty slots).
    if (shard.map.bucket_count() > kShrinkMinBuckets && shard.map.size() < shard.map.bucket_count() / 8) {
      Relocate(shard);
    }
    if (shard.active.capacity() > kShrinkMinBuckets && shard.active.size() < shard.active.capacity() / 8) {
      shard.active.shrink_to_fit();
    }
  }
  if (!slices.empty()) {
    std::lock_guard lock(forget_mu_);
    for (ForgetSlice& slice : slices) forget_queue_.push_back(std::move(slice));
  }
  PumpForgets();
  // Once a burst of forgetting is over: the memory its keys held is free, hand it back.
  const uint64_t forgotten = forgotten_.load(std::memory_order_relaxed);
  if (forgotten - forgotten_at_release_ < kReleaseAfterForgotten) return false;
  {
    std::lock_guard lock(forget_mu_);
    if (!forget_queue_.empty() || forget_in_flight_ > 0) return false;
  }
  forgotten_at_release_ = forgotten;
  return true;
}

void FenceKeys::Relocate(Shard& shard) {
  size_t bytes = 0;
  for (const auto& [key, slot] : shard.map) bytes += 1 + key.view().size();
  auto arena = std::make_unique<char[]>(std::max<size_t>(bytes, 1));
  Map moved;
  moved.reserve(shard.map.size());
  char* at = arena.get();
  for (const auto& [key, slot] : shard.map) {
    const std::string_view k = key.view();
    moved.emplace(PackedKey(k, at), slot);
    at += 1 + k.size();
  }
  shard.map = std::move(moved);     // the old keys freed (those in the old arena are not owned)...
  shard.arena = std::move(arena);   // ...and only then the old arena
  relocations_.fetch_add(1, std::memory_order_relaxed);
}

size_t FenceKeys::forgets_queued() const {
  std::lock_guard lock(forget_mu_);
  size_t queued = 0;
  for (const ForgetSlice& slice : forget_queue_) queued += slice.count;
  return queued;
}

size_t FenceKeys::forgets_in_flight() const {
  std::lock_guard lock(forget_mu_);
  return forget_in_flight_;
}

void FenceKeys::FoldBack(Shard& shard, uint32_t now_tick) {
  // The Fences idle for a while go back into their slots (a key in steady use keeps its Fence,
  // so the request path does not allocate for it).
  for (size_t i = 0; i < shard.active.size();) {
    Active* active = shard.active[i];
    auto it = shard.map.find(std::string_view(active->fence.name()));
    if (it != shard.map.end() && uint64_t(it->second.last_used) + kFoldAfterSeconds <= now_tick && Idle(*active)) {
      it->second.max = active->fence.max_token();
      it->second.active = nullptr;
      delete active;
      shard.active[i] = shard.active.back();
      shard.active.pop_back();
    } else {
      ++i;
    }
  }
}

void FenceKeys::ForgetCandidates(Shard& shard, uint32_t now_tick, std::vector<ForgetSlice>& slices) {
  for (auto& [key, slot] : shard.map) {
    if (slot.forgetting || uint64_t(slot.last_used) + forget_after_seconds_ > now_tick) continue;
    if (slot.active && !Idle(*slot.active)) continue;
    slot.forgetting = true;  // until the record is durable; a request clears it
    if (slices.empty() || slices.back().count >= std::max<size_t>(settings_.forget_slice, 1)) slices.emplace_back();
    ForgetSlice& slice = slices.back();
    const std::string_view k = key.view();
    slice.keys.push_back(static_cast<char>(static_cast<unsigned char>(k.size())));
    slice.keys.append(k);
    ++slice.count;
  }
}

void FenceKeys::PumpForgets() {
  for (;;) {
    ForgetSlice slice;
    {
      std::lock_guard lock(forget_mu_);
      if (forget_in_flight_ > 0 || forget_queue_.empty()) return;
      slice = std::move(forget_queue_.front());
      forget_queue_.pop_front();
      forget_in_flight_ = slice.count + 1;  // the 1: this call's, until every record is submitted
    }
    // Outside every lock but the key's shard (the persister may answer at once, on this thread).
    // A raise of the key that reaches the file before this record is folded into the floor with
    // it (FORMAT.md "Keys"), so the order of the two records does not matter.
    size_t skipped = 0;
    for (size_t at = 0; at < slice.keys.size();) {
      const size_t size = static_cast<unsigned char>(slice.keys[at]);
      const std::string_view key(slice.keys.data() + at + 1, size);
      at += 1 + size;
      // Queued a while ago: a key used since (a request cleared forgetting) is not forgotten,
      // and the max forgotten is the key's current one (another proxy may have raised it).
      uint64_t max = 0;
      bool still = false;
      {
        const size_t hash = Hash()(key);
        Shard& shard = ShardFor(hash);
        std::lock_guard lock(shard.mu);
        auto it = shard.map.find(HashedKey{key, hash});
        if (it != shard.map.end() && it->second.forgetting && !(it->second.active && !Idle(*it->second.active))) {
          still = true;
          max = it->second.active ? it->second.active->fence.max_token() : it->second.max;
        }
      }
      if (!still) {
        ++skipped;
        continue;
      }
      persister_.PersistKey(FenceRecord(name_, max, std::string(key), FenceRecord::Kind::kForgetKey),
                            [this, k = std::string(key), max](PersistResult result) {
                              OnForgotten(k, max, result == PersistResult::kDurable);
                              ForgetAnswered();
                            });
    }
    {
      std::lock_guard lock(forget_mu_);
      forget_in_flight_ -= skipped + 1;
      if (forget_in_flight_ > 0) return;  // the last answer pumps the next slice
    }
  }
}

void FenceKeys::ForgetAnswered() {
  bool next;
  {
    std::lock_guard lock(forget_mu_);
    next = --forget_in_flight_ == 0;
  }
  if (next) PumpForgets();
}

void FenceKeys::OnForgotten(const std::string& key, uint64_t max, bool ok) {
  if (!ok) return;  // the state file failed: every fenced write is refused from now on
  // The record is durable: the floor holds the key's max, in the file as here.
  uint64_t floor = floor_.load(std::memory_order_relaxed);
  while (max > floor && !floor_.compare_exchange_weak(floor, max, std::memory_order_acq_rel)) {
  }
  Shard& shard = ShardFor(Hash()(key));
  std::lock_guard lock(shard.mu);
  auto it = shard.map.find(std::string_view(key));
  if (it == shard.map.end()) return;
  Slot& slot = it->second;
  // Used again since it was chosen: it stays known. Its max then is the one forgotten (the floor
  // holds it) or a raise that the file has after the forget record.
  if (!slot.forgetting || (slot.active && !Idle(*slot.active))) {
    slot.forgetting = false;
    return;
  }
  if (slot.active) {
    shard.active.erase(std::find(shard.active.begin(), shard.active.end(), slot.active));
    delete slot.active;
  }
  shard.map.erase(it);
  count_.fetch_sub(1, std::memory_order_relaxed);
  forgotten_.fetch_add(1, std::memory_order_relaxed);
  if (observer_) {
    observer_->KeysChanged(-1);
    observer_->KeysForgotten(1);
  }
}

}  // namespace fencing
