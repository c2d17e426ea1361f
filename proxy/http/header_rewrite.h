#pragma once
// What crosses the proxy in each direction, serialised for the next hop. End-to-end fields are
// copied as received; hop-by-hop fields (RFC 9110 section 7.6.1: Connection and every field it
// names, Keep-Alive, Proxy-Connection, TE, Trailer, Transfer-Encoding, Upgrade) are not, and
// message framing (Content-Length, Transfer-Encoding) is written by the proxy from what it parsed. The heads are written as text straight into one gather write
// with the first body bytes: no second fields container, no generic serializer.

#include "http/head_fields.h"
#include "http/request_head.h"

#include <cstdint>
#include <functional>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace fencing {

// How a body is delimited on the next hop.
enum class BodyFraming {
  kNone,     // no body
  kLength,   // Content-Length
  kChunked,  // Transfer-Encoding: chunked
  kClose,    // until the connection closes (responses to HTTP/1.0 clients only)
};

// The framing the proxy writes for the next hop: made from what it parsed, never the peer's bytes.
// A length goes out as one Content-Length in plain decimal whatever the peer wrote ("0300",
// "5, 5"); a chunked body goes out as chunks the proxy encodes itself (exchange.cpp's
// GatherWrite: lower-case hex sizes, no extensions, no trailers). Two readers that differ on
// leading zeros, lists, chunk-size spellings or extensions then still see one message.
struct NextHopFraming {
  BodyFraming kind = BodyFraming::kNone;
  uint64_t length = 0;  // kLength: the body's length

  static NextHopFraming None() { return {}; }
  static NextHopFraming Length(uint64_t length) { return {BodyFraming::kLength, length}; }
  static NextHopFraming Chunked() { return {BodyFraming::kChunked, 0}; }
  static NextHopFraming Close() { return {BodyFraming::kClose, 0}; }
};

// The framing of a request for the backend, from what the proxy parsed. `whole`: the body is in
// hand complete, with this many bytes. A chunked body in hand whole goes with its Content-Length
// (as nginx buffers and sends it: a backend without chunked requests can take it); one still
// streaming goes as chunks the proxy encodes; a Content-Length body with the length it declared.
NextHopFraming UpstreamRequestFraming(const RequestHead& client, std::optional<uint64_t> whole);

// The request head for the backend: method, origin-form target, HTTP/1.1, end-to-end fields
// without Expect (the proxy answers 100-continue itself) and without `drop` (the token header
// when a route does not forward it; may be empty), one X-Forwarded-For holding the client's list
// plus client_ip, and `framing` (kNone, kLength or kChunked; the client's framing fields are never
// copied). Host: `host` in place of the client's when not empty (an absolute-form target's
// authority, RequestPlan::host), else the client's, else backend_host. drop_underscored leaves out
// every field whose name contains '_' (headers_with_underscores: drop; CGI-style backends read '_'
// as '-').
// token: when set, one `drop` field with this value in plain decimal is written in place of the
// client's (a fenced request's token as the proxy read it: "010" or "10 " never reaches the
// backend as written).
// identity_header (a route's, may be empty): no client field of that name is copied, and when
// `identity` (the client's identities, comma-separated) is not empty one such field carries it.
std::string UpstreamRequestHead(const RequestHead& client, NextHopFraming framing, std::string_view origin_target,
                                std::string_view host, std::string_view client_ip, std::string_view backend_host,
                                std::string_view drop, bool drop_underscored = true,
                                std::optional<uint64_t> token = std::nullopt, std::string_view identity_header = {},
                                std::string_view identity = {});

// The client's fields as UpstreamRequestHead copies them, for a next hop that is not written as
// HTTP/1.1 text (an HTTP/2 backend): the same omissions (hop-by-hop fields and those Connection
// names, Content-Length, Expect, `drop`, identity_header, underscored names when
// drop_underscored, Host when omit_host), each handed to `copy` in order, as spelled; the
// X-Forwarded-For values are collected into *forwarded_for instead.
void ForEachUpstreamRequestField(const RequestHead& client, bool omit_host, std::string_view drop,
                                 bool drop_underscored, std::string_view identity_header,
                                 const std::function<void(std::string_view, std::string_view)>& copy,
                                 std::vector<std::string_view>* forwarded_for);

// The response head for the client: status line in the client's HTTP version (with the backend's
// status and reason), the backend's end-to-end fields, `framing`, and a Connection field when
// keep-alive differs from the version's default.
std::string ClientResponseHead(unsigned status, std::string_view reason, const HeadFields& fields,
                               unsigned client_version, NextHopFraming framing, bool keep_alive);

// The end-to-end fields of a backend's response, as ClientResponseHead copies them: no hop-by-hop
// field, none a Connection field names, no Content-Length (the next hop's framing is the
// proxy's). For an HTTP/2 client, whose head has no connection-specific fields at all (RFC 9113
// 8.2.2). Views into `fields`.
std::vector<std::pair<std::string_view, std::string_view>> ResponseEndToEndFields(const HeadFields& fields);

}  // namespace fencing
