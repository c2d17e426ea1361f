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

// The catalogue: every problem type, declared once as (enum name, slug, title, status). The type
// URI is "urn:fencing-proxy:problem:<slug>"; clients and the docs key on the slug, so a slug
// never changes once released. Every 400 closes the connection (the next request's boundary is
// unknown after a malformed message).
#define FENCING_PROBLEM_TYPES(X)                                                                           \
  X(kAmbiguousFraming, "ambiguous-framing", "Ambiguous request framing", bad_request)                     \
  X(kBadConnectionHeader, "bad-connection-header", "Connection header names a protected field",          \
    bad_request)                                                                                           \
  X(kBadHost, "bad-host", "Bad Host header", bad_request)                                                  \
  X(kUnderscoreHeader, "underscore-header", "Header name with an underscore", bad_request)                \
  X(kMalformedRequest, "malformed-request", "Malformed request", bad_request)                             \
  X(kMalformedBody, "malformed-body", "Malformed request body", bad_request)                              \
  X(kAmbiguousPath, "ambiguous-path", "Ambiguous request path", bad_request)                              \
  X(kUpgradeRefused, "upgrade-refused", "Protocol upgrade refused", bad_request)                          \
  X(kMalformedToken, "malformed-token", "Malformed fencing token", bad_request)                           \
  X(kMissingFenceKey, "missing-fence-key", "Fence key required", bad_request)                            \
  X(kBadFenceKey, "bad-fence-key", "Malformed fence key", bad_request)                                   \
  X(kWriterNotAllowed, "writer-not-allowed", "Client may not write here", forbidden)                      \
  X(kNoRoute, "no-route", "No route", not_found)                                                           \
  X(kMethodNotAllowed, "method-not-allowed", "Method not allowed", method_not_allowed)                    \
  X(kStaleToken, "stale-token", "Stale fencing token", conflict)                                           \
  X(kTokenJump, "token-jump", "Fencing token jumps too far", conflict)                                     \
  X(kTokenNotVerified, "token-not-verified", "Fencing token not the lock holder's", conflict)             \
  X(kBodyTimeout, "body-timeout", "Request body too slow", request_timeout)                               \
  X(kBodyTooLarge, "body-too-large", "Request body too large", payload_too_large)                         \
  X(kMissingToken, "missing-token", "Fencing token required", precondition_required)                      \
  X(kHeaderTooLarge, "header-too-large", "Request header too large", request_header_fields_too_large)     \
  X(kUpstreamUnavailable, "upstream-unavailable", "Backend unreachable", bad_gateway)                     \
  X(kUpstreamInvalid, "upstream-invalid-response", "Backend response refused", bad_gateway)              \
  X(kBackendTls, "backend-tls", "Backend TLS failed", bad_gateway)                                        \
  X(kStateUnavailable, "state-unavailable", "Fence state unavailable", service_unavailable)               \
  X(kFenceKeyLimit, "fence-key-limit", "Too many fence keys", service_unavailable)                       \
  X(kLockServiceUnavailable, "lock-service-unavailable", "Lock service unavailable", service_unavailable) \
  X(kFenceStoreUnavailable, "fence-store-unavailable", "Shared fence store unavailable", service_unavailable) \
  X(kUpstreamTimeout, "upstream-timeout", "Backend too slow", gateway_timeout)

enum class ProblemType {
#define FENCING_PROBLEM_ENUM(name, slug, title, code) name,
  FENCING_PROBLEM_TYPES(FENCING_PROBLEM_ENUM)
#undef FENCING_PROBLEM_ENUM
};

struct ProblemTypeInfo {
  std::string_view slug;
  std::string_view title;
  boost::beast::http::status status;
};

inline constexpr ProblemTypeInfo kProblemTypes[] = {
#define FENCING_PROBLEM_INFO(name, slug, title, code) {slug, title, boost::beast::http::status::code},
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

// The full response; 409 carries X-Fencing-Token-Max, retry_after a Retry-After. keep_alive false adds Connection: close.
// head_request: the answer to a HEAD request has the same head (its Content-Length the length
// the body would have) and no body (RFC 9110 9.3.2): a body would be read as the next response.
boost::beast::http::response<boost::beast::http::string_body> MakeProblemResponse(
    const Problem& problem, unsigned http_version, bool keep_alive, bool head_request = false);

}  // namespace fencing
