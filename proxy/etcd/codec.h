#pragma once
// etcd's JSON gateway, as pure functions: the gRPC messages as JSON (POST /v3/<service>/<method>;
// bytes fields base64, int64 fields as JSON strings, zero values left out as proto3 does), kv.h's
// types to and from that JSON, gRPC status codes by name, and Classify: the one rule that says
// what an answer means to the caller (done, try the next endpoint, or authenticate again).
// Nothing here does I/O; connection_pool.h, transport.h and watch_stream.h use it, and
// codec_test.cpp tests it. The readers (response bodies -> kv.h) are in codec_read.cpp, the rest
// in codec.cpp.

#include "etcd/kv.h"

#include <boost/json/object.hpp>

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

namespace fencing::etcd {

// ---- Bytes, numbers, endpoints.

// Standard base64 with padding (the gateway's encoding of bytes fields).
std::string Base64Encode(std::string_view bytes);
// False when text is not valid padded base64.
bool Base64Decode(std::string_view text, std::string* bytes);

// An int64 field as the gateway writes it: a decimal string (or a JSON integer); absent means 0
// (proto3 leaves out zero values). False, with a readable error naming the field, for anything else.
bool ReadInt64(const boost::json::object& object, std::string_view field, int64_t* out, std::string* error);

struct Endpoint {
  bool tls = false;
  std::string host;  // as written; no brackets for IPv6
  uint16_t port = 0;
  std::string text;  // the endpoint as configured, for errors
};
// "http://host:port" or "https://host:port" (no path, no user info; one trailing "/" is allowed).
// False with an error naming the text otherwise.
bool ParseEndpoint(std::string_view text, Endpoint* out, std::string* error);

// ---- kv.h -> request bodies.

// /v3/kv/range, and a txn op's request_range.
boost::json::object ToJson(const RangeRequest& request);
// A txn compare: key's mod_revision == mod_revision.
boost::json::object ToJson(const Compare& compare);
// A txn's RequestOp: {"request_range" | "request_put" | "request_delete_range": ...}.
boost::json::object ToJson(const Op& op);
// /v3/kv/txn.
boost::json::object ToJson(const TxnRequest& request);
// /v3/kv/put (lease 0: none).
boost::json::object PutJson(std::string_view key, std::string_view value, int64_t lease);
// /v3/watch: {"create_request": ...}.
boost::json::object WatchCreateJson(const WatchOptions& options);
// /v3/lease/grant; /v3/lease/keepalive and /v3/lease/revoke ({"ID": ...}).
boost::json::object LeaseGrantJson(int64_t ttl_seconds);
boost::json::object LeaseIdJson(int64_t id);
// /v3/auth/authenticate.
boost::json::object AuthenticateJson(std::string_view name, std::string_view password);

// ---- Response bodies -> kv.h. Each is false, with a readable error, when a field has the wrong
// type, a bytes field is not base64, or something the caller relies on is missing.

// response.header.revision; 0 when absent or not an int64.
int64_t HeaderRevision(const boost::json::object& response);

// A key without a key is an error; the value may be absent (proto3 leaves out empty bytes).
bool ReadKeyValue(const boost::json::object& kv, KeyValue* out, std::string* error);

// The answer of /v3/kv/range. Its header.revision must be there (etcd always sends it).
bool ReadRangeResponse(const boost::json::object& response, RangeResponse* out, std::string* error);

// The answer of /v3/kv/txn to request: one response per op of the branch taken, each of the op's
// kind (response_range for kRange, ...), or it is an error. A range's revision is its own header's,
// else the txn's. header.revision must be there.
bool ReadTxnResponse(const boost::json::object& response, const TxnRequest& request, TxnResponse* out,
                     std::string* error);

// /v3/kv/put: its header.revision, which must be there.
bool ReadPutResponse(const boost::json::object& response, int64_t* revision, std::string* error);

// /v3/lease/grant: the ID (not 0) and TTL; the answer's own "error" text is an error too.
bool ReadLeaseGrantResponse(const boost::json::object& response, int64_t* id, int64_t* ttl_seconds,
                            std::string* error);
// One /v3/lease/keepalive answer: TTL (absent: 0, the lease is gone) and header.revision (0 if none).
bool ReadLeaseKeepAliveResponse(const boost::json::object& response, int64_t* ttl_seconds, int64_t* revision,
                                std::string* error);
// /v3/auth/authenticate: the token (not empty).
bool ReadAuthenticateResponse(const boost::json::object& response, std::string* token, std::string* error);

// One WatchResponse (a watch message's "result"), as etcd sent it; what each field means to the
// watch is watch_stream.h's.
struct WatchResponse {
  int64_t revision = 0;  // header.revision
  bool created = false;
  bool canceled = false;
  std::string cancel_reason;
  int64_t compact_revision = 0;
  std::vector<WatchEvent> events;  // in etcd's order
};
bool ReadWatchResponse(const boost::json::object& result, WatchResponse* out, std::string* error);

// ---- gRPC status codes (google.golang.org/grpc/codes): etcd's errors carry one.
enum class GrpcCode : int {
  kOk = 0,
  kCancelled = 1,
  kUnknown = 2,
  kInvalidArgument = 3,
  kDeadlineExceeded = 4,
  kNotFound = 5,
  kAlreadyExists = 6,
  kPermissionDenied = 7,
  kResourceExhausted = 8,
  kFailedPrecondition = 9,
  kAborted = 10,
  kOutOfRange = 11,
  kUnimplemented = 12,
  kInternal = 13,
  kUnavailable = 14,
  kDataLoss = 15,
  kUnauthenticated = 16,
};
// "NOT_FOUND", ...; "" for a number that is not a code.
std::string_view GrpcCodeName(int code);

// ---- What an answer means.

// One endpoint's answer to one request, as the transport got it.
struct Answer {
  // Not empty: no whole answer came ("connect: Connection refused", "receive: timed out", ...);
  // the fields below are unset.
  std::string transport_error;
  unsigned http_status = 0;
  // The body; for a streaming method answered with 200, one message of it.
  std::string body;
  // A streaming method (watch, lease keep-alive): a 200's messages are {"result": {...}} or
  // {"error": {"grpc_code": N, "message": ...}}. Any other status has the gateway's error body
  // ({"error": ..., "code": N, "message": ...}), streaming or not.
  bool stream = false;
};

struct Verdict {
  enum class Next {
    kFinal,         // the call ends here: status says ok or why not
    kNextEndpoint,  // another member may do better: no answer, a 5xx, or gRPC UNAVAILABLE (no leader, ...)
    kRenewAuth,     // the auth token is invalid or expired (or was not taken): authenticate again
  } next = Next::kFinal;
  // ok, or what went wrong, readable, without the endpoint ("HTTP 404: etcdserver: requested lease
  // not found (gRPC 5 NOT_FOUND)"; a stream's error message in a 200 without the "HTTP 200: ");
  // grpc_code when etcd gave one.
  Status status;
  boost::json::object response;  // ok: the response (a stream message's "result")
};

// Everything the pool's endpoint loop and a watch decide about an answer comes from here.
// In order: no answer, a 5xx or UNAVAILABLE -> kNextEndpoint; an auth token error (UNAUTHENTICATED,
// "invalid auth token", "revision of auth store is old", "user name is empty") -> kRenewAuth;
// anything else is kFinal: ok for a 200 whose body (message) is a JSON object (with a "result"
// object), an error otherwise (a body that is not JSON is never ok).
Verdict Classify(const Answer& answer);

}  // namespace fencing::etcd
