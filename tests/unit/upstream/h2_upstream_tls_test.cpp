// H2Upstream over TLS (backend_protocol: h2), against a TLS HTTP/2 backend in the test: a
// loopback listener whose connections are Asio TLS streams driven by the server side of the same
// codec (h2/connection.h), with certificates made at test time (test_certificates.h). A verified
// connection on which the server selected h2 carries streams; a chain or name that does not
// verify, a server that ignores ALPN and one that answers http/1.1 each fail the Open as a TLS
// failure, and the backend reads not one byte of application data; a refused client certificate
// and a close before the backend's first frame are TLS failures too; a stalled handshake ends at
// the connect timeout; new settings (a reload) apply to new connections while a stream on an old
// one finishes there.

#include <gtest/gtest.h>

#include "h2/connection.h"
#include "test_certificates.h"
#include "tls/client_context.h"
#include "tls/handshake.h"
#include "upstream/h2_answer.h"
#include "upstream/h2_upstream.h"

#include <boost/asio/co_spawn.hpp>
#include <boost/asio/detached.hpp>
#include <boost/asio/io_context.hpp>
#include <boost/asio/ssl/stream.hpp>
#include <boost/asio/write.hpp>

#include <openssl/ssl.h>

#include <array>
#include <chrono>
#include <cstring>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <vector>

// TlsSettings is written with designated initializers, naming only what a test sets; GCC warns
// about the members left to their defaults even so.
#pragma GCC diagnostic ignored "-Wmissing-field-initializers"

namespace fencing {
namespace {

namespace asio = boost::asio;
namespace ssl = asio::ssl;
using asio::ip::tcp;
using boost::system::error_code;
using io::kTuple;

// What the backend does after its handshake.
enum class Then {
  kServe,        // HTTP/2
  kCloseNotify,  // a close_notify, nothing else (the socket stays open until the client closes)
};

// What the backend does with the client's ALPN offer.
enum class Alpn {
  kH2,          // selects h2 when offered (an HTTP/2 server)
  kIgnore,      // has no ALPN at all: the handshake completes with nothing selected
  kHttp11,      // answers http/1.1 whatever was offered (an HTTP/1.1 server that insists)
};

int SelectAlpn(SSL*, const unsigned char** out, unsigned char* outlen, const unsigned char* in, unsigned int inlen,
               void* arg) {
  static constexpr unsigned char kH2[] = {'h', '2'};
  static constexpr unsigned char kHttp11[] = {'h', 't', 't', 'p', '/', '1', '.', '1'};
  if (*static_cast<const Alpn*>(arg) == Alpn::kHttp11) {
    *out = kHttp11;
    *outlen = sizeof kHttp11;
    return SSL_TLSEXT_ERR_OK;
  }
  for (unsigned int i = 0; i < inlen; i += 1u + in[i]) {
    if (in[i] == 2 && i + 3 <= inlen && std::memcmp(in + i + 1, "h2", 2) == 0) {
      *out = kH2;
      *outlen = sizeof kH2;
      return SSL_TLSEXT_ERR_OK;
    }
  }
  return SSL_TLSEXT_ERR_NOACK;
}

// The backend: TLS with the test server certificate (127.0.0.1, localhost), then HTTP/2 as the
// h2c test backend speaks it: each request, once its side has ended, gets 200, the body
// "echo:<path>:<scheme>:<the request body>" and trailers grpc-status 0. It keeps every byte of
// application data it read, and counts handshakes and connections that ended.
class TlsH2Backend {
 public:
  // client_ca: non-empty asks every client for a certificate signed by it (and refuses others).
  TlsH2Backend(asio::io_context& context, const TestCertificates& certs, Alpn alpn, Then then = Then::kServe,
               const std::string& client_ca = "")
      : acceptor_(context, tcp::endpoint(asio::ip::make_address("127.0.0.1"), 0)),
        tls_(ssl::context::tls_server),
        alpn_(alpn),
        then_(then) {
    tls_.use_certificate_chain_file(certs.server);
    tls_.use_private_key_file(certs.server_key, ssl::context::pem);
    if (!client_ca.empty()) {
      tls_.load_verify_file(client_ca);
      tls_.set_verify_mode(ssl::verify_peer | ssl::verify_fail_if_no_peer_cert);
    }
    if (alpn_ != Alpn::kIgnore) SSL_CTX_set_alpn_select_cb(tls_.native_handle(), SelectAlpn, &alpn_);
    asio::co_spawn(context, Accept(), asio::detached);
  }
  tcp::endpoint endpoint() const { return acceptor_.local_endpoint(); }
  int accepted = 0, handshakes = 0, failed_handshakes = 0, ended = 0;
  std::string received;  // application data, over every connection
  void Stop() {
    error_code ignored;
    acceptor_.close(ignored);
    for (auto& socket : sockets_) socket->close(ignored);
  }

 private:
  io::Awaitable<void> Accept() {
    for (;;) {
      auto socket = std::make_shared<io::Socket>(acceptor_.get_executor());
      auto [ec] = co_await acceptor_.async_accept(*socket, kTuple);
      if (ec) co_return;
      ++accepted;
      sockets_.push_back(socket);
      asio::co_spawn(acceptor_.get_executor(), Serve(socket), asio::detached);
    }
  }

  io::Awaitable<void> Serve(std::shared_ptr<io::Socket> socket) {
    ssl::stream<io::Socket&> stream(*socket, tls_);
    auto [hec] = co_await stream.async_handshake(ssl::stream_base::server, kTuple);
    if (hec) {
      ++failed_handshakes;
      ++ended;
      co_return;
    }
    ++handshakes;
    if (then_ == Then::kCloseNotify) {
      co_await stream.async_shutdown(kTuple);  // sends close_notify; done when the client closes
    } else {
      co_await Exchange(stream);
    }
    ++ended;
  }

  io::Awaitable<void> Exchange(ssl::stream<io::Socket&>& stream) {
    h2::Connection codec(h2::Role::kServer, h2::Settings{});
    struct Request {
      std::string path, scheme, body;
    };
    std::map<int32_t, Request> requests;
    std::vector<uint8_t> buffer(16384);
    std::string out;
    for (;;) {
      while (codec.WantWrite()) {
        out.clear();
        codec.TakeOutput(&out);
        auto [wec, wn] = co_await asio::async_write(stream, asio::buffer(out), kTuple);
        if (wec) co_return;
      }
      auto [ec, n] = co_await stream.async_read_some(asio::buffer(buffer), kTuple);
      if (ec) co_return;
      received.append(reinterpret_cast<const char*>(buffer.data()), n);
      if (!codec.Receive(buffer.data(), n).ok()) co_return;
      h2::Event event;
      while (codec.NextEvent(&event)) {
        if (event.kind == h2::Event::Kind::kHead) {
          for (const h2::Header& field : event.fields) {
            if (field.name == ":path") requests[event.stream].path = field.value;
            if (field.name == ":scheme") requests[event.stream].scheme = field.value;
          }
        } else if (event.kind == h2::Event::Kind::kData) {
          requests[event.stream].body.append(event.data);
          codec.Consume(event.stream, event.data.size());
        } else if (event.kind == h2::Event::Kind::kEnd) {
          const Request& request = requests[event.stream];
          const h2::Headers head{{":status", "200"}, {"content-type", "application/grpc"}};
          codec.SubmitResponse(event.stream, head, false);
          codec.SubmitData(event.stream, "echo:" + request.path + ":" + request.scheme + ":" + request.body, false);
          const h2::Headers trailers{{"grpc-status", "0"}};
          codec.SubmitTrailers(event.stream, trailers);
        }
      }
    }
  }

  io::Acceptor acceptor_;
  ssl::context tls_;
  Alpn alpn_;
  Then then_;
  std::vector<std::shared_ptr<io::Socket>> sockets_;
};

h2::Headers Request(const std::string& path) {
  return {{":method", "POST"}, {":scheme", "https"}, {":authority", "backend"}, {":path", path},
          {"content-type", "application/grpc"}};
}

struct CountingObserver final : HandshakeObserver {
  mutable std::array<int, kHandshakeResults> counts{};
  void Handshake(HandshakeResult result) const override { ++counts[static_cast<size_t>(result)]; }
  int operator[](HandshakeResult r) const { return counts[static_cast<size_t>(r)]; }
};

class H2UpstreamTlsTest : public testing::Test {
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
  std::shared_ptr<TlsClientContext> Trusting() { return Client({.ca_file = certs_.ca}); }

  std::unique_ptr<H2Upstream> Upstream(const tcp::endpoint& endpoint, std::shared_ptr<TlsClientContext> tls,
                                       std::chrono::milliseconds timeout = std::chrono::seconds(2)) {
    auto upstream = std::make_unique<H2Upstream>(context_.get_executor(), std::vector{endpoint}, timeout,
                                                 h2::Settings{}, &observer_);
    upstream->SetTls(std::move(tls));
    return upstream;
  }

  // Runs `body` to its end, or fails the test after a bound (a hang, not a wait: done in ms).
  void Run(std::function<io::Awaitable<void>()> body) {
    bool done = false;
    asio::co_spawn(context_, [&]() -> io::Awaitable<void> {
      co_await body();
      done = true;
    }, asio::detached);
    RunUntil([&] { return done; }, "the test's coroutine to finish");
  }

  // Runs the context until `ready` holds, or fails the test after a bound.
  void RunUntil(const std::function<bool()>& ready, const std::string& what) {
    const auto end = std::chrono::steady_clock::now() + std::chrono::seconds(20);
    while (!ready() && std::chrono::steady_clock::now() < end) context_.run_one_for(std::chrono::milliseconds(100));
    ASSERT_TRUE(ready()) << "waited in vain for " << what;
  }

  // Opens one stream that must fail; returns its error.
  error_code OpenFails(H2Upstream& upstream) {
    error_code failure;
    Run([&]() -> io::Awaitable<void> {
      error_code ec;
      auto stream = co_await upstream.Open(Request("/svc/Put"), true, ec);
      EXPECT_FALSE(stream) << "a stream on a connection that must not be used";
      failure = ec;
    });
    return failure;
  }

  asio::io_context context_;
  TestCertificates certs_;
  CountingObserver observer_;
};

TEST_F(H2UpstreamTlsTest, AVerifiedConnectionThatSelectedH2CarriesStreams) {
  TlsH2Backend backend(context_, certs_, Alpn::kH2);
  auto upstream = Upstream(backend.endpoint(), Trusting());
  std::vector<Answer> answers;
  Run([&]() -> io::Awaitable<void> {
    std::vector<std::shared_ptr<H2Upstream::Stream>> streams;
    for (int i = 0; i < 2; ++i) {
      error_code ec;
      auto stream = co_await upstream->Open(Request("/svc/Put" + std::to_string(i)), false, ec);
      EXPECT_FALSE(ec) << ec.message();
      if (!stream) co_return;
      streams.push_back(stream);
    }
    for (size_t i = 0; i < streams.size(); ++i) {
      EXPECT_TRUE(upstream->Send(*streams[i], "body" + std::to_string(i), true));
    }
    for (auto& stream : streams) answers.push_back(co_await Collect(*upstream, *stream));
  });
  ASSERT_EQ(answers.size(), 2u);
  for (size_t i = 0; i < answers.size(); ++i) {
    SCOPED_TRACE(i);
    EXPECT_EQ(answers[i].status, "200");
    EXPECT_EQ(answers[i].body, "echo:/svc/Put" + std::to_string(i) + ":https:body" + std::to_string(i));
    EXPECT_EQ(answers[i].grpc_status, "0");
    EXPECT_TRUE(answers[i].ended);
  }
  EXPECT_EQ(backend.handshakes, 1) << "both streams on one TLS connection";
  EXPECT_EQ(upstream->connections(), 1u);
  EXPECT_EQ(observer_[HandshakeResult::kSuccess], 1);
  backend.Stop();
}

TEST_F(H2UpstreamTlsTest, TheServerNameIsCheckedAsADnsName) {
  TlsH2Backend backend(context_, certs_, Alpn::kH2);
  auto upstream = Upstream(backend.endpoint(), Client({.ca_file = certs_.ca, .server_name = "localhost"}));
  Run([&]() -> io::Awaitable<void> {
    error_code ec;
    auto stream = co_await upstream->Open(Request("/svc/Named"), true, ec);
    EXPECT_TRUE(stream) << ec.message();
    if (!stream) co_return;
    const Answer answer = co_await Collect(*upstream, *stream);
    EXPECT_EQ(answer.body, "echo:/svc/Named:https:");
  });
  backend.Stop();
}

TEST_F(H2UpstreamTlsTest, AnUnknownCaFailsWithNothingSent) {
  TlsH2Backend backend(context_, certs_, Alpn::kH2);
  auto upstream = Upstream(backend.endpoint(), Client({.ca_file = certs_.other_ca}));
  const error_code ec = OpenFails(*upstream);
  EXPECT_TRUE(IsTlsFailure(ec)) << ec.message();
  EXPECT_NE(ec.message().find("certificate verify failed"), std::string::npos) << ec.message();
  RunUntil([&] { return backend.ended == 1; }, "the backend to see the connection end");
  EXPECT_EQ(backend.handshakes, 0);
  EXPECT_EQ(backend.received, "") << "nothing is written to a backend that did not verify";
  EXPECT_EQ(upstream->connections(), 0u);
  EXPECT_EQ(observer_[HandshakeResult::kCertificate], 1);
  backend.Stop();
}

TEST_F(H2UpstreamTlsTest, AnotherNameFailsWithNothingSent) {
  TlsH2Backend backend(context_, certs_, Alpn::kH2);
  auto upstream = Upstream(backend.endpoint(), Client({.ca_file = certs_.ca, .server_name = "db.elsewhere.test"}));
  const error_code ec = OpenFails(*upstream);
  EXPECT_TRUE(IsTlsFailure(ec)) << ec.message();
  EXPECT_NE(ec.message().find("hostname mismatch"), std::string::npos) << ec.message();
  RunUntil([&] { return backend.ended == 1; }, "the backend to see the connection end");
  EXPECT_EQ(backend.received, "");
  backend.Stop();
}

// A server that does not speak ALPN completes the handshake (the chain and name verify) with
// nothing selected: it may well be an HTTP/1.1 server, and HTTP/2 frames are not sent to it.
TEST_F(H2UpstreamTlsTest, AServerThatIgnoresAlpnGetsNoFrames) {
  TlsH2Backend backend(context_, certs_, Alpn::kIgnore);
  auto upstream = Upstream(backend.endpoint(), Trusting());
  const error_code ec = OpenFails(*upstream);
  EXPECT_TRUE(IsTlsFailure(ec)) << ec.message();
  EXPECT_NE(ec.message().find("did not select h2"), std::string::npos) << ec.message();
  RunUntil([&] { return backend.ended == 1; }, "the backend to see the connection end");
  EXPECT_EQ(backend.received, "") << "not even the HTTP/2 preface";
  EXPECT_EQ(upstream->connections(), 0u);
  EXPECT_EQ(observer_[HandshakeResult::kError], 1);
  backend.Stop();
}

TEST_F(H2UpstreamTlsTest, AServerThatAnswersHttp11GetsNoFrames) {
  TlsH2Backend backend(context_, certs_, Alpn::kHttp11);
  auto upstream = Upstream(backend.endpoint(), Trusting());
  const error_code ec = OpenFails(*upstream);
  EXPECT_TRUE(IsTlsFailure(ec)) << ec.message();
  RunUntil([&] { return backend.ended == 1; }, "the backend to see the connection end");
  EXPECT_EQ(backend.received, "");
  EXPECT_EQ(upstream->connections(), 0u);
  backend.Stop();
}

// TLS 1.3: the server checks a client certificate after the client's side of the handshake is
// done, so the Open may succeed and the refusal end the stream; either way it is a TLS failure,
// and the server decrypted nothing.
TEST_F(H2UpstreamTlsTest, ARefusedClientCertificateIsATlsFailure) {
  TlsH2Backend backend(context_, certs_, Alpn::kH2, Then::kServe, certs_.ca);
  auto upstream = Upstream(backend.endpoint(), Trusting());  // no client certificate
  Run([&]() -> io::Awaitable<void> {
    error_code ec;
    auto stream = co_await upstream->Open(Request("/svc/Put"), true, ec);
    if (!stream) {
      EXPECT_TRUE(IsTlsFailure(ec)) << ec.message();
      co_return;
    }
    const Answer answer = co_await Collect(*upstream, *stream);
    EXPECT_TRUE(answer.reset);
    EXPECT_TRUE(IsTlsFailure(answer.lost)) << answer.lost.message();
  });
  RunUntil([&] { return backend.ended == 1; }, "the backend to see the connection end");
  EXPECT_EQ(backend.handshakes, 0);
  EXPECT_EQ(backend.received, "");
  backend.Stop();
}

// A backend that ends the TLS in order before its SETTINGS answered nothing: the stream's reset
// says the TLS was refused, not merely that the connection was lost.
TEST_F(H2UpstreamTlsTest, ACloseBeforeTheBackendsSettingsIsATlsFailure) {
  TlsH2Backend backend(context_, certs_, Alpn::kH2, Then::kCloseNotify);
  auto upstream = Upstream(backend.endpoint(), Trusting());
  Run([&]() -> io::Awaitable<void> {
    error_code ec;
    auto stream = co_await upstream->Open(Request("/svc/Put"), true, ec);
    EXPECT_TRUE(stream) << ec.message();
    if (!stream) co_return;
    const Answer answer = co_await Collect(*upstream, *stream);
    EXPECT_TRUE(answer.reset);
    EXPECT_TRUE(IsTlsFailure(answer.lost)) << answer.lost.message();
    EXPECT_NE(answer.lost.message().find("before it sent anything over HTTP/2"), std::string::npos)
        << answer.lost.message();
  });
  backend.Stop();
}

TEST_F(H2UpstreamTlsTest, AStalledHandshakeEndsAtTheConnectTimeout) {
  // Accepts and never answers: the client's hello goes unanswered.
  io::Acceptor silent(context_, tcp::endpoint(asio::ip::make_address("127.0.0.1"), 0));
  io::Socket held(context_);
  silent.async_accept(held, [](error_code) {});
  auto upstream = Upstream(silent.local_endpoint(), Trusting(), std::chrono::milliseconds(200));
  const auto start = std::chrono::steady_clock::now();
  const error_code ec = OpenFails(*upstream);
  EXPECT_LT(std::chrono::steady_clock::now() - start, std::chrono::seconds(5));
  EXPECT_TRUE(IsTlsFailure(ec)) << ec.message();
  EXPECT_NE(ec.message().find("timeouts.connect"), std::string::npos) << ec.message();
  EXPECT_EQ(observer_[HandshakeResult::kTimeout], 1);
}

// A reload's settings: the next stream goes on a new connection made with them (here a CA that
// no longer trusts the backend, so it fails), while a stream on a connection made with the old
// ones finishes there; that connection closes once its stream has ended.
TEST_F(H2UpstreamTlsTest, NewSettingsApplyToNewConnectionsAndOldStreamsFinish) {
  TlsH2Backend backend(context_, certs_, Alpn::kH2);
  auto upstream = Upstream(backend.endpoint(), Trusting());
  Run([&]() -> io::Awaitable<void> {
    error_code ec;
    auto old = co_await upstream->Open(Request("/svc/Old"), false, ec);
    EXPECT_TRUE(old) << ec.message();
    if (!old) co_return;

    upstream->SetTls(Client({.ca_file = certs_.other_ca}));
    auto refused = co_await upstream->Open(Request("/svc/New"), true, ec);
    EXPECT_FALSE(refused) << "the new settings do not trust the backend: no stream";
    EXPECT_TRUE(IsTlsFailure(ec)) << ec.message();

    upstream->SetTls(Trusting());
    auto fresh = co_await upstream->Open(Request("/svc/Fresh"), true, ec);
    EXPECT_TRUE(fresh) << ec.message();
    if (!fresh) co_return;
    EXPECT_EQ((co_await Collect(*upstream, *fresh)).body, "echo:/svc/Fresh:https:");

    EXPECT_TRUE(upstream->Send(*old, "late", true));
    const Answer answer = co_await Collect(*upstream, *old);
    EXPECT_EQ(answer.body, "echo:/svc/Old:https:late") << "the old connection's stream finishes there";
  });
  EXPECT_EQ(backend.accepted, 3) << "old, refused, fresh";
  RunUntil([&] { return upstream->connections() == 1; }, "the old connection to close after its last stream");
  backend.Stop();
}

}  // namespace
}  // namespace fencing
