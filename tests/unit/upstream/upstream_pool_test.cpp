// UpstreamPool against a real backend on 127.0.0.1: reuse, the check before a request that must
// not be resent, what Release refuses to keep, the idle cap, the idle watch, connect failures.

#include <gtest/gtest.h>

#include <boost/asio/co_spawn.hpp>

#include <fcntl.h>
#include <poll.h>
#include <sys/socket.h>

#include <atomic>
#include <chrono>
#include <memory>
#include <vector>

#include "scripted_backend.h"
#include "upstream/upstream_pool.h"

namespace fencing {
namespace {

namespace asio = boost::asio;
using tcp = asio::ip::tcp;
using std::chrono::milliseconds;
using Conn = ScriptedBackend::Conn;

struct Acquired {
  std::unique_ptr<UpstreamConnection> connection;
  boost::system::error_code ec;
};

Acquired RunAcquire(asio::io_context& ioc, UpstreamPool& pool, bool fresh = false) {
  Acquired out;
  bool finished = false;
  auto op = fresh ? pool.Connect(out.ec) : pool.Acquire(out.ec);
  asio::co_spawn(ioc.get_executor(), std::move(op), [&](std::exception_ptr, std::unique_ptr<UpstreamConnection> c) {
    out.connection = std::move(c);
    finished = true;
  });
  ioc.restart();
  ioc.run_for(std::chrono::seconds(2));
  EXPECT_TRUE(finished);
  return out;
}

uint16_t LocalPort(const UpstreamConnection& c) { return c.socket.local_endpoint().port(); }

class UpstreamPoolTest : public ::testing::Test {
 protected:
  explicit UpstreamPoolTest(size_t max_idle = 8)
      : backend_([](Conn& c) { c.Hold(); }), pool_(ioc_, {backend_.endpoint()}, milliseconds(1000), max_idle) {}

  Acquired Acquire() { return RunAcquire(ioc_, pool_); }

  // Closes the backend's side of `c` and waits until its FIN has arrived.
  void CloseFromBackend(const UpstreamConnection& c) {
    backend_.CloseConnection(LocalPort(c));
    ASSERT_TRUE(WaitForPeerClose(const_cast<UpstreamConnection&>(c).socket.native_handle()));
  }

  ScriptedBackend backend_;
  asio::io_context ioc_;
  UpstreamPool pool_;
};

TEST_F(UpstreamPoolTest, AcquireReusesAReleasedConnection) {
  Acquired first = Acquire();
  ASSERT_TRUE(first.connection) << first.ec.message();
  EXPECT_FALSE(first.connection->reused);
  const uint16_t port = LocalPort(*first.connection);
  pool_.Release(std::move(first.connection));
  EXPECT_EQ(pool_.idle_count(), 1u);

  Acquired second = Acquire();
  ASSERT_TRUE(second.connection);
  EXPECT_TRUE(second.connection->reused);
  EXPECT_EQ(LocalPort(*second.connection), port);
  EXPECT_EQ(pool_.idle_count(), 0u);
  EXPECT_EQ(backend_.WaitForConnections(1), 1u);
}

TEST_F(UpstreamPoolTest, ConnectNeverTakesAPooledConnection) {
  Acquired first = Acquire();
  ASSERT_TRUE(first.connection);
  pool_.Release(std::move(first.connection));
  Acquired fresh = RunAcquire(ioc_, pool_, /*fresh=*/true);
  ASSERT_TRUE(fresh.connection);
  EXPECT_FALSE(fresh.connection->reused);
  EXPECT_EQ(pool_.idle_count(), 1u);
}

TEST_F(UpstreamPoolTest, AcquireSkipsConnectionsTheBackendClosed) {
  Acquired a = Acquire();
  Acquired b = Acquire();
  ASSERT_TRUE(a.connection && b.connection);
  const uint16_t a_port = LocalPort(*a.connection);
  CloseFromBackend(*b.connection);
  pool_.Release(std::move(a.connection));
  pool_.Release(std::move(b.connection));  // the most recently used: tried first
  ASSERT_EQ(pool_.idle_count(), 2u);

  Acquired got = Acquire();
  ASSERT_TRUE(got.connection) << got.ec.message();
  EXPECT_TRUE(got.connection->reused);
  EXPECT_EQ(LocalPort(*got.connection), a_port) << "the closed one was dropped, the open one taken";
  EXPECT_EQ(pool_.idle_count(), 0u);
}

TEST_F(UpstreamPoolTest, AcquireConnectsWhenEveryPooledOneIsClosed) {
  Acquired a = Acquire();
  ASSERT_TRUE(a.connection);
  CloseFromBackend(*a.connection);
  pool_.Release(std::move(a.connection));
  Acquired got = Acquire();
  ASSERT_TRUE(got.connection) << got.ec.message();
  EXPECT_FALSE(got.connection->reused);
  EXPECT_EQ(backend_.WaitForConnections(2), 2u);
}

TEST_F(UpstreamPoolTest, ReleaseDropsAConnectionWithUnreadBytes) {
  Acquired a = Acquire();
  ASSERT_TRUE(a.connection);
  // Bytes left over from the last response: the connection is out of step with the backend.
  auto room = a.connection->buffer.prepare(4);
  asio::buffer_copy(room, asio::buffer("junk", 4));
  a.connection->buffer.commit(4);
  pool_.Release(std::move(a.connection));
  EXPECT_EQ(pool_.idle_count(), 0u);
}

// A backend that writes to a connection idle in the pool (the rest of a response that said more
// than its framing, an unsolicited response, a stray CRLF) has put it out of step: the next request
// would read those bytes as its answer. Such a connection is never given out, watched or not.
TEST(UpstreamPoolStrayBytesTest, AcquireNeverTakesAConnectionThatReceivedBytesWhileIdle) {
  std::atomic<bool> spoke{false};
  ScriptedBackend backend([&](Conn& c) {
    c.ReadRequest();  // the acquire below writes one request, then the connection idles
    spoke = true;  // (before the write: the test sees the bytes as soon as they are sent)
    c.Write("HTTP/1.1 200 OK\r\nContent-Length: 6\r\n\r\nPOISON");
    c.Hold();
  });
  asio::io_context ioc;
  UpstreamPool pool(ioc, {backend.endpoint()}, milliseconds(1000), 8);
  Acquired a = RunAcquire(ioc, pool);
  ASSERT_TRUE(a.connection);
  const uint16_t port = LocalPort(*a.connection);
  const int fd = a.connection->socket.native_handle();
  constexpr std::string_view kGet = "GET / HTTP/1.1\r\nHost: b\r\n\r\n";
  ASSERT_EQ(::send(fd, kGet.data(), kGet.size(), MSG_NOSIGNAL), static_cast<ssize_t>(kGet.size()));
  pool.Release(std::move(a.connection));  // as if its (empty) response had ended cleanly
  ASSERT_EQ(pool.idle_count(), 1u);
  pollfd p{fd, POLLIN, 0};
  ASSERT_EQ(::poll(&p, 1, 2000), 1) << "the stray response arrived while the connection idled";
  ASSERT_TRUE(spoke);

  Acquired got = RunAcquire(ioc, pool);
  ASSERT_TRUE(got.connection) << got.ec.message();
  EXPECT_NE(LocalPort(*got.connection), port) << "the connection that spoke was given out";
  EXPECT_FALSE(got.connection->reused);
  EXPECT_EQ(pool.idle_count(), 0u);
  EXPECT_EQ(backend.WaitForConnections(2), 2u);
}

TEST_F(UpstreamPoolTest, ReleaseDropsAClosedSocket) {
  Acquired a = Acquire();
  ASSERT_TRUE(a.connection);
  a.connection->socket.close();
  pool_.Release(std::move(a.connection));
  EXPECT_EQ(pool_.idle_count(), 0u);
}

class UpstreamPoolSmall : public UpstreamPoolTest {
 protected:
  UpstreamPoolSmall() : UpstreamPoolTest(2) {}
};

TEST_F(UpstreamPoolSmall, TheLeastRecentlyUsedGoesOverTheCap) {
  Acquired a = Acquire();
  Acquired b = Acquire();
  Acquired c = Acquire();
  ASSERT_TRUE(a.connection && b.connection && c.connection);
  const uint16_t b_port = LocalPort(*b.connection);
  const uint16_t c_port = LocalPort(*c.connection);
  pool_.Release(std::move(a.connection));
  pool_.Release(std::move(b.connection));
  pool_.Release(std::move(c.connection));
  EXPECT_EQ(pool_.idle_count(), 2u);

  Acquired first = Acquire();
  Acquired second = Acquire();
  Acquired third = Acquire();
  ASSERT_TRUE(first.connection && second.connection && third.connection);
  EXPECT_EQ(LocalPort(*first.connection), c_port) << "most recently used first";
  EXPECT_EQ(LocalPort(*second.connection), b_port);
  EXPECT_TRUE(second.connection->reused);
  EXPECT_FALSE(third.connection->reused) << "a was dropped: a new connection";
  EXPECT_EQ(backend_.WaitForConnections(4), 4u);
}

// Runs the io_context until the pool holds `count` idle connections, or `limit` has passed.
bool RunUntilIdle(asio::io_context& ioc, UpstreamPool& pool, size_t count, milliseconds limit) {
  const auto end = std::chrono::steady_clock::now() + limit;
  ioc.restart();
  while (pool.idle_count() != count && std::chrono::steady_clock::now() < end) {
    ioc.run_for(milliseconds(10));
    ioc.restart();
  }
  return pool.idle_count() == count;
}

TEST_F(UpstreamPoolTest, SweepWatchDropsAnIdleConnectionTheBackendClosed) {
  Acquired a = Acquire();
  Acquired b = Acquire();
  ASSERT_TRUE(a.connection && b.connection);
  const uint16_t b_port = LocalPort(*b.connection);
  UpstreamConnection& a_ref = *a.connection;
  pool_.Release(std::move(a.connection));
  pool_.Release(std::move(b.connection));
  pool_.Sweep(std::chrono::steady_clock::now(), milliseconds(0));
  backend_.CloseConnection(LocalPort(a_ref));
  EXPECT_TRUE(RunUntilIdle(ioc_, pool_, 1, milliseconds(1500))) << "the closed connection is dropped";
  // The silent one stays, and acquiring it ends its watch.
  ioc_.run_for(milliseconds(30));
  EXPECT_EQ(pool_.idle_count(), 1u);
  Acquired got = Acquire();
  ASSERT_TRUE(got.connection);
  EXPECT_EQ(LocalPort(*got.connection), b_port);
  EXPECT_TRUE(got.connection->reused);
  EXPECT_EQ(pool_.idle_count(), 0u);
}

TEST_F(UpstreamPoolTest, SweepWatchesOnlyConnectionsIdleLongEnough) {
  Acquired a = Acquire();
  ASSERT_TRUE(a.connection);
  UpstreamConnection& a_ref = *a.connection;
  pool_.Release(std::move(a.connection));
  pool_.Sweep(std::chrono::steady_clock::now(), std::chrono::hours(1));
  CloseFromBackend(a_ref);
  ioc_.restart();
  ioc_.run_for(milliseconds(30));
  EXPECT_EQ(pool_.idle_count(), 1u) << "not watched yet: only the next check would find it closed";
}

TEST(UpstreamPoolConnectTest, RefusedIsReportedAsRefused) {
  // A port nobody listens on: bound and closed again.
  asio::io_context ioc;
  tcp::acceptor probe(ioc, tcp::endpoint(asio::ip::make_address_v4("127.0.0.1"), 0));
  tcp::endpoint endpoint = probe.local_endpoint();
  probe.close();
  UpstreamPool pool(ioc, {endpoint}, milliseconds(1000), 8);
  Acquired got = RunAcquire(ioc, pool);
  EXPECT_FALSE(got.connection);
  EXPECT_EQ(got.ec, asio::error::connection_refused) << got.ec.message();
}

TEST(UpstreamPoolConnectTest, ConnectTimeoutIsReportedAsTimedOut) {
  // A listener that never accepts, with its backlog full: a further SYN is dropped, so the
  // connect hangs until the pool's timeout.
  int listener = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  ASSERT_EQ(::bind(listener, reinterpret_cast<sockaddr*>(&addr), sizeof addr), 0);
  ASSERT_EQ(::listen(listener, 0), 0);
  socklen_t len = sizeof addr;
  ::getsockname(listener, reinterpret_cast<sockaddr*>(&addr), &len);
  std::vector<int> fillers;
  bool hung = false;
  for (int i = 0; i < 8 && !hung; ++i) {
    int fd = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0);
    fillers.push_back(fd);
    ::connect(fd, reinterpret_cast<sockaddr*>(&addr), sizeof addr);
    pollfd p{fd, POLLOUT, 0};
    hung = ::poll(&p, 1, 100) == 0;  // still connecting: the backlog is full
  }
  if (hung) {
    asio::io_context ioc;
    UpstreamPool pool(ioc, {tcp::endpoint(asio::ip::make_address_v4("127.0.0.1"), ntohs(addr.sin_port))},
                      milliseconds(100), 8);
    const auto started = std::chrono::steady_clock::now();
    Acquired got = RunAcquire(ioc, pool);
    const auto took = std::chrono::steady_clock::now() - started;
    EXPECT_FALSE(got.connection);
    EXPECT_EQ(got.ec, asio::error::timed_out) << got.ec.message();
    EXPECT_GE(took, milliseconds(90));
    EXPECT_LT(took, milliseconds(900));
  }
  for (int fd : fillers) ::close(fd);
  ::close(listener);
  if (!hung) GTEST_SKIP() << "this kernel completed every connect to a full backlog";
}

}  // namespace
}  // namespace fencing
