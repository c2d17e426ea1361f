#include "server/session.h"

#include "http/ascii.h"

#include "common/log.h"
#include "http/raw_head.h"
#include "server/request_plan.h"
#include "http/header_rewrite.h"
#include "server/proxy_server.h"

#include <boost/asio/as_tuple.hpp>
#include <boost/asio/bind_allocator.hpp>
#include <boost/asio/co_spawn.hpp>
#include <boost/asio/post.hpp>
#include <boost/asio/steady_timer.hpp>
#include <boost/asio/use_awaitable.hpp>
#include <boost/asio/write.hpp>
#include <boost/beast/http/read.hpp>
#include <boost/beast/http/write.hpp>
#include <boost/json/object.hpp>

#include <array>
#include <chrono>
#include <cstdio>
#include <optional>

namespace fencing {

namespace asio = boost::asio;
namespace beast = boost::beast;
namespace http = beast::http;
using tcp = asio::ip::tcp;
using Clock = std::chrono::steady_clock;

namespace {

using io::kTuple;

// Relay buffer, held only while a request is being forwarded (idle connections hold none).
constexpr size_t kRelayBufferSize = RelayBuffers::kSize;
// A rejected request's body up to this size is read and dropped to keep the connection alive;
// a larger one closes the connection instead of being read.
constexpr uint64_t kDiscardLimit = 64 * 1024;
constexpr size_t kFirstReadSize = 4 * 1024;
constexpr uint64_t kMaxUpstreamHeaderBytes = 64 * 1024;
constexpr auto kLingerTime = std::chrono::seconds(2);

bool ExpectsContinue(const http::request<http::buffer_body>& req) {
  return req.version() >= 11 && EqualsIgnoreCase(req[http::field::expect], "100-continue");
}

bool ResponseHasNoBody(unsigned status, bool head_request) {
  return head_request || status / 100 == 1 || status == 204 || status == 304;
}

// timed_out: the session's deadline passed (Session::Sweep cancelled the exchange): 504. A connect
// that ran out of timeouts.connect is a 502 like any other unreachable backend.
Problem UpstreamProblem(const boost::system::error_code& ec, bool timed_out) {
  Problem p;
  if (timed_out) {
    p.status = http::status::gateway_timeout;
    p.type = "upstream-timeout";
    p.title = "Backend too slow";
    p.detail = "the backend did not answer within timeouts.request";
  } else {
    p.status = http::status::bad_gateway;
    p.type = "upstream-unavailable";
    p.title = "Backend unreachable";
    p.detail = "the backend could not be reached: " + ec.message();
  }
  return p;
}

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

// A request waiting on a pending raise. The fence resolves it from any thread; the resolution
// is posted to the session's thread, where it wakes the waiting coroutine through the timer.
class RaiseWait final : public RaiseWaiter, public std::enable_shared_from_this<RaiseWait> {
 public:
  explicit RaiseWait(io::Executor executor) : timer_(std::move(executor)) {}

  void Resolve(Admission admission, uint64_t max_token) override {
    asio::post(timer_.get_executor(), [self = shared_from_this(), admission, max_token] {
      self->resolved_ = true;
      self->admission_ = admission;
      self->max_token_ = max_token;
      self->timer_.cancel();
    });
  }

  io::Timer& timer() { return timer_; }
  bool resolved() const { return resolved_; }
  Admission admission() const { return admission_; }
  uint64_t max_token() const { return max_token_; }

 private:
  io::Timer timer_;
  bool resolved_ = false;
  Admission admission_ = Admission::kFailed;
  uint64_t max_token_ = 0;
};

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

  const std::array<asio::const_buffer, 5>& buffers() const { return buffers_; }  // unused ones are empty

 private:
  static constexpr std::string_view kCrLf = "\r\n";
  static constexpr std::string_view kLastChunk = "0\r\n\r\n";
  char size_line_[24];
  std::array<asio::const_buffer, 5> buffers_{};
};

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

// Releases a fence admission and the in-flight gauge on every way out of an exchange.
class AdmissionGuard {
 public:
  AdmissionGuard(Fence* fence, const RouteMetrics& metrics) : fence_(fence), metrics_(metrics) {
    metrics_.inflight->Increment();
  }
  ~AdmissionGuard() {
    metrics_.inflight->Decrement();
    if (fence_) fence_->Release();
  }
  AdmissionGuard(const AdmissionGuard&) = delete;
  AdmissionGuard& operator=(const AdmissionGuard&) = delete;

 private:
  Fence* fence_;
  const RouteMetrics& metrics_;
};

}  // namespace

Session::Session(Worker& worker, io::Socket socket) : worker_(worker), socket_(std::move(socket)) {
  boost::system::error_code ec;
  auto remote = socket_.remote_endpoint(ec);
  client_ip_ = ec ? "unknown" : remote.address().to_string();
  socket_.set_option(tcp::no_delay(true), ec);
  worker_.Register(this);
  worker_.shared().metrics.connections().Increment();
}

Session::~Session() {
  worker_.Unregister(this);
  worker_.shared().metrics.connections().Decrement();
  worker_.shared().connections.fetch_sub(1, std::memory_order_relaxed);
}

void Session::CloseIfIdle() {
  if (idle_ && !closing_) {
    closing_ = true;
    boost::system::error_code ec;
    socket_.cancel(ec);
  }
}

void Session::SetDeadline(Clock::time_point deadline) {
  deadline_ = deadline;
  timed_out_ = false;
}

bool Session::Sweep(Clock::time_point now, std::chrono::milliseconds idle_timeout, std::chrono::milliseconds cool_after) {
  if (!idle_) {
    if (now >= deadline_) {
      // Past the deadline: whatever the session awaits on either socket fails now. Again at
      // every sweep until the session moves on: an operation that completed just before the
      // first cancel must not let the exchange run on unbounded.
      timed_out_ = true;
      boost::system::error_code ec;
      socket_.cancel(ec);
      if (upstream_in_use_) upstream_in_use_->socket.cancel(ec);
    }
    return false;
  }
  if (now - idle_since_ >= idle_timeout) {
    CloseIfIdle();
    return false;
  }
  if (cooling_ || closing_ || buffer_.size() != 0 || buffer_.capacity() == 0) return false;
  if (now - idle_since_ < cool_after) return false;
  // Idle for a while: stop the read that holds the buffer; Run gives the buffer back and waits
  // for readiness only.
  cooling_ = true;
  boost::system::error_code ec;
  socket_.cancel(ec);
  return true;
}

void Session::Start() {
  // A new connection's request is usually on its way: start with a buffer to read it into.
  buffer_.reserve(kFirstReadSize);
  asio::co_spawn(socket_.get_executor(), Run(), LogCoroutineFailure);
}

void Session::WaitCold() {
  // No coroutine, no buffer and no parser while idle: the session lives on in this wait's
  // handler (about 600 bytes in all), and a new coroutine starts when the next request comes.
  if (!idle_) {
    idle_ = true;
    idle_since_ = Clock::now();
  }
  auto on_readable = [self = shared_from_this()](boost::system::error_code ec) {
    self->idle_ = false;
    if (ec) {
      self->Close();  // CloseIfIdle: idle timeout, eviction or shutdown
      return;
    }
    // Readable: a request, or the client's close. Either way Run reads it, into a new buffer.
    self->buffer_.reserve(kFirstReadSize);
    asio::co_spawn(self->socket_.get_executor(), self->Run(), LogCoroutineFailure);
  };
  // An allocation of its own, sized for it: Asio's default would recycle a block some larger
  // operation of this thread left behind, and keep that whole block for as long as the wait.
  socket_.async_wait(tcp::socket::wait_read, asio::bind_allocator(ExactAllocator<void>(), std::move(on_readable)));
}

void Session::Close() {
  boost::system::error_code ec;
  socket_.shutdown(tcp::socket::shutdown_both, ec);
  socket_.close(ec);
}

io::Awaitable<void> Session::Run() {
  auto self = shared_from_this();
  for (;;) {
    if (buffer_.size() == 0) {
      if (buffer_.capacity() == 0) {
        WaitCold();
        co_return;
      }
      // Waiting for the next request, reading it straight into the buffer: the read is tried at
      // once (under load the request is often there already) and otherwise waits for epoll, with
      // no epoll_ctl (a bare readiness wait costs one per request in Asio). The idle timeout is
      // enforced by the worker's sweep (Worker::SweepIdle), not by a timer per wait.
      idle_ = true;
      idle_since_ = Clock::now();
      auto [ec, n] = co_await socket_.async_read_some(buffer_.prepare(kFirstReadSize), kTuple);
      buffer_.commit(n);
      // Sweep may have asked for the buffer just after this read completed: then the request is
      // served and the connection can cool next time.
      const bool cool = ec == asio::error::operation_aborted && cooling_ && !closing_;
      cooling_ = false;
      if (cool) {
        // Idle for a sweep period (Sweep): give the buffer back and wait without one.
        buffer_.shrink_to_fit();  // empty: unmaps it
        WaitCold();
        co_return;
      }
      idle_ = false;
      if (ec) break;
    }
    if (!co_await ServeOne()) break;
    if (worker_.shared().draining.load(std::memory_order_relaxed)) break;
  }
  if (linger_) co_await LingeringClose();
  Close();
}

io::Awaitable<bool> Session::ServeOne() {
  // One config snapshot for the whole request, even if a reload lands meanwhile.
  std::shared_ptr<const Runtime> runtime = worker_.runtime();
  const ProxyConfig& config = runtime->config();

  record_ = AccessRecord{Clock::now()};
  RequestParser parser;
  parser.header_limit(static_cast<uint32_t>(config.limits.max_header_bytes));
  parser.body_limit(config.limits.max_body_bytes);
  std::optional<Problem> head_problem = co_await ReadHead(config, parser);
  if (!parser.is_header_done()) {
    if (head_problem) {
      runtime->unmatched_metrics().Count(Outcome::kRejectedRequest);
      linger_ = true;
      co_await WriteProblem(*head_problem, 11, false);
      if (config.access_log) LogAccess(nullptr, nullptr);
    }
    co_return false;
  }
  ClearDeadline();  // header_read is over; a raise wait has its own timer
  auto& req = parser.get();

  RequestPlan plan = PlanRequest(req.base(), *runtime);
  Fence* admitted = nullptr;
  if (plan.action == RequestPlan::Action::kFence) {
    // Most requests carry the current max: decided here, without a waiter or a coroutine.
    AdmitResult result = plan.route->fence->AdmitWithoutWaiting(plan.token, plan.route->config->max_token_jump);
    uint64_t max_token = result.max_token;
    Admission admission = result.admission;
    if (admission == Admission::kWaiting) {
      admission = co_await WaitForRaise(*plan.route->fence, plan.token, plan.route->config->max_token_jump,
                                        &max_token, config.timeouts.request);
    }
    if (admission == Admission::kAdmitted) admitted = plan.route->fence;
    ApplyAdmission(plan, admission, max_token);
  }
  const RouteMetrics& metrics = plan.metrics(*runtime);
  bool keep_alive = false;
  if (plan.action == RequestPlan::Action::kReject) {
    metrics.Count(plan.outcome);
    keep_alive = co_await Reject(parser, plan.problem, plan.close);
  } else {
    std::optional<AdmissionGuard> admission;
    if (plan.route) admission.emplace(admitted, metrics);
    keep_alive = co_await Forward(*runtime, parser, plan.origin_target, plan.host, plan.drop_header, plan.outcome,
                                  metrics);
    upstream_in_use_ = nullptr;
  }
  ClearDeadline();
  if (config.access_log) LogAccess(&parser, &plan);
  co_return keep_alive;
}

void Session::LogAccess(const RequestParser* parser, const RequestPlan* plan) const {
  boost::json::object line;
  if (parser) {
    const auto& req = parser->get();
    line["method"] = std::string_view(req.method_string());
    line["path"] = std::string_view(req.target());
  }
  line["client"] = client_ip_;
  line["status"] = record_.status;
  if (plan) {
    if (plan->route) line["route"] = plan->route->config->name;
    line["decision"] = OutcomeName(plan->outcome);
    if (plan->problem.token) line["token"] = *plan->problem.token;
    if (plan->problem.max_token) line["max_token"] = *plan->problem.max_token;
  } else {
    line["decision"] = OutcomeName(Outcome::kRejectedRequest);
  }
  if (record_.upstream_status) line["upstream_status"] = record_.upstream_status;
  line["bytes_in"] = record_.bytes_in;
  line["bytes_out"] = record_.bytes_out;
  line["duration_s"] = std::chrono::duration<double>(Clock::now() - record_.start).count();
  Log(LogLevel::kInfo, "access", std::move(line));
}

io::Awaitable<std::optional<Problem>> Session::ReadHead(const ProxyConfig& config, RequestParser& parser) {
  // The head is collected raw and checked byte by byte before the parser sees it (raw_head.h).
  const size_t limit = config.limits.max_header_bytes;
  SetDeadline(Clock::now() + config.timeouts.header_read);
  size_t scanned = 0;
  size_t head_length = 0;
  for (;;) {
    std::string_view bytes(static_cast<const char*>(buffer_.data().data()), buffer_.size());
    head_length = FindHeadEnd(bytes, &scanned);
    if (head_length != 0 || buffer_.size() > limit) break;
    auto [ec, n] = co_await socket_.async_read_some(buffer_.prepare(std::min(kFirstReadSize, limit + 1 - buffer_.size())), kTuple);
    if (ec) co_return std::nullopt;  // the client went away or stalled: nothing to answer
    buffer_.commit(n);
  }
  if (head_length == 0 || head_length > limit) {
    co_return MakeProblem(http::status::request_header_fields_too_large, "header-too-large",
                          "Request header too large", "the request head exceeds limits.max_header_bytes");
  }
  std::string_view head(static_cast<const char*>(buffer_.data().data()), head_length);
  if (RawHeadCheck raw = CheckRawHead(head); !raw.ok) {
    co_return MakeProblem(http::status::bad_request, "malformed-request", "Malformed request",
                          std::string("the request head is refused because it has ") + raw.reason);
  }
  boost::system::error_code ec;
  size_t used = parser.put(asio::buffer(head.data(), head.size()), ec);
  if (!ec && !parser.is_header_done()) ec = http::error::partial_message;
  if (ec) {
    if (ec == http::error::body_limit) {
      co_return MakeProblem(http::status::payload_too_large, "body-too-large", "Request body too large",
                            "the request body exceeds limits.max_body_bytes");
    }
    co_return MakeProblem(http::status::bad_request, "malformed-request", "Malformed request",
                          "the request head could not be parsed: " + ec.message());
  }
  buffer_.consume(used);
  co_return std::nullopt;
}

io::Awaitable<Admission> Session::WaitForRaise(Fence& fence, uint64_t token, uint64_t max_jump,
                                               uint64_t* max_token, std::chrono::milliseconds deadline) {
  auto wait = std::make_shared<RaiseWait>(socket_.get_executor());
  AdmitResult result = fence.Admit(token, *wait, max_jump);
  *max_token = result.max_token;
  if (result.admission != Admission::kWaiting) co_return result.admission;

  wait->timer().expires_after(deadline);
  for (;;) {
    co_await wait->timer().async_wait(kTuple);
    if (wait->resolved()) break;
    if (fence.Abandon(*wait)) {
      *max_token = result.max_token;
      co_return Admission::kWaiting;  // gave up: no admission is held
    }
    // The resolution is already on its way to this thread: wait for it.
    wait->timer().expires_at(Clock::time_point::max());
  }
  *max_token = wait->max_token();
  co_return wait->admission();
}

io::Awaitable<bool> Session::Forward(const Runtime& runtime, RequestParser& parser, std::string_view origin_target,
                                       std::string_view host, std::string_view drop_header, Outcome outcome,
                                       const RouteMetrics& metrics) {
  const ProxyConfig& config = runtime.config();
  auto& req = parser.get();
  const auto started = Clock::now();
  const auto deadline = started + config.timeouts.request;
  const bool head_request = req.method() == http::verb::head;
  // The parser's flags, not the message's accessors: those search the fields again.
  bool client_keep_alive = parser.keep_alive() && !worker_.shared().draining.load(std::memory_order_relaxed);

  // The whole exchange is bounded by timeouts.request: an admitted write must end (or be cut
  // off) in bounded time, or a raise waiting for it would wait forever.
  SetDeadline(deadline);

  if (!parser.is_done() && ExpectsContinue(req)) {
    static constexpr std::string_view kContinue = "HTTP/1.1 100 Continue\r\n\r\n";
    auto [ec, n] = co_await asio::async_write(socket_, asio::buffer(kContinue.data(), kContinue.size()), kTuple);
    if (ec) co_return false;
  }

  // Request head for the backend, framed like the client's body (Content-Length or chunked).
  const std::string upstream_head = UpstreamRequestHead(req.base(), origin_target, host, client_ip_,
                                                        worker_.shared().backend_host, drop_header,
                                                        config.headers_with_underscores == HeadersWithUnderscores::kDrop);
  const bool chunked_request = !parser.content_length() && parser.chunked();

  RelayBuffers::Lease relay_buffer = worker_.relay_buffers().Take();
  char* buf = relay_buffer.data();
  boost::system::error_code ec;
  std::unique_ptr<UpstreamConnection> upstream = co_await worker_.pool().Acquire(ec);

  auto fail = [&](const boost::system::error_code& error) -> io::Awaitable<bool> {
    metrics.Count(Outcome::kUpstreamError);
    Problem p = UpstreamProblem(error, timed_out_);
    co_return co_await Reject(parser, p, !parser.is_done());
  };
  if (!upstream) co_return co_await fail(ec);
  upstream_in_use_ = upstream.get();

  // Request: head and body, streamed. The first write carries the head with the first body
  // bytes (one writev); a reused connection that turns out dead on that write is replaced once.
  bool first_write = true;
  bool single_write = true;  // the whole request went out in the first write (it can be resent)
  size_t first_size = 0;     // body bytes in the first write (still in buf while single_write)
  for (;;) {
    size_t n = 0;
    if (!parser.is_done()) {
      req.body().data = buf;
      req.body().size = kRelayBufferSize;
      boost::system::error_code rec = ParseBuffered(parser, buffer_);
      if (!rec && !parser.is_done() && req.body().size != 0) {
        auto [read_ec, rn] = co_await http::async_read(socket_, buffer_, parser, kTuple);
        rec = read_ec;
      }
      if (rec == http::error::need_buffer) rec = {};
      if (rec) {
        // The body broke off or broke the rules (a bad chunk, too long): the backend has a
        // truncated request, so both connections close; the client hears why if it still listens.
        metrics.Count(Outcome::kRejectedRequest);
        if (rec == http::error::body_limit) {
          co_await WriteProblem(MakeProblem(http::status::payload_too_large, "body-too-large", "Request body too large",
                                            "the request body exceeds limits.max_body_bytes"),
                                req.version(), false);
        } else if (rec != http::error::end_of_stream && !timed_out_ && rec != asio::error::eof &&
                   rec != asio::error::connection_reset) {
          co_await WriteProblem(MakeProblem(http::status::bad_request, "malformed-body", "Malformed request body",
                                            "the request body could not be read: " + rec.message()),
                                req.version(), false);
        }
        co_return false;
      }
      n = kRelayBufferSize - req.body().size;
      record_.bytes_in += n;
    }
    const bool last = parser.is_done();
    if (first_write) {
      first_size = n;
    } else {
      single_write = false;
    }
    GatherWrite piece(first_write ? upstream_head : std::string_view{}, buf, n, chunked_request, last);
    auto [wec, wn] = co_await asio::async_write(upstream->socket, piece.buffers(), kTuple);
    if (wec && first_write && upstream->reused) {
      upstream = co_await worker_.pool().Connect(ec);
      if (!upstream) co_return co_await fail(ec);
      upstream_in_use_ = upstream.get();
      auto [rwec, rwn] = co_await asio::async_write(upstream->socket, piece.buffers(), kTuple);
      wec = rwec;
    }
    if (wec) co_return co_await fail(wec);
    first_write = false;
    if (last) break;
  }

  // Response head; 1xx interim responses are dropped (the proxy answered 100-continue itself).
  std::optional<http::response_parser<http::buffer_body>> response_parser;
  for (int attempt = 0;; ++attempt) {
    response_parser.emplace();
    response_parser->header_limit(kMaxUpstreamHeaderBytes);
    response_parser->body_limit(boost::none);
    if (head_request) response_parser->skip(true);
    auto [hec, hn] = co_await http::async_read_header(upstream->socket, upstream->buffer, *response_parser, kTuple);
    if (!hec) {
      unsigned status = response_parser->get().result_int();
      if (status / 100 == 1 && status != 101) {
        --attempt;
        continue;
      }
      break;
    }
    // A pooled connection the backend closed just before this request: resend once on a new
    // one if the whole request is still in hand.
    bool closed_before_answer = hec == http::error::end_of_stream || hec == asio::error::connection_reset;
    if (attempt == 0 && closed_before_answer && upstream->reused && single_write) {
      upstream = co_await worker_.pool().Connect(ec);
      if (!upstream) co_return co_await fail(ec);
      upstream_in_use_ = upstream.get();
      GatherWrite again(upstream_head, buf, first_size, chunked_request, true);
      auto [rwec, rwn] = co_await asio::async_write(upstream->socket, again.buffers(), kTuple);
      if (rwec) co_return co_await fail(rwec);
      continue;
    }
    co_return co_await fail(hec);
  }

  // The backend answered: the request's outcome is settled (counted before the client can see
  // the response, so a scrape right after it sees the count).
  metrics.Count(outcome);
  auto& upstream_res = response_parser->get();
  const unsigned status = upstream_res.result_int();
  record_.upstream_status = status;
  record_.status = status;
  const bool no_body = ResponseHasNoBody(status, head_request);
  // false for a body delimited by the backend's close, too: such a connection cannot be reused.
  const bool upstream_keep_alive = response_parser->keep_alive();

  // Framing for the client: the backend's Content-Length when it sent one; otherwise chunked to
  // an HTTP/1.1 client and close-delimited to an HTTP/1.0 one.
  BodyFraming framing = BodyFraming::kNone;
  if (response_parser->content_length()) {
    framing = BodyFraming::kLength;
  } else if (!no_body) {
    framing = req.version() >= 11 ? BodyFraming::kChunked : BodyFraming::kClose;
    if (framing == BodyFraming::kClose) client_keep_alive = false;
  }
  const std::string client_head = ClientResponseHead(upstream_res.base(), req.version(), framing, client_keep_alive);
  const bool chunked_response = framing == BodyFraming::kChunked;

  bool response_started = false;
  for (;;) {
    size_t n = 0;
    if (!no_body && !response_parser->is_done()) {
      upstream_res.body().data = buf;
      upstream_res.body().size = kRelayBufferSize;
      boost::system::error_code rec = ParseBuffered(*response_parser, upstream->buffer);
      if (!rec && !response_parser->is_done() && upstream_res.body().size == kRelayBufferSize) {
        // Whatever arrives is relayed at once (read_some): a response that streams slowly
        // reaches the client as it comes, not when a relay buffer's worth has piled up.
        auto [read_ec, rn] =
            co_await http::async_read_some(upstream->socket, upstream->buffer, *response_parser, kTuple);
        rec = read_ec;
      }
      if (rec == http::error::need_buffer) rec = {};
      if (rec) {
        if (!response_started) {
          Problem problem = UpstreamProblem(rec, timed_out_);
          SetDeadline(Clock::now() + config.timeouts.request);  // time to tell the client
          co_return co_await WriteProblem(problem, req.version(), false);
        }
        co_return false;  // the client saw a partial response: closing tells it so
      }
      n = kRelayBufferSize - upstream_res.body().size;
      record_.bytes_out += n;
    }
    const bool last = no_body || response_parser->is_done();
    if (n == 0 && !last && response_started) continue;  // only framing arrived: nothing to send
    GatherWrite piece(response_started ? std::string_view{} : client_head, buf, n, chunked_response, last);
    auto [wec, wn] = co_await asio::async_write(socket_, piece.buffers(), kTuple);
    response_started = true;
    if (wec) co_return false;  // the client went away; the backend connection is dropped with it
    if (last) break;
  }

  metrics.upstream_seconds->Observe(std::chrono::duration<double>(Clock::now() - started).count());
  upstream_in_use_ = nullptr;
  if (upstream_keep_alive && (no_body || response_parser->is_done())) {
    worker_.pool().Release(std::move(upstream));
  }
  // A request body the backend did not wait for is still to be read before the next request.
  if (!parser.is_done()) co_return false;
  co_return client_keep_alive;
}

io::Awaitable<bool> Session::Reject(RequestParser& parser, const Problem& problem, bool force_close) {
  const auto& req = parser.get();
  // Decide on the head: the body of a rejected request is never forwarded, and read only when it
  // is small and already on its way (no 100-continue was asked for).
  bool body_pending = !parser.is_done();
  bool keep_alive = parser.keep_alive() && !force_close && !worker_.shared().draining.load(std::memory_order_relaxed);
  bool discard = false;
  if (body_pending && keep_alive) {
    auto length = parser.content_length();
    discard = !ExpectsContinue(req) && length && *length <= kDiscardLimit;
    keep_alive = discard;
  }
  const auto& config = worker_.runtime()->config();
  SetDeadline(Clock::now() + config.timeouts.request);
  if (!co_await WriteProblem(problem, req.version(), keep_alive)) co_return false;
  if (discard) co_return co_await DiscardBody(parser);
  if (body_pending) linger_ = true;
  co_return keep_alive;
}

io::Awaitable<bool> Session::WriteProblem(const Problem& problem, unsigned version, bool keep_alive) {
  record_.status = static_cast<unsigned>(problem.status);
  auto response = MakeProblemResponse(problem, version >= 11 ? 11 : 10, keep_alive);
  auto [ec, n] = co_await http::async_write(socket_, response, kTuple);
  co_return !ec && keep_alive;
}

io::Awaitable<bool> Session::DiscardBody(RequestParser& parser) {
  char scratch[1024];
  SetDeadline(Clock::now() + worker_.runtime()->config().timeouts.header_read);
  while (!parser.is_done()) {
    parser.get().body().data = scratch;
    parser.get().body().size = sizeof scratch;
    auto [ec, n] = co_await http::async_read(socket_, buffer_, parser, kTuple);
    if (ec == http::error::need_buffer) continue;
    if (ec) co_return false;
  }
  co_return true;
}

io::Awaitable<void> Session::LingeringClose() {
  // Closing a socket with unread input makes the kernel send RST, which can destroy the response
  // still in flight to the client. Half-close, then drain briefly (as nginx's lingering_close).
  boost::system::error_code ec;
  socket_.shutdown(tcp::socket::shutdown_send, ec);
  if (ec) co_return;
  SetDeadline(Clock::now() + kLingerTime);
  char scratch[1024];
  size_t drained = 0;
  while (drained < 1024 * 1024) {
    auto [rec, n] = co_await socket_.async_read_some(asio::buffer(scratch), kTuple);
    if (rec) break;
    drained += n;
  }
}

}  // namespace fencing
