#include "upstream/upstream_pool.h"

#include <boost/asio/as_tuple.hpp>
#include <boost/asio/connect.hpp>
#include <boost/asio/use_awaitable.hpp>

#include <sys/socket.h>

#include <algorithm>
#include <cerrno>
#include <tuple>

namespace fencing {

namespace asio = boost::asio;
using tcp = asio::ip::tcp;

UpstreamPool::UpstreamPool(asio::io_context& ioc, std::vector<tcp::endpoint> endpoints,
                           std::chrono::milliseconds connect_timeout, size_t max_idle,
                           const HandshakeObserver* handshakes)
    : ioc_(ioc), endpoints_(std::move(endpoints)), connect_timeout_(connect_timeout), max_idle_(max_idle),
      handshakes_(handshakes) {}

UpstreamPool::~UpstreamPool() = default;

void UpstreamPool::SetTls(std::shared_ptr<TlsClientContext> tls) {
  if (tls == tls_) return;
  tls_ = std::move(tls);
  std::erase_if(idle_, [this](const Idle& idle) { return idle.connection->tls_context != tls_; });
}

io::Awaitable<std::unique_ptr<UpstreamConnection>> UpstreamPool::Acquire(boost::system::error_code& ec) {
  if (auto connection = TakeIdle()) co_return connection;
  co_return co_await Connect(ec);
}

std::unique_ptr<UpstreamConnection> UpstreamPool::TakeIdle() {
  while (!idle_.empty()) {
    std::unique_ptr<UpstreamConnection> connection = std::move(idle_.back().connection);
    // Stop watching for the backend's close; the aborted wait completes without touching it.
    boost::system::error_code ignored;
    if (idle_.back().watched) connection->socket.cancel(ignored);
    idle_.pop_back();
    if (!Silent(*connection)) continue;  // spoke or closed meanwhile: closed, try the next
    connection->reused = true;
    return connection;
  }
  return nullptr;
}

bool UpstreamPool::Silent(UpstreamConnection& connection) {
  char byte;
  ssize_t n = ::recv(connection.socket.native_handle(), &byte, 1, MSG_PEEK | MSG_DONTWAIT);
  return n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK);
}

io::Awaitable<std::unique_ptr<UpstreamConnection>> UpstreamPool::Connect(boost::system::error_code& ec) {
  auto connection = std::make_unique<UpstreamConnection>(ioc_);
  // connect_timeout, for the connect and the TLS handshake together: a timer that cancels them.
  // `watch.connecting` tells a timer that fired just as they completed that the socket is no
  // longer its to cancel; `watch.fired`, that it cut them off.
  struct Watch {
    bool connecting = true;
    bool fired = false;
  };
  auto watch = std::make_shared<Watch>();
  io::Timer timer(ioc_.get_executor(), connect_timeout_);
  timer.async_wait([watch, socket = &connection->socket](boost::system::error_code timer_ec) {
    boost::system::error_code ignored;
    if (timer_ec || !watch->connecting) return;
    watch->fired = true;
    socket->cancel(ignored);
  });
  auto [connect_ec, endpoint] = co_await asio::async_connect(connection->socket, endpoints_, io::kTuple);
  if (connect_ec) {
    watch->connecting = false;
    timer.cancel();
    ec = watch->fired || connect_ec == asio::error::operation_aborted ? asio::error::timed_out : connect_ec;
    co_return nullptr;
  }
  connection->socket.set_option(tcp::no_delay(true), ec);
  if (tls_) {
    // A failed handshake ends the connection: the request is never written on it.
    connection->tls_context = tls_;
    connection->tls = std::make_unique<TlsStream>(connection->socket, tls_->context());
    SSL* ssl = connection->tls->native_handle();
    boost::system::error_code hec;
    if (tls_->Prepare(ssl)) {
      std::tie(hec) = co_await connection->tls->async_handshake(asio::ssl::stream_base::client, io::kTuple);
      if (hec) hec = HandshakeFailure(hec, ssl, watch->fired);
    } else {
      hec = HandshakeFailure({}, nullptr, false);
    }
    if (handshakes_) handshakes_->Handshake(ResultOf(hec));
    if (hec) {
      watch->connecting = false;
      timer.cancel();
      ec = hec;
      co_return nullptr;
    }
  }
  watch->connecting = false;
  timer.cancel();
  ec = {};
  co_return connection;
}

void UpstreamPool::Release(std::unique_ptr<UpstreamConnection> connection) {
  if (!connection->socket.is_open() || connection->buffer.size() != 0) return;  // unusable
  // TLS: nothing held in its TLS layer either, and made with the settings in force.
  if (connection->tls && (connection->tls_context != tls_ || !connection->TlsQuiet())) return;
  if (idle_.size() >= max_idle_) {
    // The least recently used connection goes, so the pool keeps the warm ones.
    idle_.erase(idle_.begin());
  }
  idle_.push_back(Idle{next_id_++, std::move(connection), std::chrono::steady_clock::now()});
}

void UpstreamPool::Sweep(std::chrono::steady_clock::time_point now, std::chrono::milliseconds watch_after) {
  for (Idle& idle : idle_) {
    if (!idle.watched && now - idle.since >= watch_after) WatchIdle(idle);
  }
}

void UpstreamPool::WatchIdle(Idle& idle) {
  idle.watched = true;
  uint64_t id = idle.id;
  idle.connection->socket.async_wait(tcp::socket::wait_read, [this, id](boost::system::error_code ec) {
    if (ec == asio::error::operation_aborted) return;  // acquired, or the pool is closing
    DropIdle(id);
  });
}

void UpstreamPool::DropIdle(uint64_t id) {
  auto it = std::find_if(idle_.begin(), idle_.end(), [id](const Idle& idle) { return idle.id == id; });
  if (it != idle_.end()) idle_.erase(it);
}

}  // namespace fencing
