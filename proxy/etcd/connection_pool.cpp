#include "etcd/connection_pool.h"

#include <algorithm>
#include <cstdint>
#include <iterator>

namespace fencing::etcd {

namespace net = boost::asio;
namespace beast = boost::beast;
namespace http = beast::http;

namespace {

constexpr size_t kMaxIdleConnections = 4;
// Unary answers are small (a range of a few keys); larger ones are a bug or a wrong server.
constexpr uint64_t kMaxResponseBytes = 16 * 1024 * 1024;

}  // namespace

std::string Call::TimeoutError() const {
  std::string error = "timed out after " + std::to_string(timeout.count()) + "ms";
  for (size_t i = 0; i < failures.size(); ++i) error += (i == 0 ? " (" : "; ") + failures[i];
  return failures.empty() ? error : error + ")";
}

std::unique_ptr<ConnectionPool> ConnectionPool::Create(net::io_context& ioc, std::vector<Endpoint> endpoints,
                                                       const TlsSettings& settings, std::string* error) {
  std::unique_ptr<ConnectionPool> p(new ConnectionPool(ioc));
  p->endpoints_ = std::move(endpoints);
  if (std::any_of(p->endpoints_.begin(), p->endpoints_.end(), [](const Endpoint& e) { return e.tls; }) &&
      !MakeTlsContext(settings, &p->tls_, error)) {
    return nullptr;
  }
  p->tls_server_name_ = settings.server_name;
  return p;
}

ConnectionPool::~ConnectionPool() = default;

void ConnectionPool::CloseIdle() {
  for (auto& c : idle_) c->Close();
  idle_.clear();
}

net::awaitable<ConnectionPool::Outcome> ConnectionPool::Send(Call& call, const Request& request,
                                                             const std::string& token) {
  const size_t n = endpoints_.size();
  const size_t first = preferred_;
  Outcome out;
  bool answered = false;
  for (size_t k = 0; k < n && !call.finished; ++k) {
    const Clock::time_point now = Clock::now();
    if (now >= call.deadline) break;
    // An equal share of what is left for each endpoint still to try (the last one gets all of
    // it): a black-holed or hung member cannot use up the whole deadline.
    const Clock::time_point share = now + (call.deadline - now) / int(n - k);
    const size_t index = (first + k) % n;
    out = co_await OnEndpoint(call, index, share, request, token);
    if (out.verdict.next != Verdict::Next::kNextEndpoint) {
      answered = true;
      break;
    }
    call.failures.push_back(endpoints_[index].text + ": " + out.verdict.status.error);
  }
  if (answered && out.verdict.status.ok()) {
    preferred_ = out.endpoint;
  } else if (answered) {
    out.verdict.status.error = "etcd " + endpoints_[out.endpoint].text + ": " + out.verdict.status.error;
  } else {
    out = Outcome{};
    if (Clock::now() >= call.deadline) {
      out.verdict.status.error = call.TimeoutError();
    } else {
      for (const auto& f : call.failures) out.verdict.status.error += (out.verdict.status.error.empty() ? "" : "; ") + f;
      if (out.verdict.status.error.empty()) out.verdict.status.error = "no etcd endpoint answered";
    }
  }
  co_return out;
}

net::awaitable<ConnectionPool::Outcome> ConnectionPool::OnEndpoint(Call& call, size_t index, Clock::time_point deadline,
                                                                   const Request& request, const std::string& token) {
  const bool own = bool(request.open);  // a stream's own connection, never a pooled one
  ConnectionPtr conn = own ? nullptr : TakeIdle(index);
  Answer answer{"the request ended", 0, "", false};
  bool keep_alive = false;
  for (int round = 0; round < 2 && !call.finished; ++round) {
    if (!conn) {
      conn = std::make_shared<Connection>(ioc_, index, endpoints_[index].tls ? tls_.get() : nullptr);
      call.current = conn;
      std::string failure = co_await conn->Connect(endpoints_[index], tls_server_name_, deadline);
      if (!failure.empty()) {
        answer = Answer{std::move(failure), 0, "", false};
        conn.reset();
        break;
      }
      if (own) conn->SetKeepAliveProbes();
    }
    call.current = conn;
    bool nothing_received = false;
    answer = co_await Exchange(*conn, deadline, request, token, &nothing_received, &keep_alive);
    if (answer.transport_error.empty()) break;
    const bool stale = conn->reused && nothing_received;
    conn->Close();
    conn.reset();
    if (!stale) break;  // else the server had closed it while idle: once more, on a fresh one
  }
  call.current.reset();
  Outcome out{Classify(answer), index, nullptr};
  if (conn && !call.finished && own && out.verdict.status.ok()) {
    conn->ExpiresNever();
    out.connection = std::move(conn);
  } else if (conn && !call.finished && !own && keep_alive) {
    Release(std::move(conn));
  } else if (conn) {
    conn->Close();
  }
  co_return out;
}

net::awaitable<Answer> ConnectionPool::Exchange(Connection& conn, Clock::time_point deadline, const Request& request,
                                                const std::string& token, bool* nothing_received, bool* keep_alive) {
  const Endpoint& ep = endpoints_[conn.endpoint()];
  http::request<http::string_body> message{http::verb::post, request.path, 11};
  const bool ipv6 = ep.host.find(':') != std::string::npos;
  message.set(http::field::host, (ipv6 ? "[" + ep.host + "]" : ep.host) + ":" + std::to_string(ep.port));
  message.set(http::field::content_type, "application/json");
  if (!token.empty()) message.set(http::field::authorization, token);
  message.keep_alive(true);
  message.body() = request.body;
  message.prepare_payload();
  conn.ExpiresAt(deadline);
  Answer answer{"", 0, "", request.stream};
  beast::error_code ec = co_await conn.Write(message);
  if (ec) {
    *nothing_received = true;
    answer.transport_error = "send: " + Describe(ec);
    co_return answer;
  }
  if (request.open) co_return co_await request.open(conn);
  http::response_parser<http::string_body> parser;
  parser.body_limit(kMaxResponseBytes);
  ec = co_await conn.Read(parser);
  if (ec) {
    *nothing_received = !parser.got_some() && ClosedByPeer(ec);
    answer.transport_error = "receive: " + Describe(ec);
    co_return answer;
  }
  answer.http_status = parser.get().result_int();
  answer.body = std::move(parser.get().body());
  *keep_alive = parser.get().keep_alive();
  co_return answer;
}

ConnectionPool::ConnectionPtr ConnectionPool::TakeIdle(size_t index) {
  for (auto it = idle_.rbegin(); it != idle_.rend(); ++it) {
    if ((*it)->endpoint() != index) continue;
    ConnectionPtr conn = std::move(*it);
    idle_.erase(std::next(it).base());
    conn->reused = true;
    return conn;
  }
  return nullptr;
}

void ConnectionPool::Release(ConnectionPtr conn) {
  conn->DropBuffered();
  if (idle_.size() >= kMaxIdleConnections) {
    idle_.front()->Close();
    idle_.erase(idle_.begin());
  }
  idle_.push_back(std::move(conn));
}

}  // namespace fencing::etcd
