#include "server/h2_session.h"

#include "common/access_log.h"
#include "common/log.h"
#include "http/ascii.h"
#include "http/outcome.h"
#include "http/problem.h"
#include "http/request_head.h"
#include "server/admission.h"
#include "server/h2_http1_relay.h"
#include "server/request_plan.h"
#include "tls/handshake.h"

#include <boost/asio/co_spawn.hpp>
#include <boost/asio/detached.hpp>
#include <boost/asio/write.hpp>

#include <chrono>
#include <cstdlib>
#include <optional>
#include <string>
#include <utility>
#include <vector>

namespace fencing {

namespace asio = boost::asio;
namespace http = boost::beast::http;
using boost::system::error_code;
using io::kTuple;

namespace {

// One side held back at h2::kRelayHighWater (h2/connection.h).
constexpr size_t kHighWater = h2::kRelayHighWater;

}  // namespace

struct H2Session::Stream {
  Stream(io::Executor executor, int32_t stream_id) : id(stream_id), changed(std::move(executor)) {
    changed.expires_at(io::Timer::time_point::max());
  }
  int32_t id;
  h2::Headers head;
  bool head_end = false;             // the request has no body
  std::deque<H2StreamEvent> events;  // from the client, after the head
  bool client_closed = false;        // its kEnd or kReset has come
  bool reset = false;                // the client reset it
  io::Timer changed;                 // waited on until the upstream stream exists
  std::shared_ptr<H2Upstream::Stream> upstream;
  ExchangeCancel http1;              // an HTTP/1.1 backend's exchange (h2_http1_relay.h)

  // What its access line says (Handle fills it in).
  struct Record {
    std::chrono::steady_clock::time_point start = std::chrono::steady_clock::now();
    std::shared_ptr<const Runtime> runtime;  // the snapshot the stream was planned with
    std::string method, path;
    std::string_view route;    // into runtime's config
    Outcome outcome = Outcome::kRejectedRequest;
    std::optional<uint64_t> token, max_token;
    unsigned status = 0;           // the :status sent to the client (0: none, reset)
    unsigned upstream_status = 0;  // the backend's
    unsigned upstream_attempts = 0;
    uint64_t bytes_in = 0, bytes_out = 0;
  } record;

  void Wake() {
    changed.cancel();
    if (upstream) upstream->Wake();
  }
  io::Timer& Waiter() { return upstream ? upstream->changed() : changed; }
  // The client reset it, or the connection ended: an HTTP/1.1 exchange's backend I/O stops.
  void Abort() {
    boost::system::error_code ignored;
    if (http1.upstream) http1.upstream->socket.cancel(ignored);
    Wake();
  }
};

H2Session::H2Session(Worker& worker, tls::ServerStream& stream, const ClientIdentity& identity, std::string client_ip,
                     H2Upstream* upstream, std::function<void(bool idle)> idle)
    : worker_(worker),
      client_(stream),
      identity_(identity),
      client_ip_(std::move(client_ip)),
      upstream_(upstream),
      idle_(std::move(idle)),
      codec_(h2::Role::kServer),
      done_(stream.get_executor()) {}

io::Awaitable<void> H2Session::Serve(std::string already_read) {
  auto self = shared_from_this();
  idle_(true);
  bool ok = already_read.empty() || codec_.Receive(already_read).ok();
  Dispatch();
  Flush();
  std::vector<uint8_t> buffer(16 * 1024);
  while (ok && !over_ && !codec_.Done()) {
    auto [ec, n] = co_await client_.async_read_some(asio::buffer(buffer), kTuple);
    if (ec) break;
    ok = codec_.Receive(buffer.data(), n).ok();
    Dispatch();
    Flush();
  }
  // A connection error's GOAWAY is written by the writer Flush started; the streams end.
  over_ = true;
  WakeAll();
  while (running_ > 0 || writing_) {
    done_.expires_at(io::Timer::time_point::max());
    co_await done_.async_wait(kTuple);
  }
}

void H2Session::Dispatch() {
  h2::Event event;
  while (codec_.NextEvent(&event)) {
    const int32_t id = event.stream;
    switch (event.kind) {
      case h2::Event::Kind::kHead: {
        auto stream = std::make_shared<Stream>(client_.get_executor(), id);
        stream->head = std::move(event.fields);
        stream->head_end = event.end_stream;
        streams_[id] = stream;
        if (running_++ == 0) idle_(false);
        asio::co_spawn(client_.get_executor(), ServeStream(shared_from_this(), std::move(stream)), asio::detached);
        continue;
      }
      case h2::Event::Kind::kHeadTooLarge: {
        const Problem problem = MakeProblem(ProblemType::kHeaderTooLarge, "the request head is over the limit");
        const std::string body = ProblemJson(problem);
        const h2::Headers head{{":status", "431"},
                               {"content-type", "application/problem+json"},
                               {"content-length", std::to_string(body.size())}};
        codec_.SubmitResponse(id, head, false);
        codec_.SubmitData(id, body, true);
        continue;
      }
      case h2::Event::Kind::kGoAway:
        continue;
      default:
        break;
    }
    auto it = streams_.find(id);
    if (it == streams_.end()) {
      if (event.kind == h2::Event::Kind::kData) codec_.Consume(id, event.data.size());
      continue;
    }
    Stream& stream = *it->second;
    H2StreamEvent owned;
    owned.kind = event.kind;
    owned.fields = std::move(event.fields);
    owned.data.assign(event.data);
    owned.error_code = event.error_code;
    if (event.kind == h2::Event::Kind::kEnd || event.kind == h2::Event::Kind::kReset) stream.client_closed = true;
    if (event.kind == h2::Event::Kind::kReset) stream.reset = true;
    stream.events.push_back(std::move(owned));
    if (stream.reset) {
      stream.Abort();
    } else {
      stream.Wake();
    }
  }
}

void H2Session::Flush() {
  if (writing_ || !codec_.WantWrite()) return;
  writing_ = true;
  asio::co_spawn(client_.get_executor(), WriteLoop(shared_from_this()), asio::detached);
}

io::Awaitable<void> H2Session::WriteLoop(std::shared_ptr<H2Session> self) {
  const std::shared_ptr<H2Session> keep = std::move(self);  // alive until the writer ends
  std::string out;
  while (codec_.WantWrite()) {
    out.clear();
    codec_.TakeOutput(&out);
    auto [ec, n] = co_await asio::async_write(client_, asio::buffer(out), kTuple);
    if (ec) {
      over_ = true;
      break;
    }
    Dispatch();  // sending can close streams
    WakeAll();   // what they queued moved on
  }
  writing_ = false;
  if (over_ || codec_.Done()) {
    over_ = true;
    WakeAll();
    error_code ignored;
    client_.socket().cancel(ignored);  // ends the read loop
    done_.cancel();
  }
}

void H2Session::WakeAll() {
  for (auto& [id, stream] : streams_) {
    if (over_) {
      stream->Abort();
    } else {
      stream->Wake();
    }
  }
}

io::Awaitable<void> H2Session::ServeStream(std::shared_ptr<H2Session> self, std::shared_ptr<Stream> stream) {
  co_await Handle(*stream);
  LogAccess(*stream);
  // Bytes the client sent that nobody passed on: its window back.
  for (const H2StreamEvent& event : stream->events) {
    if (event.kind == h2::Event::Kind::kData) codec_.Consume(stream->id, event.data.size());
  }
  stream->events.clear();
  streams_.erase(stream->id);
  if (--running_ == 0) {
    idle_(true);
    if (over_) done_.cancel();
    EndIfDraining();
  }
  Flush();
  self.reset();
}

void H2Session::EndIfDraining() {
  // Shutting down: the drain closed the connections idle when it began; one that was busy ends
  // once its last stream has, with a GOAWAY that tells the client to go elsewhere (as nginx and
  // Envoy do), instead of holding the shutdown until timeouts.idle.
  if (running_ != 0 || over_ || !worker_.shared().draining.load(std::memory_order_relaxed)) return;
  codec_.GoAway(h2::kNoError);
  over_ = true;
  WakeAll();
  Flush();  // the writer sends the GOAWAY, then ends the read loop
  if (!writing_) {
    error_code ignored;
    client_.socket().cancel(ignored);
  }
}

void H2Session::LogAccess(const Stream& stream) const {
  const Stream::Record& record = stream.record;
  if (!record.runtime || !record.runtime->config().access_log || !LogEnabled(LogLevel::kInfo)) return;
  AccessEntry entry;
  entry.method = record.method;
  entry.path = record.path;
  entry.client = client_ip_;
  entry.identity = identity_.joined;
  entry.status = record.status;
  if (!record.route.empty()) entry.route = record.route;
  entry.decision = OutcomeName(record.outcome);
  entry.token = record.token;
  entry.max_token = record.max_token;
  entry.upstream_status = record.upstream_status;
  entry.upstream_attempts = record.upstream_attempts;
  entry.bytes_in = record.bytes_in;
  entry.bytes_out = record.bytes_out;
  entry.duration_us = static_cast<uint64_t>(
      std::chrono::duration_cast<std::chrono::microseconds>(std::chrono::steady_clock::now() - record.start).count());
  worker_.LogAccess(entry);
}

io::Awaitable<void> H2Session::Handle(Stream& stream_ref) {
  Stream* stream = &stream_ref;
  std::shared_ptr<const Runtime> runtime = worker_.runtime();
  const ProxyConfig& config = runtime->config();
  Stream::Record& record = stream->record;
  record.runtime = runtime;

  // The request as the fence sees any request: the pseudo-headers as its request line, its
  // :authority as Host.
  H2Request request;
  ReadH2Request(stream->head, request);
  const RequestHead& head = request.head;
  const std::string& authority = request.authority;
  const std::string& method = request.method;
  const bool grpc = request.grpc;

  record.method = method;
  record.path = std::string(head.target());
  RequestPlan plan = PlanRequest(head, *runtime, identity_);
  const RouteMetrics& metrics = plan.metrics(*runtime);
  if (plan.route) record.route = plan.route->config->name;
  // Counted once, when the answer is decided: a refusal, or the backend's head (an admitted
  // stream whose backend fails before answering counts as upstream_error instead).
  bool counted = false;
  auto count = [&](Outcome outcome) {
    if (counted) return;
    counted = true;
    metrics.Count(outcome);
    record.outcome = outcome;
  };
  auto refuse = [&](const Problem& problem) {
    count(plan.outcome);
    record.token = problem.token;
    record.max_token = problem.max_token;
    record.status = grpc ? 200 : static_cast<unsigned>(problem.status);
    if (grpc) {
      h2::Headers extra;
      if (problem.status == http::status::conflict && problem.max_token) {
        extra.push_back({"x-fencing-token-max", std::to_string(*problem.max_token)});
      }
      codec_.SubmitResponse(stream->id, h2::GrpcTrailersOnly(static_cast<int>(GrpcStatusOf(problem)), problem.detail, extra),
                            true);
    } else {
      const std::string body = ProblemJson(problem);
      h2::Headers response{{":status", std::to_string(static_cast<unsigned>(problem.status))},
                           {"content-type", "application/problem+json"},
                           {"content-length", std::to_string(body.size())}};
      if (problem.status == http::status::conflict && problem.max_token) {
        response.push_back({"x-fencing-token-max", std::to_string(*problem.max_token)});
      }
      if (problem.retry_after) response.push_back({"retry-after", std::to_string(*problem.retry_after)});
      codec_.SubmitResponse(stream->id, response, false);
      codec_.SubmitData(stream->id, body, true);
    }
    Flush();
  };

  if (grpc && !upstream_) {
    // HTTP/1.1 cannot carry a gRPC call (its status comes in trailers): refused before
    // admission, nothing forwarded.
    plan.outcome = Outcome::kRejectedRequest;
    refuse(MakeProblem(ProblemType::kGrpcNeedsHttp2Backend,
                       "gRPC needs an HTTP/2 backend (backend_protocol: h2c); this proxy's backend speaks HTTP/1.1"));
    co_return;
  }
  if (plan.action == RequestPlan::Action::kReject) {
    refuse(plan.problem);
    co_return;
  }
  bool verified = false;
  FenceRef fence = AcquireFence(plan, verified);
  if (!fence && plan.action == RequestPlan::Action::kFence) {  // a new key on a verified route
    verified = co_await VerifyToken(plan);
    fence = AcquireFence(plan, verified);
  }
  Fence* admitted = nullptr;
  if (plan.action == RequestPlan::Action::kFence && fence) {
    const AdmitContext context{client_.get_executor(), worker_.raise_inbox(), config, {}};
    admitted = co_await Admit(context, plan, *fence, verified);
  }
  // Held from here until the stream has ended both ways: a raise waits for it.
  AdmissionGuard guard(admitted, metrics);
  if (plan.action == RequestPlan::Action::kReject) {
    refuse(plan.problem);
    co_return;
  }
  if (over_ || stream->reset) co_return;
  record.outcome = plan.outcome;
  record.token = plan.problem.token;  // as HTTP/1.1's access line: the token read, and the max
  record.max_token = plan.problem.max_token;
  // Bounded as an HTTP/1.1 exchange is, from its admission: a stream still open at
  // timeouts.request is reset both ways, so an admitted call always ends and a raise never waits
  // longer for it (a long-lived stream is reset too, as a long HTTP/1.1 response is cut off).
  const auto deadline = std::chrono::steady_clock::now() + config.timeouts.request;
  if (!upstream_) {
    co_await RelayHttp1(*stream, plan, request, deadline, count, refuse);
    co_return;
  }

  // The head for the backend: the client's fields but the token as read (or none) and the
  // route's identity header as the proxy knows it.
  const std::string_view identity_header =
      plan.route ? std::string_view(plan.route->config->identity_header) : std::string_view();
  h2::Headers upstream_head{{":method", method},
                            {":scheme", config.backend_https ? "https" : "http"},
                            {":authority", !plan.host.empty() ? std::string(plan.host)
                                           : !authority.empty() ? authority
                                                                : std::string(worker_.shared().backend_host)},
                            {":path", std::string(plan.origin_target)}};
  for (const h2::Header& field : stream->head) {
    if (field.name.empty() || field.name[0] == ':' || field.name == "host") continue;
    if (!plan.drop_header.empty() && EqualsIgnoreCase(field.name, plan.drop_header)) continue;
    if (!identity_header.empty() && EqualsIgnoreCase(field.name, identity_header)) continue;
    upstream_head.push_back(field);
  }
  if (plan.rewrite_token) upstream_head.push_back({ToAsciiLower(plan.drop_header), std::to_string(plan.token)});
  if (!identity_header.empty() && !identity_.joined.empty()) {
    upstream_head.push_back({ToAsciiLower(identity_header), identity_.joined});
  }

  error_code ec;
  std::shared_ptr<H2Upstream::Stream> upstream = co_await upstream_->Open(upstream_head, stream->head_end, ec);
  if (!upstream) {
    plan.outcome = Outcome::kUpstreamError;
    // h2: the backend's TLS failed (its certificate did not verify, it refused the handshake, or
    // it did not select h2), and nothing was sent to it: 502 backend-tls, as over HTTP/1.1.
    refuse(IsTlsFailure(ec)
               ? MakeProblem(ProblemType::kBackendTls, "the TLS connection to the backend failed: " + ec.message())
               : MakeProblem(ProblemType::kUpstreamUnavailable, "the backend could not be reached: " + ec.message()));
    co_return;
  }
  record.upstream_attempts = 1;
  stream->upstream = upstream;
  bool client_done = stream->head_end;  // our side towards the backend has ended
  bool head_sent = false, response_done = false;
  for (;;) {
    if (over_) {
      upstream_->Reset(*upstream, h2::kCancel);
      co_return;
    }
    // Client to backend, while the backend's side takes it.
    while (!stream->events.empty()) {
      H2StreamEvent& event = stream->events.front();
      if (event.kind == h2::Event::Kind::kData) {
        if (upstream_->Queued(*upstream) >= kHighWater) break;
        if (!client_done) upstream_->Send(*upstream, event.data, false);
        codec_.Consume(stream->id, event.data.size());
        record.bytes_in += event.data.size();
      } else if (event.kind == h2::Event::Kind::kTrailers) {
        if (!client_done) upstream_->Finish(*upstream, event.fields);
        client_done = true;
      } else if (event.kind == h2::Event::Kind::kEnd) {
        if (!client_done) upstream_->Send(*upstream, {}, true);
        client_done = true;
      } else if (event.kind == h2::Event::Kind::kReset) {
        stream->events.clear();
        upstream_->Reset(*upstream, h2::kCancel);
        co_return;
      }
      stream->events.pop_front();
    }
    // Backend to client, while the client takes it.
    while (!upstream->events.empty() && !response_done) {
      H2StreamEvent& event = upstream->events.front();
      if (event.kind == h2::Event::Kind::kHead) {
        codec_.SubmitResponse(stream->id, event.fields, event.end_stream);
        head_sent = head_sent || !event.fields.empty();
        count(plan.outcome);
        for (const h2::Header& field : event.fields) {
          if (field.name == ":status") record.status = record.upstream_status = static_cast<unsigned>(std::atoi(field.value.c_str()));
        }
      } else if (event.kind == h2::Event::Kind::kData) {
        if (codec_.Queued(stream->id) >= kHighWater) break;
        codec_.SubmitData(stream->id, event.data, false);
        upstream_->Consume(*upstream, event.data.size());
        record.bytes_out += event.data.size();
      } else if (event.kind == h2::Event::Kind::kTrailers) {
        codec_.SubmitTrailers(stream->id, event.fields);
        response_done = true;
      } else if (event.kind == h2::Event::Kind::kEnd) {
        codec_.SubmitData(stream->id, {}, true);
        response_done = true;
      } else if (event.kind == h2::Event::Kind::kReset) {
        if (!head_sent) {
          plan.outcome = Outcome::kUpstreamError;
          const error_code& lost = event.connection_error;  // the connection failed under it
          if (IsTlsFailure(lost)) {
            // Its TLS failed (a fatal alert, such as a TLS 1.3 backend refusing our client
            // certificate after the handshake): 502 backend-tls with the reason, as over HTTP/1.1.
            refuse(MakeProblem(ProblemType::kBackendTls, "the TLS connection to the backend failed: " + lost.message()));
          } else if (lost) {
            refuse(MakeProblem(ProblemType::kUpstreamUnavailable,
                               "the connection to the backend failed: " + lost.message()));
          } else {
            refuse(MakeProblem(ProblemType::kUpstreamUnavailable, "the backend reset the stream (" +
                                                                      h2::ErrorCodeName(event.error_code) + ")"));
          }
        } else {
          codec_.ResetStream(stream->id, h2::kInternalError);
        }
        upstream->events.clear();
        co_return;
      }
      upstream->events.pop_front();
    }
    Flush();
    if (response_done) {
      // The answer is complete: what the client still sends is not needed (the codec resets
      // the client's side), and the backend hears the same.
      if (!client_done) upstream_->Reset(*upstream, h2::kNoError);
      co_return;
    }
    if (std::chrono::steady_clock::now() >= deadline) {
      upstream_->Reset(*upstream, h2::kCancel);
      codec_.ResetStream(stream->id, h2::kCancel);
      Flush();
      co_return;
    }
    io::Timer& waiter = stream->Waiter();
    waiter.expires_at(deadline);
    co_await waiter.async_wait(kTuple);
  }
}

io::Awaitable<void> H2Session::RelayHttp1(Stream& stream, RequestPlan& plan, const H2Request& request,
                                          std::chrono::steady_clock::time_point deadline,
                                          const std::function<void(Outcome)>& count,
                                          const std::function<void(const Problem&)>& refuse) {
  const ProxyConfig& config = stream.record.runtime->config();
  Stream::Record& record = stream.record;
  RelayBuffers::Lease relay = worker_.relay_buffers().Take();
  H2StreamPort port{codec_,        stream.id, stream.events, stream.changed, stream.reset, over_, stream.http1,
                    [this] { Flush(); }};
  H2Http1Relay exchange(std::move(port), worker_.pool(), relay.data(), RelayBuffers::kSize, deadline);
  const Http1HeadContext context{client_ip_, worker_.shared().backend_host,
                                 config.headers_with_underscores == HeadersWithUnderscores::kDrop, identity_.joined};
  ExchangeResult result = co_await exchange.Run(
      request, stream.head_end, static_cast<size_t>(config.limits.buffered_body_bytes), config.limits.max_body_bytes,
      [&](NextHopFraming framing) { return Http1RequestHead(request, plan, framing, context); });
  record.upstream_attempts = result.attempts;
  record.upstream_status = result.upstream_status;
  record.bytes_in = result.bytes_in;
  record.bytes_out = result.bytes_out;
  if (result.problem) {
    // Nothing was sent to the client yet: the problem, as HTTP/1.1 answers it.
    plan.outcome = result.body_failed ? Outcome::kRejectedRequest : Outcome::kUpstreamError;
    refuse(*result.problem);
  } else if (result.status != 0) {
    count(plan.outcome);
    record.status = result.status;
  }
}

}  // namespace fencing
