#pragma once
// Where a request goes: which endpoint, over which connection. Between connection.h (one
// connection) and transport.h (a request's deadline, cancellation and auth), which sends every
// request, and the start of every watch, through Send here.
//
//   - Endpoints are tried in turn, starting with the last one that worked, while Classify
//     (codec.h) says kNextEndpoint: it could not be connected, answered 5xx or said the gRPC
//     status UNAVAILABLE. Each gets an equal share of what is left of the call's deadline (the
//     last one all of it), so a black-holed first endpoint leaves time for the next.
//   - On an endpoint, the request goes on its most recently used idle connection if there is one,
//     else on a new one; a reused connection that the server had closed meanwhile (it answered
//     nothing) is replaced once by a fresh one.
//   - After the answer, a connection the server keeps alive goes back to the pool (a few idle ones
//     at most: the oldest is closed to make room); any other is closed.
//   - A request that opens a stream (Request::open, a watch) has a connection of its own, never a
//     pooled one, with TCP keep-alive probes; once the stream has started, the connection is the
//     caller's, without a deadline.

#include "config/config.h"
#include "etcd/codec.h"
#include "etcd/connection.h"

#include <boost/asio/awaitable.hpp>
#include <boost/asio/io_context.hpp>
#include <boost/asio/ssl/context.hpp>

#include <chrono>
#include <cstddef>
#include <functional>
#include <limits>
#include <memory>
#include <string>
#include <vector>

namespace fencing::etcd {

struct Request {
  std::string path;  // "/v3/kv/range"
  std::string body;  // JSON
  bool stream = false;  // a streaming method: a 200's answer is one {"result"} or {"error"} message
  // Set: a stream that stays open (a watch). Called after the request is written on the request's
  // own connection, it reads the answer's head and first message (or error body) and returns them
  // for Classify. Called once per endpoint tried; the last call's reading belongs to the stream.
  std::function<boost::asio::awaitable<Answer>(Connection&)> open = {};
};

// One request as the pool sees it (the transport's request is one). The transport sets the
// deadline and completes it; the pool adds the failures and sets current.
struct Call {
  Clock::time_point deadline;
  std::chrono::milliseconds timeout{0};  // what the deadline was set from, for TimeoutError
  bool finished = false;                 // completed: nothing more is tried, no connection kept
  std::weak_ptr<Connection> current;     // closed at the deadline and by Cancel, to end its waits
  std::vector<std::string> failures;     // per endpoint tried, for the final error

  // "timed out after 1000ms", with the failures so far in parentheses.
  std::string TimeoutError() const;
};

class ConnectionPool {
 public:
  static constexpr size_t kNoEndpoint = std::numeric_limits<size_t>::max();

  // What came of a request.
  struct Outcome {
    Verdict verdict;                         // kFinal or kRenewAuth (the pool's own error: kFinal)
    size_t endpoint = kNoEndpoint;           // the endpoint that answered
    std::shared_ptr<Connection> connection;  // a started stream's
  };

  // endpoints: parsed, at least one. With an https one, loads the TLS files (settings); null with
  // a readable error when that fails. Nothing is connected yet.
  static std::unique_ptr<ConnectionPool> Create(boost::asio::io_context& ioc, std::vector<Endpoint> endpoints,
                                                const TlsSettings& settings, std::string* error);
  ~ConnectionPool();
  ConnectionPool(const ConnectionPool&) = delete;
  ConnectionPool& operator=(const ConnectionPool&) = delete;

  // Everything below runs on the thread that runs ioc (one thread).
  // request to the endpoints in turn (above), with token in the Authorization header when not
  // empty, until one answers, call.deadline passes or call finishes. call must outlive it. An
  // error says the endpoint ("etcd http://h:2379: ..."), else each endpoint's failure or the
  // timeout.
  boost::asio::awaitable<Outcome> Send(Call& call, const Request& request, const std::string& token);
  // Closes the idle connections.
  void CloseIdle();

  const Endpoint& endpoint(size_t index) const { return endpoints_[index]; }

 private:
  using ConnectionPtr = std::shared_ptr<Connection>;

  explicit ConnectionPool(boost::asio::io_context& ioc) : ioc_(ioc) {}

  // request on endpoint index, by deadline (its share of the call's).
  boost::asio::awaitable<Outcome> OnEndpoint(Call& call, size_t index, Clock::time_point deadline,
                                             const Request& request, const std::string& token);
  // One request and its answer on conn. *nothing_received: the connection was found closed before
  // any of the answer came; *keep_alive: the server keeps it open.
  boost::asio::awaitable<Answer> Exchange(Connection& conn, Clock::time_point deadline, const Request& request,
                                          const std::string& token, bool* nothing_received, bool* keep_alive);
  ConnectionPtr TakeIdle(size_t index);
  void Release(ConnectionPtr conn);

  boost::asio::io_context& ioc_;
  std::vector<Endpoint> endpoints_;
  std::string tls_server_name_;
  std::unique_ptr<boost::asio::ssl::context> tls_;  // null without an https endpoint

  size_t preferred_ = 0;             // the endpoint that answered last
  std::vector<ConnectionPtr> idle_;  // most recently used last
};

}  // namespace fencing::etcd
