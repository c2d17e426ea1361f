#pragma once
// Keep-alive connections to the backend, one pool per I/O thread: every connection in a pool is
// used by sessions of that thread only, so the hot path takes no lock.
//
// An https backend's connections are TLS (upstream_connection.h), pooled and reused as plain
// ones are: the handshake is part of the connect and bounded by its timeout, and a connection is
// pooled only when its TLS layer, too, holds nothing after the response.

#include "common/io.h"
#include "tls/client_context.h"
#include "tls/handshake.h"
#include "upstream/upstream_connection.h"

#include <boost/asio/awaitable.hpp>
#include <boost/asio/io_context.hpp>
#include <boost/asio/ip/tcp.hpp>

#include <chrono>
#include <cstdint>
#include <memory>
#include <vector>

namespace fencing {

class UpstreamPool {
 public:
  // handshakes: told of every TLS handshake (null: nobody counts them).
  UpstreamPool(boost::asio::io_context& ioc, std::vector<boost::asio::ip::tcp::endpoint> endpoints,
               std::chrono::milliseconds connect_timeout, size_t max_idle,
               const HandshakeObserver* handshakes = nullptr);
  ~UpstreamPool();

  // The TLS of new connections: null for an http:// backend. Idle connections made with other
  // settings are closed now, and busy ones when they are released (a reload that changed the CA
  // must not leave connections verified by the old one in use).
  void SetTls(std::shared_ptr<TlsClientContext> tls);

  // An idle pooled connection that is known clean, or a new one (connect bounded by
  // connect_timeout). On failure, returns null and sets ec.
  io::Awaitable<std::unique_ptr<UpstreamConnection>> Acquire(boost::system::error_code& ec);

  // Acquire's first half, with no coroutine: an idle pooled connection, or null when there is
  // none. A pooled connection is given out only when it is known clean: its last response ended
  // exactly at its framing (Release) and nothing has arrived on it since, checked now with one
  // non-blocking peek (a syscall). A connection the backend wrote to while it idled (stray bytes
  // of a response that said more than its framing, an unsolicited response, its close) is out of
  // step with the backend: the next request would read those bytes as its answer, release its
  // fence admission while the backend still runs it, or be sent twice. It is closed instead.
  // (An idle watch alone cannot promise this: a byte that arrives just before the take, whose
  // handler has not run yet, would go unseen.) A TLS connection is peeked at the same way: the
  // peek sees every record that came after the release, and what its TLS layer held by then was
  // checked at the release (nothing reads into it while it idles).
  std::unique_ptr<UpstreamConnection> TakeIdle();

  // Connects a fresh connection, never a pooled one (used to retry on a reused one that died).
  // With TLS, the handshake is part of it, under the same connect_timeout; a failed one sets ec
  // to a TLS failure (tls/handshake.h), and nothing has been written on the connection.
  io::Awaitable<std::unique_ptr<UpstreamConnection>> Connect(boost::system::error_code& ec);

  // Gives back a connection whose last exchange ended cleanly and which may be kept alive; one
  // with a byte read beyond the end of its response, in the buffer or (TLS) in the TLS layer, is
  // closed, never pooled.
  void Release(std::unique_ptr<UpstreamConnection> connection);

  // Called by the worker's periodic sweep: connections idle for at least watch_after start
  // watching for the backend's close (see Idle::watched).
  void Sweep(std::chrono::steady_clock::time_point now, std::chrono::milliseconds watch_after);

  size_t idle_count() const { return idle_.size(); }
  // The sockets of the idle connections, most recently used last: for tests that wait for a
  // backend's close or stray bytes to arrive on one before they take it.
  std::vector<int> idle_handles() {
    std::vector<int> handles;
    for (Idle& idle : idle_) handles.push_back(idle.connection->socket.native_handle());
    return handles;
  }

 private:
  struct Idle {
    uint64_t id;
    std::unique_ptr<UpstreamConnection> connection;
    std::chrono::steady_clock::time_point since;
    // An idle connection must stay silent; if it becomes readable, the backend closed it (or
    // wrote out of turn) and it is dropped, its descriptor freed without waiting for a request.
    // The watch costs a syscall (an epoll_ctl), so a connection reused within a sweep period is
    // not watched: TakeIdle's peek is what keeps a request off a connection that spoke.
    bool watched = false;
  };
  void WatchIdle(Idle& idle);
  // True when nothing has arrived on the connection since its last response: no byte, no close.
  static bool Silent(UpstreamConnection& connection);
  void DropIdle(uint64_t id);

  boost::asio::io_context& ioc_;
  std::vector<boost::asio::ip::tcp::endpoint> endpoints_;
  std::chrono::milliseconds connect_timeout_;
  size_t max_idle_;
  const HandshakeObserver* handshakes_;
  std::shared_ptr<TlsClientContext> tls_;  // null: plain HTTP
  uint64_t next_id_ = 1;
  std::vector<Idle> idle_;  // most recently used last
};

}  // namespace fencing
