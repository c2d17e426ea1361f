#pragma once
// An admitted HTTP/1.1 request relayed as one stream of the worker's H2Upstream, for a backend
// that speaks HTTP/2 only (backend_protocol: h2c): what Exchange (server/exchange.h) is for an
// HTTP/1.1 backend. The session has planned, fenced and admitted the request as for any backend,
// and read its body by the same rules (server/request_body.h: whole when it fits
// limits.buffered_body_bytes, else streamed); it holds the admission until this returns.
//
//   request head   -> :method, :scheme http, :authority (the Host the HTTP/1.1 path would send),
//                     :path (origin-form), the fields UpstreamRequestHead copies, lower-cased, with
//                     the same X-Forwarded-For, token and identity fields; te: trailers only when
//                     the client's TE is exactly that; content-length as the HTTP/1.1 path frames it
//   request body   -> DATA: a body in hand whole goes at once (and is still held: a stream the
//                     backend refused unprocessed, REFUSED_STREAM, is opened once more); a larger
//                     one as it arrives, held back while the backend's side is a window behind. A
//                     streamed body that breaks off resets the stream: the backend never sees a
//                     complete request
//   response head  -> an HTTP/1.1 status line and fields (1xx dropped; a head the client could be
//                     misled by is refused: 502), framed by the proxy: the backend's
//                     content-length, else chunked (the close to an HTTP/1.0 client)
//   response body  -> written to the client as it comes; a byte is given back to the backend's
//                     window (Consume) only once written: a slow client holds back the stream
//   trailers       -> chunked trailers when the client sent TE: trailers, else dropped
//   failures       -> before the head: the problem (502, 504 at timeouts.request); after it: the
//                     client connection closes without a complete response
//
// Tests: tests/unit/server/http1_h2_relay_test.cpp (the head translations),
// tests/integration/test_http1_to_h2.py (the binary against h2c backends).

#include "common/io.h"
#include "h2/connection.h"
#include "http/header_rewrite.h"
#include "http/request_head.h"
#include "server/exchange.h"
#include "server/request_body.h"
#include "tls/server_stream.h"
#include "upstream/h2_upstream.h"

#include <chrono>
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>

namespace fencing {

// What the HTTP/1.1 path decided about the head (RequestPlan and the route), for the h2 head.
struct H2RequestHeadInput {
  std::string_view origin_target;   // :path
  std::string_view host;            // an absolute-form target's authority (RequestPlan::host); empty: Host
  std::string_view backend_host;    // :authority when the client sent no Host
  std::string_view client_ip;       // appended to X-Forwarded-For
  std::string_view drop;            // the token header not forwarded as written (may be empty)
  bool drop_underscored = true;
  std::optional<uint64_t> token;    // goes on as `drop` in plain decimal
  std::string_view identity_header;
  std::string_view identity;
  std::optional<uint64_t> whole;    // the body is in hand complete, with this many bytes
  bool https = false;               // :scheme https (backend_protocol h2, an https:// backend)
};

// The client sent exactly one TE field, and it says "trailers": it reads chunked trailers, and an
// HTTP/2 backend is told te: trailers (the only TE HTTP/2 allows).
bool ClientAcceptsTrailers(const RequestHead& client);

// The HTTP/2 request head for an HTTP/1.1 request (pseudo-headers first, names lower-cased).
h2::Headers H2RequestHead(const RequestHead& client, const H2RequestHeadInput& input);

// An HTTP/2 response head translated for an HTTP/1.1 client.
struct Http1ResponseHead {
  unsigned status = 0;                    // 0: the head is refused (error says why)
  bool interim = false;                   // 1xx: dropped, the final head follows
  std::string head;                       // status line, fields, framing, CRLF
  NextHopFraming framing;                 // how the body goes to the client
  bool no_body = false;                   // HEAD, 204, 304: DATA is dropped, never relayed
  bool keep_alive = false;                // as written in the head
  std::optional<uint64_t> content_length; // the backend's: the DATA must match it exactly
  std::string error;
};

// fields: the kHead's, pseudo-headers first; end_stream: no body follows. head_request: the
// answer has no body. keep_alive: the client connection stays open after it (written as the
// client's version needs; an HTTP/1.0 client's body delimited by the close turns it off).
Http1ResponseHead Http1ResponseFromH2(const h2::Headers& fields, bool end_stream, unsigned client_version,
                                      bool head_request, bool keep_alive);

// The last chunk with the backend's trailers ("0\r\n", the fields, "\r\n"): framing fields and
// anything a trailer may not carry are left out.
std::string ChunkedTrailers(const h2::Headers& trailers);

struct H2RelayRequest {
  h2::Headers head;
  bool head_request = false;      // HEAD: the response has no body
  unsigned client_version = 11;
  bool client_keep_alive = true;
  bool trailers = false;          // the client accepts chunked trailers
  std::chrono::steady_clock::time_point deadline;  // timeouts.request from the admission
};

class Http1H2Relay {
 public:
  // relay_size: how much of a streamed request body is read from the client at a time.
  Http1H2Relay(tls::ServerStream& client, ClientBuffer& client_buffer, H2Upstream& upstream, size_t relay_size)
      : client_(client), client_buffer_(client_buffer), upstream_(upstream), relay_size_(relay_size) {}

  // result: as Exchange::Run's (problem when nothing of the response went to the client).
  io::Awaitable<ExchangeResult> Run(const H2RelayRequest& request, RequestBody& body);

 private:
  enum class Sent { kOk, kClosed, kBodyFailed, kTimedOut };
  io::Awaitable<Sent> SendBody(H2Upstream::Stream& stream, const H2RelayRequest& request, RequestBody& body);
  // Waits until the stream changes or the deadline passes; false at the deadline.
  io::Awaitable<bool> Wait(H2Upstream::Stream& stream, std::chrono::steady_clock::time_point deadline);

  tls::ServerStream& client_;
  ClientBuffer& client_buffer_;
  H2Upstream& upstream_;
  size_t relay_size_;
};

}  // namespace fencing
