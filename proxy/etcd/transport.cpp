#include "etcd/transport.h"

#include <boost/asio/co_spawn.hpp>
#include <boost/asio/detached.hpp>
#include <boost/asio/post.hpp>
#include <boost/asio/steady_timer.hpp>
#include <boost/asio/use_awaitable.hpp>
#include <boost/json/serialize.hpp>

#include <cerrno>
#include <cstring>
#include <fstream>
#include <sstream>
#include <vector>

namespace fencing::etcd {

namespace net = boost::asio;
namespace beast = boost::beast;

namespace {

constexpr const char* kAuthenticatePath = "/v3/auth/authenticate";

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

// Call: its deadline, whether it has finished, the connection it waits on, the failures so far.
struct Transport::Op : Call {
  explicit Op(net::io_context& ioc) : guard(ioc) {}
  uint64_t id = 0;
  Request request;
  Done done;
  net::steady_timer guard;  // the deadline, whatever the request is waiting for
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
  std::vector<Endpoint> endpoints;
  for (const auto& text : config.endpoints) {
    if (!ParseEndpoint(text, &endpoints.emplace_back(), error)) return nullptr;
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
  t->pool_ = ConnectionPool::Create(ioc, std::move(endpoints), config.tls_settings, error);
  if (!t->pool_) return nullptr;
  t->timeout_ = config.timeout;
  return t;
}

Transport::~Transport() = default;

uint64_t Transport::Start(Request request, Done done) {
  auto op = std::make_shared<Op>(ioc_);
  op->id = next_id_++;
  op->request = std::move(request);
  op->done = std::move(done);
  op->deadline = Clock::now() + timeout_;
  op->timeout = timeout_;
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
  pool_->CloseIdle();
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

void Transport::TimedOut(const OpPtr& op) {
  if (op->finished) return;
  if (auto c = op->current.lock()) c->Close();
  Finish(op, Reply{Status{op->TimeoutError(), -1}, {}, nullptr, ""});
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
    out = co_await pool_->Send(*op, op->request, token);
    if (out.verdict.next != Verdict::Next::kRenewAuth || token.empty()) break;
    if (token_ == token) token_.clear();  // unless another request has renewed it meanwhile
  }
  Reply reply{std::move(out.verdict.status), std::move(out.verdict.response), std::move(out.connection), ""};
  if (out.endpoint != ConnectionPool::kNoEndpoint) reply.endpoint = pool_->endpoint(out.endpoint).text;
  Finish(op, std::move(reply));
}

net::awaitable<Status> Transport::EnsureToken(OpPtr op) {
  if (!token_.empty()) co_return Status{};
  // Named, not temporaries in the co_await: GCC 12 destroys such a temporary twice.
  const Request authenticate{kAuthenticatePath, auth_body_};
  const std::string no_token;
  Outcome out = co_await pool_->Send(*op, authenticate, no_token);
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

}  // namespace fencing::etcd
