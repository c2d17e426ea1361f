#pragma once
// What the fence store asks of etcd, as typed interfaces: the shape of clientv3's kv.go
// (Range, Txn, Put), lease.go (Grant, KeepAliveOnce, Revoke) and watch.go (Watch). Two
// implementations: EtcdClient (etcd_client.h, the real one over etcd's JSON gateway) and the
// simulation's model of etcd (tests/unit/store/fake_etcd.h). Code written against these never
// sees JSON, base64 or HTTP.
//
// Callbacks: each is called exactly once (a watch's on_end too, with nothing after it), never
// inside the call that was given it, on the implementation's thread. A caller that has a thread
// of its own posts from there (etcd_fence_store.cpp does).

#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

namespace fencing::etcd {

// The outcome of one call.
struct Status {
  std::string error;   // empty: ok; else readable (endpoint, cause)
  int grpc_code = -1;  // etcd's gRPC status when it gave one (5 NOT_FOUND, 14 UNAVAILABLE, ...)
  bool ok() const { return error.empty(); }
};

// One key-value as etcd returns it. A deleted key's kv in a watch event carries only key and
// mod_revision (the delete's revision).
struct KeyValue {
  std::string key, value;  // bytes
  int64_t create_revision = 0, mod_revision = 0, version = 0, lease = 0;
};

struct RangeRequest {
  std::string key;
  std::string range_end;  // empty: key alone; PrefixRangeEnd(p): every key starting with p
  int64_t revision = 0;   // 0: the newest
  int64_t limit = 0;      // 0: no limit
  // The order the kvs come in, ascending, the limit applied after it (clientv3's WithSort). The
  // fence store keeps kKey, etcd's own order; EtcdLockService asks for the lowest create revision.
  enum class SortBy { kKey, kCreateRevision } sort_by = SortBy::kKey;
  bool keys_only = false;  // kvs without their values
};
struct RangeResponse {
  int64_t revision = 0;  // the store's revision the range was read at (header.revision)
  std::vector<KeyValue> kvs;
  bool more = false;  // keys past the limit
};

// A compare of a txn: key's mod_revision == mod_revision (0: the key does not exist). The only
// compare the fence store needs; the gateway's others are not modelled.
struct Compare {
  std::string key;
  int64_t mod_revision = 0;
};
struct Op {
  enum class Type { kRange, kPut, kDelete } type = Type::kRange;
  std::string key;
  std::string range_end;  // kRange only
  std::string value;      // kPut only
  int64_t lease = 0;      // kPut only; 0: none

  static Op Range(std::string key, std::string range_end = {}) {
    return Op{Type::kRange, std::move(key), std::move(range_end), {}, 0};
  }
  static Op Put(std::string key, std::string value, int64_t lease = 0) {
    return Op{Type::kPut, std::move(key), {}, std::move(value), lease};
  }
  static Op Delete(std::string key) { return Op{Type::kDelete, std::move(key), {}, {}, 0}; }
};
struct TxnRequest {
  std::vector<Compare> compare;
  std::vector<Op> success, failure;
};
struct TxnResponse {
  bool succeeded = false;
  int64_t revision = 0;  // the txn's revision when it wrote, else the store's
  // One per op of the branch taken, in order; the range of a kRange op, empty for the others.
  std::vector<RangeResponse> responses;
};

class Kv {
 public:
  virtual void Range(RangeRequest request, std::function<void(Status, RangeResponse)> done) = 0;
  virtual void Txn(TxnRequest request, std::function<void(Status, TxnResponse)> done) = 0;
  // revision: the put's (header.revision).
  virtual void Put(std::string key, std::string value, int64_t lease,
                   std::function<void(Status, int64_t revision)> done) = 0;

 protected:
  ~Kv() = default;
};

class Lease {
 public:
  // The id is etcd's choice; ttl_seconds the TTL it granted. Both 0 on error.
  virtual void Grant(int64_t ttl_seconds, std::function<void(Status, int64_t id, int64_t ttl_seconds)> done) = 0;
  // One keep-alive round. ttl_seconds 0 with an ok status: the lease is gone (expired or revoked;
  // etcd does not call that an error). revision: the answer's header.revision (0 if none).
  virtual void KeepAliveOnce(int64_t id, std::function<void(Status, int64_t ttl_seconds, int64_t revision)> done) = 0;
  // The lease and every key attached to it are deleted. An unknown lease: grpc_code 5.
  virtual void Revoke(int64_t id, std::function<void(Status)> done) = 0;

 protected:
  ~Lease() = default;
};

struct WatchOptions {
  std::string key, range_end;   // range_end empty: key alone
  int64_t start_revision = 0;   // 0: from the next revision on
  bool progress_notify = true;  // etcd sends an empty message now and then (its own interval)
};
struct WatchEvent {
  enum class Type { kPut, kDelete } type = Type::kPut;
  KeyValue kv;
};
struct WatchEnd {
  enum class Reason {
    kCompacted,  // start_revision is compacted: read again at compact_revision or later, watch again
    kError,      // connection, etcd (canceled, error message) or start-up timeout; error says which
    kCancelled,  // WatchHandle::Cancel
  } reason = Reason::kError;
  int64_t compact_revision = 0;  // kCompacted
  std::string error;             // kError: readable
};
class WatchHandle {
 public:
  virtual ~WatchHandle() = default;
  // Idempotent, from any thread: on_end(kCancelled) follows unless the watch has already ended.
  // Dropping the handle does not cancel.
  virtual void Cancel() = 0;
};
// revision: the message's header.revision. Also called with no events for the "created" message
// (the first) and for progress notifications. Events come in revision order within one watch.
using WatchEvents = std::function<void(int64_t revision, std::vector<WatchEvent> events)>;
using WatchEnded = std::function<void(WatchEnd)>;

class Watcher {
 public:
  virtual std::shared_ptr<WatchHandle> Watch(WatchOptions options, WatchEvents on_events, WatchEnded on_end) = 0;

 protected:
  ~Watcher() = default;
};

// All three, as one client offers them.
class Client : public Kv, public Lease, public Watcher {
 public:
  virtual ~Client() = default;
};

// The range_end that makes [prefix, range_end) every key starting with prefix (clientv3's
// GetPrefixRangeEnd): the prefix with its last byte below 0xff incremented and what follows it
// dropped; "\0" (every key from prefix on) when the prefix is empty or all 0xff.
std::string PrefixRangeEnd(std::string_view prefix);

}  // namespace fencing::etcd
