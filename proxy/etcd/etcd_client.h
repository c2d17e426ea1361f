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
// Streaming calls: see Watch and LeaseKeepAlive below.
// chunked bodies of one JSON object per message, {"result": ...} or {"error": ...}) go beside
// Call as a Stream(path, first request, on_message, on_end) that owns a connection of its own,
// never a pooled one, reads the body with a buffer_body parser and splits it at each message.
// They reuse Connect/Authenticate below and the endpoint order; they need no change to Call.

#include "config/config.h"

#include <boost/json/object.hpp>

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

// The range_end that makes [prefix, range_end) every key starting with prefix (clientv3's
// GetPrefixRangeEnd): the prefix with its last byte below 0xff incremented and what follows it
// dropped; "\0" (every key from prefix on) when the prefix is empty or all 0xff.
std::string PrefixRangeEnd(std::string_view prefix);

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

  // Completes every pending call with an error ("etcd client stopped"), closes the connections
  // and joins the thread. Idempotent; must not be called from a callback.
  void Stop();

  std::chrono::milliseconds timeout() const;

 private:
  class Impl;
  explicit EtcdClient(std::shared_ptr<Impl> impl);
  std::shared_ptr<Impl> impl_;
};

}  // namespace fencing
