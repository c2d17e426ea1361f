#pragma once
// One forwarded request: the request (head and body) to the backend, the response head (1xx
// dropped, the resend rule), the response body to the client, and the backend connection back to
// the pool. It decides nothing about fences: the session admits the request first and releases
// the admission when the exchange has ended.
//
// At most once. A pooled connection is used only when it is known clean (UpstreamPool::TakeIdle:
// its last response ended exactly at its framing and nothing, not even its close, has arrived
// since). A request is resent on a new backend connection only when it cannot have reached the
// backend (a pooled connection refused its first write outright), or when it may have but its
// method is idempotent (GET, HEAD, OPTIONS, PUT, DELETE), the connection was a pooled one, the
// whole request is still in hand and the backend closed or reset the connection without a byte
// of answer; and only once. A non-idempotent request (POST, PATCH, ...) is never resent once a
// byte of it may have reached the backend, and no request is resent once the backend answered
// (however badly): the client gets 502.
//
// An https backend's connections are TLS (upstream/upstream_connection.h); the rules are the
// same. A handshake that fails is a 502 (backend-tls) before a byte of the request is written.
//
// A backend connection is either known clean or closed: bytes after the end of a response (a
// 204, 304, 1xx or HEAD response with a body, more than its Content-Length), a 101 nobody asked
// for, or a response that cannot be read, close it.
//
// Tests drive it over real sockets against a scripted backend (tests/unit/server/exchange_test.cpp).

#include "common/io.h"
#include "http/problem.h"
#include "http/response_parser.h"
#include "server/request_body.h"
#include "tls/server_stream.h"
#include "upstream/upstream_pool.h"


#include <chrono>
#include <memory>
#include <optional>
#include <string_view>

namespace fencing {

// Shared between an exchange and the connection's deadline: the connection's sweep sets
// timed_out and cancels the client socket and `upstream` once the deadline has passed.
struct ExchangeCancel {
  bool timed_out = false;
  UpstreamConnection* upstream = nullptr;
};

struct ExchangeRequest {
  std::string_view head;      // the request head for the backend, framed like the body
  bool chunked = false;       // the body goes as chunks (else as Content-Length says, or none)
  bool idempotent = false;    // may be resent once after it may have reached the backend
  bool head_request = false;  // HEAD: the response has no body
  unsigned client_version = 11;
  bool client_keep_alive = true;
  size_t keep = 0;            // limits.buffered_body_bytes: how much of the body may be held
};

struct ExchangeResult {
  // Nothing of the response has gone to the client: answer with this problem (502, 504, or a
  // 400/413 for a request body that broke off or broke the rules).
  std::optional<Problem> problem;
  bool upstream_failed = false;  // problem is the backend's fault (counted as upstream_error)
  bool body_failed = false;      // the request body broke off or broke the rules mid-stream
  bool keep_alive = false;       // the client connection may serve another request
  unsigned status = 0;           // relayed to the client (0 with a problem)
  unsigned upstream_status = 0;
  unsigned attempts = 0;         // requests written to a backend connection
  uint64_t bytes_in = 0;         // request body bytes forwarded
  uint64_t bytes_out = 0;        // response body bytes relayed
};

// RFC 9110 section 9.2.2, as the contract lists them.
bool IsIdempotentMethod(std::string_view method);

// Where the rest of a request body comes from once what was held has gone to the backend (a body
// longer than limits.buffered_body_bytes streams): the HTTP/1.1 client connection (Exchange), or
// an HTTP/2 stream's DATA (server/h2_http1_relay.h). More feeds `body` (RequestBody::Feed) until
// it is complete, failed or holds a relay buffer's worth; the error is the client's (gone, reset,
// timed out).
class BodySource {
 public:
  virtual io::Awaitable<boost::system::error_code> More(RequestBody& body) = 0;

 protected:
  ~BodySource() = default;
};

// The backend's half of an exchange up to the response head, whoever the client is: a connection
// (pooled and known clean, or new), the request written (head and held body, then the rest from
// `more`), the resend rule above, the response head read (1xx dropped, an unasked 101 refused).
// Returns the connection with the head in `parser`; or null, with result.problem (the backend
// failed: 502/504) or result.body_failed (the client's body broke off or broke the rules: the
// backend connection is closed without finishing the message) set.
io::Awaitable<std::unique_ptr<UpstreamConnection>> SendToBackend(UpstreamPool& pool, ExchangeCancel& cancel,
                                                                 const ExchangeRequest& request, RequestBody& body,
                                                                 BodySource& more,
                                                                 std::optional<ResponseParser>& parser,
                                                                 ExchangeResult& result);

// The response body, a piece at a time, into the parser's body buffer (SetBodyBuffer): first what
// the connection's buffer holds, with no I/O (usually the whole body came with the head). Sets
// *read when that gave nothing and the body goes on: then ReadResponse reads from the backend.
// need_buffer (the body buffer is full) is no error; any error is the response's (refused framing,
// the backend's close before its end).
boost::system::error_code BufferedResponseBody(UpstreamConnection& upstream, ResponseParser& parser, size_t room,
                                               bool* read);
io::Awaitable<boost::system::error_code> ReadResponse(UpstreamConnection& upstream, ResponseParser& parser);

// The response may not have a body: a HEAD request's, a 1xx, 204 or 304.
bool ResponseHasNoBody(unsigned status, bool head_request);

class Exchange final : private BodySource {
 public:
  // relay: the worker's relay buffer for the response body (and a streamed request body).
  Exchange(tls::ServerStream& client, ClientBuffer& client_buffer, UpstreamPool& pool, ExchangeCancel& cancel,
           char* relay, size_t relay_size)
      : client_(client), client_buffer_(client_buffer), pool_(pool), cancel_(cancel), relay_(relay),
        relay_size_(relay_size) {}

  // body: what the session has read of the request body (all of it when it fits request.keep).
  io::Awaitable<ExchangeResult> Run(const ExchangeRequest& request, RequestBody& body);

 private:
  // The rest of the body from the client connection.
  io::Awaitable<boost::system::error_code> More(RequestBody& body) override;
  // The response to the client; the connection goes back to the pool when it can be reused.
  io::Awaitable<void> Relay(const ExchangeRequest& request, std::unique_ptr<UpstreamConnection> upstream,
                            std::optional<ResponseParser>& response_parser, ExchangeResult& result);
  tls::ServerStream& client_;
  ClientBuffer& client_buffer_;
  UpstreamPool& pool_;
  ExchangeCancel& cancel_;
  char* relay_;
  size_t relay_size_;
  std::optional<ResponseParser> response_parser_;  // the backend's response, once its head came
};

}  // namespace fencing
