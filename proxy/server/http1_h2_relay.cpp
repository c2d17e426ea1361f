#include "server/http1_h2_relay.h"

#include "http/ascii.h"
#include "http/fields.h"
#include "http/head_fields.h"

#include <boost/asio/write.hpp>
#include <boost/beast/http/field.hpp>
#include <boost/beast/http/status.hpp>

#include <cstdio>
#include <utility>
#include <vector>

namespace fencing {

namespace asio = boost::asio;
namespace http = boost::beast::http;
using io::kTuple;
using Clock = std::chrono::steady_clock;

namespace {

// One side held back at h2::kRelayHighWater (h2/connection.h).
constexpr size_t kHighWater = h2::kRelayHighWater;
// Response bytes gathered for one write to the client (an event may bring it over by one event).
constexpr size_t kWriteBatch = 64 * 1024;

bool IsTokenChar(char c) {
  return IsAsciiAlpha(c) || IsAsciiDigit(c) || std::string_view("!#$%&'*+-.^_`|~").find(c) != std::string_view::npos;
}

// An HTTP/2 field name as HTTP/1.1 may carry it: a lower-case token (RFC 9113 8.2.1).
bool ValidName(std::string_view name) {
  if (name.empty()) return false;
  for (char c : name) {
    if (!IsTokenChar(c) || IsAsciiUpper(c)) return false;
  }
  return true;
}

// No CR, LF, NUL nor any other control but HTAB: nothing that could end a field line early.
bool ValidValue(std::string_view value) {
  for (char c : value) {
    const auto u = static_cast<unsigned char>(c);
    if ((u < 0x20 && c != '\t') || u == 0x7f) return false;
  }
  return true;
}

// Connection-specific fields make an HTTP/2 message malformed (RFC 9113 8.2.2): a response with
// one is refused, not relayed without it.
bool ConnectionSpecific(std::string_view name) {
  return name == "connection" || name == "keep-alive" || name == "proxy-connection" ||
         name == "transfer-encoding" || name == "upgrade" || name == "te";
}

// A content-length value: plain decimal digits, at most 19 of them (no overflow).
std::optional<uint64_t> ParseLength(std::string_view value) {
  if (value.empty() || value.size() > 19) return std::nullopt;
  uint64_t n = 0;
  for (char c : value) {
    if (!IsAsciiDigit(c)) return std::nullopt;
    n = n * 10 + static_cast<uint64_t>(c - '0');
  }
  return n;
}

void AppendChunk(std::string& out, std::string_view data) {
  char line[24];
  const int n = std::snprintf(line, sizeof line, "%zx\r\n", data.size());
  out.append(line, static_cast<size_t>(n));
  out.append(data);
  out.append("\r\n");
}

}  // namespace

bool ClientAcceptsTrailers(const RequestHead& client) {
  return client.count(http::field::te) == 1 && EqualsIgnoreCase(client[http::field::te], "trailers");
}

h2::Headers H2RequestHead(const RequestHead& client, const H2RequestHeadInput& input) {
  const std::string_view client_host = client[http::field::host];
  const std::string_view authority = !input.host.empty()   ? input.host
                                     : !client_host.empty() ? client_host
                                                            : input.backend_host;
  h2::Headers head{{":method", std::string(client.method_string())},
                   {":scheme", input.https ? "https" : "http"},
                   {":authority", std::string(authority)},
                   {":path", std::string(input.origin_target)}};
  // The fields the HTTP/1.1 path copies, by the same rule (header_rewrite.h): Host is :authority.
  std::vector<std::string_view> forwarded_for;
  ForEachUpstreamRequestField(
      client, /*omit_host=*/true, input.drop, input.drop_underscored, input.identity_header,
      [&head](std::string_view name, std::string_view value) { head.push_back({ToAsciiLower(name), std::string(value)}); },
      &forwarded_for);
  if (ClientAcceptsTrailers(client)) head.push_back({"te", "trailers"});
  std::string hops;
  for (std::string_view hop : forwarded_for) {
    hops.append(hop);
    hops.append(", ");
  }
  hops.append(input.client_ip);
  head.push_back({"x-forwarded-for", std::move(hops)});
  if (input.token && !input.drop.empty()) head.push_back({ToAsciiLower(input.drop), std::to_string(*input.token)});
  if (!input.identity_header.empty() && !input.identity.empty()) {
    head.push_back({ToAsciiLower(input.identity_header), std::string(input.identity)});
  }
  const NextHopFraming framing = UpstreamRequestFraming(client, input.whole);
  if (framing.kind == BodyFraming::kLength) head.push_back({"content-length", std::to_string(framing.length)});
  return head;
}

Http1ResponseHead Http1ResponseFromH2(const h2::Headers& fields, bool end_stream, unsigned client_version,
                                      bool head_request, bool keep_alive) {
  Http1ResponseHead out;
  auto refuse = [&out](std::string why) {
    out.status = 0;
    out.error = std::move(why);
    return out;
  };
  std::optional<unsigned> status;
  std::optional<uint64_t> length;
  HeadFields copied;
  bool regular = false;  // a regular field came: no pseudo-header may follow
  for (const h2::Header& field : fields) {
    if (!field.name.empty() && field.name[0] == ':') {
      if (regular || field.name != ":status" || status) return refuse("a misplaced or unknown pseudo-header " + field.name);
      const std::string& value = field.value;
      if (value.size() != 3 || !IsAsciiDigit(value[0]) || !IsAsciiDigit(value[1]) || !IsAsciiDigit(value[2]) ||
          value[0] < '1' || value[0] > '5') {
        return refuse("a :status that is not a three-digit status");
      }
      status = static_cast<unsigned>(std::stoul(value));
      continue;
    }
    regular = true;
    if (!ValidName(field.name)) return refuse("a field name that is not a lower-case token");
    if (!ValidValue(field.value)) return refuse("a control character in field " + field.name);
    if (ConnectionSpecific(field.name)) return refuse("the connection-specific field " + field.name);
    if (field.name == "content-length") {
      const std::optional<uint64_t> n = ParseLength(field.value);
      if (!n || (length && *length != *n)) return refuse("an invalid or conflicting content-length");
      length = n;
      continue;  // the proxy writes the framing itself
    }
    copied.Add(http::string_to_field(field.name), field.name, field.value);
  }
  if (!status) return refuse("no :status");
  if (*status == 101) return refuse("101 Switching Protocols, which HTTP/2 does not have");
  if (*status / 100 == 1) {
    out.status = *status;
    out.interim = true;
    return out;
  }
  out.status = *status;
  out.no_body = head_request || *status == 204 || *status == 304;
  out.keep_alive = keep_alive;
  // Framing written by the proxy, as Exchange frames an HTTP/1.1 backend's answer: the backend's
  // length (not for a 204); else, with a body to come, chunks to an HTTP/1.1 client and the close
  // to an HTTP/1.0 one; a head that ended the stream has an empty body.
  if (length && *status != 204) {
    out.framing = NextHopFraming::Length(*length);
    if (!out.no_body) out.content_length = length;
  } else if (out.no_body) {
    out.framing = NextHopFraming::None();
  } else if (end_stream) {
    out.framing = NextHopFraming::Length(0);
    out.content_length = 0;
  } else if (client_version >= 11) {
    out.framing = NextHopFraming::Chunked();
  } else {
    out.framing = NextHopFraming::Close();
    out.keep_alive = false;
  }
  const http::status known = http::int_to_status(*status);
  std::string_view reason;
  if (known != http::status::unknown) {
    const auto text = http::obsolete_reason(known);
    reason = std::string_view(text.data(), text.size());
  }
  out.head = ClientResponseHead(*status, reason, copied, client_version, out.framing, out.keep_alive);
  return out;
}

std::string ChunkedTrailers(const h2::Headers& trailers) {
  std::string out = "0\r\n";
  for (const h2::Header& field : trailers) {
    if (!ValidName(field.name) || !ValidValue(field.value)) continue;
    const http::field id = http::string_to_field(field.name);
    if (IsHopByHop(id) || id == http::field::content_length || id == http::field::host) continue;
    out.append(field.name);
    out.append(": ");
    out.append(field.value);
    out.append("\r\n");
  }
  out.append("\r\n");
  return out;
}

io::Awaitable<bool> Http1H2Relay::Wait(H2Upstream::Stream& stream, Clock::time_point deadline) {
  if (Clock::now() >= deadline) co_return false;
  io::Timer& timer = stream.changed();
  timer.expires_at(deadline);
  co_await timer.async_wait(kTuple);
  co_return Clock::now() < deadline;
}

io::Awaitable<Http1H2Relay::Sent> Http1H2Relay::SendBody(H2Upstream::Stream& stream, const H2RelayRequest& request,
                                                         RequestBody& body) {
  for (;;) {
    const bool last = body.complete();
    if ((body.size() != 0 || last) && !upstream_.Send(stream, std::string_view(body.data(), body.size()), last)) {
      co_return Sent::kClosed;
    }
    if (last) co_return Sent::kOk;
    // A body too long to hold: what was held has gone; the rest is relayed as it arrives, while
    // the backend takes it.
    body.DropHeld();
    while (upstream_.Queued(stream) >= kHighWater && !stream.closed) {
      if (!co_await Wait(stream, request.deadline)) co_return Sent::kTimedOut;
    }
    if (stream.closed) co_return Sent::kClosed;
    if (auto ec = co_await body.Read(client_, client_buffer_, relay_size_); ec) co_return Sent::kBodyFailed;
    if (body.failed()) co_return Sent::kBodyFailed;
  }
}

io::Awaitable<ExchangeResult> Http1H2Relay::Run(const H2RelayRequest& request, RequestBody& body) {
  ExchangeResult result;
  auto fail = [&result](ProblemType type, std::string detail) {
    result.problem = MakeProblem(type, std::move(detail));
    result.upstream_failed = true;
    result.keep_alive = false;
  };
  std::shared_ptr<H2Upstream::Stream> stream;
  for (;;) {
    ++result.attempts;
    boost::system::error_code ec;
    const bool no_data = body.complete() && body.size() == 0;
    stream = co_await upstream_.Open(request.head, no_data, ec);
    if (!stream) {
      fail(ProblemType::kUpstreamUnavailable, "the backend could not be reached: " + ec.message());
      co_return result;
    }
    const Sent sent = no_data ? Sent::kOk : co_await SendBody(*stream, request, body);
    if (sent == Sent::kBodyFailed) {
      // The client's body broke off or broke the rules mid-stream: the backend's stream is reset,
      // so it never sees a complete request; the client hears why if it still listens.
      upstream_.Reset(*stream, h2::kCancel);
      if (body.failed()) result.problem = body.problem();
      result.body_failed = true;
      result.keep_alive = false;
      co_return result;
    }
    if (sent == Sent::kTimedOut) {
      upstream_.Reset(*stream, h2::kCancel);
      fail(ProblemType::kUpstreamTimeout, "the backend did not answer within timeouts.request");
      co_return result;
    }
    result.bytes_in = body.decoder().body_bytes();
    // The stream closed under a body still arriving (the backend answered early, or reset it):
    // the rest of the body is unread, so the client connection cannot carry another request.
    const bool body_unread = sent == Sent::kClosed && !body.complete();

    // The response, relayed as it comes: a batch of events, written, then given back.
    Http1ResponseHead response;  // status 0 until the final head came
    std::string out;
    uint64_t data_bytes = 0;  // DATA of the final response received so far
    bool written = false;     // a byte of the response went to the client
    bool trailers_done = false;
    bool done = false;
    bool retry = false;
    for (;;) {
      size_t consumed = 0;  // DATA bytes in `out`, given back once written
      std::optional<std::string> broken;  // the response broke off or broke its framing: why
      while (!stream->events.empty() && out.size() < kWriteBatch && !broken && !done && !retry) {
        H2StreamEvent event = std::move(stream->events.front());
        stream->events.pop_front();
        switch (event.kind) {
          case h2::Event::Kind::kHead: {
            if (response.status != 0) break;  // (the codec gives trailers as kTrailers)
            Http1ResponseHead translated = Http1ResponseFromH2(event.fields, event.end_stream, request.client_version,
                                                               request.head_request, request.client_keep_alive);
            if (translated.status == 0) {
              upstream_.Reset(*stream, h2::kProtocolError);
              fail(ProblemType::kUpstreamInvalid, "the backend's response was refused: it has " + translated.error);
              co_return result;
            }
            if (translated.interim) break;  // 1xx: the proxy answered 100-continue itself
            response = std::move(translated);
            result.upstream_status = response.status;
            out.append(response.head);
            break;
          }
          case h2::Event::Kind::kData:
            if (response.status == 0 || response.no_body) {
              upstream_.Consume(*stream, event.data.size());  // no body to carry it: dropped
              break;
            }
            data_bytes += event.data.size();
            if (response.content_length && data_bytes > *response.content_length) {
              broken = "more DATA than its content-length";
              break;
            }
            if (response.framing.kind == BodyFraming::kChunked) {
              if (!event.data.empty()) AppendChunk(out, event.data);
            } else {
              out.append(event.data);
            }
            consumed += event.data.size();
            break;
          case h2::Event::Kind::kTrailers:
            if (response.framing.kind == BodyFraming::kChunked) {
              out.append(request.trailers ? ChunkedTrailers(event.fields) : std::string("0\r\n\r\n"));
              trailers_done = true;
            }
            break;
          case h2::Event::Kind::kEnd:
            if (response.status == 0) {
              broken = "no response head";
            } else if (response.content_length && data_bytes != *response.content_length) {
              broken = "less DATA than its content-length";
            } else {
              if (response.framing.kind == BodyFraming::kChunked && !trailers_done) out.append("0\r\n\r\n");
              done = true;
            }
            break;
          case h2::Event::Kind::kReset:
            if (response.status == 0 && event.error_code == h2::kRefusedStream && result.attempts == 1 &&
                body.whole()) {
              retry = true;  // the backend says it never processed it: once more, as it was
            } else {
              broken = "the stream reset (" + h2::ErrorCodeName(event.error_code) + ")";
            }
            break;
          default:
            broken = std::string("an unexpected ") + std::string(h2::EventKindName(event.kind));
            break;
        }
      }
      if (retry) break;
      if (broken) {
        upstream_.Reset(*stream, h2::kCancel);
        result.keep_alive = false;
        if (!written) {
          fail(response.status == 0 ? ProblemType::kUpstreamUnavailable : ProblemType::kUpstreamInvalid,
               response.status == 0 ? "the backend ended the stream without an answer: " + *broken
                                    : "the backend's response broke off: " + *broken);
        }
        co_return result;  // a partial response: the client connection closes
      }
      if (!out.empty()) {
        auto [wec, n] = co_await asio::async_write(client_, asio::buffer(out), kTuple);
        written = true;
        result.status = response.status;
        if (wec) {
          upstream_.Reset(*stream, h2::kCancel);  // the client went away
          result.keep_alive = false;
          co_return result;
        }
        result.bytes_out += consumed;
        upstream_.Consume(*stream, consumed);
        out.clear();
      }
      if (done) {
        result.keep_alive = response.keep_alive && !body_unread;
        co_return result;
      }
      if (!stream->events.empty()) continue;
      if (!co_await Wait(*stream, request.deadline)) {
        // timeouts.request: the stream is reset toward the backend (as H2Session does), and the
        // client gets a 504 or, mid-response, a closed connection.
        upstream_.Reset(*stream, h2::kCancel);
        result.keep_alive = false;
        if (!written) fail(ProblemType::kUpstreamTimeout, "the backend did not answer within timeouts.request");
        co_return result;
      }
    }
    stream.reset();  // REFUSED_STREAM: opened once more, on a connection with room
  }
}

}  // namespace fencing
