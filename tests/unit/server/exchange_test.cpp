// Exchange over real loopback sockets: a client connection pair and a pool pointing at a scripted
// backend. The at-most-once rule is checked against what the backend actually received.

#include <gtest/gtest.h>

#include <boost/asio/co_spawn.hpp>
#include <boost/asio/read.hpp>
#include <boost/asio/write.hpp>

#include <chrono>
#include <memory>
#include <string>
#include <vector>

#include "scripted_backend.h"
#include "server/exchange.h"
#include "test_files.h"

namespace fencing {
namespace {

namespace asio = boost::asio;
using tcp = asio::ip::tcp;
using std::chrono::milliseconds;
using Conn = ScriptedBackend::Conn;

constexpr size_t kRelaySize = 16 * 1024;
constexpr size_t kKeep = 1024 * 1024;

// One request as the session hands it to the exchange.
struct Call {
  std::string head{};           // the request head for the backend
  BodyDecoder decoder{};        // the body's framing (none by default)
  std::string body{};           // body bytes the session has read with the head
  std::string body_later{};     // body bytes the client sends after the exchange has started
  size_t feed_keep = kKeep;     // how much the session held before the exchange (0: streaming)
  bool head_request = false;
  unsigned client_version = 11;
  milliseconds cancel_after{0};  // the connection's deadline: sets timed_out and cancels
};

struct Outcome {
  ExchangeResult result;
  std::string client_saw;  // everything written to the client, up to the exchange's end
  bool finished = false;
};

std::string Body(const Outcome& o) {
  size_t end = o.client_saw.find("\r\n\r\n");
  return end == std::string::npos ? std::string() : o.client_saw.substr(end + 4);
}

class ExchangeTest : public ::testing::Test {
 protected:
  explicit ExchangeTest(ScriptedBackend::Script script = [](Conn& c) { c.Serve(); }, size_t relay = kRelaySize)
      : backend_(std::move(script)), relay_(relay), pool_(ioc_, {backend_.endpoint()}, milliseconds(1000), 8) {}

  Outcome Run(const Call& call) {
    // A client connection of its own for every exchange, so what it saw can be read to its end.
    io::Acceptor acceptor(ioc_.get_executor(), tcp::endpoint(asio::ip::make_address_v4("127.0.0.1"), 0));
    tcp::socket client_peer(ioc_);
    client_peer.connect(acceptor.local_endpoint());
    io::Socket accepted(ioc_.get_executor());
    acceptor.accept(accepted);
    tls::ServerStream proxy_side(std::move(accepted));  // a plain client connection
    if (!call.body_later.empty()) asio::write(client_peer, asio::buffer(call.body_later));

    ClientBuffer client_buffer;
    {
      auto room = client_buffer.prepare(call.body.size());
      asio::buffer_copy(room, asio::buffer(call.body));
      client_buffer.commit(call.body.size());
    }
    RequestBody body(call.decoder, relay_.data(), relay_.size());
    body.Feed(client_buffer, call.feed_keep);

    ExchangeRequest request;
    request.head = call.head;
    request.chunked = call.decoder.chunked();
    request.idempotent = IsIdempotentMethod(call.head.substr(0, call.head.find(' ')));
    request.head_request = call.head_request;
    request.client_version = call.client_version;
    request.client_keep_alive = true;
    request.keep = kKeep;

    ExchangeCancel cancel;
    Exchange exchange(proxy_side, client_buffer, pool_, cancel, relay_.data(), relay_.size());
    Outcome outcome;
    io::Timer deadline(ioc_.get_executor());
    if (call.cancel_after.count() > 0) {
      // As the session's sweep does once the deadline has passed.
      deadline.expires_after(call.cancel_after);
      deadline.async_wait([&](boost::system::error_code ec) {
        if (ec) return;
        cancel.timed_out = true;
        boost::system::error_code ignored;
        proxy_side.socket().cancel(ignored);
        if (cancel.upstream) cancel.upstream->socket.cancel(ignored);
      });
    }
    asio::co_spawn(ioc_.get_executor(), exchange.Run(request, body),
                   [&](std::exception_ptr e, ExchangeResult r) {
                     deadline.cancel();
                     if (e) {
                       ADD_FAILURE() << "the exchange threw";
                       return;
                     }
                     outcome.result = r;
                     outcome.finished = true;
                   });
    ioc_.restart();
    ioc_.run_for(std::chrono::seconds(3));
    EXPECT_TRUE(outcome.finished) << "the exchange did not end";

    boost::system::error_code ec;
    proxy_side.socket().shutdown(tcp::socket::shutdown_send, ec);
    std::string saw;
    asio::read(client_peer, asio::dynamic_buffer(saw), ec);
    outcome.client_saw = saw;
    return outcome;
  }

  // Waits until the backend has closed the one pooled connection (its FIN has arrived), so a
  // test does not race the close it scripted. The connection stays in the pool untouched.
  void WaitUntilPooledConnectionClosed() {
    ASSERT_EQ(pool_.idle_count(), 1u);
    ASSERT_TRUE(WaitForPeerClose(pool_.idle_handles().front()));
    ASSERT_EQ(pool_.idle_count(), 1u);
  }

  ScriptedBackend backend_;
  asio::io_context ioc_;
  std::vector<char> relay_;
  UpstreamPool pool_;
};

const std::string kGet = "GET /r HTTP/1.1\r\nHost: b\r\n\r\n";
std::string Post(const std::string& method, size_t length) {
  return method + " /w HTTP/1.1\r\nHost: b\r\nContent-Length: " + std::to_string(length) + "\r\n\r\n";
}

// ---------------------------------------------------------------------------------------------
// Responses

class ExchangeSimple : public ExchangeTest {
 protected:
  ExchangeSimple()
      : ExchangeTest([](Conn& c) {
          c.Serve("HTTP/1.1 201 Created\r\nContent-Length: 5\r\nX-Backend: yes\r\n\r\nhello");
        }) {}
};

TEST_F(ExchangeSimple, RelaysStatusHeadersAndBodyAndPoolsTheConnection) {
  Call call{.head = Post("POST", 7), .decoder = BodyDecoder::Length(7), .body = "payload"};
  Outcome o = Run(call);
  ASSERT_FALSE(o.result.problem) << o.result.problem->detail;
  EXPECT_EQ(o.result.status, 201u);
  EXPECT_EQ(o.result.upstream_status, 201u);
  EXPECT_EQ(o.result.attempts, 1u);
  EXPECT_TRUE(o.result.keep_alive);
  EXPECT_EQ(o.result.bytes_in, 7u);
  EXPECT_EQ(o.result.bytes_out, 5u);
  EXPECT_EQ(o.client_saw.rfind("HTTP/1.1 201 Created\r\n", 0), 0u) << o.client_saw;
  EXPECT_TRUE(Contains(o.client_saw, "\r\nX-Backend: yes\r\n"));
  EXPECT_TRUE(Contains(o.client_saw, "\r\nContent-Length: 5\r\n"));
  EXPECT_EQ(Body(o), "hello");
  EXPECT_EQ(pool_.idle_count(), 1u) << "the backend connection goes back to the pool";
  ASSERT_EQ(backend_.requests(0).size(), 1u);
  EXPECT_EQ(backend_.requests(0)[0], Post("POST", 7) + "payload");

  // The next request reuses it.
  o = Run(Call{.head = kGet});
  EXPECT_EQ(o.result.status, 201u);
  EXPECT_EQ(backend_.connections(), 1u);
  EXPECT_EQ(backend_.requests(0).size(), 2u);
}

class ExchangeInterimResponses : public ExchangeTest {
 protected:
  ExchangeInterimResponses()
      : ExchangeTest([](Conn& c) {
          c.Serve(
              "HTTP/1.1 100 Continue\r\n\r\n"
              "HTTP/1.1 103 Early Hints\r\nLink: </style.css>; rel=preload\r\n\r\n"
              "HTTP/1.1 200 OK\r\nContent-Length: 4\r\n\r\ndone");
        }) {}
};

TEST_F(ExchangeInterimResponses, AreDropped) {
  Outcome o = Run(Call{.head = Post("PUT", 1), .decoder = BodyDecoder::Length(1), .body = "x"});
  ASSERT_FALSE(o.result.problem) << o.result.problem->detail;
  EXPECT_EQ(o.result.status, 200u);
  EXPECT_EQ(o.client_saw.rfind("HTTP/1.1 200 OK\r\n", 0), 0u) << o.client_saw;
  EXPECT_FALSE(Contains(o.client_saw, "100 Continue"));
  EXPECT_FALSE(Contains(o.client_saw, "Early Hints"));
  EXPECT_FALSE(Contains(o.client_saw, "Link:"));
  EXPECT_EQ(Body(o), "done");
  EXPECT_EQ(pool_.idle_count(), 1u);
}

class ExchangeHeadResponse : public ExchangeTest {
 protected:
  ExchangeHeadResponse() : ExchangeTest([](Conn& c) { c.Serve("HTTP/1.1 200 OK\r\nContent-Length: 1234\r\n\r\n"); }) {}
};

TEST_F(ExchangeHeadResponse, HasNoBodyAndKeepsTheConnection) {
  Outcome o = Run(Call{.head = "HEAD /r HTTP/1.1\r\nHost: b\r\n\r\n", .head_request = true});
  ASSERT_FALSE(o.result.problem) << o.result.problem->detail;
  EXPECT_EQ(o.result.status, 200u);
  EXPECT_TRUE(o.result.keep_alive);
  EXPECT_EQ(o.result.bytes_out, 0u);
  EXPECT_TRUE(Contains(o.client_saw, "\r\nContent-Length: 1234\r\n")) << o.client_saw;
  EXPECT_EQ(Body(o), "") << "no body after the head of a HEAD response";
  EXPECT_EQ(pool_.idle_count(), 1u) << "the backend connection is still in step";
}

class ExchangeChunkedResponse : public ExchangeTest {
 protected:
  ExchangeChunkedResponse()
      : ExchangeTest([](Conn& c) {
          c.Serve(
              "HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n"
              "5\r\nhello\r\n7;ext=1\r\n, world\r\n0\r\nX-Trailer: t\r\n\r\n");
        }) {}
};

TEST_F(ExchangeChunkedResponse, IsChunkedToAnHttp11Client) {
  Outcome o = Run(Call{.head = kGet});
  ASSERT_FALSE(o.result.problem) << o.result.problem->detail;
  EXPECT_EQ(o.result.status, 200u);
  EXPECT_TRUE(o.result.keep_alive);
  EXPECT_EQ(o.result.bytes_out, 12u);
  EXPECT_TRUE(Contains(o.client_saw, "\r\nTransfer-Encoding: chunked\r\n")) << o.client_saw;
  // Re-chunked by the proxy: decode what the client got.
  BodyDecoder d = BodyDecoder::Chunked(1 << 20);
  std::string body = Body(o);
  std::string out(body.size(), '\0');
  BodyDecoder::Step step = d.Decode(body, out.data(), out.size());
  ASSERT_TRUE(d.done()) << d.reason() << " in " << body;
  EXPECT_EQ(step.consumed, body.size());
  EXPECT_EQ(out.substr(0, step.produced), "hello, world");
  EXPECT_EQ(pool_.idle_count(), 1u);
}

TEST_F(ExchangeChunkedResponse, IsCloseDelimitedToAnHttp10Client) {
  Outcome o = Run(Call{.head = kGet, .client_version = 10});
  ASSERT_FALSE(o.result.problem) << o.result.problem->detail;
  EXPECT_FALSE(o.result.keep_alive) << "the close delimits the body";
  EXPECT_EQ(o.client_saw.rfind("HTTP/1.0 200 OK\r\n", 0), 0u) << o.client_saw;
  EXPECT_FALSE(Contains(o.client_saw, "chunked"));
  EXPECT_EQ(Body(o), "hello, world");
  EXPECT_EQ(pool_.idle_count(), 1u) << "the backend connection itself is fine";
}

class ExchangeBrokenResponse : public ExchangeTest {
 protected:
  ExchangeBrokenResponse()
      : ExchangeTest([](Conn& c) {
          c.ReadRequest();
          c.Write("HTTP/1.1 200 OK\r\nContent-Length: 100\r\n\r\nonly-ten!!");
          c.Close();
        }) {}
};

TEST_F(ExchangeBrokenResponse, MidBodyClosesTheClientWithoutAProblem) {
  Outcome o = Run(Call{.head = kGet});
  EXPECT_FALSE(o.result.problem) << "the client has seen part of the response: no 502 can follow";
  EXPECT_FALSE(o.result.keep_alive);
  EXPECT_EQ(o.result.status, 200u);
  EXPECT_EQ(o.result.attempts, 1u);
  EXPECT_EQ(Body(o), "only-ten!!");
  EXPECT_EQ(pool_.idle_count(), 0u);
}

// ---------------------------------------------------------------------------------------------
// At most once: resends

// Connection 0 answers one GET and then does what `then` says; later connections are served.
ScriptedBackend::Script AfterOneGet(std::function<void(Conn&)> then) {
  return [then](Conn& c) {
    if (c.index() != 0) return c.Serve();
    c.ReadRequest();
    c.Write(ScriptedBackend::kOk);
    then(c);
  };
}

class ExchangeClosedWhileIdle : public ExchangeTest {
 protected:
  ExchangeClosedWhileIdle() : ExchangeTest(AfterOneGet([](Conn& c) { c.Close(); })) {}
  void SetUp() override {
    ASSERT_EQ(Run(Call{.head = kGet}).result.status, 200u);
    WaitUntilPooledConnectionClosed();
  }
};

// A pooled connection is checked before any request is written to it (a peek): one the backend
// closed while it idled is never used, whatever the method.
TEST_F(ExchangeClosedWhileIdle, PutIsNeverWrittenToTheDeadConnection) {
  Outcome o = Run(Call{.head = Post("PUT", 3), .decoder = BodyDecoder::Length(3), .body = "abc"});
  ASSERT_FALSE(o.result.problem) << o.result.problem->detail;
  EXPECT_EQ(o.result.status, 200u);
  EXPECT_EQ(o.result.attempts, 1u) << "the pooled connection was checked before it was used";
  EXPECT_EQ(Body(o), "ok");
  EXPECT_EQ(backend_.connections(), 2u);
  EXPECT_FALSE(Contains(backend_.received(0), "PUT"));
  ASSERT_EQ(backend_.requests(1).size(), 1u);
  EXPECT_EQ(backend_.requests(1)[0], Post("PUT", 3) + "abc");
}

TEST_F(ExchangeClosedWhileIdle, PostIsNeverWrittenToTheDeadConnection) {
  Outcome o = Run(Call{.head = Post("POST", 3), .decoder = BodyDecoder::Length(3), .body = "abc"});
  ASSERT_FALSE(o.result.problem) << o.result.problem->detail;
  EXPECT_EQ(o.result.status, 200u);
  EXPECT_EQ(o.result.attempts, 1u) << "the pooled connection was checked before it was used";
  EXPECT_EQ(backend_.connections(), 2u);
  EXPECT_FALSE(Contains(backend_.received(0), "POST"));
  EXPECT_EQ(backend_.Count("POST"), 1u);
  ASSERT_EQ(backend_.requests(1).size(), 1u);
  EXPECT_EQ(backend_.requests(1)[0], Post("POST", 3) + "abc");
}

// The backend reads the whole second request on the pooled connection and closes unanswered.
class ExchangeClosedAfterReading : public ExchangeTest {
 protected:
  explicit ExchangeClosedAfterReading(size_t relay = kRelaySize)
      : ExchangeTest(AfterOneGet([](Conn& c) {
                       c.ReadRequest();
                       c.Close();
                     }),
                     relay) {}
  void SetUp() override { ASSERT_EQ(Run(Call{.head = kGet}).result.status, 200u); }
};

TEST_F(ExchangeClosedAfterReading, PostGets502AndReachedTheBackendOnce) {
  Outcome o = Run(Call{.head = Post("POST", 3), .decoder = BodyDecoder::Length(3), .body = "abc"});
  ASSERT_TRUE(o.result.problem);
  EXPECT_EQ(o.result.problem->status, boost::beast::http::status::bad_gateway);
  EXPECT_TRUE(o.result.upstream_failed);
  EXPECT_EQ(o.result.attempts, 1u);
  EXPECT_EQ(o.result.status, 0u);
  EXPECT_EQ(o.client_saw, "") << "the session writes the problem, not the exchange";
  EXPECT_EQ(backend_.Count("POST"), 1u);
  EXPECT_EQ(backend_.connections(), 1u) << "no second connection was opened for it";
}

TEST_F(ExchangeClosedAfterReading, PutIsResentOnce) {
  Outcome o = Run(Call{.head = Post("PUT", 3), .decoder = BodyDecoder::Length(3), .body = "abc"});
  ASSERT_FALSE(o.result.problem) << o.result.problem->detail;
  EXPECT_EQ(o.result.status, 200u);
  EXPECT_EQ(o.result.attempts, 2u);
  EXPECT_EQ(backend_.Count("PUT"), 2u);
  ASSERT_EQ(backend_.requests(1).size(), 1u);
  EXPECT_EQ(backend_.requests(1)[0], Post("PUT", 3) + "abc");
}

// The backend reads the second request and answers it with bytes that are no response, then
// closes: it has read the request, so the request is not sent again, whatever its method.
class ExchangeGarbledAfterReading : public ExchangeTest {
 protected:
  ExchangeGarbledAfterReading()
      : ExchangeTest(AfterOneGet([](Conn& c) {
          c.ReadRequest();
          c.Write("\r\nHTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nok");
          c.Close();
        })) {}
  void SetUp() override { ASSERT_EQ(Run(Call{.head = kGet}).result.status, 200u); }
};

TEST_F(ExchangeGarbledAfterReading, PutGets502AndIsNotResent) {
  Outcome o = Run(Call{.head = Post("PUT", 3), .decoder = BodyDecoder::Length(3), .body = "abc"});
  ASSERT_TRUE(o.result.problem);
  EXPECT_EQ(o.result.problem->status, boost::beast::http::status::bad_gateway);
  EXPECT_EQ(o.result.problem->type, "upstream-invalid-response") << o.result.problem->detail;
  EXPECT_EQ(o.result.attempts, 1u);
  EXPECT_EQ(backend_.Count("PUT"), 1u) << "a request the backend answered (however badly) is never resent";
}

// A 101 nobody asked for (the proxy forwards no Upgrade): 502, and the connection is not pooled.
class ExchangeUnsolicitedUpgrade : public ExchangeTest {
 protected:
  ExchangeUnsolicitedUpgrade()
      : ExchangeTest([](Conn& c) { c.Serve("HTTP/1.1 101 Switching Protocols\r\nUpgrade: x\r\nConnection: upgrade\r\n\r\n"); }) {}
};

TEST_F(ExchangeUnsolicitedUpgrade, Is502AndClosesTheConnection) {
  Outcome o = Run(Call{.head = kGet});
  ASSERT_TRUE(o.result.problem);
  EXPECT_EQ(o.result.problem->status, boost::beast::http::status::bad_gateway);
  EXPECT_EQ(o.result.problem->type, "upstream-invalid-response");
  EXPECT_EQ(o.result.upstream_status, 101u);
  EXPECT_EQ(o.result.attempts, 1u);
  EXPECT_EQ(o.client_saw, "");
  EXPECT_EQ(pool_.idle_count(), 0u);
}

// Bytes after the end of a response, in the same read: the connection is out of step with the
// backend and is closed, never pooled (the client still gets the response it was sent).
class ExchangeSaysTooMuch : public ExchangeTest {
 protected:
  ExchangeSaysTooMuch()
      : ExchangeTest([](Conn& c) {
          c.ReadRequest();
          c.Write("HTTP/1.1 204 No Content\r\n\r\nstray body of a 204");
          c.Hold();
        }) {}
};

TEST_F(ExchangeSaysTooMuch, TheConnectionIsNotPooled) {
  Outcome o = Run(Call{.head = kGet});
  ASSERT_FALSE(o.result.problem) << o.result.problem->detail;
  EXPECT_EQ(o.result.status, 204u);
  EXPECT_EQ(Body(o), "");
  EXPECT_EQ(pool_.idle_count(), 0u);
}

// A relay buffer smaller than the body: it streams, and what has gone cannot be sent again.
class ExchangeStreamedAfterReading : public ExchangeClosedAfterReading {
 protected:
  ExchangeStreamedAfterReading() : ExchangeClosedAfterReading(64) {}
};

std::string Pattern(size_t n) {
  std::string s(n, '\0');
  for (size_t i = 0; i < n; ++i) s[i] = static_cast<char>('a' + (i * 7 + i / 26) % 26);
  return s;
}

TEST_F(ExchangeStreamedAfterReading, StreamedPutIsNeverResent) {
  const std::string body = Pattern(1000);
  Call call{.head = Post("PUT", body.size()),
            .decoder = BodyDecoder::Length(body.size()),
            .body = body.substr(0, 100),
            .body_later = body.substr(100),
            .feed_keep = 0};
  Outcome o = Run(call);
  ASSERT_TRUE(o.result.problem);
  EXPECT_EQ(o.result.problem->status, boost::beast::http::status::bad_gateway);
  EXPECT_EQ(o.result.attempts, 1u) << "the body was not whole: idempotent or not, it goes once";
  EXPECT_EQ(backend_.Count("PUT"), 1u);
  ASSERT_EQ(backend_.requests(0).size(), 2u);
  EXPECT_EQ(backend_.requests(0)[1], Post("PUT", body.size()) + body);
  EXPECT_EQ(backend_.connections(), 1u);
}

class ExchangeStreamedBody : public ExchangeTest {
 protected:
  ExchangeStreamedBody() : ExchangeTest([](Conn& c) { c.Serve(); }, 64) {}
};

TEST_F(ExchangeStreamedBody, IsRelayedInPieces) {
  const std::string body = Pattern(1000);
  std::string wire;
  for (size_t i = 0; i < body.size(); i += 100) {
    char line[16];
    std::snprintf(line, sizeof line, "%x\r\n", 100);
    wire += line + body.substr(i, 100) + "\r\n";
  }
  wire += "0\r\n\r\n";
  const std::string head = "POST /w HTTP/1.1\r\nHost: b\r\nTransfer-Encoding: chunked\r\n\r\n";
  Call call{.head = head,
            .decoder = BodyDecoder::Chunked(1 << 20),
            .body = wire.substr(0, 150),
            .body_later = wire.substr(150),
            .feed_keep = 0};
  Outcome o = Run(call);
  ASSERT_FALSE(o.result.problem) << o.result.problem->detail;
  EXPECT_EQ(o.result.status, 200u);
  EXPECT_EQ(o.result.attempts, 1u);
  EXPECT_EQ(o.result.bytes_in, body.size());
  ASSERT_EQ(backend_.requests(0).size(), 1u);
  const std::string got = backend_.requests(0)[0];
  ASSERT_EQ(got.rfind(head, 0), 0u) << got;
  // The backend got the body as chunks of at most the relay buffer's size.
  BodyDecoder d = BodyDecoder::Chunked(1 << 20);
  std::string framed = got.substr(head.size());
  std::string decoded(framed.size(), '\0');
  BodyDecoder::Step step = d.Decode(framed, decoded.data(), decoded.size());
  ASSERT_TRUE(d.done()) << d.reason();
  EXPECT_EQ(decoded.substr(0, step.produced), body);
  size_t chunks = 0;
  for (size_t at = 0; (at = framed.find("\r\n", at)) != std::string::npos; at += 2) ++chunks;
  EXPECT_GE(chunks / 2, body.size() / 64) << "relayed in relay-buffer pieces: " << framed.substr(0, 200);
}

// ---------------------------------------------------------------------------------------------
// Deadline

class ExchangeSilentBackend : public ExchangeTest {
 protected:
  ExchangeSilentBackend() : ExchangeTest(AfterOneGet([](Conn& c) {
    c.ReadRequest();
    c.Hold();  // never answers; holds until the proxy closes
  })) {}
};

TEST_F(ExchangeSilentBackend, TimedOutCancelGives504AndNoResend) {
  ASSERT_EQ(Run(Call{.head = kGet}).result.status, 200u);
  // A pooled connection and an idempotent request: only the deadline stops a resend.
  Outcome o = Run(Call{.head = kGet, .cancel_after = milliseconds(50)});
  ASSERT_TRUE(o.result.problem);
  EXPECT_EQ(o.result.problem->status, boost::beast::http::status::gateway_timeout);
  EXPECT_TRUE(o.result.upstream_failed);
  EXPECT_EQ(o.result.attempts, 1u);
  EXPECT_EQ(backend_.connections(), 1u);
  EXPECT_EQ(backend_.Count("GET"), 2u);
  EXPECT_EQ(pool_.idle_count(), 0u);
}

}  // namespace
}  // namespace fencing
