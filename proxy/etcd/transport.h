#pragma once
// How a request reaches etcd: POST <path> with a JSON body, with auth, by a deadline; where it goes
// (which endpoint, which connection) is the connection pool's (connection_pool.h). One loop does it
// for unary calls and for the start of a watch alike.
//
// Per request:
//   - one deadline, the config's timeout, that covers everything (resolve, connect, TLS
//     handshake, authentication, the request, the answer): at the latest then the request
//     completes with an error ("timed out after ..."); it never hangs;
//   - the pool tries the endpoints in turn, starting with the last one that worked, each with an
//     equal share of what is left of the deadline, over kept-alive connections where it can;
//   - with a username, the token from /v3/auth/authenticate goes in the Authorization header;
//     when Classify (codec.h) says kRenewAuth (the token is invalid or expired), the transport
//     authenticates again, once, and sends the request again;
//   - Cancel and Abort complete it at once, closing the connection it waits on.
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
#include "etcd/connection_pool.h"

#include <boost/asio/awaitable.hpp>
#include <boost/asio/io_context.hpp>
#include <boost/json/object.hpp>

#include <chrono>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <unordered_map>

namespace fencing::etcd {

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
  using OpPtr = std::shared_ptr<Op>;
  using Outcome = ConnectionPool::Outcome;

  explicit Transport(boost::asio::io_context& ioc) : ioc_(ioc) {}

  boost::asio::awaitable<void> Run(OpPtr op);
  boost::asio::awaitable<Status> EnsureToken(OpPtr op);
  void Finish(const OpPtr& op, Reply reply);
  void TimedOut(const OpPtr& op);

  boost::asio::io_context& ioc_;
  std::unique_ptr<ConnectionPool> pool_;
  std::chrono::milliseconds timeout_{0};
  std::string username_;
  std::string auth_body_;  // {"name","password"}: the password is kept only in here
  std::string token_;      // etcd's auth token; empty: authenticate first
  uint64_t next_id_ = 1;
  std::unordered_map<uint64_t, OpPtr> pending_;
};

}  // namespace fencing::etcd
