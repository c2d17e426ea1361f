// FakeEtcd: the cluster's state (MVCC, txn, leases) and the network's timing. The clients' side
// (calls in flight, timeouts, watches, link faults) is in fake_etcd_client.cpp.

#include "fake_etcd.h"

#include <algorithm>
#include <limits>
#include <utility>

namespace fencing::sim {
namespace {

constexpr int64_t kLatest = std::numeric_limits<int64_t>::max();
// Lease ids look like etcd's (large, positive) and are handed out in order.
constexpr int64_t kFirstLeaseId = 0x694d71a2c3e40001;

etcd::Status Error(std::string text, int grpc_code) { return etcd::Status{std::move(text), grpc_code}; }

}  // namespace

// What the timers own may start or cancel others: they go once the map is out of the way.
TimerSet::~TimerSet() {
  auto timers = std::move(timers_);
  timers_.clear();
}

void TimerSet::At(int64_t at_ns, std::function<void()> f) {
  const uint64_t id = next_++;
  timers_[id] = scheduler_.At(at_ns, [this, id, f = std::move(f)] {
    timers_.erase(id);  // f may destroy this set: nothing of it is touched after f
    f();
  });
}

FakeEtcd::FakeEtcd(store::Scheduler& scheduler, uint64_t seed, FakeEtcdOptions options)
    : scheduler_(scheduler), options_(options), rng_(seed), network_(scheduler) {}

FakeEtcd::~FakeEtcd() = default;

std::unique_ptr<FakeEtcdClient> FakeEtcd::Connect(std::string name, int64_t call_timeout_ns) {
  const uint64_t id = ++clients_connected_;
  std::unique_ptr<FakeEtcdClient> client(new FakeEtcdClient(*this, id, std::move(name), call_timeout_ns));
  clients_[id] = client.get();
  return client;
}

FakeEtcdClient* FakeEtcd::Client(uint64_t client_id) const {
  auto it = clients_.find(client_id);
  return it == clients_.end() ? nullptr : it->second;
}

// ------------------------------------------------------------------------------ faults

void FakeEtcd::SetUnavailable(bool unavailable) {
  if (unavailable == unavailable_) return;
  unavailable_ = unavailable;
  Trace(unavailable ? "cluster unavailable" : "cluster available again");
  if (!unavailable) LeaderChange();  // the leases' clocks start again on the new leader
}

void FakeEtcd::Compact(int64_t rev) {
  rev = std::min(rev, revision_);
  if (rev <= compact_revision_) return;
  compact_revision_ = rev;
  Trace("compacted at " + std::to_string(rev));
}

void FakeEtcd::LeaderChange() {
  Trace("leader change");
  for (auto& [id, lease] : leases_) {
    lease.expiry_ns = Now() + lease.ttl_seconds * 1'000'000'000;
    ArmLease(id);
  }
}

// ------------------------------------------------------------------------------ reads

bool FakeEtcd::InRange(std::string_view key, std::string_view begin, std::string_view end) {
  if (end.empty()) return key == begin;
  if (key < begin) return false;
  return end == std::string_view("\0", 1) || key < end;  // "\0": every key from begin on
}

const FakeEtcd::Version* FakeEtcd::Visible(std::string_view key, int64_t at_revision) const {
  auto found = keys_.find(key);
  if (found == keys_.end()) return nullptr;
  const std::vector<Version>& history = found->second;
  auto it = std::upper_bound(history.begin(), history.end(), at_revision,
                             [](int64_t at, const Version& v) { return at < v.mod_revision; });
  if (it == history.begin()) return nullptr;
  --it;
  return it->deleted ? nullptr : &*it;
}

std::vector<etcd::KeyValue> FakeEtcd::Read(std::string_view key, std::string_view range_end, int64_t at_revision) const {
  std::vector<etcd::KeyValue> kvs;
  for (auto it = keys_.lower_bound(key); it != keys_.end() && InRange(it->first, key, range_end); ++it) {
    const Version* v = Visible(it->first, at_revision);
    if (v == nullptr) continue;
    kvs.push_back(etcd::KeyValue{it->first, v->value, v->create_revision, v->mod_revision, v->version, v->lease});
  }
  return kvs;
}

std::optional<etcd::KeyValue> FakeEtcd::Get(std::string_view key) const {
  std::vector<etcd::KeyValue> kvs = Read(key, {}, kLatest);
  if (kvs.empty()) return std::nullopt;
  return kvs.front();
}

std::vector<etcd::KeyValue> FakeEtcd::Scan(std::string_view key, std::string_view range_end) const {
  return Read(key, range_end, kLatest);
}

etcd::Status FakeEtcd::ApplyRange(const etcd::RangeRequest& request, etcd::RangeResponse* response) const {
  if (request.revision > revision_) return Error("etcdserver: mvcc: required revision is a future revision", 11);
  if (request.revision > 0 && request.revision < compact_revision_) {
    return Error("etcdserver: mvcc: required revision has been compacted", 11);
  }
  response->revision = revision_;
  response->kvs = Read(request.key, request.range_end, request.revision > 0 ? request.revision : kLatest);
  if (request.sort_by == etcd::RangeRequest::SortBy::kCreateRevision) {  // ascending; ties in key order
    std::stable_sort(response->kvs.begin(), response->kvs.end(),
                     [](const etcd::KeyValue& a, const etcd::KeyValue& b) { return a.create_revision < b.create_revision; });
  }
  response->more = request.limit > 0 && static_cast<int64_t>(response->kvs.size()) > request.limit;
  if (response->more) response->kvs.resize(static_cast<size_t>(request.limit));
  if (request.keys_only) {
    for (etcd::KeyValue& kv : response->kvs) kv.value.clear();
  }
  return {};
}

// ------------------------------------------------------------------------------ writes

void FakeEtcd::PutKey(Batch& batch, const std::string& key, const std::string& value, int64_t lease) {
  const Version* current = Visible(key, kLatest);
  if (current != nullptr && current->lease != 0 && current->lease != lease) {
    if (auto old = leases_.find(current->lease); old != leases_.end()) old->second.keys.erase(key);
  }
  Version v;
  v.mod_revision = batch.revision;
  v.create_revision = current != nullptr ? current->create_revision : batch.revision;
  v.version = current != nullptr ? current->version + 1 : 1;
  v.lease = lease;
  v.value = value;
  if (lease != 0) leases_.at(lease).keys.insert(key);
  keys_[key].push_back(v);
  batch.events.push_back(etcd::WatchEvent{etcd::WatchEvent::Type::kPut,
                                          etcd::KeyValue{key, value, v.create_revision, v.mod_revision, v.version, lease}});
}

void FakeEtcd::DeleteKey(Batch& batch, const std::string& key) {
  const Version* current = Visible(key, kLatest);
  if (current == nullptr) return;  // nothing to delete: no change, no revision
  if (current->lease != 0) {
    if (auto lease = leases_.find(current->lease); lease != leases_.end()) lease->second.keys.erase(key);
  }
  Version v;
  v.mod_revision = batch.revision;
  v.deleted = true;
  keys_[key].push_back(v);
  etcd::KeyValue kv;
  kv.key = key;
  kv.mod_revision = batch.revision;
  batch.events.push_back(etcd::WatchEvent{etcd::WatchEvent::Type::kDelete, std::move(kv)});
}

void FakeEtcd::Commit(Batch& batch) {
  if (batch.events.empty()) return;
  revision_ = batch.revision;
  for (const etcd::WatchEvent& event : batch.events) {
    log_.push_back(EtcdWrite{Now(), event});
    if (trace_) {
      Trace(std::string(event.type == etcd::WatchEvent::Type::kPut ? "put " : "delete ") + event.kv.key +
            (event.type == etcd::WatchEvent::Type::kPut ? "=" + event.kv.value : "") + " @" +
            std::to_string(revision_));
    }
    if (observer_) observer_(log_.back());
  }
  for (const auto& [id, client] : clients_) client->Notify(revision_, batch.events);
}

etcd::Status FakeEtcd::ApplyPut(const std::string& key, const std::string& value, int64_t lease, int64_t* revision) {
  if (lease != 0 && leases_.count(lease) == 0) return Error("etcdserver: requested lease not found", 5);
  Batch batch{revision_ + 1, {}};
  PutKey(batch, key, value, lease);
  Commit(batch);
  *revision = revision_;
  return {};
}

etcd::Status FakeEtcd::ApplyTxn(const etcd::TxnRequest& request, etcd::TxnResponse* response) {
  for (const std::vector<etcd::Op>* branch : {&request.success, &request.failure}) {
    std::set<std::string_view> written;
    for (const etcd::Op& op : *branch) {
      if (op.type != etcd::Op::Type::kRange && !written.insert(op.key).second) {
        return Error("etcdserver: duplicate key given in txn request", 3);
      }
    }
  }
  bool succeeded = true;
  for (const etcd::Compare& compare : request.compare) {
    const Version* v = Visible(compare.key, kLatest);
    if ((v != nullptr ? v->mod_revision : 0) != compare.mod_revision) succeeded = false;
  }
  const std::vector<etcd::Op>& ops = succeeded ? request.success : request.failure;
  for (const etcd::Op& op : ops) {
    if (op.type == etcd::Op::Type::kPut && op.lease != 0 && leases_.count(op.lease) == 0) {
      return Error("etcdserver: requested lease not found", 5);
    }
  }
  Batch batch{revision_ + 1, {}};
  response->succeeded = succeeded;
  response->responses.clear();
  for (const etcd::Op& op : ops) {
    etcd::RangeResponse r;
    switch (op.type) {
      case etcd::Op::Type::kRange:  // sees the txn's own writes before it, as etcd's does
        r.kvs = Read(op.key, op.range_end, kLatest);
        break;
      case etcd::Op::Type::kPut:
        PutKey(batch, op.key, op.value, op.lease);
        break;
      case etcd::Op::Type::kDelete:
        DeleteKey(batch, op.key);
        break;
    }
    response->responses.push_back(std::move(r));
  }
  Commit(batch);
  response->revision = revision_;
  for (size_t i = 0; i < ops.size(); ++i) {
    if (ops[i].type == etcd::Op::Type::kRange) response->responses[i].revision = revision_;
  }
  return {};
}

// ------------------------------------------------------------------------------ leases

void FakeEtcd::ArmLease(int64_t id) {
  LeaseState& lease = leases_.at(id);
  const int64_t sweep = options_.expiry_sweep_max_ns > 0 ? Between(0, options_.expiry_sweep_max_ns) : 0;
  lease.timer = scheduler_.At(lease.expiry_ns + sweep, [this, id] {
    // Without a leader nothing expires; the recovery's LeaderChange arms the lease again.
    if (unavailable_) return;
    RevokeLease(id, "expired");
  });
}

void FakeEtcd::RevokeLease(int64_t id, const char* why) {
  auto it = leases_.find(id);
  if (it == leases_.end()) return;
  const std::set<std::string> keys = std::move(it->second.keys);
  std::unique_ptr<store::Scheduler::Timer> timer = std::move(it->second.timer);  // may be running now
  leases_.erase(it);
  Trace("lease " + std::to_string(id) + " " + why + " (" + std::to_string(keys.size()) + " keys)");
  Batch batch{revision_ + 1, {}};
  for (const std::string& key : keys) DeleteKey(batch, key);  // in key order, as etcd does
  Commit(batch);
}

etcd::Status FakeEtcd::ApplyGrant(int64_t ttl_seconds, int64_t* id, int64_t* granted_ttl) {
  *id = kFirstLeaseId + leases_granted_++;
  *granted_ttl = std::max(ttl_seconds, options_.min_lease_ttl_seconds);
  LeaseState& lease = leases_[*id];
  lease.ttl_seconds = *granted_ttl;
  lease.expiry_ns = Now() + *granted_ttl * 1'000'000'000;
  ArmLease(*id);
  return {};
}

etcd::Status FakeEtcd::ApplyKeepAlive(int64_t id, int64_t* ttl_seconds, int64_t* revision) {
  *revision = revision_;
  auto it = leases_.find(id);
  if (it == leases_.end() || Now() >= it->second.expiry_ns) {
    *ttl_seconds = 0;  // gone, or expired and about to go: not an error, as in etcd
    return {};
  }
  *ttl_seconds = it->second.ttl_seconds;
  it->second.expiry_ns = Now() + it->second.ttl_seconds * 1'000'000'000;
  ArmLease(id);
  return {};
}

etcd::Status FakeEtcd::ApplyRevoke(int64_t id) {
  if (leases_.count(id) == 0) return Error("etcdserver: requested lease not found", 5);
  RevokeLease(id, "revoked");
  return {};
}

// ------------------------------------------------------------------------------ network

int64_t FakeEtcd::Latency() {
  if (options_.slow_one_in != 0 && Draw(options_.slow_one_in) == 0) {
    return Between(options_.latency_max_ns, options_.slow_max_ns);
  }
  return Between(options_.latency_min_ns, options_.latency_max_ns);
}

void FakeEtcd::Trace(const std::string& line) const {
  if (trace_) trace_(Now(), line);
}

}  // namespace fencing::sim
