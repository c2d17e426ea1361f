// UpstreamPool with an https backend, against a real TLS server on 127.0.0.1: the handshake is
// part of the connect (verified chain and name, bounded by the connect timeout, counted), a failed
// one is a TLS failure with nothing written, a TLS connection is pooled and reused like a plain
// one, and never pooled while its TLS layer holds something the backend sent after the response
// (stray bytes, a close_notify), which a peek at the socket cannot see.

#include <gtest/gtest.h>

#include <boost/asio/co_spawn.hpp>
#include <boost/asio/write.hpp>

#include <array>
#include <chrono>
#include <memory>
#include <string>

#include "scripted_backend.h"
#include "test_certificates.h"
#include "tls/client_context.h"
#include "tls/handshake.h"
#include "upstream/tls_backend.h"
#include "upstream/upstream_pool.h"

// TlsSettings and TlsBackend::Answer are written with designated initializers, naming only what
// a test sets; GCC warns about the members left to their defaults even so.
#pragma GCC diagnostic ignored "-Wmissing-field-initializers"

namespace fencing {
namespace {

namespace asio = boost::asio;
using std::chrono::milliseconds;

constexpr std::string_view kGet = "GET / HTTP/1.1\r\nHost: b\r\n\r\n";
const std::string kOk = "HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nok";

struct Acquired {
  std::unique_ptr<UpstreamConnection> connection;
  boost::system::error_code ec;
};

Acquired RunAcquire(asio::io_context& ioc, UpstreamPool& pool) {
  Acquired out;
  bool finished = false;
  asio::co_spawn(ioc.get_executor(), pool.Acquire(out.ec),
                 [&](std::exception_ptr, std::unique_ptr<UpstreamConnection> c) {
                   out.connection = std::move(c);
                   finished = true;
                 });
  ioc.restart();
  ioc.run_for(std::chrono::seconds(3));
  EXPECT_TRUE(finished);
  return out;
}

struct CountingObserver final : HandshakeObserver {
  mutable std::array<int, kHandshakeResults> counts{};
  void Handshake(HandshakeResult result) const override { ++counts[static_cast<size_t>(result)]; }
  int operator[](HandshakeResult r) const { return counts[static_cast<size_t>(r)]; }
};

class UpstreamTlsTest : public ::testing::Test {
 protected:
  void SetUp() override {
    std::string error;
    ASSERT_TRUE(certs_.Make(&error)) << error;
  }

  std::shared_ptr<TlsClientContext> Client(TlsSettings settings, std::string_view host = "127.0.0.1") {
    TlsLoadError error;
    auto tls = TlsClientContext::Make(settings, host, &error);
    EXPECT_TRUE(tls) << error.key << ": " << error.message;
    return tls;
  }
  std::shared_ptr<TlsClientContext> TrustingClient() { return Client({.ca_file = certs_.ca}); }

  std::unique_ptr<UpstreamPool> Pool(const boost::asio::ip::tcp::endpoint& endpoint,
                                     std::shared_ptr<TlsClientContext> tls, milliseconds timeout = milliseconds(2000)) {
    auto pool = std::make_unique<UpstreamPool>(ioc_, std::vector{endpoint}, timeout, 8, &observer_);
    pool->SetTls(std::move(tls));
    return pool;
  }

  // One request on the connection, its response read with one TLS read once the backend has
  // sent everything it answers with: the response's record only, as an exchange would read it.
  std::string Exchange(UpstreamConnection& c, TlsBackend& backend, size_t nth) {
    asio::write(*c.tls, asio::buffer(kGet));
    EXPECT_TRUE(backend.WaitAnswered(nth));
    std::array<char, 4096> buf;
    const size_t n = c.tls->read_some(asio::buffer(buf));
    return std::string(buf.data(), n);
  }

  TestCertificates certs_;
  asio::io_context ioc_;
  CountingObserver observer_;
};

TEST_F(UpstreamTlsTest, AVerifiedConnectionIsPooledAndReused) {
  TlsBackend backend(certs_.server, certs_.server_key, [](size_t) { return TlsBackend::Answer{kOk}; });
  auto pool = Pool(backend.endpoint(), TrustingClient());
  Acquired a = RunAcquire(ioc_, *pool);
  ASSERT_TRUE(a.connection) << a.ec.message();
  ASSERT_TRUE(a.connection->tls);
  EXPECT_FALSE(a.connection->reused);
  EXPECT_EQ(Exchange(*a.connection, backend, 1), kOk);
  pool->Release(std::move(a.connection));
  EXPECT_EQ(pool->idle_count(), 1u);

  Acquired b = RunAcquire(ioc_, *pool);
  ASSERT_TRUE(b.connection);
  EXPECT_TRUE(b.connection->reused);
  EXPECT_EQ(Exchange(*b.connection, backend, 2), kOk);
  EXPECT_EQ(backend.handshakes(), 1u) << "one handshake for both requests";
  EXPECT_EQ(observer_[HandshakeResult::kSuccess], 1);
}

TEST_F(UpstreamTlsTest, TheServerNameIsCheckedAsADnsName) {
  TlsBackend backend(certs_.server, certs_.server_key, [](size_t) { return TlsBackend::Answer{kOk}; });
  auto pool = Pool(backend.endpoint(), Client({.ca_file = certs_.ca, .server_name = "localhost"}));
  Acquired a = RunAcquire(ioc_, *pool);
  ASSERT_TRUE(a.connection) << a.ec.message();
  EXPECT_EQ(Exchange(*a.connection, backend, 1), kOk);
}

// Records held in the TLS layer (read off the socket with the response's) are not visible to a
// peek at the socket: without the check of the TLS layer, these connections would be pooled.
TEST_F(UpstreamTlsTest, ReleaseDropsAConnectionWhoseTlsLayerHoldsStrayBytes) {
  TlsBackend backend(certs_.server, certs_.server_key,
                     [](size_t) { return TlsBackend::Answer{kOk, "HTTP/1.1 200 OK\r\nContent-Length: 6\r\n\r\nPOISON"}; });
  auto pool = Pool(backend.endpoint(), TrustingClient());
  Acquired a = RunAcquire(ioc_, *pool);
  ASSERT_TRUE(a.connection) << a.ec.message();
  ASSERT_EQ(Exchange(*a.connection, backend, 1), kOk);
  pollfd p{a.connection->socket.native_handle(), POLLIN, 0};
  ASSERT_EQ(::poll(&p, 1, 0), 0) << "the stray record was read off the socket with the response's";
  pool->Release(std::move(a.connection));
  EXPECT_EQ(pool->idle_count(), 0u);
}

TEST_F(UpstreamTlsTest, ReleaseDropsAConnectionWithAPendingCloseNotify) {
  TlsBackend backend(certs_.server, certs_.server_key,
                     [](size_t) { return TlsBackend::Answer{kOk, "", /*close_notify=*/true}; });
  auto pool = Pool(backend.endpoint(), TrustingClient());
  Acquired a = RunAcquire(ioc_, *pool);
  ASSERT_TRUE(a.connection) << a.ec.message();
  ASSERT_EQ(Exchange(*a.connection, backend, 1), kOk);
  pool->Release(std::move(a.connection));
  EXPECT_EQ(pool->idle_count(), 0u);
}

TEST_F(UpstreamTlsTest, AnUnknownCaFailsTheHandshakeBeforeAnyByteIsSent) {
  TlsBackend backend(certs_.server, certs_.server_key, [](size_t) { return TlsBackend::Answer{kOk}; });
  auto pool = Pool(backend.endpoint(), Client({.ca_file = certs_.other_ca}));
  Acquired a = RunAcquire(ioc_, *pool);
  EXPECT_FALSE(a.connection);
  EXPECT_TRUE(IsTlsFailure(a.ec)) << a.ec.message();
  EXPECT_EQ(ResultOf(a.ec), HandshakeResult::kCertificate);
  EXPECT_NE(a.ec.message().find("certificate verify failed"), std::string::npos) << a.ec.message();
  EXPECT_TRUE(backend.WaitFailedHandshakes(1));
  EXPECT_EQ(backend.handshakes(), 0u);
  EXPECT_EQ(backend.received(), "");
  EXPECT_EQ(observer_[HandshakeResult::kCertificate], 1);
}

TEST_F(UpstreamTlsTest, AnotherNameFailsTheHandshake) {
  TlsBackend backend(certs_.server, certs_.server_key, [](size_t) { return TlsBackend::Answer{kOk}; });
  auto pool = Pool(backend.endpoint(), Client({.ca_file = certs_.ca, .server_name = "db.elsewhere.test"}));
  Acquired a = RunAcquire(ioc_, *pool);
  EXPECT_FALSE(a.connection);
  EXPECT_EQ(ResultOf(a.ec), HandshakeResult::kCertificate) << a.ec.message();
  EXPECT_NE(a.ec.message().find("hostname mismatch"), std::string::npos) << a.ec.message();
  EXPECT_TRUE(backend.WaitFailedHandshakes(1));
  EXPECT_EQ(backend.received(), "");
}

// The default name is the backend's host: an address, checked against the IP SANs.
TEST_F(UpstreamTlsTest, AnAddressMustBeAnIpSan) {
  TlsBackend backend(certs_.server, certs_.server_key, [](size_t) { return TlsBackend::Answer{kOk}; });
  auto pool = Pool(backend.endpoint(), Client({.ca_file = certs_.ca}, "127.0.0.2"));
  Acquired a = RunAcquire(ioc_, *pool);
  EXPECT_FALSE(a.connection);
  EXPECT_EQ(ResultOf(a.ec), HandshakeResult::kCertificate) << a.ec.message();
}

TEST_F(UpstreamTlsTest, TheSystemTrustStoreRefusesAPrivateCa) {
  TlsBackend backend(certs_.server, certs_.server_key, [](size_t) { return TlsBackend::Answer{kOk}; });
  auto pool = Pool(backend.endpoint(), Client({}));
  Acquired a = RunAcquire(ioc_, *pool);
  EXPECT_FALSE(a.connection);
  EXPECT_EQ(ResultOf(a.ec), HandshakeResult::kCertificate) << a.ec.message();
}

TEST_F(UpstreamTlsTest, AClientCertificateIsPresentedWhenConfigured) {
  TlsBackend backend(certs_.server, certs_.server_key, [](size_t) { return TlsBackend::Answer{kOk}; }, certs_.ca);
  auto pool = Pool(backend.endpoint(),
                   Client({.ca_file = certs_.ca, .cert_file = certs_.client, .key_file = certs_.client_key}));
  Acquired a = RunAcquire(ioc_, *pool);
  ASSERT_TRUE(a.connection) << a.ec.message();
  EXPECT_EQ(Exchange(*a.connection, backend, 1), kOk);
  EXPECT_EQ(backend.handshakes(), 1u);
}

// A backend that is not TLS at all: OpenSSL's own reason, a TLS failure.
TEST_F(UpstreamTlsTest, APlainHttpBackendFailsTheHandshake) {
  ScriptedBackend plain([](ScriptedBackend::Conn& c) {
    c.Write("HTTP/1.1 400 Bad Request\r\nContent-Length: 0\r\n\r\n");
    c.Hold();
  });
  auto pool = Pool(plain.endpoint(), TrustingClient());
  Acquired a = RunAcquire(ioc_, *pool);
  EXPECT_FALSE(a.connection);
  EXPECT_TRUE(IsTlsFailure(a.ec)) << a.ec.message();
  EXPECT_EQ(ResultOf(a.ec), HandshakeResult::kError) << a.ec.message();
}

// A backend that accepts the connection and never answers the ClientHello: bounded by the connect
// timeout, reported as the handshake's.
TEST_F(UpstreamTlsTest, AStalledHandshakeEndsAtTheConnectTimeout) {
  ScriptedBackend silent([](ScriptedBackend::Conn& c) { c.Hold(); });
  auto pool = Pool(silent.endpoint(), TrustingClient(), milliseconds(200));
  const auto started = std::chrono::steady_clock::now();
  Acquired a = RunAcquire(ioc_, *pool);
  const auto took = std::chrono::steady_clock::now() - started;
  EXPECT_FALSE(a.connection);
  EXPECT_TRUE(IsTlsFailure(a.ec)) << a.ec.message();
  EXPECT_EQ(ResultOf(a.ec), HandshakeResult::kTimeout) << a.ec.message();
  EXPECT_GE(took, milliseconds(190));
  EXPECT_LT(took, milliseconds(1500));
  EXPECT_EQ(observer_[HandshakeResult::kTimeout], 1);
}

// New settings (a reload): connections made with the old ones are not used again.
TEST_F(UpstreamTlsTest, NewSettingsCloseConnectionsMadeWithTheOldOnes) {
  TlsBackend backend(certs_.server, certs_.server_key, [](size_t) { return TlsBackend::Answer{kOk}; });
  auto pool = Pool(backend.endpoint(), TrustingClient());
  Acquired idle = RunAcquire(ioc_, *pool);
  Acquired busy = RunAcquire(ioc_, *pool);
  ASSERT_TRUE(idle.connection && busy.connection);
  ASSERT_EQ(Exchange(*idle.connection, backend, 1), kOk);
  ASSERT_EQ(Exchange(*busy.connection, backend, 2), kOk);
  pool->Release(std::move(idle.connection));
  ASSERT_EQ(pool->idle_count(), 1u);

  pool->SetTls(TrustingClient());
  EXPECT_EQ(pool->idle_count(), 0u) << "the idle one is closed at once";
  pool->Release(std::move(busy.connection));
  EXPECT_EQ(pool->idle_count(), 0u) << "the busy one when it comes back";
  Acquired fresh = RunAcquire(ioc_, *pool);
  ASSERT_TRUE(fresh.connection) << fresh.ec.message();
  EXPECT_FALSE(fresh.connection->reused);
  EXPECT_TRUE(backend.WaitHandshakes(3));  // the server's side ends after the client's
}

// What does not load is named by its key and file.
TEST_F(UpstreamTlsTest, FilesThatDoNotLoadAreNamed) {
  TlsLoadError error;
  EXPECT_FALSE(TlsClientContext::Make({.ca_file = certs_.dir + "/missing.pem"}, "h", &error));
  EXPECT_EQ(error.key, "ca_file");
  EXPECT_NE(error.message.find("missing.pem: No such file or directory"), std::string::npos) << error.message;

  EXPECT_FALSE(TlsClientContext::Make({.ca_file = certs_.server_key}, "h", &error));  // a key, not a CA
  EXPECT_EQ(error.key, "ca_file") << error.message;

  EXPECT_FALSE(TlsClientContext::Make({.cert_file = certs_.client, .key_file = certs_.server_key}, "h", &error));
  EXPECT_EQ(error.key, "key_file");
  EXPECT_NE(error.message.find("key values mismatch"), std::string::npos) << error.message;

  EXPECT_FALSE(TlsClientContext::Make({.cert_file = certs_.ca_key, .key_file = certs_.client_key}, "h", &error));
  EXPECT_EQ(error.key, "cert_file") << error.message;
}

}  // namespace
}  // namespace fencing
