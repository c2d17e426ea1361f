#pragma once
// Shared fences: every proxy of one etcd key prefix keeps its fences (and fence keys) there, and
// the order guarantee holds across all of them (contract "Shared fences"; the protocol and why
// it is safe: docs/design-notes.md "Shared fences on etcd"). The parts, each against etcd's
// typed interfaces (etcd/kv.h) and an injected clock (store/scheduler.h):
//
//   store/layout.h          the keys, and the one classifier of a key
//   store/membership.h      lease, renewals, the gate, the roster
//   store/prefix_view.h     the full read, the watch, a stalled watch noticed
//   store/raise_protocol.h  pending -> acknowledgements -> commit or withdraw, as a table
//   store/member.h          the three wired together (what the simulation runs, N times)
//
// This facade gives them a thread of their own (an io_context), the real etcd client and the
// real clock. Equal tokens never reach it: only a raise, and its answer.

#include "config/config.h"
#include "fence/fence_keys.h"
#include "fence/raise_store.h"
#include "state/state_store.h"
#include "store/fence_store_observer.h"

#include <chrono>
#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

namespace fencing {

class FenceRegistry;

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
