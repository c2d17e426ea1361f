#pragma once
// EtcdClient: kv.h's Kv, Lease and Watcher over etcd's JSON gateway (POST /v3/<service>/<method>,
// the gRPC messages as JSON). Used by verified raises (EtcdLockService) and shared fences. Why the
// gateway and not gRPC: docs/design-notes.md, "Lock-service clients: etcd over its JSON gateway".
//
// Layered as clientv3 is:
//   codec.h            the gateway's JSON <-> kv.h's types, gRPC codes, Classify (what an
//                      answer means)
//   connection.h       one plain or TLS connection
//   connection_pool.h  the endpoints in turn, the idle connections: where a request goes
//   transport.h        the deadline, cancellation, auth: how every request goes
//   watch_stream.h     a watch's messages, from the connection the transport hands over
//   etcd_client.h      this: the client's thread, and kv.h's calls as requests
//
// Threads: the client runs its own io_context on one thread of its own. Every method may be called
// from any thread; it posts to that thread, and the callback runs there, exactly once and never
// inside the call (kv.h), except after Stop (below). Callbacks must not block: they hold up every
// other call of the client.
//
// Each call is one request of the transport (transport.h, connection_pool.h: one deadline, the
// config's timeout, covering everything; the endpoints in turn with equal shares of it, starting
// with the last one that worked; pooled connections, a stale one replaced once; auth renewed
// once). KeepAliveOnce is one message of /v3/lease/keepalive, answered and ended by etcd like a
// unary call. A Watch has a connection of its own with TCP keep-alive probes; only its start (up
// to the "created" message) has the deadline, then it lasts until etcd, the connection, Cancel or
// Stop ends it (watch_stream.h says what ends it how).
//
// An answer that does not read as the call's response (a field of the wrong type, a key that is
// not base64, a txn whose responses do not match its ops, no header.revision) is an error, never a
// guess. kv.h's Status.grpc_code is etcd's code when it gave one.

#include "config/config.h"
#include "etcd/kv.h"

#include <chrono>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>

namespace fencing {

class EtcdClient : public etcd::Client {
 public:
  // Checks the endpoints, reads the password file and loads the TLS files, then starts the
  // client's thread. Null with a readable error when any of that fails. Nothing is sent to etcd
  // yet: an unreachable etcd is a call's error, not a start error.
  static std::unique_ptr<EtcdClient> Create(const EtcdClientConfig& config, std::string* error);

  ~EtcdClient() override;  // Stop()
  EtcdClient(const EtcdClient&) = delete;
  EtcdClient& operator=(const EtcdClient&) = delete;

  // ---- kv.h.
  void Range(etcd::RangeRequest request, std::function<void(etcd::Status, etcd::RangeResponse)> done) override;
  void Txn(etcd::TxnRequest request, std::function<void(etcd::Status, etcd::TxnResponse)> done) override;
  void Put(std::string key, std::string value, int64_t lease,
           std::function<void(etcd::Status, int64_t revision)> done) override;
  void Grant(int64_t ttl_seconds, std::function<void(etcd::Status, int64_t id, int64_t ttl_seconds)> done) override;
  void KeepAliveOnce(int64_t id, std::function<void(etcd::Status, int64_t ttl_seconds, int64_t revision)> done) override;
  void Revoke(int64_t id, std::function<void(etcd::Status)> done) override;
  // Stop ends every watch with kError "etcd client stopped". A handle may outlive the client
  // (Cancel is then harmless).
  std::shared_ptr<etcd::WatchHandle> Watch(etcd::WatchOptions options, etcd::WatchEvents on_events,
                                           etcd::WatchEnded on_end) override;

  // Completes every pending call with an error ("etcd client stopped"), ends every watch (kError,
  // the same words), closes the connections and joins the thread. Idempotent; must not be called
  // from a callback. After Stop the thread is gone: a call's callback, and a new watch's on_end,
  // run at once, inside the call (the one exception to kv.h's "never inside the call").
  void Stop();

  std::chrono::milliseconds timeout() const;

 private:
  class Impl;
  explicit EtcdClient(std::shared_ptr<Impl> impl);
  std::shared_ptr<Impl> impl_;
};

}  // namespace fencing
