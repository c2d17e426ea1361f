#pragma once
// How a request reaches etcd: POST <path> with a JSON body to one of the endpoints, over a pooled
// connection (connection.h), with auth. One loop does it for unary calls and for the start of a
// watch alike.
//
// Per request:
//   - one deadline, the config's timeout, that covers everything (resolve, connect, TLS
//     handshake, authentication, the request, the answer): at the latest then the request
//     completes with an error ("timed out after ..."); it never hangs;
//   - endpoints are tried in turn, starting with the last one that worked, while Classify
//     (codec.h) says kNextEndpoint: it could not be connected, answered 5xx or said the gRPC
//     status UNAVAILABLE. Each endpoint gets an equal share of what is left of the deadline (the
//     last one all of it), so a black-holed first endpoint leaves time for the next;
//   - connections are kept alive and reused (a few idle ones at most); a reused connection that
//     the server had closed meanwhile (it answered nothing) is replaced once by a fresh one;
//   - with a username, the token from /v3/auth/authenticate goes in the Authorization header;
//     when Classify says kRenewAuth (the token is invalid or expired), the transport
//     authenticates again, once, and sends the request again.
// A request that failed after it was sent may be resent to the next endpoint: callers send only
// requests for which that is harmless (reads, keep-alives, a txn whose compare fails the second
// time, a put of the same value).
//
// Streaming methods: the gateway answers /v3/watch and /v3/lease/keepalive with a chunked body of
// one JSON object per message, {"result": ...} or {"error": ...}.
//   - A keep-alive sends one message with Content-Length; etcd then sees the end of the request
//     stream after it, answers that one message and ends the response, so a keep-alive round is
//     an ordinary request (Request::stream) whose answer is unwrapped from {"result": ...}.
//   - A watch (Request::open) has a connection of its own, never a pooled one, with TCP
//     keep-alive probes. Its start (connect, authenticate, the response's head and the "created"
//     message) is a request like any other, deadline and endpoints included; once started, the
//     connection is handed over, without a deadline, to the watch (watch_stream.h).

#include "config/config.h"
#include "etcd/codec.h"
#include "etcd/connection.h"

#include <boost/asio/awaitable.hpp>
#include <boost/asio/io_context.hpp>
#include <boost/asio/ssl/context.hpp>
#include <boost/json/object.hpp>

#include <chrono>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <unordered_map>
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

struct Reply {
  // ok, or why not, readable: the endpoint and the cause ("etcd http://h:2379: HTTP 404: ..."),
  // each endpoint's failure, or "timed out after 1000ms (...)".
  Status status;
  boost::json::object response;  // ok: the answer (a stream message's "result")
  std::shared_ptr<Connection> connection;  // ok and Request::open: the stream's, now the caller's
  std::string endpoint;  // the endpoint that answered, as configured; empty when none did
};

class Transport {
 public:
  // Checks the endpoints, reads the password file and loads the TLS files; nothing is sent yet.
  // Null with a readable error when any of that fails.
  static std::unique_ptr<Transport> Create(boost::asio::io_context& ioc, const EtcdClientConfig& config,
                                           std::string* error);
  ~Transport();
  Transport(const Transport&) = delete;
  Transport& operator=(const Transport&) = delete;

  // Everything below runs on the thread that runs ioc (one thread).
  using Done = std::function<void(Reply)>;
  // Sends request. done is called exactly once: with the answer, the error, at the deadline, or by
  // Cancel or Abort; never inside Start. The id is for Cancel.
  uint64_t Start(Request request, Done done);
  // done(why) now, unless the request has completed already; its connection is closed.
  void Cancel(uint64_t id, const std::string& why);
  // Cancel(why) of every request in flight, and the idle connections closed.
  void Abort(const std::string& why);

  std::chrono::milliseconds timeout() const { return timeout_; }

 private:
  struct Op;
  struct Outcome;
  using OpPtr = std::shared_ptr<Op>;
  using ConnectionPtr = std::shared_ptr<Connection>;

  explicit Transport(boost::asio::io_context& ioc) : ioc_(ioc) {}

  boost::asio::awaitable<void> Run(OpPtr op);
  boost::asio::awaitable<Status> EnsureToken(OpPtr op);
  boost::asio::awaitable<Outcome> Rotate(OpPtr op, const Request& request, const std::string& token);
  boost::asio::awaitable<Outcome> OnEndpoint(OpPtr op, size_t index, Clock::time_point deadline,
                                             const Request& request, const std::string& token);
  boost::asio::awaitable<Answer> Exchange(Connection& conn, Clock::time_point deadline, const Request& request,
                                          const std::string& token, bool* nothing_received, bool* keep_alive);
  void Finish(const OpPtr& op, Reply reply);
  void TimedOut(const OpPtr& op);
  std::string TimeoutError(const Op& op) const;
  ConnectionPtr TakeIdle(size_t index);
  void Release(ConnectionPtr conn);

  boost::asio::io_context& ioc_;
  std::vector<Endpoint> endpoints_;
  std::chrono::milliseconds timeout_{0};
  std::string username_;
  std::string auth_body_;  // {"name","password"}: the password is kept only in here
  std::string tls_server_name_;
  std::unique_ptr<boost::asio::ssl::context> tls_;  // null without an https endpoint

  size_t preferred_ = 0;  // the endpoint that answered last
  std::string token_;     // etcd's auth token; empty: authenticate first
  uint64_t next_id_ = 1;
  std::unordered_map<uint64_t, OpPtr> pending_;
  std::vector<ConnectionPtr> idle_;  // most recently used last
};

}  // namespace fencing::etcd
