#pragma once
// A keyed fence: one Fence per key (per object, tenant, partition: one lock, one key), up to a
// million keys and more. Each key is a fence in full (fence.h): its own max, pending raise,
// admitted writes and drain barrier, so a raise on one key never waits for another key's writes.
//
// Memory is what decides the shape. A key without traffic is its bytes plus 8 bytes of max (and
// the hash table's overhead); the Fence machinery (mutex, waiters, counters) exists only for keys
// that are in use, and a sweep folds an idle one back:
//
//   lookup of a key        state                          on the request path
//   ---------------------  -----------------------------  ----------------------------------------
//   known, active          Slot + Fence                   one shard lock, one hash lookup, no allocation
//   known, idle            Slot {max}                     the Fence is made again from max (allocates)
//   unknown, token < floor nothing is created             stale at once (the floor is the max)
//   unknown, at max_keys   nothing is created             kKeyLimit: 503, fail closed
//   unknown, else          Slot {max = floor} + Fence     counts toward max_keys from now on
//
// The floor: every unknown key starts at it. It is the fence's max from before it was keyed, and,
// with forgetting (token_order: global only), the highest max of any key forgotten. A key is
// forgotten only once a durable record says so (FenceRecord::kForgetKey folds its max, and any
// max of the key before the record in the file, into the floor), so no restart and no later
// request can see it lower.
//
// Lifetime: a FenceRef pins its key's Fence; the sweep never folds a pinned or busy Fence back.

#include "fence/fence.h"
#include "fence/fence_observer.h"
#include "state/state_store.h"

#include <boost/unordered/unordered_flat_map.hpp>

#include <array>
#include <atomic>
#include <chrono>
#include <cstdint>
#include <deque>
#include <functional>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace fencing {

class FenceKeys;

// A Fence held for one request: the key's Fence cannot be folded back while a FenceRef to it
// exists. For an unkeyed fence it is a plain pointer. Move-only.
class FenceRef {
 public:
  FenceRef() = default;
  explicit FenceRef(Fence* fence) : fence_(fence) {}
  FenceRef(Fence* fence, std::atomic<uint32_t>* pins) : fence_(fence), pins_(pins) {}
  ~FenceRef() { reset(); }
  FenceRef(FenceRef&& other) noexcept : fence_(other.fence_), pins_(other.pins_) {
    other.fence_ = nullptr;
    other.pins_ = nullptr;
  }
  FenceRef& operator=(FenceRef&& other) noexcept {
    if (this != &other) {
      reset();
      fence_ = other.fence_;
      pins_ = other.pins_;
      other.fence_ = nullptr;
      other.pins_ = nullptr;
    }
    return *this;
  }
  FenceRef(const FenceRef&) = delete;
  FenceRef& operator=(const FenceRef&) = delete;

  Fence* get() const { return fence_; }
  Fence& operator*() const { return *fence_; }
  Fence* operator->() const { return fence_; }
  explicit operator bool() const { return fence_ != nullptr; }
  void reset() {
    if (pins_) pins_->fetch_sub(1, std::memory_order_release);
    fence_ = nullptr;
    pins_ = nullptr;
  }

 private:
  Fence* fence_ = nullptr;
  std::atomic<uint32_t>* pins_ = nullptr;
};

// Makes a key's record durable; done exactly once, on any thread, possibly before returning.
class KeyPersister {
 public:
  virtual void PersistKey(FenceRecord record, std::function<void(PersistResult)> done) = 0;

 protected:
  ~KeyPersister() = default;
};

// Forget records go to the state writer this many at a time: the next slice only once the last
// one is durable, so a raise of any fence waits behind at most one slice (a group commit of a
// few hundred small records), however many keys fall idle together (a restart starts every key's
// idle time at once).
inline constexpr size_t kForgetSlice = 512;

struct KeySettings {
  uint64_t max_keys = 1000000;
  // 0: never forget. Only for token_order: global (config rejects it otherwise).
  std::chrono::milliseconds forget_idle_after{0};
  size_t forget_slice = kForgetSlice;  // tests make it small
};

struct KeyLookup {
  FenceRef fence;  // set when the key is (now) known: ask it as an unkeyed route asks its fence
  // Without a fence: kStale (an unknown key below the floor; max_token is the floor) or
  // kKeyLimit (a new key at max_keys).
  Admission refusal = Admission::kAdmitted;
  uint64_t max_token = 0;
  // Acquire(..., may_create = false) on a key the fence does not hold: nothing was made (a
  // verified route confirms the token first, then asks again).
  bool unknown = false;
};

struct KeyedFenceSnapshot {
  uint64_t keys = 0;
  uint64_t active = 0;  // keys with their Fence made (traffic lately)
  uint64_t floor = 0;
  uint64_t forgotten = 0;  // since start
  uint64_t max_keys = 0;
};

class FenceKeys final : private FencePersister {
 public:
  using Clock = Fence::Clock;

  // keys: as replayed from the state file (consumed). observer and gate may be null.
  FenceKeys(std::string name, uint64_t floor, KeyMaxima keys, KeySettings settings, KeyPersister& persister,
            const std::atomic<bool>& state_failed, Clock clock, const FenceObserver* observer,
            const MembershipGate* gate = nullptr);
  ~FenceKeys();
  FenceKeys(const FenceKeys&) = delete;
  FenceKeys& operator=(const FenceKeys&) = delete;

  const std::string& name() const { return name_; }

  // The request path: the key's Fence, pinned, made if need be (table above) and may_create.
  // token decides only whether an unknown key is worth creating.
  KeyLookup Acquire(std::string_view key, uint64_t token, bool may_create = true);

  // The shared store: max is the key's committed max (raised by another proxy). An active key's
  // Fence hears it (RemoteCommitted), an idle key's max is raised, an unknown key above the
  // floor is made at it (beyond max_keys too: forgetting a committed max would let a lower
  // token pass).
  void NoteCommitted(std::string_view key, uint64_t max);

  // Read-only (admin): the key's snapshot, or nullopt for a key the fence does not hold.
  std::optional<FenceSnapshot> Find(std::string_view key) const;
  KeyedFenceSnapshot Snapshot() const;
  uint64_t floor() const { return floor_.load(std::memory_order_acquire); }
  // The highest max of the floor and every key (a scan: for a fence that stops being keyed).
  uint64_t Highest() const;

  // Folds idle Fences back into their slots, and (with forgetting) queues the keys idle for
  // forget_idle_after to be forgotten, in slices of forget_slice (the first submitted here, each
  // next one once the one before is durable). Cheap when nothing is active; called every second
  // or so, from one thread at a time. now: the clock's seconds. Returns true when a burst of
  // forgetting is over and freed enough memory that the caller should hand it back to the
  // kernel (ReleaseFreeMemoryGradually, off the request threads).
  bool Sweep(double now);
  // Forget records queued and not yet submitted, and submitted and not yet answered (tests).
  size_t forgets_queued() const;
  size_t forgets_in_flight() const;
  // Shard tables moved into an arena after forgetting left them sparse (tests).
  uint64_t relocations() const { return relocations_.load(std::memory_order_relaxed); }

 private:
  // A key's bytes in one allocation (length byte first): 8 bytes in the table. Keys are 1-128
  // bytes, so the length byte holds the length - 1 in its low 7 bits; the top bit says the bytes
  // live in the shard's arena (Relocate) and are not this key's to free.
  class PackedKey {
   public:
    explicit PackedKey(std::string_view key);
    PackedKey(std::string_view key, char* arena_at);  // writes 1 + key.size() bytes there
    ~PackedKey() { Free(); }
    PackedKey(PackedKey&& other) noexcept : data_(other.data_) { other.data_ = nullptr; }
    PackedKey& operator=(PackedKey&& other) noexcept;
    PackedKey(const PackedKey&) = delete;
    PackedKey& operator=(const PackedKey&) = delete;
    std::string_view view() const {
      return {data_ + 1, static_cast<size_t>(static_cast<unsigned char>(data_[0]) & kLengthMask) + 1};
    }

   private:
    void Free() {
      if (data_ != nullptr && !(static_cast<unsigned char>(data_[0]) & kInArena)) delete[] data_;
    }
    static constexpr unsigned char kInArena = 0x80;
    static constexpr unsigned char kLengthMask = 0x7f;
    static unsigned char LengthByte(std::string_view key, bool in_arena) {
      return static_cast<unsigned char>(((key.size() - 1) & kLengthMask) | (in_arena ? kInArena : 0));
    }
    char* data_;
  };
  // A key with its hash already computed: the shard is chosen by the hash, and the lookup in the
  // shard's map must not hash the key a second time (the request path hashes once).
  struct HashedKey {
    std::string_view key;
    size_t hash;
  };
  struct Hash {
    using is_transparent = void;
    size_t operator()(std::string_view key) const noexcept { return std::hash<std::string_view>()(key); }
    size_t operator()(const PackedKey& key) const noexcept { return (*this)(key.view()); }
    size_t operator()(const HashedKey& key) const noexcept { return key.hash; }
  };
  struct Equal {
    using is_transparent = void;
    static std::string_view View(std::string_view key) { return key; }
    static std::string_view View(const PackedKey& key) { return key.view(); }
    static std::string_view View(const HashedKey& key) { return key.key; }
    template <typename A, typename B>
    bool operator()(const A& a, const B& b) const noexcept {
      return View(a) == View(b);
    }
  };
  // A key's Fence while it is in use, and the requests holding it.
  struct Active {
    Active(std::string key, uint64_t max, FencePersister& persister, const std::atomic<bool>& state_failed,
           Clock clock, const FenceObserver* observer, const MembershipGate* gate)
        : fence(std::move(key), max, persister, state_failed, std::move(clock), observer, gate) {}
    Fence fence;
    std::atomic<uint32_t> pins{0};
  };
  struct Slot {
    uint64_t max;            // durable; while active, the Fence's max is the live one
    Active* active;          // owned; null for an idle key
    uint32_t last_used;      // whole seconds since the FenceKeys was made (forgetting)
    bool forgetting;         // its forget record is on its way to the disk
  };
  using Map = boost::unordered_flat_map<PackedKey, Slot, Hash, Equal>;
  static constexpr size_t kShards = 64;  // unrelated keys rarely share a lock
  static constexpr uint64_t kFoldAfterSeconds = 2;  // unused this long, an idle Fence is folded back
  static constexpr size_t kShrinkMinBuckets = 1024;  // a shard's table or list smaller is kept as is
  // Keys forgotten since memory was last handed back, before Sweep asks for it again.
  static constexpr uint64_t kReleaseAfterForgotten = 65536;
  struct alignas(64) Shard {
    mutable std::mutex mu;
    Map map;
    std::vector<Active*> active;  // the slots with a Fence, for the sweep
    // The bytes of the keys the last Relocate moved (their PackedKeys point here).
    std::unique_ptr<char[]> arena;
  };
  // Reports a key's raises to the fence's observer: a key's max is no label value, so the
  // fence's max_token gauge shows the highest max of any key.
  class KeyObserver final : public FenceObserver {
   public:
    explicit KeyObserver(const FenceObserver* fence) : fence_(fence) {}
    void MaxToken(uint64_t max_token) const override;
    void Raised() const override;
    void RaiseWaited(double seconds) const override;

   private:
    const FenceObserver* fence_;
    mutable std::atomic<uint64_t> highest_{0};
  };

  // A key's Fence asks for its raise here (its name is the key): a key record.
  void Persist(Fence& fence, uint64_t token) override;
  Shard& ShardFor(size_t hash) { return shards_[hash >> 58]; }
  const Shard& ShardFor(size_t hash) const { return shards_[hash >> 58]; }
  Active* Activate(std::string_view key, Slot& slot, Shard& shard);
  uint32_t Tick(double now) const;
  static bool Idle(const Active& active);
  // Keys chosen to be forgotten, not yet submitted: each a length byte and the key's bytes, one
  // after another (17 bytes for a 16-byte key: a million of them queued cost 17 MB, not the
  // 100 MB of a record and a callback each).
  struct ForgetSlice {
    std::string keys;
    size_t count = 0;
  };
  // With the shard's lock held.
  void FoldBack(Shard& shard, uint32_t now_tick);
  // A table that forgetting left mostly empty: its keys move into one arena allocation and the
  // table shrinks. Their own small allocations were spread over the pages of every key the shard
  // once held, so a few survivors would keep most of those pages resident (1,000 keys left of a
  // million: 12 MB the allocator could not return).
  void Relocate(Shard& shard);
  void ForgetCandidates(Shard& shard, uint32_t now_tick, std::vector<ForgetSlice>& slices);
  // Submits the next slice unless one is in flight (or being submitted); any thread.
  void PumpForgets();
  void OnForgotten(const std::string& key, uint64_t max, bool ok);
  void ForgetAnswered();

  const std::string name_;
  const KeySettings settings_;
  const uint64_t forget_after_seconds_;  // forget_idle_after in whole seconds, rounded up; 0: never
  KeyPersister& persister_;
  const std::atomic<bool>& state_failed_;
  const Clock clock_;
  const FenceObserver* observer_;
  const MembershipGate* gate_;
  KeyObserver key_observer_;
  const double started_;
  std::atomic<uint64_t> floor_;
  std::atomic<uint64_t> count_{0};
  std::atomic<uint64_t> forgotten_{0};
  std::atomic<uint64_t> relocations_{0};
  uint32_t next_forget_scan_ = 0;  // Sweep's only (one sweeper)
  uint64_t forgotten_at_release_ = 0;  // Sweep's only: forgotten_ when memory was last handed back
  mutable std::mutex forget_mu_;  // never held while a shard's lock is taken or a record submitted
  std::deque<ForgetSlice> forget_queue_;
  // Records of the slice submitted last not yet answered, plus one while PumpForgets is still
  // submitting it (so that no other slice starts meanwhile).
  size_t forget_in_flight_ = 0;
  std::array<Shard, kShards> shards_;
};

}  // namespace fencing
