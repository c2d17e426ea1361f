// The whole data plane over real sockets, in one process: a ProxyServer (one worker thread, the
// real Session, Exchange, fence and state writer) between a client and a recording backend, both
// driven by this thread from one poll loop.
//
// Per input: the first byte says where to split the rest (high bit set: at (b & 0x7f)/128 of
// it, with a pause until the proxy goes quiet in between; else no split). The rest is written on
// a new client connection, the write side is shut, and the answer is read until the proxy closes
// (or ~300 ms). Meanwhile the backend accepts, records every byte per connection, and answers
// each complete request it parses (Beast) with a 200 marked `X-Backend: 1`.
//
// Oracles (each abort is a request that reached the backend when it should not have, or not whole):
//  - every byte the backend got parses as HTTP/1.1 requests framed by the proxy (one framing field:
//    a plain decimal Content-Length or "Transfer-Encoding: chunked"), and once things settle none is left
//    over as a partial request (whole or nothing: bodies this small are read whole first);
//  - if the proxy's first final response is its own 4xx, or it closed without a final response,
//    and nothing else was answered, the backend got no byte during this input;
//  - when the proxy closed the connection, the responses marked as the backend's are exactly as
//    many as the requests the backend got: one forwarded request is one request to the backend
//    (no smuggled second request, no resend, no answer dropped).

#include "metrics/metrics.h"
#include "common/log.h"
#include "config/config.h"
#include "fence/fence_registry.h"
#include "lockservice/lock_services.h"
#include "fuzz_check.h"
#include "server/proxy_server.h"
#include "state/state_store.h"
#include "state/state_writer.h"

#include <boost/asio/buffer.hpp>
#include <boost/beast/http.hpp>

#include <arpa/inet.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cctype>
#include <chrono>
#include <csignal>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace {

using namespace fencing;
namespace http = boost::beast::http;
using Clock = std::chrono::steady_clock;

constexpr auto kAnswerWait = std::chrono::milliseconds(300);  // after the last write
constexpr auto kSettleWait = std::chrono::milliseconds(50);   // for a partial request to complete
constexpr auto kQuietGap = std::chrono::milliseconds(2);      // "the proxy went quiet" at a split
constexpr auto kSplitWait = std::chrono::milliseconds(20);

[[noreturn]] void Fail(const char* what, std::string_view detail) {
  std::string shown;
  for (unsigned char c : detail.substr(0, 2000)) {
    if (c == '\r') shown += "\\r";
    else if (c == '\n') shown += "\\n\n";
    else if (c >= 0x20 && c < 0x7f) shown += static_cast<char>(c);
    else { char b[5]; std::snprintf(b, sizeof b, "\\x%02x", c); shown += b; }
  }
  std::fprintf(stderr, "fuzz_exchange: oracle failed: %s\n--- detail ---\n%s\n---\n", what, shown.c_str());
  std::abort();
}

void SetNonBlocking(int fd) { ::fcntl(fd, F_SETFL, ::fcntl(fd, F_GETFL) | O_NONBLOCK); }

int ListenLoopback(uint16_t* port) {
  int fd = ::socket(AF_INET, SOCK_STREAM, 0);
  int one = 1;
  ::setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  FUZZ_CHECK(::bind(fd, reinterpret_cast<sockaddr*>(&addr), sizeof addr) == 0, "bind");
  FUZZ_CHECK(::listen(fd, 128) == 0, "listen");
  socklen_t len = sizeof addr;
  ::getsockname(fd, reinterpret_cast<sockaddr*>(&addr), &len);
  *port = ntohs(addr.sin_port);
  return fd;
}

// A free port for the proxy: ProxyServer binds its own (SO_REUSEPORT) listener from the config.
uint16_t FreePort() {
  uint16_t port = 0;
  int fd = ListenLoopback(&port);
  ::close(fd);
  return port;
}

void SendAll(int fd, std::string_view bytes) {
  while (!bytes.empty()) {
    ssize_t n = ::send(fd, bytes.data(), bytes.size(), MSG_NOSIGNAL);
    if (n > 0) {
      bytes.remove_prefix(static_cast<size_t>(n));
    } else if (n < 0 && (errno == EAGAIN || errno == EINTR)) {
      pollfd p{fd, POLLOUT, 0};
      ::poll(&p, 1, 10);
    } else {
      return;  // the proxy went away; it will see the rest missing
    }
  }
}

// Parses one request at the front of bytes: its length once complete, 0 while more is needed,
// nullopt (with *error) if it is not HTTP/1.1 at all. *head_done/*expect say what the head said.
std::optional<size_t> ParseRequest(std::string_view bytes, bool* head_done, bool* expect, bool* head_method,
                                   std::string* error) {
  http::request_parser<http::string_body> parser;
  parser.header_limit(1024 * 1024);
  parser.body_limit(boost::none);
  parser.eager(true);
  size_t used = 0;
  *head_done = false;
  for (;;) {
    boost::beast::error_code ec;
    size_t n = parser.put(boost::asio::buffer(bytes.data() + used, bytes.size() - used), ec);
    used += n;
    if (parser.is_header_done() && !*head_done) {
      *head_done = true;
      *expect = boost::beast::iequals(parser.get()[http::field::expect], "100-continue");
      *head_method = parser.get().method() == http::verb::head;
      // The proxy frames what it forwards itself: at most one framing field, a Content-Length in
      // plain decimal, a Transfer-Encoding that is exactly "chunked".
      const auto& fields = parser.get();
      const size_t lengths = fields.count(http::field::content_length);
      const size_t codings = fields.count(http::field::transfer_encoding);
      const std::string_view length = fields[http::field::content_length];
      const bool plain = !length.empty() && length.find_first_not_of("0123456789") == std::string_view::npos &&
                         (length.size() == 1 || length.front() != '0');
      if (lengths + codings > 1 || (lengths == 1 && !plain) ||
          (codings == 1 && fields[http::field::transfer_encoding] != "chunked")) {
        *error = "framing fields the proxy did not write itself";
        return std::nullopt;
      }
    }
    if (parser.is_done()) return used;
    if (ec == http::error::need_more) {
      if (n == 0 || used == bytes.size()) return 0;
      continue;
    }
    if (ec) {
      *error = ec.message();
      return std::nullopt;
    }
    if (n == 0) return 0;
  }
}

struct BackendConn {
  int fd = -1;
  bool open = true;
  std::string data;      // every byte received
  size_t parsed = 0;     // end of the last complete request
  size_t mark = 0;       // data.size() when the current input began
  size_t requests = 0;   // complete requests since mark
  bool sent_continue = false;
};

class Backend {
 public:
  Backend() { listener_ = ListenLoopback(&port_); SetNonBlocking(listener_); }
  uint16_t port() const { return port_; }

  void BeginInput() {
    std::vector<BackendConn> kept;
    for (BackendConn& c : conns_) {
      if (!c.open) continue;
      if (c.parsed == c.data.size()) {  // all served: forget it, or a pooled connection grows forever
        c.data.clear();
        c.parsed = 0;
      }
      c.mark = c.data.size();
      c.requests = 0;
      kept.push_back(std::move(c));
    }
    conns_ = std::move(kept);
  }

  void AddPollFds(std::vector<pollfd>* fds) {
    fds->push_back({listener_, POLLIN, 0});
    for (BackendConn& c : conns_) {
      if (c.open) fds->push_back({c.fd, POLLIN, 0});
    }
  }

  // Accepts and reads whatever is ready (never blocks). True if anything happened.
  bool Pump() {
    bool any = false;
    for (;;) {
      int fd = ::accept(listener_, nullptr, nullptr);
      if (fd < 0) break;
      SetNonBlocking(fd);
      int one = 1;
      ::setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
      BackendConn c;
      c.fd = fd;
      conns_.push_back(std::move(c));
      any = true;
    }
    for (BackendConn& c : conns_) {
      if (!c.open) continue;
      char buf[16384];
      for (;;) {
        ssize_t n = ::recv(c.fd, buf, sizeof buf, 0);
        if (n > 0) {
          c.data.append(buf, static_cast<size_t>(n));
          any = true;
          continue;
        }
        if (n == 0 || (errno != EAGAIN && errno != EINTR)) {
          ::close(c.fd);
          c.open = false;
          any = true;
        }
        break;
      }
      Serve(c);
    }
    return any;
  }

  bool AnyPartial() const {
    for (const BackendConn& c : conns_) {
      if (c.parsed < c.data.size()) return true;
    }
    return false;
  }
  size_t NewBytes() const {
    size_t n = 0;
    for (const BackendConn& c : conns_) n += c.data.size() - c.mark;
    return n;
  }
  size_t NewRequests() const {
    size_t n = 0;
    for (const BackendConn& c : conns_) n += c.requests;
    return n;
  }
  std::string Dump() const {
    std::string out;
    for (const BackendConn& c : conns_) {
      if (c.data.size() == c.mark) continue;
      out += "[backend connection, " + std::to_string(c.requests) + " requests]\n";
      out += c.data.substr(c.mark);
    }
    return out;
  }
  // Closes what is left over so that the next input starts clean (only after a failure).
  void CloseAll() {
    for (BackendConn& c : conns_) {
      if (c.open) ::close(c.fd);
    }
    conns_.clear();
  }

 private:
  void Serve(BackendConn& c) {
    while (c.parsed < c.data.size()) {
      bool head_done = false, expect = false, head_method = false;
      std::string error;
      std::optional<size_t> n =
          ParseRequest(std::string_view(c.data).substr(c.parsed), &head_done, &expect, &head_method, &error);
      if (!n) Fail(("the backend got bytes that are not an HTTP/1.1 request: " + error).c_str(), Dump());
      if (*n == 0) {
        if (head_done && expect && !c.sent_continue && c.open) {
          c.sent_continue = true;
          SendAll(c.fd, "HTTP/1.1 100 Continue\r\n\r\n");
        }
        return;
      }
      c.parsed += *n;
      c.requests++;
      c.sent_continue = false;
      if (c.open) {
        SendAll(c.fd, head_method ? "HTTP/1.1 200 OK\r\nContent-Length: 2\r\nX-Backend: head\r\n\r\n"
                                  : "HTTP/1.1 200 OK\r\nContent-Length: 2\r\nX-Backend: 1\r\n\r\nok");
      }
    }
  }

  int listener_ = -1;
  uint16_t port_ = 0;
  std::vector<BackendConn> conns_;
};

struct Response {
  unsigned status = 0;
  bool from_backend = false;
};

// The final responses at the front of bytes (1xx skipped); stops at the first incomplete one.
std::vector<Response> ParseResponses(std::string_view bytes) {
  std::vector<Response> out;
  size_t pos = 0;
  while (pos < bytes.size()) {
    size_t end = bytes.find("\r\n\r\n", pos);
    if (end == std::string_view::npos) break;
    std::string_view head = bytes.substr(pos, end - pos);
    if (head.size() < 12 || head.substr(0, 7) != "HTTP/1.") break;
    Response r;
    for (size_t i = 9; i < 12; ++i) {
      if (!std::isdigit(static_cast<unsigned char>(head[i]))) return out;
      r.status = r.status * 10 + static_cast<unsigned>(head[i] - '0');
    }
    std::optional<uint64_t> length;
    bool chunked = false, no_body = false;
    size_t line = head.find("\r\n");
    while (line != std::string_view::npos) {
      size_t next = head.find("\r\n", line + 2);
      std::string_view field = head.substr(line + 2, next == std::string_view::npos ? head.npos : next - line - 2);
      size_t colon = field.find(':');
      if (colon != std::string_view::npos) {
        std::string name(field.substr(0, colon));
        for (char& ch : name) ch = static_cast<char>(std::tolower(static_cast<unsigned char>(ch)));
        std::string_view value = field.substr(colon + 1);
        while (!value.empty() && value.front() == ' ') value.remove_prefix(1);
        if (name == "content-length") length = std::strtoull(std::string(value).c_str(), nullptr, 10);
        if (name == "transfer-encoding" && value.find("chunked") != value.npos) chunked = true;
        if (name == "x-backend") {
          r.from_backend = true;
          if (value == "head") no_body = true;
        }
      }
      line = next;
    }
    pos = end + 4;
    if (r.status >= 100 && r.status < 200) continue;
    if (r.status == 204 || r.status == 304) no_body = true;
    if (no_body) {
    } else if (chunked) {
      for (;;) {
        size_t eol = bytes.find("\r\n", pos);
        if (eol == std::string_view::npos) return out;
        uint64_t size = std::strtoull(std::string(bytes.substr(pos, eol - pos)).c_str(), nullptr, 16);
        pos = eol + 2;
        if (size == 0) {
          size_t trailer_end = bytes.find("\r\n", pos);  // no trailers from either side
          if (trailer_end == std::string_view::npos) return out;
          pos = trailer_end + 2;
          break;
        }
        if (bytes.size() - pos < size + 2) return out;
        pos += size + 2;
      }
    } else if (length) {
      if (bytes.size() - pos < *length) return out;
      pos += *length;
    } else {
      pos = bytes.size();  // to the close
    }
    out.push_back(r);
  }
  return out;
}

struct Harness {
  std::string dir;
  std::unique_ptr<StateStore> store;
  std::unique_ptr<Metrics> metrics;
  std::unique_ptr<StateWriter> writer;
  FenceRegistry* registry = nullptr;  // never destroyed, like the rest
  LockServiceSet lock_services;  // none: the fuzzed routes verify nothing
  std::unique_ptr<ProxyServer> server;
  Backend backend;
  uint16_t proxy_port = 0;
};

Harness* harness = nullptr;

struct Outcome {
  std::string answer;
  bool closed = false;  // the proxy closed the connection (else the wait ran out)
};

// Runs the poll loop (client and backend) until the client side closes, or until the deadline;
// with stop_when_quiet, also once nothing has happened for kQuietGap.
void Drive(int client, Outcome* out, Clock::time_point deadline, bool stop_when_quiet) {
  Backend& backend = harness->backend;
  auto last_event = Clock::now();
  while (!out->closed) {
    auto now = Clock::now();
    if (now >= deadline) return;
    if (stop_when_quiet && now - last_event >= kQuietGap) return;
    std::vector<pollfd> fds;
    fds.push_back({client, POLLIN, 0});
    backend.AddPollFds(&fds);
    auto wait = std::chrono::duration_cast<std::chrono::milliseconds>(deadline - now).count() + 1;
    if (stop_when_quiet) wait = std::min<long>(wait, kQuietGap.count());
    int ready = ::poll(fds.data(), fds.size(), static_cast<int>(wait));
    if (ready <= 0) continue;
    last_event = Clock::now();
    if (fds[0].revents) {
      char buf[16384];
      for (;;) {
        ssize_t n = ::recv(client, buf, sizeof buf, 0);
        if (n > 0) {
          out->answer.append(buf, static_cast<size_t>(n));
          continue;
        }
        if (n == 0 || (errno != EAGAIN && errno != EINTR)) out->closed = true;
        break;
      }
    }
    backend.Pump();
  }
}

void Start() {
  SetLogLevel(LogLevel::kError);
  std::signal(SIGPIPE, SIG_IGN);
  harness = new Harness;  // lives for the process: the worker thread runs until exit
  char tmpl[] = "/tmp/fuzz_exchange.XXXXXX";
  FUZZ_CHECK(::mkdtemp(tmpl) != nullptr, "mkdtemp");
  harness->dir = tmpl;
  harness->proxy_port = FreePort();
  std::string yaml = "listen: \"127.0.0.1:" + std::to_string(harness->proxy_port) +
                     "\"\nadmin_listen: \"127.0.0.1:1\"\nbackend: \"http://127.0.0.1:" +
                     std::to_string(harness->backend.port()) + "\"\nstate_file: \"" + harness->dir +
                     "/fences.log\"\nthreads: 1\naccess_log: false\n" +
                     R"(timeouts: {connect: 200ms, header_read: 200ms, request: 500ms, idle: 2s}
limits: {max_header_bytes: 8KiB, max_body_bytes: 64KiB}
routes:
  - {name: orders, prefix: /orders}
  - {name: notes, prefix: /notes, mode: observe}
)";
  ConfigResult config = ParseConfig(yaml, "fuzz_exchange.yaml");
  if (!config.ok()) {
    for (const ConfigError& e : config.errors) std::fprintf(stderr, "%s\n", e.ToString().c_str());
    std::abort();
  }
  Status s = StateStore::Open(config.config->state_file, OpenOptions{}, &harness->store);
  FUZZ_CHECK(s.ok(), "state store opens");
  harness->metrics = std::make_unique<Metrics>();
  harness->writer = std::make_unique<StateWriter>(*harness->store, [](double) {});
  harness->registry = new FenceRegistry(harness->store->maxima(), *harness->writer, *harness->metrics);
  harness->server = std::make_unique<ProxyServer>(config.config, *harness->registry, *harness->metrics,
                                                  harness->lock_services);
  s = harness->server->Start();
  if (!s.ok()) {
    std::fprintf(stderr, "fuzz_exchange: %s\n", s.message().c_str());
    std::abort();
  }
}

int Connect() {
  int fd = ::socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  addr.sin_port = htons(harness->proxy_port);
  for (int attempt = 0; ::connect(fd, reinterpret_cast<sockaddr*>(&addr), sizeof addr) != 0; ++attempt) {
    FUZZ_CHECK(attempt < 100, "the proxy accepts connections");
    ::usleep(10000);  // the worker thread may not be listening yet
    ::close(fd);
    fd = ::socket(AF_INET, SOCK_STREAM, 0);
  }
  int one = 1;
  ::setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
  SetNonBlocking(fd);
  return fd;
}

std::vector<Response> RunOne(std::string_view input) {
  unsigned char control = input.empty() ? 0 : static_cast<unsigned char>(input[0]);
  std::string_view bytes = input.empty() ? input : input.substr(1);
  size_t split = (control & 0x80) ? (control & 0x7f) * bytes.size() / 128 : bytes.size();

  Backend& backend = harness->backend;
  backend.Pump();  // anything late from the input before belongs to it, not to this one
  FUZZ_CHECK(!backend.AnyPartial(), "no partial request left from before");
  backend.BeginInput();

  int client = Connect();
  Outcome out;
  SendAll(client, bytes.substr(0, split));
  if (split < bytes.size()) {
    Drive(client, &out, Clock::now() + kSplitWait, /*stop_when_quiet=*/true);
    if (!out.closed) SendAll(client, bytes.substr(split));
  }
  ::shutdown(client, SHUT_WR);
  Drive(client, &out, Clock::now() + kAnswerWait, /*stop_when_quiet=*/false);
  // Abort rather than close: no TIME_WAIT left behind per input.
  linger abort_close{1, 0};
  ::setsockopt(client, SOL_SOCKET, SO_LINGER, &abort_close, sizeof abort_close);
  ::close(client);

  // Let whatever is on its way to the backend arrive.
  backend.Pump();
  for (auto until = Clock::now() + kSettleWait; backend.AnyPartial() && Clock::now() < until;) {
    pollfd none{};
    ::poll(&none, 0, 1);
    backend.Pump();
  }

  std::vector<Response> responses = ParseResponses(out.answer);
  std::string detail = "[client sent]\n" + std::string(bytes) + "\n[proxy answered]\n" + out.answer + "\n" +
                       backend.Dump();
  if (backend.AnyPartial()) Fail("the backend got part of a request (not whole)", detail);

  size_t from_backend = 0;
  for (const Response& r : responses) from_backend += r.from_backend;
  if (std::getenv("FUZZ_EXCHANGE_VERBOSE")) {  // what each input did, to check the seeds
    std::fprintf(stderr, "fuzz_exchange: %zu bytes, %s; responses:", bytes.size(), out.closed ? "closed" : "timed out");
    for (const Response& r : responses) std::fprintf(stderr, " %u%s", r.status, r.from_backend ? "(backend)" : "");
    std::fprintf(stderr, "; backend got %zu bytes, %zu requests\n", backend.NewBytes(), backend.NewRequests());
  }
  bool refused_first = responses.empty() ? out.closed
                                         : (!responses[0].from_backend && responses[0].status >= 400 &&
                                            responses[0].status < 500);
  if (refused_first && responses.size() <= 1 && backend.NewBytes() != 0) {
    Fail("a request the proxy refused (4xx or closed) reached the backend", detail);
  }
  if (out.closed && from_backend != backend.NewRequests()) {
    Fail(("the backend got " + std::to_string(backend.NewRequests()) + " requests, the client " +
          std::to_string(from_backend) + " answers from it")
             .c_str(),
         detail);
  }
  return responses;
}

}  // namespace

extern "C" int LLVMFuzzerInitialize(int*, char***) {
  Start();
  // Raise the fence to 10, as the seeds expect, through the proxy itself.
  using namespace std::literals;
  std::vector<Response> r =
      RunOne("\x00PUT /orders/1 HTTP/1.1\r\nHost: b\r\nX-Fencing-Token: 10\r\nContent-Length: 0\r\n\r\n"sv);
  FUZZ_CHECK(r.size() == 1 && r[0].from_backend && r[0].status == 200, "the warm-up PUT with token 10 is forwarded");
  return 0;
}

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  RunOne(fuzz::AsView(data, size));
  return 0;
}
