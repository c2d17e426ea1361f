#pragma once
// Shared fences: every proxy of one etcd key prefix keeps its fences (and fence keys) there, and
// the order guarantee holds across all of them (contract "Shared fences"; the protocol and why
// it is safe: docs/design-notes.md "Shared fences on etcd"). In short:
//
//   etcd key (under the prefix)       value                               lease
//   members/<member id>               {"host","pid","started_unix"}       the member's
//   roster/<member id>                the same                            none (taken off
//                                                                         timeouts.request after
//                                                                         the member key went)
//   max/<fence>[/<key>]               the committed max, 20 digits        none
//   pending/<fence>[/<key>]           "<20-digit T> <raiser id>"          the raiser's
//   ack/<member id>/<fence>[/<key>]   "<20-digit T> <pending's revision>" the acker's
//
//   a raise to T    pending := T (compare-and-set), reading the roster in the same txn; wait
//                   until each other member acked T at that revision, or its member key is gone
//                   and timeouts.request has passed since; max := T and pending deleted (CAS)
//   another's T     the local fence refuses tokens below T and drains (Fence::RemotePending),
//                   then acknowledges; T is its max once committed (or forgotten if withdrawn)
//   membership      a lease of member_ttl, renewed every third of it; fenced writes are admitted
//                   only until the last renewal's send time + member_ttl − margin (the gate)
//
// Everything the store does runs on one thread of its own (its io_context); the etcd client's
// answers are posted to it. Equal tokens never reach the store: only a raise, and its answer.

#include "config/config.h"
#include "fence/fence_keys.h"
#include "fence/raise_store.h"
#include "state/state_store.h"

#include <chrono>
#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

namespace fencing {

class FenceRegistry;

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

// The pure rules of the layout (tests call them directly).
namespace shared_fence {
// The 20-digit zero-padded text of a token: bytewise order is numeric order.
std::string TokenText(uint64_t token);
// Exactly 20 decimal digits. False for anything else.
bool ParseToken(std::string_view text, uint64_t* token);
// A member id as it appears in keys: the lease ID in 16 lower-case hex digits.
std::string MemberId(int64_t lease);
// "<20-digit token> <word>" (a pending's raiser, an ack's revision). False when malformed.
bool ParseTokenAnd(std::string_view text, uint64_t* token, std::string* word);
// "fence" or "fence/key" (the part after max/, pending/, ack/<member>/). False when malformed.
bool SplitTarget(std::string_view target, std::string* fence, std::string* key);
}  // namespace shared_fence

class EtcdFenceStore final : public RaiseStore {
 public:
  // Connects, registers this proxy as a member and reads every fence and key of the prefix,
  // waiting up to `wait` for it. Null with a readable error when that fails: a proxy that cannot
  // reach its fence store does not start (as one whose state file cannot be opened).
  // request_timeout: timeouts.request (how long a dead member's admitted writes may still run).
  static std::unique_ptr<EtcdFenceStore> Open(const FenceStoreConfig& config, std::chrono::milliseconds request_timeout,
                                              std::chrono::milliseconds wait, const FenceStoreObserver* observer,
                                              std::string* error);
  ~EtcdFenceStore() override;  // Stop()
  EtcdFenceStore(const EtcdFenceStore&) = delete;
  EtcdFenceStore& operator=(const EtcdFenceStore&) = delete;

  // As read at Open (the registry is made from them; the keys move out).
  const FenceMaxima& maxima() const;
  FenceKeyMaxima TakeKeyMaxima();

  // From now on the other members' raises reach the registry's fences (those pending at Open
  // first), and the gate opens. Call once, before any request is served.
  void Attach(FenceRegistry& registry);
  // Closes the gate, gives up the raises under way, revokes the membership and stops the thread.
  // left_cleanly (every admitted write has ended): this proxy also leaves the roster, and the
  // others stop waiting for it at once; else they wait timeouts.request after its member key has
  // gone, as for a proxy that died. Idempotent.
  void Stop(bool left_cleanly = false);

  void Persist(FenceRecord record, Done done) override;
  const MembershipGate* gate() const override;

  struct Status {
    std::string endpoints;  // as configured, comma-separated
    std::string prefix;
    std::string member_id;  // empty while not registered
    int64_t members = 0;    // registered members, this one included, as last seen
    bool gate_open = false;
    double gate_seconds_left = 0;
    uint64_t raises = 0;           // committed by this proxy
    uint64_t acks = 0;             // acknowledged for other members
    uint64_t raises_refused = 0;   // given up: etcd unreachable, acks missing, superseded
    std::string last_error;        // empty: none since start
    double last_error_seconds_ago = 0;
  };
  Status status() const;  // any thread

  class Impl;

 private:
  explicit EtcdFenceStore(std::shared_ptr<Impl> impl);
  std::shared_ptr<Impl> impl_;
};

}  // namespace fencing
