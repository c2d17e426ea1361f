#include "server/exchange.h"

#include "http/header_rewrite.h"
#include "tls/handshake.h"

#include <boost/asio/write.hpp>
#include <boost/beast/core/flat_buffer.hpp>
#include <boost/beast/core/read_size.hpp>
#include <boost/beast/http/error.hpp>

#include <array>
#include <cstdio>

namespace fencing {

namespace asio = boost::asio;
namespace beast = boost::beast;
namespace http = beast::http;
using io::kTuple;

namespace {

constexpr uint64_t kMaxUpstreamHeaderBytes = 64 * 1024;

// Feeds a parser the body bytes already in buffer (usually the whole body came with the head),
// into the relay buffer its body points to, without an I/O operation: an asynchronous read that
// could complete at once still costs a trip through the scheduler. Stops when the message is
// done, the buffered bytes run out, or the relay buffer is full; an error is the parser's.
template <typename Parser, typename DynamicBuffer>
boost::system::error_code ParseBuffered(Parser& parser, DynamicBuffer& buffer) {
  boost::system::error_code ec;
  while (buffer.size() != 0 && !parser.is_done()) {
    size_t used = parser.put(buffer.data(), ec);
    buffer.consume(used);
    if (ec == http::error::need_more || ec == http::error::need_buffer) return {};
    if (ec || used == 0) break;
  }
  return ec;
}

// One gather write for the next hop: an optional head, then body bytes in the hop's framing
// (chunk-size line and CRLF around them when chunked, and the last-chunk marker at the end).
// Holds the chunk-size text its buffers point to: build it in place, do not copy it.
class GatherWrite {
 public:
  GatherWrite(std::string_view head, const char* data, size_t size, bool chunked, bool last) {
    size_t count = 0;
    if (!head.empty()) buffers_[count++] = asio::buffer(head.data(), head.size());
    if (chunked && size > 0) {
      int length = std::snprintf(size_line_, sizeof size_line_, "%zx\r\n", size);
      buffers_[count++] = asio::buffer(size_line_, static_cast<size_t>(length));
    }
    if (size > 0) buffers_[count++] = asio::buffer(data, size);
    if (chunked && size > 0) buffers_[count++] = asio::buffer(kCrLf.data(), kCrLf.size());
    if (chunked && last) buffers_[count++] = asio::buffer(kLastChunk.data(), kLastChunk.size());
  }
  GatherWrite(const GatherWrite&) = delete;
  GatherWrite& operator=(const GatherWrite&) = delete;

  const GatherBuffers& buffers() const { return buffers_; }  // unused ones are empty

 private:
  static constexpr std::string_view kCrLf = "\r\n";
  static constexpr std::string_view kLastChunk = "0\r\n\r\n";
  char size_line_[24];
  GatherBuffers buffers_{};
};


}  // namespace

bool IsIdempotentMethod(std::string_view method) {
  return method == "GET" || method == "HEAD" || method == "OPTIONS" || method == "PUT" || method == "DELETE";
}

bool ResponseHasNoBody(unsigned status, bool head_request) {
  return head_request || status / 100 == 1 || status == 204 || status == 304;
}

// What http::async_read_some does, without its composed operation (which, besides its own
// machinery, posts its completion through the scheduler when the bytes were there already):
// parses what the buffer holds and, while the parser needs more, reads from the socket. The
// backend's EOF ends a body delimited by the close (put_eof); it cuts anything else short
// (partial_message), and before a byte of the response it is end_of_stream. need_buffer: the
// body buffer is full.
// With TLS the backend's close is its close_notify (eof); a connection closed without one is a
// stream cut short (stream_truncated), so a body delimited by the close is never taken whole from
// a connection an attacker could have cut.
io::Awaitable<boost::system::error_code> ReadResponse(UpstreamConnection& upstream, ResponseParser& parser) {
  beast::flat_buffer& buffer = upstream.buffer;
  // As Beast reads: what the buffer has room for, at least 512 and at most 64 KiB at a time.
  constexpr size_t kReadSize = 64 * 1024;
  boost::system::error_code ec;
  for (;;) {
    if (buffer.size() != 0) {
      buffer.consume(parser.put(buffer.data(), ec));
      if (ec != http::error::need_more) co_return ec;
      ec = {};
    }
    const size_t size = beast::read_size(buffer, kReadSize);
    if (size == 0) co_return http::error::buffer_overflow;
    auto [rec, n] = co_await upstream.ReadSome(buffer.prepare(size));
    buffer.commit(n);
    if (rec == asio::error::eof) {
      if (!parser.got_some()) co_return http::error::end_of_stream;
      parser.put_eof(ec);
      co_return ec;
    }
    if (rec) co_return rec;
  }
}

boost::system::error_code BufferedResponseBody(UpstreamConnection& upstream, ResponseParser& parser, size_t room,
                                               bool* read) {
  boost::system::error_code ec = ParseBuffered(parser, upstream.buffer);
  // Whatever arrives is relayed at once (read_some): a response that streams slowly reaches the
  // client as it comes, not when a relay buffer's worth has piled up.
  *read = !ec && !parser.is_done() && parser.room() == room;
  if (ec == http::error::need_buffer) ec = {};
  return ec;
}

namespace {

enum class Sent { kOk, kRefused, kFailed, kBodyFailed };

Problem UpstreamProblem(const ExchangeCancel& cancel, const boost::system::error_code& ec) {
  // timed_out: the connection's deadline passed (its sweep cancelled the exchange): 504. A connect
  // that ran out of timeouts.connect is a 502 like any other unreachable backend.
  if (cancel.timed_out) {
    return MakeProblem(ProblemType::kUpstreamTimeout, "the backend did not answer within timeouts.request");
  }
  // The backend's TLS failed: its certificate did not verify, it refused the handshake (or, in
  // TLS 1.3, the client certificate after it), or the handshake ran out of timeouts.connect.
  if (IsTlsFailure(ec)) {
    return MakeProblem(ProblemType::kBackendTls, "the TLS connection to the backend failed: " + ec.message());
  }
  // A response the parser refused (malformed, ambiguous, unsolicited): the backend answered
  // something no client may be handed. end_of_stream and partial_message are the backend's close.
  if (ec.category() == http::make_error_code(http::error::bad_version).category() &&
      ec != http::error::end_of_stream && ec != http::error::partial_message) {
    return MakeProblem(ProblemType::kUpstreamInvalid, "the backend's response was refused: " + ec.message());
  }
  return MakeProblem(ProblemType::kUpstreamUnavailable, "the backend could not be reached or closed the connection without an answer: " + ec.message());
}

void Fail(const ExchangeCancel& cancel, ExchangeResult& result, const boost::system::error_code& ec) {
  result.problem = UpstreamProblem(cancel, ec);
  result.upstream_failed = true;
}

io::Awaitable<std::unique_ptr<UpstreamConnection>> Reconnect(UpstreamPool& pool, ExchangeCancel& cancel,
                                                             boost::system::error_code& ec) {
  cancel.upstream = nullptr;
  std::unique_ptr<UpstreamConnection> upstream = co_await pool.Connect(ec);
  cancel.upstream = upstream.get();
  co_return upstream;
}

// What a failed write of the request means for the resend rule.
Sent WriteFailure(bool first_write, size_t written) {
  // Nothing of the request left the proxy: it cannot have reached the backend. Over TLS, written
  // counts the bytes of whole records on the wire (Asio writes with partial writes on, one record
  // per write_some, and reports a write that failed midway as 0): a record cut short in its
  // first write cannot be decrypted, so the backend cannot have read a byte of the request.
  return first_write && written == 0 ? Sent::kRefused : Sent::kFailed;
}

// Writes a request whose body is not all in hand: head and held body bytes, then the rest as
// it arrives.
// kRefused: the first write failed with nothing written (the connection was already closed).
io::Awaitable<Sent> SendRequest(UpstreamConnection& upstream, const ExchangeRequest& request, RequestBody& body,
                                BodySource& more, ExchangeResult& result, boost::system::error_code& ec) {
  bool first = true;
  for (;;) {
    const bool last = body.complete();
    GatherWrite piece(first ? request.head : std::string_view{}, body.data(), body.size(), request.chunked, last);
    auto [wec, written] = co_await upstream.Write(piece.buffers());
    if (wec) {
      ec = wec;
      co_return WriteFailure(first, written);
    }
    first = false;
    if (last) break;
    // A body too long to hold: what was held has gone; the rest is relayed as it arrives.
    body.DropHeld();
    if (auto rec = co_await more.More(body); rec) {
      ec = rec;
      co_return Sent::kBodyFailed;
    }
    if (body.failed()) co_return Sent::kBodyFailed;
  }
  result.bytes_in = body.decoder().body_bytes();
  co_return Sent::kOk;
}

// SendToBackend's work, with what follows a response head as `then(connection, result)`: so the
// HTTP/1.1 client's exchange relays the response from the same coroutine frame that sent the
// request (one frame per exchange plus the relay's, as when this lived in Exchange::Run), and
// SendToBackend hands the connection back.
template <typename Then>
io::Awaitable<ExchangeResult> ForwardToBackend(UpstreamPool& pool, ExchangeCancel& cancel,
                                               const ExchangeRequest& request, RequestBody& body, BodySource& more,
                                               std::optional<ResponseParser>& response_parser, Then then) {
  ExchangeResult result;
  boost::system::error_code ec;
  // A pooled connection is taken without a coroutine of its own (the usual case); a new one
  // needs a connect.
  std::unique_ptr<UpstreamConnection> upstream = pool.TakeIdle();
  if (!upstream) upstream = co_await pool.Connect(ec);
  if (!upstream) {
    Fail(cancel, result, ec);
    co_return result;
  }
  cancel.upstream = upstream.get();

  // A byte of a response came on the current connection: the backend has read the request, so
  // it is never sent again (a response that could not be read is a 502, not a reason to resend).
  bool answered = false;
  for (;;) {
    ++result.attempts;
    // Only a pooled connection can have gone stale unnoticed; only the first attempt is retried;
    // only what is still in hand can be sent again.
    const bool may_resend = upstream->reused && result.attempts == 1 && body.resendable();
    Sent sent = Sent::kOk;
    if (body.complete()) {
      // The usual case, the whole request in one gather write, without a coroutine of its own.
      GatherWrite piece(request.head, body.data(), body.size(), request.chunked, true);
      auto [wec, written] = co_await upstream->Write(piece.buffers());
      ec = wec;
      sent = wec ? WriteFailure(true, written) : Sent::kOk;
      result.bytes_in = body.decoder().body_bytes();
    } else {
      sent = co_await SendRequest(*upstream, request, body, more, result, ec);
    }
    if (sent == Sent::kBodyFailed) {
      // The client's body broke off or broke the rules mid-stream: the backend has a truncated
      // request, so both connections close; the client hears why if it still listens.
      if (body.failed()) result.problem = body.problem();
      result.body_failed = true;
      result.keep_alive = false;
      cancel.upstream = nullptr;
      co_return result;
    }
    if (sent == Sent::kRefused && may_resend) {
      // Closed before a byte of the request was written: it cannot have reached the backend.
      upstream = co_await Reconnect(pool, cancel, ec);
      if (!upstream) break;
      continue;
    }
    if (sent == Sent::kRefused && upstream->tls && !upstream->reused) {
      // A TLS connection the backend dropped between its handshake and the request: its TLS
      // refused us after our side was done (how TLS 1.3 refuses a client certificate).
      ec = RefusedAfterHandshake(ec);
    }
    if (sent == Sent::kOk) {
      // The response head; 1xx interim responses are dropped (the proxy answered 100-continue
      // itself).
      for (;;) {
        response_parser.emplace();
        response_parser->header_limit(kMaxUpstreamHeaderBytes);
        if (request.head_request) response_parser->skip(true);
        // (the parser stops at the end of the head: it is not eager)
        ec = co_await ReadResponse(*upstream, *response_parser);
        answered = answered || response_parser->got_some();
        if (ec) break;
        const unsigned status = response_parser->status();
        if (status == 101) {
          // The proxy forwards no Upgrade field, so nobody asked to switch protocols: what follows
          // on the connection is not HTTP the proxy could frame. 502, and the connection closes.
          result.upstream_status = status;
          ec = http::error::bad_status;
          break;
        }
        if (status / 100 != 1) break;
      }
      if (!ec) {
        co_await then(std::move(upstream), result);
        co_return result;
      }
    }
    // The request may have reached the backend: resent only when repeating it is harmless, and
    // only when the backend closed or reset the connection without a byte of answer.
    if (request.idempotent && may_resend && body.whole() && !cancel.timed_out && !answered) {
      upstream = co_await Reconnect(pool, cancel, ec);
      if (!upstream) break;
      continue;
    }
    break;
  }
  cancel.upstream = nullptr;
  Fail(cancel, result, ec);
  if (result.upstream_status == 101) {
    result.problem->detail = "the backend switched protocols (101) though no upgrade was asked for";
  }
  co_return result;
}

}  // namespace

io::Awaitable<std::unique_ptr<UpstreamConnection>> SendToBackend(UpstreamPool& pool, ExchangeCancel& cancel,
                                                                 const ExchangeRequest& request, RequestBody& body,
                                                                 BodySource& more,
                                                                 std::optional<ResponseParser>& response_parser,
                                                                 ExchangeResult& result) {
  std::unique_ptr<UpstreamConnection> upstream;
  result = co_await ForwardToBackend(pool, cancel, request, body, more, response_parser,
                                     [&upstream](std::unique_ptr<UpstreamConnection> answered,
                                                 ExchangeResult&) -> io::Awaitable<void> {
                                       upstream = std::move(answered);
                                       co_return;
                                     });
  co_return upstream;
}

io::Awaitable<boost::system::error_code> Exchange::More(RequestBody& body) {
  return body.Read(client_, client_buffer_, relay_size_);
}

io::Awaitable<ExchangeResult> Exchange::Run(const ExchangeRequest& request, RequestBody& body) {
  // Not a coroutine itself: ForwardToBackend's frame is the exchange's.
  return ForwardToBackend(pool_, cancel_, request, body, *this, response_parser_,
                          [this, &request](std::unique_ptr<UpstreamConnection> upstream, ExchangeResult& result) {
                            return Relay(request, std::move(upstream), response_parser_, result);
                          });
}

io::Awaitable<void> Exchange::Relay(const ExchangeRequest& request, std::unique_ptr<UpstreamConnection> upstream,
                                    std::optional<ResponseParser>& response_parser, ExchangeResult& result) {
  const unsigned status = response_parser->status();
  result.upstream_status = status;
  const bool no_body = ResponseHasNoBody(status, request.head_request);
  // false for a body delimited by the backend's close, too: such a connection cannot be reused.
  const bool upstream_keep_alive = response_parser->keep_alive();
  result.keep_alive = request.client_keep_alive;

  // Framing for the client, written by the proxy: the length the backend's Content-Length said
  // (in plain decimal, whatever its spelling); otherwise chunks the proxy encodes to an HTTP/1.1
  // client, and the close to an HTTP/1.0 one.
  // A 204 has no Content-Length (RFC 9110 8.6), whatever the backend sent.
  NextHopFraming framing = NextHopFraming::None();
  if (auto length = response_parser->content_length(); length && status != 204) {
    framing = NextHopFraming::Length(*length);
  } else if (!no_body) {
    framing = request.client_version >= 11 ? NextHopFraming::Chunked() : NextHopFraming::Close();
    if (framing.kind == BodyFraming::kClose) result.keep_alive = false;
  }
  const std::string client_head =
      ClientResponseHead(status, response_parser->reason(), response_parser->fields(), request.client_version, framing,
                         result.keep_alive);
  const bool chunked_response = framing.kind == BodyFraming::kChunked;

  bool response_started = false;
  for (;;) {
    size_t n = 0;
    if (!no_body && !response_parser->is_done()) {
      response_parser->SetBodyBuffer(relay_, relay_size_);
      bool read = false;
      boost::system::error_code rec = BufferedResponseBody(*upstream, *response_parser, relay_size_, &read);
      if (read) {
        rec = co_await ReadResponse(*upstream, *response_parser);
        if (rec == http::error::need_buffer) rec = {};
      }
      if (rec) {
        result.keep_alive = false;
        if (!response_started) Fail(cancel_, result, rec);
        co_return;  // the client saw a partial response: closing tells it so
      }
      n = relay_size_ - response_parser->room();
      result.bytes_out += n;
    }
    const bool last = no_body || response_parser->is_done();
    if (n == 0 && !last && response_started) continue;  // only framing arrived: nothing to send
    GatherWrite piece(response_started ? std::string_view{} : client_head, relay_, n, chunked_response, last);
    auto [wec, wn] = co_await asio::async_write(client_, piece.buffers(), kTuple);
    response_started = true;
    result.status = status;
    if (wec) {
      result.keep_alive = false;  // the client went away; the backend connection is dropped with it
      co_return;
    }
    if (last) break;
  }

  cancel_.upstream = nullptr;
  if (upstream_keep_alive) pool_.Release(std::move(upstream));
}

}  // namespace fencing
