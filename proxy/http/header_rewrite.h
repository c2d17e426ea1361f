#pragma once
// What crosses the proxy in each direction, serialised for the next hop. End-to-end fields are
// copied as received; hop-by-hop fields (RFC 9110 section 7.6.1: Connection and every field it
// names, Keep-Alive, Proxy-Connection, TE, Trailer, Transfer-Encoding, Upgrade) are not, and
// message framing is set afresh. The heads are written as text straight into one gather write
// with the first body bytes: no second fields container, no generic serializer.

#include "http/head_fields.h"
#include "http/request_head.h"

#include <cstdint>
#include <string>
#include <string_view>

namespace fencing {

// How a body is delimited on the next hop.
enum class BodyFraming {
  kNone,     // no body
  kLength,   // Content-Length (copied from the message being relayed)
  kChunked,  // Transfer-Encoding: chunked
  kClose,    // until the connection closes (responses to HTTP/1.0 clients only)
};

// The request head for the backend: method, origin-form target, HTTP/1.1, end-to-end fields
// without Expect (the proxy answers 100-continue itself) and without `drop` (the token header
// when a route does not forward it; may be empty), one X-Forwarded-For holding the client's list
// plus client_ip, and the client's body framing. Host: `host` in place of the client's when not
// empty (an absolute-form target's authority, RequestPlan::host), else the client's, else
// backend_host. drop_underscored leaves out every field whose name contains '_'
// (headers_with_underscores: drop; CGI-style backends read '_' as '-').
std::string UpstreamRequestHead(const RequestHead& client, std::string_view origin_target,
                                std::string_view host, std::string_view client_ip, std::string_view backend_host,
                                std::string_view drop, bool drop_underscored = true);

// The response head for the client: status line in the client's HTTP version (with the backend's
// status and reason), the backend's end-to-end fields, `framing`, and a Connection field when
// keep-alive differs from the version's default.
std::string ClientResponseHead(unsigned status, std::string_view reason, const HeadFields& fields,
                               unsigned client_version, BodyFraming framing, bool keep_alive);

}  // namespace fencing
