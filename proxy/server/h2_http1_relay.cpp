#include "server/h2_http1_relay.h"

#include "http/ascii.h"

#include <boost/asio/error.hpp>
#include <boost/beast/http/error.hpp>

#include <memory>
#include <utility>

namespace fencing {

namespace asio = boost::asio;
namespace http = boost::beast::http;
using boost::system::error_code;
using io::kTuple;

namespace {

// One side held back at h2::kRelayHighWater (h2/connection.h).
constexpr size_t kHighWater = h2::kRelayHighWater;

std::optional<uint64_t> PlainDecimal(std::string_view text) {
  if (text.empty() || text.size() > 19) return std::nullopt;  // 19 digits never overflow
  uint64_t value = 0;
  for (char c : text) {
    if (c < '0' || c > '9') return std::nullopt;
    value = value * 10 + static_cast<uint64_t>(c - '0');
  }
  return value;
}

}  // namespace

void ReadH2Request(const h2::Headers& fields, H2Request& out) {
  RequestHead& head = out.head;
  std::string cookie;
  bool cookies = false, lengths = false;
  for (const h2::Header& field : fields) {
    if (field.name == ":method") {
      out.method = field.value;
      head.method_string(field.value);
    } else if (field.name == ":path") {
      head.target(field.value);
    } else if (field.name == ":authority") {
      out.authority = field.value;
    } else if (!field.name.empty() && field.name[0] != ':') {
      if (field.name == "content-type") out.grpc = std::string_view(field.value).starts_with("application/grpc");
      if (field.name == "cookie") {
        if (cookies) cookie += "; ";
        cookie += field.value;
        cookies = true;
        continue;
      }
      if (field.name == "content-length") {
        auto length = PlainDecimal(field.value);
        if (lengths || !length) out.bad_content_length = true;
        out.content_length = lengths ? std::nullopt : length;
        lengths = true;
      }
      head.insert(field.name, field.value);
    }
  }
  if (out.bad_content_length) out.content_length.reset();
  if (cookies) head.insert(http::field::cookie, cookie);
  if (!out.authority.empty() && head.count(http::field::host) == 0) head.insert(http::field::host, out.authority);
  head.version(11);
}

std::string Http1RequestHead(const H2Request& request, const RequestPlan& plan, NextHopFraming framing,
                             const Http1HeadContext& context) {
  const std::string_view identity_header =
      plan.route ? std::string_view(plan.route->config->identity_header) : std::string_view();
  return UpstreamRequestHead(request.head, framing, plan.origin_target, plan.host, context.client_ip,
                             context.backend_host, plan.drop_header, context.drop_underscored,
                             plan.rewrite_token ? std::optional<uint64_t>(plan.token) : std::nullopt,
                             identity_header, identity_header.empty() ? std::string_view() : context.identity);
}

h2::Headers H2ResponseHead(unsigned status, const HeadFields& fields, std::optional<uint64_t> content_length) {
  h2::Headers head{{":status", std::to_string(status)}};
  for (const auto& [name, value] : ResponseEndToEndFields(fields)) {
    head.push_back({ToAsciiLower(name), std::string(value)});
  }
  if (content_length) head.push_back({"content-length", std::to_string(*content_length)});
  return head;
}

io::Awaitable<bool> H2Http1Relay::Wait() {
  if (Stopped()) co_return false;
  port_.changed.expires_at(io::Timer::time_point::max());
  co_await port_.changed.async_wait(kTuple);
  co_return !Stopped();
}

io::Awaitable<error_code> H2Http1Relay::Collect(RequestBody& body, size_t keep) {
  for (;;) {
    while (!port_.events.empty() && !ended_ && !body.failed() && !body.full(keep)) {
      H2StreamEvent& event = port_.events.front();
      if (event.kind == h2::Event::Kind::kReset) break;
      if (event.kind == h2::Event::Kind::kData) {
        const size_t used = body.Feed(event.data, keep);
        port_.codec.Consume(port_.id, used);  // held: its window goes back
        if (used < event.data.size()) {
          // DATA beyond the content-length; or the body is full: the rest waits.
          if (body.complete()) body.decoder().Overrun();
          event.data.erase(0, used);
          continue;
        }
      } else if (event.kind == h2::Event::Kind::kEnd || event.kind == h2::Event::Kind::kTrailers) {
        // (request trailers are dropped, as the HTTP/1.1 path drops a chunked body's)
        body.decoder().EndOfStream();
        ended_ = true;
      }
      port_.events.pop_front();
    }
    port_.flush();  // the window given back goes out
    if (ended_ || body.failed() || body.full(keep)) co_return error_code{};
    if (port_.cancel.timed_out) co_return asio::error::timed_out;
    if (!co_await Wait()) {
      co_return port_.cancel.timed_out ? error_code(asio::error::timed_out) : error_code(asio::error::connection_reset);
    }
  }
}

io::Awaitable<ExchangeResult> H2Http1Relay::Run(const H2Request& request, bool no_body, size_t keep,
                                                uint64_t max_body,
                                                const std::function<std::string(NextHopFraming)>& make_head) {
  ExchangeResult result;
  // The deadline: the backend connection in use is cancelled and the waits end, as the
  // HTTP/1.1 session's sweep cuts an exchange off.
  auto active = std::make_shared<bool>(true);
  io::Timer deadline(port_.changed.get_executor(), deadline_);
  deadline.async_wait([active, &cancel = port_.cancel, &changed = port_.changed](error_code ec) {
    if (ec || !*active) return;
    cancel.timed_out = true;
    error_code ignored;
    if (cancel.upstream) cancel.upstream->socket.cancel(ignored);
    changed.cancel();
  });
  struct Stop {
    std::shared_ptr<bool> active;
    ~Stop() { *active = false; }
  } stop{active};

  if (request.content_length && *request.content_length > max_body) {
    result.problem = MakeProblem(ProblemType::kBodyTooLarge, "the request body exceeds limits.max_body_bytes");
    result.body_failed = true;
    co_return result;
  }
  // Whole or nothing: a body that fits `keep` is held until the stream's END_STREAM, and only then
  // does a byte of the request go to the backend.
  RequestBody body(no_body                  ? BodyDecoder()
                   : request.content_length ? BodyDecoder::Length(*request.content_length)
                                            : BodyDecoder::UntilEnd(max_body),
                   relay_, relay_size_);
  ended_ = no_body;
  if (!ended_) {
    const error_code ec = co_await Collect(body, keep);
    if (ec == asio::error::timed_out) {
      result.problem = MakeProblem(ProblemType::kBodyTimeout, "the request body did not arrive within timeouts.request");
      result.body_failed = true;
    }
    if (ec) co_return result;
  }
  if (body.failed()) {
    result.problem = body.problem();
    result.body_failed = true;
    co_return result;
  }
  // Framing for the backend, the proxy's: a body in hand whole goes with its length (as a held
  // chunked HTTP/1.1 body does); one that streams with the client's content-length, or chunked.
  NextHopFraming framing = NextHopFraming::None();
  if (ended_) {
    if (body.size() != 0 || request.content_length || !no_body) framing = NextHopFraming::Length(body.size());
  } else {
    framing = request.content_length ? NextHopFraming::Length(*request.content_length) : NextHopFraming::Chunked();
  }
  const std::string head = make_head(framing);
  ExchangeRequest exchange;
  exchange.head = head;
  exchange.chunked = framing.kind == BodyFraming::kChunked;
  exchange.idempotent = IsIdempotentMethod(request.method);
  exchange.head_request = request.method == "HEAD";
  exchange.keep = keep;

  std::optional<ResponseParser> parser;
  std::unique_ptr<UpstreamConnection> upstream =
      co_await SendToBackend(pool_, port_.cancel, exchange, body, *this, parser, result);
  if (!upstream) {
    // A streamed body that broke off (the client reset the stream, or the deadline passed): the
    // backend connection was closed without finishing the message; the client, if still there,
    // hears of it by RST_STREAM.
    if (result.body_failed && !result.problem && !port_.reset && !port_.over) {
      port_.codec.ResetStream(port_.id, h2::kCancel);
      port_.flush();
    }
    co_return result;
  }
  co_await Respond(request, std::move(upstream), *parser, result);
  co_return result;
}

io::Awaitable<void> H2Http1Relay::Respond(const H2Request& request, std::unique_ptr<UpstreamConnection> upstream,
                                          ResponseParser& parser, ExchangeResult& result) {
  const unsigned status = parser.status();
  result.upstream_status = status;
  const bool no_body = ResponseHasNoBody(status, request.method == "HEAD");
  // false for a body delimited by the backend's close, too: such a connection cannot be reused.
  const bool keep_alive = parser.keep_alive();
  struct Forget {  // the session cancels only a connection still in use
    ExchangeCancel& cancel;
    ~Forget() { cancel.upstream = nullptr; }
  } forget{port_.cancel};
  if (port_.reset || port_.over) co_return;  // nobody to answer; the connection closes
  const std::optional<uint64_t> length = status == 204 ? std::nullopt : parser.content_length();
  port_.codec.SubmitResponse(port_.id, H2ResponseHead(status, parser.fields(), length), no_body);
  result.status = status;
  port_.flush();

  auto cut_off = [&] {
    // After the head: the client learns of a response cut short by RST_STREAM; the backend
    // connection, out of step, is closed (dropped with `upstream`).
    if (!port_.over) port_.codec.ResetStream(port_.id, port_.cancel.timed_out ? h2::kCancel : h2::kInternalError);
    port_.flush();
  };
  if (!no_body) {
    for (;;) {
      parser.SetBodyBuffer(relay_, relay_size_);
      bool read = false;
      error_code ec = BufferedResponseBody(*upstream, parser, relay_size_, &read);
      if (read) {
        ec = co_await ReadResponse(*upstream, parser);
        if (ec == http::error::need_buffer) ec = {};
      }
      if (ec || Stopped()) {
        cut_off();
        co_return;
      }
      const size_t n = relay_size_ - parser.room();
      if (n != 0) {
        port_.codec.SubmitData(port_.id, std::string_view(relay_, n), false);
        result.bytes_out += n;
        port_.flush();
      }
      if (parser.is_done()) break;
      // Back-pressure: the backend is read no further while the client has a window's worth
      // queued.
      while (port_.codec.Queued(port_.id) >= kHighWater) {
        if (!co_await Wait()) {
          cut_off();
          co_return;
        }
      }
    }
    port_.codec.SubmitData(port_.id, {}, true);
    port_.flush();
  }
  if (keep_alive) pool_.Release(std::move(upstream));
}

}  // namespace fencing
