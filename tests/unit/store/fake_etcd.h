#pragma once
// A model of etcd for the shared-fence simulation: one cluster's state (FakeEtcd) and one
// client per member (FakeEtcdClient, an etcd::Client), on a store::Scheduler's virtual clock.
// Every outcome is drawn from the seed given to FakeEtcd, so a run replays exactly.
//
// The state, as etcd keeps it:
//   - MVCC: one revision counter; a put, a delete, a txn, a lease's expiry or revoke that
//     changes anything takes the next revision, shared by all its changes. Keys keep their
//     history (create_revision, mod_revision, version, lease), so a Range at an older revision
//     reads it. Compact(rev): a Range below rev fails (gRPC 11, "mvcc: required revision has
//     been compacted"); a watch from below rev ends with kCompacted.
//   - Range: [key, range_end) ("\0": every key from key on), at a revision, sorted by key or by
//     create revision, the limit applied after the sort, keys only if asked.
//   - Txn compares mod_revision only (0: the key is absent). A put with an unknown lease fails
//     the whole call or txn (gRPC 5, "requested lease not found"); two writes of one key in one
//     branch fail it (gRPC 3), as in etcd. Range's header revision is the store's current one,
//     as etcd's is, also when reading at an older revision.
//   - Leases on the virtual clock: the TTL granted is at least options.min_lease_ttl_seconds
//     (etcd's is 2 s with its default election timeout); a lease expires ttl after its grant or
//     its last keep-alive (applied), and is revoked then or, with options.expiry_sweep_max_ns,
//     up to that much later, deleting its keys at one revision. LeaderChange() gives every lease
//     its full TTL again, as a new etcd leader does.
//
// The network: a call reaches etcd after one drawn latency, is applied there and then, and its
// answer comes back after another. A call that has no answer within the client's call timeout
// fails ("timed out"), and a late answer is dropped, as the real client's deadline does: so a
// caller can time out on a write that was applied. Watches: a "created" message first (header
// revision: the store's, as etcd's, so it can be above the replayed events that follow it), then
// one message per revision with the watch's events of it (replayed from the log when
// start_revision is older), each delivered after a drawn latency plus the member's watch lag, in
// revision order.
//
// Faults:
//   a member's link   SetPartitioned: calls sent get no answer (they time out), and a seeded
//                     share of them is applied all the same; answers due while partitioned are
//                     lost; watches deliver nothing and end (kError) after a drawn while,
//                     unless the partition heals first. SetWatchStalled: watches deliver nothing,
//                     unary calls work; on unstall each watch, seeded, either delivers what it
//                     buffered or ends (kError). SetWatchLag: watch messages come this much later.
//                     CancelWatches: etcd cancels every watch (kError, after what was sent).
//   the cluster       SetUnavailable: every call fails with gRPC 14 after a round trip, nothing
//                     is applied, new watches end (kError), leases do not expire; on recovery,
//                     a LeaderChange. Compact(rev). LeaderChange().
//
// Lifetimes: the scheduler outlives FakeEtcd, which outlives its clients. Destroying a client
// drops its pending callbacks and watches unseen (a member that crashed); its requests already
// on their way still reach etcd. Stop() instead ends them all with an error, as
// EtcdClient::Stop does. A client must not be destroyed or stopped from one of its callbacks.

#include "etcd/kv.h"
#include "store/scheduler.h"

#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <random>
#include <set>
#include <string>
#include <string_view>
#include <vector>

namespace fencing::sim {

struct FakeEtcdOptions {
  // One way (a request to etcd, or an answer or a watch message back): uniform in [min, max].
  int64_t latency_min_ns = 200'000;
  int64_t latency_max_ns = 3'000'000;
  // One trip in slow_one_in (0: none) is slow instead: uniform in [latency_max_ns, slow_max_ns].
  uint32_t slow_one_in = 0;
  int64_t slow_max_ns = 1'500'000'000;
  // A call sent into a partition is applied all the same (its answer lost) this often.
  uint32_t partition_applied_percent = 50;
  // A partitioned watch ends (kError) after a while uniform in [min, max], unless healed first.
  int64_t partition_watch_end_min_ns = 1'000'000'000;
  int64_t partition_watch_end_max_ns = 5'000'000'000;
  // On unstall, a watch delivers what it buffered this often; else it ends (kError).
  uint32_t unstall_resume_percent = 50;
  int64_t min_lease_ttl_seconds = 2;
  // An expired lease is revoked (its keys deleted) up to this much later, uniform (etcd's lessor
  // sweeps every 500 ms, then goes through raft); a keep-alive meanwhile does not save it. 0: at once.
  int64_t expiry_sweep_max_ns = 0;
  // A watch that asked for them and has nothing queued gets a progress notification (no events,
  // the store's revision) this often. 0: never.
  int64_t progress_interval_ns = 0;
};

// One change of one key, as applied. A delete's kv has only key and mod_revision.
struct EtcdWrite {
  int64_t time_ns = 0;
  etcd::WatchEvent event;
};

// Fires the functions it is given at their times, unless destroyed first.
class TimerSet {
 public:
  explicit TimerSet(store::Scheduler& scheduler) : scheduler_(scheduler) {}
  ~TimerSet();
  TimerSet(const TimerSet&) = delete;
  TimerSet& operator=(const TimerSet&) = delete;
  void At(int64_t at_ns, std::function<void()> f);

 private:
  store::Scheduler& scheduler_;
  uint64_t next_ = 0;
  std::map<uint64_t, std::unique_ptr<store::Scheduler::Timer>> timers_;
};

class FakeEtcdClient;

class FakeEtcd {
 public:
  static constexpr int64_t kDefaultCallTimeoutNanos = 1'000'000'000;

  FakeEtcd(store::Scheduler& scheduler, uint64_t seed, FakeEtcdOptions options = {});
  ~FakeEtcd();
  FakeEtcd(const FakeEtcd&) = delete;
  FakeEtcd& operator=(const FakeEtcd&) = delete;

  // A member's client, with its own link (faults) and call timeout.
  std::unique_ptr<FakeEtcdClient> Connect(std::string name, int64_t call_timeout_ns = kDefaultCallTimeoutNanos);

  // ---- Cluster faults.
  void SetUnavailable(bool unavailable);
  bool unavailable() const { return unavailable_; }
  // Revisions below rev can no longer be read or watched (rev is capped at the current one).
  void Compact(int64_t rev);
  void LeaderChange();

  // ---- What an invariant checker sees: the state as it is now, no latency, no faults.
  int64_t Revision() const { return revision_; }
  int64_t CompactRevision() const { return compact_revision_; }
  std::optional<etcd::KeyValue> Get(std::string_view key) const;
  std::vector<etcd::KeyValue> Scan(std::string_view key, std::string_view range_end) const;
  bool LeaseAlive(int64_t id) const { return leases_.count(id) != 0; }
  // Every change so far, in revision order (within a revision, in the order applied).
  const std::vector<EtcdWrite>& Log() const { return log_; }
  // Called on every change as it is applied, before anyone is told.
  void SetObserver(std::function<void(const EtcdWrite&)> observer) { observer_ = std::move(observer); }
  // A line per call, answer, watch message, lease expiry and fault, with the virtual time.
  void SetTrace(std::function<void(int64_t now_ns, const std::string& line)> trace) { trace_ = std::move(trace); }

 private:
  friend class FakeEtcdClient;

  struct Version {  // one entry of a key's history
    int64_t mod_revision = 0, create_revision = 0, version = 0, lease = 0;
    std::string value;
    bool deleted = false;
  };
  struct LeaseState {
    int64_t ttl_seconds = 0;
    int64_t expiry_ns = 0;
    std::set<std::string> keys;
    std::unique_ptr<store::Scheduler::Timer> timer;
  };
  struct Batch {  // the changes of one revision
    int64_t revision = 0;
    std::vector<etcd::WatchEvent> events;
  };

  // The requests, applied where they reach etcd. Not ok: nothing was applied.
  etcd::Status ApplyRange(const etcd::RangeRequest& request, etcd::RangeResponse* response) const;
  etcd::Status ApplyTxn(const etcd::TxnRequest& request, etcd::TxnResponse* response);
  etcd::Status ApplyPut(const std::string& key, const std::string& value, int64_t lease, int64_t* revision);
  etcd::Status ApplyGrant(int64_t ttl_seconds, int64_t* id, int64_t* granted_ttl);
  etcd::Status ApplyKeepAlive(int64_t id, int64_t* ttl_seconds, int64_t* revision);
  etcd::Status ApplyRevoke(int64_t id);

  static bool InRange(std::string_view key, std::string_view begin, std::string_view end);
  const Version* Visible(std::string_view key, int64_t at_revision) const;  // null: absent
  // Every key of [key, range_end) as it was at at_revision, in key order.
  std::vector<etcd::KeyValue> Read(std::string_view key, std::string_view range_end, int64_t at_revision) const;
  void PutKey(Batch& batch, const std::string& key, const std::string& value, int64_t lease);
  void DeleteKey(Batch& batch, const std::string& key);
  void Commit(Batch& batch);  // no-op when nothing changed
  void RevokeLease(int64_t id, const char* why);
  void ArmLease(int64_t id);

  // The network.
  int64_t Latency();
  uint64_t Draw(uint64_t n) { return n == 0 ? 0 : rng_() % n; }
  int64_t Between(int64_t lo, int64_t hi) {  // uniform in [lo, hi]
    return hi <= lo ? lo : lo + static_cast<int64_t>(Draw(static_cast<uint64_t>(hi - lo) + 1));
  }
  bool Chance(uint32_t percent) { return Draw(100) < percent; }
  FakeEtcdClient* Client(uint64_t client_id) const;
  void Trace(const std::string& line) const;
  int64_t Now() const { return scheduler_.NowNanos(); }

  store::Scheduler& scheduler_;
  const FakeEtcdOptions options_;
  std::mt19937_64 rng_;
  TimerSet network_;  // requests and answers on their way

  int64_t revision_ = 1;  // a new etcd's
  int64_t compact_revision_ = 0;
  std::map<std::string, std::vector<Version>, std::less<>> keys_;
  std::map<int64_t, LeaseState> leases_;
  int64_t leases_granted_ = 0;
  bool unavailable_ = false;
  std::vector<EtcdWrite> log_;
  std::map<uint64_t, FakeEtcdClient*> clients_;
  uint64_t clients_connected_ = 0;
  std::function<void(const EtcdWrite&)> observer_;
  std::function<void(int64_t, const std::string&)> trace_;
};

class FakeEtcdClient final : public etcd::Client {
 public:
  ~FakeEtcdClient() override;
  FakeEtcdClient(const FakeEtcdClient&) = delete;
  FakeEtcdClient& operator=(const FakeEtcdClient&) = delete;

  void Range(etcd::RangeRequest request, std::function<void(etcd::Status, etcd::RangeResponse)> done) override;
  void Txn(etcd::TxnRequest request, std::function<void(etcd::Status, etcd::TxnResponse)> done) override;
  void Put(std::string key, std::string value, int64_t lease,
           std::function<void(etcd::Status, int64_t revision)> done) override;
  void Grant(int64_t ttl_seconds, std::function<void(etcd::Status, int64_t id, int64_t ttl_seconds)> done) override;
  void KeepAliveOnce(int64_t id, std::function<void(etcd::Status, int64_t ttl_seconds, int64_t revision)> done) override;
  void Revoke(int64_t id, std::function<void(etcd::Status)> done) override;
  std::shared_ptr<etcd::WatchHandle> Watch(etcd::WatchOptions options, etcd::WatchEvents on_events,
                                           etcd::WatchEnded on_end) override;

  const std::string& name() const { return name_; }

  // ---- This member's link (see the header comment).
  void SetPartitioned(bool partitioned);
  void SetWatchStalled(bool stalled);
  void SetWatchLag(int64_t lag_ns) { watch_lag_ns_ = lag_ns; }
  void CancelWatches();
  // Every pending call fails and every watch ends (kError), "etcd client stopped", through the
  // scheduler; later calls fail so too. Idempotent.
  void Stop();

  size_t PendingCalls() const { return pending_.size(); }
  size_t Watches() const { return watches_.size(); }

 private:
  friend class FakeEtcd;
  struct PendingCall {
    std::function<void(etcd::Status)> fail;  // the callback with an error
    std::unique_ptr<store::Scheduler::Timer> timeout;
  };
  struct WatchState;
  class Handle;

  FakeEtcdClient(FakeEtcd& etcd, uint64_t id, std::string name, int64_t call_timeout_ns);

  // Applies the call at etcd (unless lost), answers with what apply returned.
  template <typename R>
  void Unary(const char* what, std::function<etcd::Status(FakeEtcd&, R*)> apply,
             std::function<void(etcd::Status, R)> done);
  // From the network: the answer of call (or, answer empty, its failure with error).
  void Complete(uint64_t call, std::function<void()> answer, etcd::Status error);
  void Fail(uint64_t call, etcd::Status error);

  // Watches.
  void Register(const std::shared_ptr<WatchState>& w);  // the watch reached etcd
  void Notify(int64_t revision, const std::vector<etcd::WatchEvent>& events);
  void Enqueue(WatchState& w, int64_t revision, std::vector<etcd::WatchEvent> events,
               std::optional<etcd::WatchEnd> end = std::nullopt);
  void Arm(WatchState& w);
  void Pump(WatchState& w);
  void End(WatchState& w, etcd::WatchEnd end);  // on_end through the scheduler; nothing after
  void ArmProgress(WatchState& w);
  std::shared_ptr<WatchState> Find(uint64_t watch_id) const;
  bool Held() const { return partitioned_ || watch_stalled_; }

  FakeEtcd& etcd_;
  const uint64_t id_;
  const std::string name_;
  const int64_t call_timeout_ns_;
  TimerSet timers_;  // this client's own: failures delivered later, on_end
  bool partitioned_ = false, watch_stalled_ = false, stopped_ = false;
  int64_t watch_lag_ns_ = 0;
  uint64_t next_call_ = 1, next_watch_ = 1;
  std::map<uint64_t, PendingCall> pending_;
  std::map<uint64_t, std::shared_ptr<WatchState>> watches_;
};

}  // namespace fencing::sim
