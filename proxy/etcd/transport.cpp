#include "etcd/transport.h"

#include <boost/asio/co_spawn.hpp>
#include <boost/asio/detached.hpp>
#include <boost/asio/post.hpp>
#include <boost/asio/steady_timer.hpp>
#include <boost/asio/use_awaitable.hpp>
#include <boost/json/serialize.hpp>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <fstream>
#include <limits>
#include <sstream>

namespace fencing::etcd {

namespace net = boost::asio;
namespace beast = boost::beast;
namespace http = beast::http;

namespace {

constexpr const char* kAuthenticatePath = "/v3/auth/authenticate";
constexpr size_t kMaxIdleConnections = 4;
// Unary answers are small (a range of a few keys); larger ones are a bug or a wrong server.
constexpr uint64_t kMaxResponseBytes = 16 * 1024 * 1024;
constexpr size_t kNoEndpoint = std::numeric_limits<size_t>::max();

bool ReadPasswordFile(const std::string& path, std::string* password, std::string* error) {
  std::ifstream in(path, std::ios::binary);
  if (!in) {
    *error = "cannot read the etcd password_file " + path + ": " + std::strerror(errno);
    return false;
  }
  std::ostringstream text;
  text << in.rdbuf();
  std::string value = text.str();
  // One line: a trailing newline (an editor's, `echo`'s) is not part of the password.
  while (!value.empty() && (value.back() == '\n' || value.back() == '\r')) value.pop_back();
  if (value.empty()) {
    *error = "the etcd password_file " + path + " is empty";
    return false;
  }
  if (value.find('\n') != std::string::npos) {
    *error = "the etcd password_file " + path + " has more than one line";
    return false;
  }
  *password = std::move(value);
  return true;
}

}  // namespace

struct Transport::Op {
  explicit Op(net::io_context& ioc) : guard(ioc) {}
  uint64_t id = 0;
  Request request;
  Done done;
  bool finished = false;
  Clock::time_point deadline;
  net::steady_timer guard;               // the deadline, whatever the request is waiting for
  std::weak_ptr<Connection> current;     // closed at the deadline and by Cancel, to end its waits
  std::vector<std::string> failures;     // per endpoint tried, for the final error
};

// What the endpoint loop made of one request.
struct Transport::Outcome {
  Verdict verdict;                  // kFinal or kRenewAuth (the loop's own error: kFinal)
  size_t endpoint = kNoEndpoint;    // the endpoint that answered
  ConnectionPtr connection;         // a started stream's
};

std::unique_ptr<Transport> Transport::Create(net::io_context& ioc, const EtcdClientConfig& config, std::string* error) {
  if (config.endpoints.empty()) {
    *error = "etcd client: no endpoints";
    return nullptr;
  }
  if (config.timeout <= std::chrono::milliseconds::zero()) {
    *error = "etcd client: the timeout must be positive";
    return nullptr;
  }
  std::unique_ptr<Transport> t(new Transport(ioc));
  for (const auto& text : config.endpoints) {
    if (!ParseEndpoint(text, &t->endpoints_.emplace_back(), error)) return nullptr;
  }
  if (!config.username.empty()) {
    if (config.password_file.empty()) {
      *error = "etcd user \"" + config.username + "\" needs a password_file";
      return nullptr;
    }
    std::string password;
    if (!ReadPasswordFile(config.password_file, &password, error)) return nullptr;
    t->username_ = config.username;
    t->auth_body_ = boost::json::serialize(AuthenticateJson(config.username, password));
  } else if (!config.password_file.empty()) {
    *error = "etcd password_file " + config.password_file + " is set without a username";
    return nullptr;
  }
  if (std::any_of(t->endpoints_.begin(), t->endpoints_.end(), [](const Endpoint& e) { return e.tls; }) &&
      !MakeTlsContext(config.tls_settings, &t->tls_, error)) {
    return nullptr;
  }
  t->timeout_ = config.timeout;
  t->tls_server_name_ = config.tls_settings.server_name;
  return t;
}

Transport::~Transport() = default;

uint64_t Transport::Start(Request request, Done done) {
  auto op = std::make_shared<Op>(ioc_);
  op->id = next_id_++;
  op->request = std::move(request);
  op->done = std::move(done);
  op->deadline = Clock::now() + timeout_;
  pending_.emplace(op->id, op);
  op->guard.expires_at(op->deadline);
  op->guard.async_wait([this, weak = std::weak_ptr<Op>(op)](beast::error_code ec) {
    if (ec) return;
    if (auto o = weak.lock()) TimedOut(o);
  });
  net::co_spawn(ioc_, Run(op), net::detached);
  return op->id;
}

void Transport::Cancel(uint64_t id, const std::string& why) {
  auto it = pending_.find(id);
  if (it == pending_.end()) return;
  OpPtr op = it->second;
  if (auto c = op->current.lock()) c->Close();  // ends the coroutine's wait; it then sees finished
  Finish(op, Reply{Status{why, -1}, {}, nullptr, ""});
}

void Transport::Abort(const std::string& why) {
  std::vector<uint64_t> ids;
  for (const auto& [id, op] : pending_) ids.push_back(id);
  for (uint64_t id : ids) Cancel(id, why);
  for (auto& c : idle_) c->Close();
  idle_.clear();
}

void Transport::Finish(const OpPtr& op, Reply reply) {
  if (op->finished) {
    if (reply.connection) reply.connection->Close();  // a stream that started too late
    return;
  }
  op->finished = true;
  op->guard.cancel();
  pending_.erase(op->id);
  Done done = std::move(op->done);
  done(std::move(reply));
}

std::string Transport::TimeoutError(const Op& op) const {
  std::string error = "timed out after " + std::to_string(timeout_.count()) + "ms";
  for (size_t i = 0; i < op.failures.size(); ++i) error += (i == 0 ? " (" : "; ") + op.failures[i];
  return op.failures.empty() ? error : error + ")";
}

void Transport::TimedOut(const OpPtr& op) {
  if (op->finished) return;
  if (auto c = op->current.lock()) c->Close();
  Finish(op, Reply{Status{TimeoutError(*op), -1}, {}, nullptr, ""});
}

net::awaitable<void> Transport::Run(OpPtr op) {
  co_await net::post(net::use_awaitable);  // never inside Start
  Outcome out;
  for (int attempt = 0; attempt < 2 && !op->finished; ++attempt) {
    std::string token;
    if (!username_.empty()) {
      Status auth = co_await EnsureToken(op);
      if (!auth.ok()) {
        out = Outcome{};
        out.verdict.status = std::move(auth);
        break;
      }
      token = token_;
    }
    out = co_await Rotate(op, op->request, token);
    if (out.verdict.next != Verdict::Next::kRenewAuth || token.empty()) break;
    if (token_ == token) token_.clear();  // unless another request has renewed it meanwhile
  }
  Reply reply{std::move(out.verdict.status), std::move(out.verdict.response), std::move(out.connection), ""};
  if (out.endpoint != kNoEndpoint) reply.endpoint = endpoints_[out.endpoint].text;
  Finish(op, std::move(reply));
}

net::awaitable<Status> Transport::EnsureToken(OpPtr op) {
  if (!token_.empty()) co_return Status{};
  // Named, not temporaries in the co_await: GCC 12 destroys such a temporary twice.
  const Request authenticate{kAuthenticatePath, auth_body_};
  const std::string no_token;
  Outcome out = co_await Rotate(op, authenticate, no_token);
  Status status = std::move(out.verdict.status);
  std::string token;
  if (status.ok() && !ReadAuthenticateResponse(out.verdict.response, &token, &status.error)) status.grpc_code = -1;
  if (!status.ok()) {
    status.error = "etcd authenticate as \"" + username_ + "\": " + status.error;
    co_return status;
  }
  token_ = std::move(token);
  co_return Status{};
}

net::awaitable<Transport::Outcome> Transport::Rotate(OpPtr op, const Request& request, const std::string& token) {
  const size_t n = endpoints_.size();
  const size_t first = preferred_;
  Outcome out;
  bool answered = false;
  for (size_t k = 0; k < n && !op->finished; ++k) {
    const Clock::time_point now = Clock::now();
    if (now >= op->deadline) break;
    // An equal share of what is left for each endpoint still to try (the last one gets all of
    // it): a black-holed or hung member cannot use up the whole deadline.
    const Clock::time_point share = now + (op->deadline - now) / int(n - k);
    const size_t index = (first + k) % n;
    out = co_await OnEndpoint(op, index, share, request, token);
    if (out.verdict.next != Verdict::Next::kNextEndpoint) {
      answered = true;
      break;
    }
    op->failures.push_back(endpoints_[index].text + ": " + out.verdict.status.error);
  }
  if (answered && out.verdict.status.ok()) {
    preferred_ = out.endpoint;
  } else if (answered) {
    out.verdict.status.error = "etcd " + endpoints_[out.endpoint].text + ": " + out.verdict.status.error;
  } else {
    out = Outcome{};
    if (Clock::now() >= op->deadline) {
      out.verdict.status.error = TimeoutError(*op);
    } else {
      for (const auto& f : op->failures) out.verdict.status.error += (out.verdict.status.error.empty() ? "" : "; ") + f;
      if (out.verdict.status.error.empty()) out.verdict.status.error = "no etcd endpoint answered";
    }
  }
  co_return out;
}

net::awaitable<Transport::Outcome> Transport::OnEndpoint(OpPtr op, size_t index, Clock::time_point deadline,
                                                         const Request& request, const std::string& token) {
  const bool own = bool(request.open);  // a stream's own connection, never a pooled one
  ConnectionPtr conn = own ? nullptr : TakeIdle(index);
  Answer answer{"the request ended", 0, "", false};
  bool keep_alive = false;
  for (int round = 0; round < 2 && !op->finished; ++round) {
    if (!conn) {
      conn = std::make_shared<Connection>(ioc_, index, endpoints_[index].tls ? tls_.get() : nullptr);
      op->current = conn;
      std::string failure = co_await conn->Connect(endpoints_[index], tls_server_name_, deadline);
      if (!failure.empty()) {
        answer = Answer{std::move(failure), 0, "", false};
        conn.reset();
        break;
      }
      if (own) conn->SetKeepAliveProbes();
    }
    op->current = conn;
    bool nothing_received = false;
    answer = co_await Exchange(*conn, deadline, request, token, &nothing_received, &keep_alive);
    if (answer.transport_error.empty()) break;
    const bool stale = conn->reused && nothing_received;
    conn->Close();
    conn.reset();
    if (!stale) break;  // else the server had closed it while idle: once more, on a fresh one
  }
  op->current.reset();
  Outcome out{Classify(answer), index, nullptr};
  if (conn && !op->finished && own && out.verdict.status.ok()) {
    conn->ExpiresNever();
    out.connection = std::move(conn);
  } else if (conn && !op->finished && !own && keep_alive) {
    Release(std::move(conn));
  } else if (conn) {
    conn->Close();
  }
  co_return out;
}

net::awaitable<Answer> Transport::Exchange(Connection& conn, Clock::time_point deadline, const Request& request,
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

Transport::ConnectionPtr Transport::TakeIdle(size_t index) {
  for (auto it = idle_.rbegin(); it != idle_.rend(); ++it) {
    if ((*it)->endpoint() != index) continue;
    ConnectionPtr conn = std::move(*it);
    idle_.erase(std::next(it).base());
    conn->reused = true;
    return conn;
  }
  return nullptr;
}

void Transport::Release(ConnectionPtr conn) {
  conn->DropBuffered();
  if (idle_.size() >= kMaxIdleConnections) {
    idle_.front()->Close();
    idle_.erase(idle_.begin());
  }
  idle_.push_back(std::move(conn));
}

}  // namespace fencing::etcd
