#pragma once
// An HTTP/2 client's stream in front of an HTTP/1.1 backend (backend_protocol: http1, the
// default): once admitted, the stream becomes one HTTP/1.1 exchange over the worker's
// UpstreamPool, with the HTTP/1.1 path's own rules (server/exchange.h: SendToBackend, the
// response parser and its body steps). See docs/design-notes.md, "HTTP/2 and gRPC".
//
//   the head      :method and :path as the request line, :authority as Host (unless a host field
//                 came), cookie crumbs joined; then UpstreamRequestHead as for an HTTP/1.1 client
//                 (hop-by-hop fields dropped, te among them; the token and identity as the plan
//                 says; framing written by the proxy)
//   the body      whole or nothing: held until END_STREAM when it fits
//                 limits.buffered_body_bytes (then sent with its Content-Length), else streamed
//                 (with the client's content-length, or chunked). A body whose DATA do not match
//                 its content-length fails: nothing, or an unfinished message, reaches the backend
//   the response  read by the HTTP/1.1 path's parser; :status and its end-to-end fields (no
//                 connection-specific field), content-length from its framing; its body relayed as
//                 DATA, the backend read held while the client's queue holds a window's worth
//   failures      before the response head: the catalogue's problem (502, 504, or 400/408/413 for
//                 the body); after it: RST_STREAM, and the backend connection is closed
//
// The whole is bounded by the deadline the session passes (timeouts.request from admission).

#include "common/io.h"
#include "h2/connection.h"
#include "http/header_rewrite.h"
#include "http/request_head.h"
#include "server/exchange.h"
#include "server/request_plan.h"
#include "upstream/h2_upstream.h"
#include "upstream/upstream_pool.h"

#include <chrono>
#include <cstdint>
#include <deque>
#include <functional>
#include <optional>
#include <string>
#include <string_view>

namespace fencing {

// An HTTP/2 request head as the fence and an HTTP/1.1 backend see it.
struct H2Request {
  RequestHead head;       // the pseudo-headers as the request line, the fields, Host from :authority
  std::string method;     // :method
  std::string authority;  // :authority
  bool grpc = false;      // content-type application/grpc...
  std::optional<uint64_t> content_length;  // the client's, when it sent one in plain decimal
  bool bad_content_length = false;         // it sent one that is not (or several)
};

// Reads an HTTP/2 request head (the codec checked its pseudo-headers and field names). Cookie
// crumbs (RFC 9113 8.2.3) are joined into one field with "; ".
void ReadH2Request(const h2::Headers& fields, H2Request& out);

// What an HTTP/1.1 request head carries besides the client's fields.
struct Http1HeadContext {
  std::string_view client_ip;
  std::string_view backend_host;
  bool drop_underscored = true;  // headers_with_underscores: drop
  std::string_view identity;     // the client's identities, for the route's identity header
};

// The head for the backend: UpstreamRequestHead's, for the plan, framed by `framing`.
std::string Http1RequestHead(const H2Request& request, const RequestPlan& plan, NextHopFraming framing,
                             const Http1HeadContext& context);

// The response head for an HTTP/2 client: :status, the backend's end-to-end fields lower-cased
// (ResponseEndToEndFields), and content-length in plain decimal when its framing gave one.
h2::Headers H2ResponseHead(unsigned status, const HeadFields& fields, std::optional<uint64_t> content_length);

// The client's side of one stream, as the relay sees it (H2Session's stream).
struct H2StreamPort {
  h2::Connection& codec;
  int32_t id;
  std::deque<H2StreamEvent>& events;  // from the client, after the head
  io::Timer& changed;                 // cancelled when events come or frames went out
  const bool& reset;                  // the client reset the stream
  const bool& over;                   // the connection ended
  ExchangeCancel& cancel;             // the session cancels `upstream` when the stream ends early
  std::function<void()> flush;        // starts the writer
};

class H2Http1Relay final : private BodySource {
 public:
  H2Http1Relay(H2StreamPort port, UpstreamPool& pool, char* relay, size_t relay_size,
               std::chrono::steady_clock::time_point deadline)
      : port_(std::move(port)), pool_(pool), relay_(relay), relay_size_(relay_size), deadline_(deadline) {}

  // The exchange. keep: limits.buffered_body_bytes; max_body: limits.max_body_bytes; no_body: the
  // head ended the stream. make_head: the HTTP/1.1 head for a framing (Http1RequestHead).
  // Returns what happened: result.problem when nothing was sent to the client (answer it;
  // body_failed: the client's body was at fault), else result.status is what was sent (0: the
  // stream was reset, or the client went away).
  io::Awaitable<ExchangeResult> Run(const H2Request& request, bool no_body, size_t keep, uint64_t max_body,
                                    const std::function<std::string(NextHopFraming)>& make_head);

 private:
  // Feeds `body` from the stream's events until the client's side ended, the body failed, or it
  // holds `keep` bytes. The error: the client reset the stream, the connection ended, or the
  // deadline passed (timed_out).
  io::Awaitable<boost::system::error_code> Collect(RequestBody& body, size_t keep);
  io::Awaitable<boost::system::error_code> More(RequestBody& body) override { return Collect(body, relay_size_); }
  // Waits for the stream to change (events, frames sent, the end); false when it is to stop.
  io::Awaitable<bool> Wait();
  bool Stopped() const { return port_.reset || port_.over || port_.cancel.timed_out; }
  io::Awaitable<void> Respond(const H2Request& request, std::unique_ptr<UpstreamConnection> upstream,
                              ResponseParser& parser, ExchangeResult& result);

  H2StreamPort port_;
  UpstreamPool& pool_;
  char* relay_;
  size_t relay_size_;
  std::chrono::steady_clock::time_point deadline_;
  bool ended_ = false;  // the client's side of the stream has ended (END_STREAM)
};

}  // namespace fencing
