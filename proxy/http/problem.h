#pragma once
// Every response the proxy makes itself is an RFC 9457 problem: application/problem+json with
// type, title, status, detail and, where they apply, route, fence, token and max_token.

#include <boost/beast/http/message.hpp>
#include <boost/beast/http/status.hpp>
#include <boost/beast/http/string_body.hpp>

#include <cstddef>
#include <cstdint>
#include <iterator>
#include <optional>
#include <string>
#include <string_view>

namespace fencing {

// gRPC's status codes (grpc/doc/statuscodes.md), for the answer to a gRPC call the proxy refuses
// itself: a trailers-only response whose grpc-status is its problem type's.
enum class GrpcStatus : uint8_t {
  kOk = 0, kCancelled = 1, kUnknown = 2, kInvalidArgument = 3, kDeadlineExceeded = 4, kNotFound = 5,
  kAlreadyExists = 6, kPermissionDenied = 7, kResourceExhausted = 8, kFailedPrecondition = 9, kAborted = 10,
  kOutOfRange = 11, kUnimplemented = 12, kInternal = 13, kUnavailable = 14, kDataLoss = 15, kUnauthenticated = 16,
};

// The catalogue: every problem type, declared once as (enum name, slug, title, status, gRPC
// status). The type URI is "urn:fencing-proxy:problem:<slug>"; clients and the docs key on the
// slug, so a slug never changes once released. Every 400 closes the connection (the next
// request's boundary is unknown after a malformed message).
// The gRPC status (docs/design-notes.md, "HTTP/2 and gRPC"): a token below the max, jumping or
// unverified is ABORTED (gRPC's code for "a sequencer check failure"); a malformed token or key
// INVALID_ARGUMENT, a missing one FAILED_PRECONDITION; writers PERMISSION_DENIED; every 502, 503
// and 504 UNAVAILABLE; a body or head over a limit RESOURCE_EXHAUSTED (as gRPC's own message
// limits); the rest as gRPC's HTTP-to-gRPC table maps their HTTP status (400 INTERNAL, 404
// UNIMPLEMENTED, others UNKNOWN); a gRPC call to an HTTP/1.1 backend, which cannot carry its
// trailers, UNIMPLEMENTED (501: the proxy does not carry gRPC over HTTP/1.1).
#define FENCING_PROBLEM_TYPES(X)                                                                          \
  X(kAmbiguousFraming, "ambiguous-framing", "Ambiguous request framing", bad_request, kInternal)          \
  X(kBadConnectionHeader, "bad-connection-header", "Connection header names a protected field",           \
    bad_request, kInternal)                                                                               \
  X(kBadHost, "bad-host", "Bad Host header", bad_request, kInternal)                                      \
  X(kUnderscoreHeader, "underscore-header", "Header name with an underscore", bad_request, kInternal)     \
  X(kMalformedRequest, "malformed-request", "Malformed request", bad_request, kInternal)                  \
  X(kMalformedBody, "malformed-body", "Malformed request body", bad_request, kInternal)                   \
  X(kAmbiguousPath, "ambiguous-path", "Ambiguous request path", bad_request, kInternal)                   \
  X(kUpgradeRefused, "upgrade-refused", "Protocol upgrade refused", bad_request, kInternal)               \
  X(kMalformedToken, "malformed-token", "Malformed fencing token", bad_request, kInvalidArgument)         \
  X(kMissingFenceKey, "missing-fence-key", "Fence key required", bad_request, kFailedPrecondition)        \
  X(kBadFenceKey, "bad-fence-key", "Malformed fence key", bad_request, kInvalidArgument)                  \
  X(kWriterNotAllowed, "writer-not-allowed", "Client may not write here", forbidden, kPermissionDenied)   \
  X(kNoRoute, "no-route", "No route", not_found, kUnimplemented)                                          \
  X(kMethodNotAllowed, "method-not-allowed", "Method not allowed", method_not_allowed, kUnknown)          \
  X(kStaleToken, "stale-token", "Stale fencing token", conflict, kAborted)                                \
  X(kTokenJump, "token-jump", "Fencing token jumps too far", conflict, kAborted)                          \
  X(kTokenNotVerified, "token-not-verified", "Fencing token not the lock holder's", conflict, kAborted)   \
  X(kBodyTimeout, "body-timeout", "Request body too slow", request_timeout, kUnknown)                     \
  X(kBodyTooLarge, "body-too-large", "Request body too large", payload_too_large, kResourceExhausted)     \
  X(kMissingToken, "missing-token", "Fencing token required", precondition_required, kFailedPrecondition) \
  X(kHeaderTooLarge, "header-too-large", "Request header too large",                                      \
    request_header_fields_too_large, kResourceExhausted)                                                  \
  X(kUpstreamUnavailable, "upstream-unavailable", "Backend unreachable", bad_gateway, kUnavailable)       \
  X(kUpstreamInvalid, "upstream-invalid-response", "Backend response refused", bad_gateway, kUnavailable) \
  X(kBackendTls, "backend-tls", "Backend TLS failed", bad_gateway, kUnavailable)                          \
  X(kStateUnavailable, "state-unavailable", "Fence state unavailable", service_unavailable, kUnavailable) \
  X(kFenceKeyLimit, "fence-key-limit", "Too many fence keys", service_unavailable, kUnavailable)          \
  X(kLockServiceUnavailable, "lock-service-unavailable", "Lock service unavailable",                      \
    service_unavailable, kUnavailable)                                                                    \
  X(kFenceStoreUnavailable, "fence-store-unavailable", "Shared fence store unavailable",                  \
    service_unavailable, kUnavailable)                                                                    \
  X(kUpstreamTimeout, "upstream-timeout", "Backend too slow", gateway_timeout, kUnavailable)           \
  X(kGrpcNeedsHttp2Backend, "grpc-needs-http2-backend", "gRPC needs an HTTP/2 backend", not_implemented, \
    kUnimplemented)

enum class ProblemType {
#define FENCING_PROBLEM_ENUM(name, slug, title, code, grpc) name,
  FENCING_PROBLEM_TYPES(FENCING_PROBLEM_ENUM)
#undef FENCING_PROBLEM_ENUM
};

struct ProblemTypeInfo {
  std::string_view slug;
  std::string_view title;
  boost::beast::http::status status;
  GrpcStatus grpc;
};

inline constexpr ProblemTypeInfo kProblemTypes[] = {
#define FENCING_PROBLEM_INFO(name, slug, title, code, grpc) \
  {slug, title, boost::beast::http::status::code, GrpcStatus::grpc},
    FENCING_PROBLEM_TYPES(FENCING_PROBLEM_INFO)
#undef FENCING_PROBLEM_INFO
};
inline constexpr size_t kProblemTypeCount = std::size(kProblemTypes);

constexpr const ProblemTypeInfo& Describe(ProblemType type) { return kProblemTypes[static_cast<size_t>(type)]; }

struct Problem {
  boost::beast::http::status status = boost::beast::http::status::bad_request;
  std::string_view type;   // the slug, e.g. "stale-token"; becomes "urn:fencing-proxy:problem:<slug>"
  std::string_view title;  // stable per type
  std::string detail;      // this occurrence
  std::string_view route;  // empty: omitted
  std::string_view fence;  // empty: omitted
  std::string_view key;    // the fence key of a keyed route; empty: omitted
  std::optional<uint64_t> token;
  std::optional<uint64_t> max_token;
  std::string_view lock_service;      // a verified raise: the service asked; empty: omitted
  std::optional<unsigned> retry_after;  // seconds; sent as Retry-After
};

// A problem of a catalogued type, without route or token details.
inline Problem MakeProblem(ProblemType type, std::string detail) {
  const ProblemTypeInfo& info = Describe(type);
  Problem p;
  p.status = info.status;
  p.type = info.slug;
  p.title = info.title;
  p.detail = std::move(detail);
  return p;
}

std::string ProblemJson(const Problem& problem);

// The gRPC status a gRPC call refused with this problem gets: its type's (the catalogue), UNKNOWN
// for a slug not in it.
GrpcStatus GrpcStatusOf(const Problem& problem);

// The full response; 409 carries X-Fencing-Token-Max, retry_after a Retry-After. keep_alive false adds Connection: close.
// head_request: the answer to a HEAD request has the same head (its Content-Length the length
// the body would have) and no body (RFC 9110 9.3.2): a body would be read as the next response.
boost::beast::http::response<boost::beast::http::string_body> MakeProblemResponse(
    const Problem& problem, unsigned http_version, bool keep_alive, bool head_request = false);

}  // namespace fencing
