#include "server/session.h"

#include "common/log.h"
#include "http/ascii.h"
#include "http/header_rewrite.h"
#include "http/raw_head.h"
#include "lockservice/raise_verifier.h"
#include "server/admission.h"
#include "server/h2_session.h"
#include "server/http1_h2_relay.h"
#include "server/request_plan.h"

#include <boost/asio/bind_allocator.hpp>
#include <boost/asio/co_spawn.hpp>
#include <boost/asio/post.hpp>
#include <boost/asio/write.hpp>
#include <boost/beast/http/error.hpp>
#include <boost/beast/http/write.hpp>

#include <chrono>
#include <optional>

namespace fencing {

namespace asio = boost::asio;
namespace beast = boost::beast;
namespace http = beast::http;
using tcp = asio::ip::tcp;
using Clock = std::chrono::steady_clock;

namespace {

using io::kTuple;

// A rejected request's body up to this size is read and dropped to keep the connection alive;
// a larger one closes the connection instead of being read.
constexpr uint64_t kDiscardLimit = 64 * 1024;
constexpr size_t kFirstReadSize = 4 * 1024;
constexpr auto kLingerTime = std::chrono::seconds(2);

bool ExpectsContinue(const RequestHead& head) {
  return head.version() >= 11 && EqualsIgnoreCase(head[http::field::expect], "100-continue");
}

// The decoder for the body the head announces (the head's framing passed the checks already).
BodyDecoder DecoderFor(const RequestHead& head, uint64_t max_body_bytes) {
  if (auto length = head.content_length()) return BodyDecoder::Length(*length);
  if (head.chunked()) return BodyDecoder::Chunked(max_body_bytes);
  return BodyDecoder();
}

// Plain heap allocation for a long-lived operation (a distinct type: Asio recycles its blocks
// for handlers whose allocator is std::allocator).
template <typename T>
struct ExactAllocator {
  using value_type = T;
  ExactAllocator() noexcept = default;
  template <typename U>
  ExactAllocator(const ExactAllocator<U>&) noexcept {}
  T* allocate(size_t n) { return std::allocator<T>().allocate(n); }
  void deallocate(T* p, size_t n) noexcept { std::allocator<T>().deallocate(p, n); }
  template <typename U>
  bool operator==(const ExactAllocator<U>&) const noexcept {
    return true;
  }
};

}  // namespace

Session::Session(Worker& worker, io::Socket socket, const tls::ServerContext* tls)
    : worker_(worker), stream_(std::move(socket)) {
  boost::system::error_code ec;
  auto remote = stream_.socket().remote_endpoint(ec);
  client_ip_ = ec ? "unknown" : remote.address().to_string();
  stream_.socket().set_option(tcp::no_delay(true), ec);
  if (tls) stream_.StartTls(*tls);
  worker_.Register(this);
  worker_.shared().metrics.connections().Increment();
}

Session::~Session() {
  worker_.Unregister(this);
  worker_.shared().metrics.connections().Decrement();
  worker_.shared().connections.Leave();
}

void Session::CloseIfIdle() {
  if (idle_ && !closing_) {
    closing_ = true;
    boost::system::error_code ec;
    stream_.socket().cancel(ec);
  }
}

void Session::SetDeadline(Clock::time_point deadline) {
  deadline_ = deadline;
  cancel_.timed_out = false;
}

bool Session::Sweep(Clock::time_point now, std::chrono::milliseconds idle_timeout, std::chrono::milliseconds cool_after) {
  if (!idle_) {
    if (now >= deadline_) {
      // Past the deadline: whatever the session awaits on either socket fails now. Again at
      // every sweep until the session moves on: an operation that completed just before the
      // first cancel must not let the exchange run on unbounded.
      cancel_.timed_out = true;
      boost::system::error_code ec;
      stream_.socket().cancel(ec);
      if (cancel_.upstream) cancel_.upstream->socket.cancel(ec);
    }
    return false;
  }
  if (now - idle_since_ >= idle_timeout) {
    CloseIfIdle();
    return false;
  }
  if (cooling_ || closing_ || !buffer_ || buffer_->size() != 0) return false;
  if (now - idle_since_ < cool_after) return false;
  // Idle for a while: stop the read that holds the buffer; Run gives the buffer back and waits
  // for readiness only.
  cooling_ = true;
  boost::system::error_code ec;
  stream_.socket().cancel(ec);
  return true;
}

void Session::Start() {
  asio::co_spawn(stream_.get_executor(), stream_.tls() ? Handshake() : Run(), LogCoroutineFailure);
}

io::Awaitable<void> Session::Handshake() {
  SessionPtr self(this);
  // Bounded like a request head: the sweep cancels a handshake still under way at header_read.
  SetDeadline(Clock::now() + worker_.runtime()->config().timeouts.header_read);
  auto [ec] = co_await stream_.async_handshake(kTuple);
  const bool timed_out = cancel_.timed_out;  // (ClearDeadline resets it)
  ClearDeadline();
  Metrics& metrics = worker_.shared().metrics;
  if (ec) {
    metrics.tls_handshakes(timed_out ? TlsHandshakeResult::kTimeout : TlsHandshakeResult::kFailed).Increment();
    if (LogEnabled(LogLevel::kDebug)) {
      Log(LogLevel::kDebug, "TLS handshake failed",
          {{"client", client_ip_}, {"error", timed_out ? std::string("timeout") : ec.message()}});
    }
    Close();
    co_return;
  }
  metrics.tls_handshakes(TlsHandshakeResult::kOk).Increment();
  // Shutting down since the handshake began: the drain closed the idle connections before this
  // one was idle, so it closes itself.
  if (worker_.shared().draining.load(std::memory_order_relaxed)) {
    co_await SendCloseNotify();
    Close();
    co_return;
  }
  stream_.TakeIdentity();
  if (stream_.alpn() == "h2") {
    co_await RunH2({});
    co_return;
  }
  co_await Run();
}

io::Awaitable<void> Session::RunH2(std::string already_read) {
  SessionPtr self(this);
  auto h2 = std::make_shared<H2Session>(worker_, stream_, stream_.identity(), client_ip_, worker_.h2_upstream(),
                                        [this](bool idle) {
                                          idle_ = idle;
                                          if (idle) idle_since_ = Clock::now();
                                        });
  co_await h2->Serve(std::move(already_read));
  idle_ = false;
  Close();
}

void Session::WaitCold() {
  // No coroutine, no buffer and no parser while idle: the session lives on in this wait's
  // handler (with the session and Asio's socket state, about 420 bytes of heap), and a new
  // coroutine starts when the next request comes.
  if (!idle_) {
    idle_ = true;
    idle_since_ = Clock::now();
  }
  auto on_readable = [self = SessionPtr(this)](boost::system::error_code ec) {
    self->idle_ = false;
    if (ec) {
      self->Close();  // CloseIfIdle: idle timeout, eviction or shutdown
      return;
    }
    // Readable: a request, or the client's close. Either way Run reads it, into a new buffer.
    asio::co_spawn(self->stream_.get_executor(), self->Run(), LogCoroutineFailure);
  };
  // An allocation of its own, sized for it: Asio's default would recycle a block some larger
  // operation of this thread left behind, and keep that whole block for as long as the wait.
  // Readiness of the TCP socket: with TLS too, since a TLS read waits on the socket only when
  // what OpenSSL holds is no whole record; should it hold one, Run reads it at once.
  if (stream_.HasBufferedInput()) {
    asio::post(stream_.get_executor(), [on_readable = std::move(on_readable)]() mutable { on_readable({}); });
    return;
  }
  stream_.socket().async_wait(tcp::socket::wait_read,
                              asio::bind_allocator(ExactAllocator<void>(), std::move(on_readable)));
}

void Session::Close() {
  boost::system::error_code ec;
  stream_.socket().shutdown(tcp::socket::shutdown_both, ec);
  stream_.socket().close(ec);
}

io::Awaitable<void> Session::Run() {
  SessionPtr self(this);
  // The read buffer lives in this coroutine's frame, not in the session: a connection waiting
  // cold (WaitCold) holds neither. A request is usually on its way (a new connection's, or the
  // one that woke a cold wait): start with room to read it into.
  ClientBuffer buffer;
  buffer.reserve(kFirstReadSize);
  buffer_ = &buffer;
  // Sweep must not reach the buffer once the frame is gone (its end, or the io_context's).
  struct Unpoint {
    Session* session;
    ClientBuffer* buffer;
    ~Unpoint() {
      if (session->buffer_ == buffer) session->buffer_ = nullptr;
    }
  } unpoint{this, &buffer};
  for (;;) {
    if (buffer.size() == 0) {
      // Waiting for the next request, reading it straight into the buffer: the read is tried at
      // once (under load the request is often there already) and otherwise waits for epoll, with
      // no epoll_ctl (a bare readiness wait costs one per request in Asio). The idle timeout is
      // enforced by the worker's sweep (Worker::SweepIdle), not by a timer per wait.
      idle_ = true;
      idle_since_ = Clock::now();
      auto [ec, n] = co_await stream_.async_read_some(buffer.prepare(kFirstReadSize), kTuple);
      buffer.commit(n);
      // Sweep may have asked for the buffer just after this read completed: then the request is
      // served and the connection can cool next time.
      const bool cool = ec == asio::error::operation_aborted && cooling_ && !closing_;
      cooling_ = false;
      if (cool) {
        // Idle for a sweep period (Sweep): give the buffer back (this frame's end unmaps it) and
        // wait without one.
        WaitCold();
        co_return;
      }
      idle_ = false;
      if (ec) break;
    }
    if (first_read_) {
      // HTTP/2 with prior knowledge (h2c) begins with its preface, whose method PRI no HTTP/1.1
      // request has (RFC 9113 3.4); its first 4 bytes decide, whatever the backend speaks.
      first_read_ = false;
      static constexpr std::string_view kPrefaceStart = "PRI ";
      const std::string_view got(static_cast<const char*>(buffer.data().data()), buffer.size());
      if (got.starts_with(kPrefaceStart)) {
        std::string already_read(got);
        buffer.consume(buffer.size());
        buffer_ = nullptr;
        co_await RunH2(std::move(already_read));
        co_return;
      }
    }
    if (!co_await ServeOne()) break;
    if (worker_.shared().draining.load(std::memory_order_relaxed)) break;
  }
  // A TLS client is told the end (close_notify), unless the sweep ended it: a connection idle or
  // stalled past its timeout is closed at once.
  if (stream_.tls() && !closing_ && !cancel_.timed_out) co_await SendCloseNotify();
  if (linger_) co_await LingeringClose();
  Close();
}

io::Awaitable<bool> Session::ServeOne() {
  // One config snapshot for the whole request, even if a reload lands meanwhile.
  std::shared_ptr<const Runtime> runtime = worker_.runtime();
  const ProxyConfig& config = runtime->config();

  // In this coroutine's frame, not in the session: an idle connection carries none.
  AccessRecord record{Clock::now()};
  record_ = &record;
  RequestHead head;
  bool parsed = false;
  head_request_ = false;
  std::optional<Problem> head_problem = co_await ReadHead(config, head, &parsed);
  if (!parsed) {
    if (head_problem) {
      // A head refused before it was read: answered without a body when it began as HEAD's.
      head_request_ = std::string_view(static_cast<const char*>(buffer_->data().data()), buffer_->size()).starts_with("HEAD ");
      runtime->unmatched_metrics().Count(Outcome::kRejectedRequest);
      linger_ = true;
      co_await WriteProblem(*head_problem, 11, false);
      if (config.access_log) LogAccess(nullptr, nullptr);
    }
    co_return false;
  }
  ClearDeadline();  // header_read is over
  head_request_ = head.method() == http::verb::head;

  RequestPlan plan = PlanRequest(head, *runtime, stream_.identity());
  BodyDecoder decoder = DecoderFor(head, config.limits.max_body_bytes);
  const RouteMetrics& metrics = plan.metrics(*runtime);
  bool keep_alive = false;
  if (plan.action == RequestPlan::Action::kReject) {
    metrics.Count(plan.outcome);
    keep_alive = co_await Reject(head, decoder, plan.problem, plan.close);
    if (config.access_log) LogAccess(&head, &plan);
    co_return keep_alive;
  }

  // The body: what came with the head, then (whole or nothing) the rest of a body that fits
  // limits.buffered_body_bytes, before the fence is asked: a slow upload holds up no raise.
  RelayBuffers::Lease relay = worker_.relay_buffers().Take();
  RequestBody body(decoder, relay.data(), RelayBuffers::kSize);
  const size_t keep = static_cast<size_t>(config.limits.buffered_body_bytes);
  body.Feed(*buffer_, keep);
  bool verified = false;  // the lock service confirmed the token (a raise on a verified route)
  // The fence this request asks: the route's, or its key's.
  FenceRef fence = AcquireFence(plan, verified);
  if (!fence && plan.action == RequestPlan::Action::kFence) {  // a new key on a verified route
    verified = co_await VerifyToken(plan);
    fence = AcquireFence(plan, verified);
  }
  if (plan.action == RequestPlan::Action::kReject) {  // a key the fence cannot take
    metrics.Count(plan.outcome);
    BodyDecoder rest = body.decoder();
    keep_alive = co_await Reject(head, rest, plan.problem, plan.close);
    if (config.access_log) LogAccess(&head, &plan);
    co_return keep_alive;
  }
  const bool fenced = plan.action == RequestPlan::Action::kFence;
  if (!body.complete() && !body.failed()) {
    if (fenced) {
      // Refused on the head, before 100 Continue and before the body is read.
      // (observe mode forwards what would be refused: it is asked once the body is in)
      AdmitResult check = fence->Check(plan.token, plan.route->config->max_token_jump);
      if (check.admission != Admission::kAdmitted && plan.route->config->mode != FenceMode::kObserve) {
        ApplyAdmission(plan, check.admission, check.max_token);
      } else if (!verified && NeedsVerification(plan, check)) {
        verified = co_await VerifyToken(plan);  // an unconfirmed raise is refused before its body
      }
      if (plan.action == RequestPlan::Action::kReject) {
        metrics.Count(plan.outcome);
        BodyDecoder rest = body.decoder();
        keep_alive = co_await Reject(head, rest, plan.problem, plan.close);
        if (config.access_log) LogAccess(&head, &plan);
        co_return keep_alive;
      }
    }
    if (ExpectsContinue(head)) {
      static constexpr std::string_view kContinue = "HTTP/1.1 100 Continue\r\n\r\n";
      SetDeadline(Clock::now() + config.timeouts.request);
      auto [ec, n] = co_await asio::async_write(stream_, asio::buffer(kContinue.data(), kContinue.size()), kTuple);
      if (ec) co_return false;
    }
  }
  // A body announced longer than the buffered limit streams: read what fits the relay buffer.
  const bool stream = !body.decoder().chunked() && body.decoder().remaining_known() + body.size() > keep;
  bool gone = false;
  std::optional<Problem> body_problem;
  if (!body.complete()) {  // (a coroutine frame saved for the usual body that came with its head)
    body_problem = co_await ReadBody(body, stream ? 0 : keep, &gone);
    ClearDeadline();
  }
  if (gone || body_problem) {
    metrics.Count(Outcome::kRejectedRequest);
    if (body_problem) co_await WriteProblem(*body_problem, head.version(), false);
    if (config.access_log) LogAccess(&head, nullptr);
    co_return false;
  }

  Fence* admitted = nullptr;
  if (plan.action == RequestPlan::Action::kFence) {
    // The sweep leaves the session alone while it waits for a raise.
    const AdmitContext admit{stream_.get_executor(), worker_.raise_inbox(), config,
                             [this](Clock::time_point until) { SetDeadline(until); }};
    admitted = co_await Admit(admit, plan, *fence, verified);
  }
  if (plan.action == RequestPlan::Action::kReject) {
    metrics.Count(plan.outcome);
    BodyDecoder rest = body.decoder();
    keep_alive = co_await Reject(head, rest, plan.problem, plan.close);
  } else {
    AdmissionGuard admission(admitted, metrics);
    keep_alive = co_await Forward(*runtime, head, plan, body, relay);
  }
  ClearDeadline();
  if (config.access_log) LogAccess(&head, &plan);
  co_return keep_alive;
}

io::Awaitable<std::optional<Problem>> Session::ReadBody(RequestBody& body, size_t keep, bool* gone) {
  const auto& config = worker_.runtime()->config();
  if (!body.complete() && !body.failed() && !body.full(keep)) {
    SetDeadline(Clock::now() + config.timeouts.request);
    boost::system::error_code ec = co_await body.Read(stream_, *buffer_, keep);
    if (ec) {
      if (cancel_.timed_out) {
        co_return MakeProblem(ProblemType::kBodyTimeout, "the request body did not arrive within timeouts.request");
      }
      *gone = true;  // the client went away: nothing of the request was sent
      co_return std::nullopt;
    }
  }
  if (body.failed()) co_return body.problem();
  co_return std::nullopt;
}

void Session::LogAccess(const RequestHead* head, const RequestPlan* plan) const {
  if (!LogEnabled(LogLevel::kInfo)) return;  // access lines are info lines
  AccessEntry entry;
  if (head) {
    entry.method = head->method_string();
    entry.path = head->target();
  }
  entry.client = client_ip_;
  entry.identity = stream_.identity().joined;
  entry.status = record_->status;
  if (plan) {
    if (plan->route) entry.route = std::string_view(plan->route->config->name);
    entry.decision = OutcomeName(plan->outcome);
    entry.token = plan->problem.token;
    entry.max_token = plan->problem.max_token;
  } else {
    entry.decision = OutcomeName(Outcome::kRejectedRequest);
  }
  entry.upstream_status = record_->upstream_status;
  entry.upstream_attempts = record_->upstream_attempts;
  entry.bytes_in = record_->bytes_in;
  entry.bytes_out = record_->bytes_out;
  entry.duration_us = static_cast<uint64_t>(
      std::chrono::duration_cast<std::chrono::microseconds>(Clock::now() - record_->start).count());
  worker_.LogAccess(entry);
}

io::Awaitable<std::optional<Problem>> Session::ReadHead(const ProxyConfig& config, RequestHead& head, bool* parsed) {
  // The head is collected raw and checked byte by byte (raw_head.h), then read (request_head.h).
  const size_t limit = config.limits.max_header_bytes;
  SetDeadline(Clock::now() + config.timeouts.header_read);
  size_t scanned = 0;
  size_t head_length = 0;
  size_t empty_lines = 0;  // bytes of empty lines skipped before the request line (RFC 9112 2.2)
  HeadInProgress so_far;   // what can never become a valid head is answered now, not at header_read
  for (;;) {
    std::string_view bytes(static_cast<const char*>(buffer_->data().data()), buffer_->size());
    if (scanned == 0 && bytes.starts_with('\r')) {
      const size_t skip = LeadingEmptyLines(bytes);
      buffer_->consume(skip);
      bytes.remove_prefix(skip);
      empty_lines += skip;
    }
    head_length = FindHeadEnd(bytes, &scanned);
    if (head_length != 0 || buffer_->size() + empty_lines > limit) break;
    if (RawHeadCheck start = so_far.Check(bytes); !start.ok) {
      co_return MakeProblem(ProblemType::kMalformedRequest, std::string("the request head is refused because it has ") + start.reason);
    }
    auto [ec, n] = co_await stream_.async_read_some(buffer_->prepare(std::min(kFirstReadSize, limit + 1 - buffer_->size())), kTuple);
    if (ec) co_return std::nullopt;  // the client went away or stalled: nothing to answer
    buffer_->commit(n);
  }
  if (head_length == 0 || head_length > limit) {
    co_return MakeProblem(ProblemType::kHeaderTooLarge, "the request head exceeds limits.max_header_bytes");
  }
  std::string_view bytes(static_cast<const char*>(buffer_->data().data()), head_length);
  if (RawHeadCheck raw = CheckRawHead(bytes); !raw.ok) {
    co_return MakeProblem(ProblemType::kMalformedRequest, std::string("the request head is refused because it has ") + raw.reason);
  }
  // A Content-Length above limits.max_body_bytes: 413 on the head.
  boost::system::error_code ec = head.Parse(bytes, config.limits.max_body_bytes);
  if (ec) {
    if (ec == http::error::body_limit) {
      co_return MakeProblem(ProblemType::kBodyTooLarge, "the request body exceeds limits.max_body_bytes");
    }
    co_return MakeProblem(ProblemType::kMalformedRequest, "the request head could not be parsed: " + ec.message());
  }
  buffer_->consume(head_length);
  *parsed = true;
  co_return std::nullopt;
}

io::Awaitable<bool> Session::Forward(const Runtime& runtime, const RequestHead& head, const RequestPlan& plan,
                                     RequestBody& body, RelayBuffers::Lease& relay) {
  const ProxyConfig& config = runtime.config();
  const RouteMetrics& metrics = plan.metrics(runtime);
  const auto started = Clock::now();
  // The whole exchange is bounded by timeouts.request: an admitted write must end (or be cut
  // off) in bounded time, or a raise waiting for it would wait forever.
  SetDeadline(started + config.timeouts.request);

  const std::string_view identity_header =
      plan.route ? std::string_view(plan.route->config->identity_header) : std::string_view();
  const std::string_view identity = identity_header.empty() ? std::string_view() : stream_.identity().joined;
  const bool client_keep_alive = head.keep_alive() && !worker_.shared().draining.load(std::memory_order_relaxed);
  const std::optional<uint64_t> token = plan.rewrite_token ? std::optional<uint64_t>(plan.token) : std::nullopt;
  const bool drop_underscored = config.headers_with_underscores == HeadersWithUnderscores::kDrop;
  ExchangeResult result;
  if (H2Upstream* h2 = worker_.h2_upstream()) {
    // An HTTP/2 backend (backend_protocol: h2c or h2): the request is one stream (server/http1_h2_relay.h).
    H2RelayRequest request;
    request.head = H2RequestHead(
        head, H2RequestHeadInput{plan.origin_target, plan.host, worker_.shared().backend_host, client_ip_,
                                 plan.drop_header, drop_underscored, token, identity_header, identity,
                                 body.complete() ? std::optional<uint64_t>(body.size()) : std::nullopt,
                                 config.backend_https});
    request.head_request = head.method() == http::verb::head;
    request.client_version = head.version();
    request.client_keep_alive = client_keep_alive;
    request.trailers = ClientAcceptsTrailers(head);
    request.deadline = started + config.timeouts.request;
    Http1H2Relay relay_h2(stream_, *buffer_, *h2, RelayBuffers::kSize);
    result = co_await relay_h2.Run(request, body);
  } else {
    // Request head for the backend, framed by the proxy (never the client's framing bytes). A
    // route's identity header carries the client's identity, never what the client sent in it.
    const NextHopFraming framing =
        UpstreamRequestFraming(head, body.complete() ? std::optional<uint64_t>(body.size()) : std::nullopt);
    const std::string upstream_head =
        UpstreamRequestHead(head, framing, plan.origin_target, plan.host, client_ip_, worker_.shared().backend_host,
                            plan.drop_header, drop_underscored, token, identity_header, identity);
    ExchangeRequest request;
    request.head = upstream_head;
    request.chunked = framing.kind == BodyFraming::kChunked;
    request.idempotent = IsIdempotentMethod(head.method_string());
    request.head_request = head.method() == http::verb::head;
    request.client_version = head.version();
    request.client_keep_alive = client_keep_alive;
    request.keep = static_cast<size_t>(config.limits.buffered_body_bytes);

    Exchange exchange(stream_, *buffer_, worker_.pool(), cancel_, relay.data(), RelayBuffers::kSize);
    result = co_await exchange.Run(request, body);
  }
  cancel_.upstream = nullptr;
  record_->upstream_status = result.upstream_status;
  record_->upstream_attempts = result.attempts;
  record_->bytes_in = result.bytes_in;
  record_->bytes_out = result.bytes_out;
  if (result.body_failed) {
    metrics.Count(Outcome::kRejectedRequest);
    if (result.problem) co_await WriteProblem(*result.problem, head.version(), false);
    co_return false;
  }
  if (result.problem) {
    metrics.Count(Outcome::kUpstreamError);
    SetDeadline(Clock::now() + config.timeouts.request);  // time to tell the client
    // The request was read to its end (it is not streamed after a failure): the connection can
    // serve the next one.
    co_return co_await WriteProblem(*result.problem, head.version(), body.complete() && client_keep_alive);
  }
  // The backend answered: the request's outcome is settled.
  metrics.Count(plan.outcome);
  record_->status = result.status;
  if (result.status != 0) {
    metrics.upstream_seconds->Observe(std::chrono::duration<double>(Clock::now() - started).count());
  }
  co_return result.keep_alive;
}

io::Awaitable<bool> Session::Reject(const RequestHead& head, BodyDecoder& body, const Problem& problem,
                                    bool force_close) {
  // Decide on the head: the body of a rejected request is never forwarded, and read only when it
  // is small and already on its way (no 100-continue was asked for).
  const bool body_pending = !body.done();
  bool keep_alive = head.keep_alive() && !force_close && problem.status != http::status::bad_request &&
                    !worker_.shared().draining.load(std::memory_order_relaxed);
  bool discard = false;
  if (body_pending && keep_alive) {
    // The whole declared length counts, not what is left of it: the limit is on the body.
    discard = !ExpectsContinue(head) && !body.chunked() && head.content_length().value_or(0) <= kDiscardLimit;
    keep_alive = discard;
  }
  const auto& config = worker_.runtime()->config();
  SetDeadline(Clock::now() + config.timeouts.request);
  if (!co_await WriteProblem(problem, head.version(), keep_alive)) {
    // Closing with request bytes possibly still on their way: linger, or the kernel's RST could
    // destroy the answer in flight.
    linger_ = body_pending || buffer_->size() != 0 || problem.status == http::status::bad_request;
    co_return false;
  }
  if (discard) co_return co_await DiscardBody(body);
  co_return keep_alive;
}

io::Awaitable<bool> Session::WriteProblem(const Problem& problem, unsigned version, bool keep_alive) {
  record_->status = static_cast<unsigned>(problem.status);
  auto response = MakeProblemResponse(problem, version >= 11 ? 11 : 10, keep_alive, head_request_);
  auto [ec, n] = co_await http::async_write(stream_, response, kTuple);
  co_return !ec && keep_alive;
}

io::Awaitable<bool> Session::DiscardBody(BodyDecoder& body) {
  char scratch[1024];
  SetDeadline(Clock::now() + worker_.runtime()->config().timeouts.header_read);
  for (;;) {
    while (buffer_->size() != 0 && !body.done() && !body.failed()) {
      std::string_view bytes(static_cast<const char*>(buffer_->data().data()), buffer_->size());
      buffer_->consume(body.Decode(bytes, scratch, sizeof scratch).consumed);
    }
    if (body.done()) co_return true;
    if (body.failed()) co_return false;
    auto [ec, n] = co_await stream_.async_read_some(buffer_->prepare(kFirstReadSize), kTuple);
    if (ec) co_return false;
    buffer_->commit(n);
  }
}

io::Awaitable<void> Session::LingeringClose() {
  // Closing a socket with unread input makes the kernel send RST, which can destroy the response
  // still in flight to the client. Half-close, then drain briefly (as nginx's lingering_close):
  // the TCP bytes, TLS records or not, are only dropped.
  io::Socket& socket = stream_.socket();
  boost::system::error_code ec;
  socket.shutdown(tcp::socket::shutdown_send, ec);
  if (ec) co_return;
  SetDeadline(Clock::now() + kLingerTime);
  char scratch[1024];
  size_t drained = 0;
  while (drained < 1024 * 1024) {
    auto [rec, n] = co_await socket.async_read_some(asio::buffer(scratch), kTuple);
    if (rec) break;
    drained += n;
  }
}

io::Awaitable<void> Session::SendCloseNotify() {
  // The client reads the end of the stream, then the connection closes (not waiting for its
  // close_notify, as nginx).
  SetDeadline(Clock::now() + kLingerTime);
  co_await stream_.async_close_notify(kTuple);
}

}  // namespace fencing
