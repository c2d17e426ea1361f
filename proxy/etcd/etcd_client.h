#pragma once
// An etcd v3 client over etcd's JSON gateway (POST /v3/<service>/<method>, the gRPC messages as
// JSON: bytes fields base64, int64 fields as JSON strings). Used by verified raises
// (EtcdLockService) and meant to carry shared fences as well. Why the gateway and not gRPC:
// docs/design-notes.md, "Lock-service clients: etcd over its JSON gateway".
//
// Threads: the client runs its own io_context on one thread of its own. Call may be made from any
// thread; it posts to that thread, and the callback runs there (never inside Call). Callbacks must
// not block: they hold up every other call of the client.
//
// Per call:
//   - one deadline, the config's timeout, that covers everything (resolve, connect, TLS
//     handshake, authentication, the request, the response): at the latest then the call
//     completes with an error ("timed out after ..."); it never hangs;
//   - endpoints are tried in turn, starting with the last one that worked, when one cannot be
//     connected, answers 5xx or says the gRPC status UNAVAILABLE; each endpoint's connect gets
//     an equal share of what is left of the deadline, so a black-holed first endpoint leaves time
//     for the next;
//   - connections are kept alive and reused (a few idle ones at most); a reused connection that
//     the server had closed meanwhile is replaced once by a fresh one;
//   - with a username, the token from /v3/auth/authenticate goes in the Authorization header;
//     when etcd says the token is invalid or expired, the client authenticates again, once.
// A request that failed after it was sent may be resent to the next endpoint: callers send only
// requests for which that is harmless (reads; a txn whose compare fails the second time).
//
// Streaming calls: the gateway answers /v3/watch and /v3/lease/keepalive with a chunked body of
// one JSON object per message, {"result": ...} or {"error": ...}.
//   - LeaseKeepAlive sends one message with Content-Length; etcd then sees the end of the
//     request stream after it, answers that one message and ends the response, so a keep-alive
//     round is an ordinary call (deadline, endpoints, pooled connections, auth) whose answer is
//     unwrapped from {"result": ...}.
//   - Watch owns a connection of its own, never a pooled one, reads the body as it comes and
//     splits it at each message. Only connect + authenticate + the "created" message have a
//     deadline (the config's timeout); after that a watch lasts until etcd or the connection ends
//     it, or Cancel. TCP keep-alive probes (after 10 s idle) notice a peer that vanished without
//     a word.

#include "config/config.h"
#include "etcd/kv.h"

#include <boost/json/object.hpp>

#include <chrono>

#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace fencing {

// ---- The small rules of etcd's JSON gateway (pure functions).
namespace etcd {

// Standard base64 with padding (the gateway's encoding of bytes fields).
std::string Base64Encode(std::string_view bytes);
// False when text is not valid padded base64.
bool Base64Decode(std::string_view text, std::string* bytes);

// An int64 field as the gateway writes it: a decimal string (or a JSON integer); absent means 0
// (proto3 leaves out zero values). False, with a readable error, for anything else.
bool ReadInt64(const boost::json::object& object, std::string_view field, int64_t* out, std::string* error);

struct Endpoint {
  bool tls = false;
  std::string host;  // as written; no brackets for IPv6
  uint16_t port = 0;
  std::string text;  // the endpoint as configured, for errors
};
// "http://host:port" or "https://host:port" (no path, no user info). False with an error otherwise.
bool ParseEndpoint(std::string_view text, Endpoint* out, std::string* error);

// False with a readable error when a field has the wrong type or the key is missing or not base64
// (the value may be absent: proto3 leaves out empty bytes).
bool ReadKeyValue(const boost::json::object& kv, KeyValue* out, std::string* error);

// A RangeResponse (the answer of /v3/kv/range, or a txn's "response_range"): its kvs (in etcd's
// order) and whether there are more keys past its limit.
bool ReadRange(const boost::json::object& range_response, std::vector<KeyValue>* out, bool* more, std::string* error);

// response.header.revision; 0 when absent or not an int64.
int64_t HeaderRevision(const boost::json::object& response);

// The request of /v3/kv/range, and of a txn op's request_range. range_end empty: key alone;
// revision 0: the newest; limit 0: no limit.
boost::json::object RangeRequest(std::string_view key, std::string_view range_end = {}, int64_t revision = 0,
                                 int64_t limit = 0);

// A txn compare: key's mod revision == revision (0: the key does not exist).
boost::json::object CompareModRevision(std::string_view key, int64_t revision);

// Txn ops: {"request_put": ...} (lease 0: none), {"request_delete_range": ...} of one key,
// {"request_range": ...}.
boost::json::object PutOp(std::string_view key, std::string_view value, int64_t lease = 0);
boost::json::object DeleteOp(std::string_view key);
boost::json::object RangeOp(std::string_view key, std::string_view range_end = {});

// The body of /v3/kv/txn.
boost::json::object Txn(std::vector<boost::json::object> compare, std::vector<boost::json::object> success,
                        std::vector<boost::json::object> failure);

struct TxnResult {
  bool succeeded = false;
  int64_t revision = 0;  // the header's: the txn's revision when it wrote, else the store's
  // responses[i]: the i-th op's (of the branch taken) inner object, e.g. the response_range
  // object itself (ReadRange reads it).
  std::vector<boost::json::object> responses;
};
bool ReadTxn(const boost::json::object& response, TxnResult* out, std::string* error);

// The events of one WatchResponse ("events" absent: none).
bool ReadWatchEvents(const boost::json::object& watch_response, std::vector<WatchEvent>* out, std::string* error);

}  // namespace etcd

// The outcome of one unary call.
struct EtcdResult {
  bool ok() const { return error.empty(); }
  boost::json::object response;  // ok: the gateway's JSON response
  std::string error;             // not ok: what went wrong, readable (endpoint, cause)
  // Not ok and etcd answered with a gRPC status: its code (5 NOT_FOUND, 9 FAILED_PRECONDITION,
  // 14 UNAVAILABLE, 16 UNAUTHENTICATED, ...); -1 for transport errors and timeouts.
  int grpc_code = -1;
};

class EtcdClient {
 public:
  using Callback = std::function<void(EtcdResult)>;

  // Checks the endpoints, reads the password file and loads the TLS files, then starts the
  // client's thread. Null with a readable error when any of that fails. Nothing is sent to etcd
  // yet: an unreachable etcd is a call's error, not a start error.
  static std::unique_ptr<EtcdClient> Create(const EtcdClientConfig& config, std::string* error);

  ~EtcdClient();  // Stop()
  EtcdClient(const EtcdClient&) = delete;
  EtcdClient& operator=(const EtcdClient&) = delete;

  // One unary call: POSTs request (as JSON) to path ("/v3/kv/range") and calls done exactly once
  // with the response object or an error. After Stop, done is called at once with an error.
  void Call(std::string path, boost::json::object request, Callback done);

  // ---- Leases. done runs exactly once on the client's thread; id and ttl_seconds are 0 on error.
  using LeaseCallback = std::function<void(EtcdResult result, int64_t id, int64_t ttl_seconds)>;
  // /v3/lease/grant; the id is chosen by etcd, ttl_seconds is the TTL etcd granted.
  void LeaseGrant(int64_t ttl_seconds, LeaseCallback done);
  // One keep-alive round. ttl_seconds 0 (with an ok result): the lease is gone (expired or
  // revoked; etcd does not call that an error).
  void LeaseKeepAlive(int64_t id, LeaseCallback done);
  // /v3/lease/revoke: the lease and every key attached to it are deleted. An unknown lease is an
  // error (gRPC code 5, "requested lease not found").
  void LeaseRevoke(int64_t id, Callback done);

  // ---- Watches.
  // (The types of kv.h, by their old names here.)
  using WatchOptions = etcd::WatchOptions;
  using WatchEnd = etcd::WatchEnd;
  using WatchHandle = etcd::WatchHandle;
  using WatchEvents = etcd::WatchEvents;
  using WatchEnded = etcd::WatchEnded;
  // Starts a watch; on_events and on_end run on the client's thread, on_end exactly once and
  // nothing after it. Stop ends every watch with kError "etcd client stopped"; after Stop, on_end
  // is called at once (inside Watch, as Call does: the client's thread is gone).
  std::shared_ptr<WatchHandle> Watch(WatchOptions options, WatchEvents on_events, WatchEnded on_end);

  // Completes every pending call with an error ("etcd client stopped"), ends every watch (kError,
  // the same words), closes the connections and joins the thread. Idempotent; must not be called
  // from a callback.
  void Stop();

  std::chrono::milliseconds timeout() const;

 private:
  class Impl;
  explicit EtcdClient(std::shared_ptr<Impl> impl);
  std::shared_ptr<Impl> impl_;
};

}  // namespace fencing
