#pragma once
// Keep-alive connections to the backend, one pool per I/O thread: every connection in a pool is
// used by sessions of that thread only, so the hot path takes no lock.

#include "common/io.h"

#include <boost/asio/awaitable.hpp>
#include <boost/asio/io_context.hpp>
#include <boost/asio/ip/tcp.hpp>
#include <boost/beast/core/flat_buffer.hpp>

#include <chrono>
#include <cstdint>
#include <memory>
#include <vector>

namespace fencing {

struct UpstreamConnection {
  explicit UpstreamConnection(boost::asio::io_context& ioc) : socket(ioc.get_executor()) {}
  // A plain socket: the session using it enforces timeouts.request (Session::Sweep).
  io::Socket socket;
  boost::beast::flat_buffer buffer;
  bool reused = false;  // came from the pool: the backend may have closed it meanwhile
};

class UpstreamPool {
 public:
  UpstreamPool(boost::asio::io_context& ioc, std::vector<boost::asio::ip::tcp::endpoint> endpoints,
               std::chrono::milliseconds connect_timeout, size_t max_idle);
  ~UpstreamPool();

  // An idle pooled connection, or a new one (connect bounded by connect_timeout). On failure,
  // returns null and sets ec. verify: make sure first that a pooled connection is still open
  // (one non-blocking peek, a syscall): for a request that must not be resent once it may have
  // reached the backend, a connection the backend has already closed must not be used at all.
  io::Awaitable<std::unique_ptr<UpstreamConnection>> Acquire(boost::system::error_code& ec, bool verify = false);

  // Acquire's first half, with no coroutine: an idle pooled connection (verified as above when
  // asked), or null when there is none.
  std::unique_ptr<UpstreamConnection> TakeIdle(bool verify);

  // Connects a fresh connection, never a pooled one (used to retry on a reused one that died).
  io::Awaitable<std::unique_ptr<UpstreamConnection>> Connect(boost::system::error_code& ec);

  // Gives back a connection whose last exchange ended cleanly and which may be kept alive.
  void Release(std::unique_ptr<UpstreamConnection> connection);

  // Called by the worker's periodic sweep: connections idle for at least watch_after start
  // watching for the backend's close (see Idle::watched).
  void Sweep(std::chrono::steady_clock::time_point now, std::chrono::milliseconds watch_after);

  size_t idle_count() const { return idle_.size(); }

 private:
  struct Idle {
    uint64_t id;
    std::unique_ptr<UpstreamConnection> connection;
    std::chrono::steady_clock::time_point since;
    // An idle connection must stay silent; if it becomes readable, the backend closed it and it
    // is dropped before a request can fail on it. The watch costs a syscall (an epoll_ctl), so a
    // connection reused within a sweep period is not watched: the exchange's resend rule
    // (server/exchange.h) covers it, and a non-idempotent request checks it first (Acquire's
    // verify).
    bool watched = false;
  };
  void WatchIdle(Idle& idle);
  // False when the backend has closed the connection (or sent bytes nobody asked for).
  static bool StillOpen(UpstreamConnection& connection);
  void DropIdle(uint64_t id);

  boost::asio::io_context& ioc_;
  std::vector<boost::asio::ip::tcp::endpoint> endpoints_;
  std::chrono::milliseconds connect_timeout_;
  size_t max_idle_;
  uint64_t next_id_ = 1;
  std::vector<Idle> idle_;  // most recently used last
};

}  // namespace fencing
