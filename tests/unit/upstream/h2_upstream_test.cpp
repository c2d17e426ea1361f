// The worker's HTTP/2 connections to an h2c backend (upstream/h2_upstream.h), against a backend
// in the test: a loopback listener whose connections are driven by the server side of the same
// codec (h2/connection.h). Streams share one connection, a full connection opens another, a
// backend that closes ends its streams with a reset and the next stream gets a new connection,
// and a backend nobody listens for is an error, not a hang.

#include <gtest/gtest.h>

#include "h2/connection.h"
#include "upstream/h2_answer.h"
#include "upstream/h2_upstream.h"

#include <boost/asio/co_spawn.hpp>
#include <boost/asio/detached.hpp>
#include <boost/asio/io_context.hpp>
#include <boost/asio/write.hpp>

#include <chrono>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <vector>

namespace fencing {
namespace {

namespace asio = boost::asio;
using asio::ip::tcp;
using boost::system::error_code;
using io::kTuple;

// The backend: answers each request when its side has ended with 200, a body "echo:<path>:<the
// request body>" and trailers grpc-status 0. A request for /close makes it close the connection
// without an answer.
class Backend {
 public:
  Backend(asio::io_context& context, uint32_t max_streams)
      : acceptor_(context, tcp::endpoint(asio::ip::make_address("127.0.0.1"), 0)), max_streams_(max_streams) {
    asio::co_spawn(context, Accept(), asio::detached);
  }
  tcp::endpoint endpoint() const { return acceptor_.local_endpoint(); }
  int accepted = 0;
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
    h2::Settings settings;
    settings.max_concurrent_streams = max_streams_;
    h2::Connection codec(h2::Role::kServer, settings);
    std::map<int32_t, std::pair<std::string, std::string>> requests;  // path, body
    std::vector<uint8_t> buffer(16384);
    std::string out;
    for (;;) {
      while (codec.WantWrite()) {
        out.clear();
        codec.TakeOutput(&out);
        auto [wec, wn] = co_await asio::async_write(*socket, asio::buffer(out), kTuple);
        if (wec) co_return;
      }
      auto [ec, n] = co_await socket->async_read_some(asio::buffer(buffer), kTuple);
      if (ec) co_return;
      if (!codec.Receive(buffer.data(), n).ok()) co_return;
      h2::Event event;
      while (codec.NextEvent(&event)) {
        if (event.kind == h2::Event::Kind::kHead) {
          for (const h2::Header& field : event.fields) {
            if (field.name == ":path") requests[event.stream].first = field.value;
          }
          if (requests[event.stream].first == "/close") {
            error_code ignored;
            socket->close(ignored);
            co_return;
          }
        } else if (event.kind == h2::Event::Kind::kData) {
          requests[event.stream].second.append(event.data);
          codec.Consume(event.stream, event.data.size());
        } else if (event.kind == h2::Event::Kind::kEnd) {
          const auto& [path, body] = requests[event.stream];
          const h2::Headers head{{":status", "200"}, {"content-type", "application/grpc"}};
          codec.SubmitResponse(event.stream, head, false);
          codec.SubmitData(event.stream, "echo:" + path + ":" + body, false);
          const h2::Headers trailers{{"grpc-status", "0"}};
          codec.SubmitTrailers(event.stream, trailers);
        }
      }
    }
  }

  io::Acceptor acceptor_;
  uint32_t max_streams_;
  std::vector<std::shared_ptr<io::Socket>> sockets_;
};

h2::Headers Request(const std::string& path) {
  return {{":method", "POST"}, {":scheme", "http"}, {":authority", "backend"}, {":path", path},
          {"content-type", "application/grpc"}};
}

class H2UpstreamTest : public testing::Test {
 protected:
  // Runs `body` to its end, or fails the test after a bound (a hang, not a wait: done in ms).
  void Run(std::function<io::Awaitable<void>()> body) {
    bool done = false;
    asio::co_spawn(context_, [&]() -> io::Awaitable<void> {
      co_await body();
      done = true;
    }, asio::detached);
    const auto end = std::chrono::steady_clock::now() + std::chrono::seconds(20);
    while (!done && std::chrono::steady_clock::now() < end) context_.run_one_for(std::chrono::milliseconds(100));
    ASSERT_TRUE(done) << "did not finish";
  }

  asio::io_context context_;
};

TEST_F(H2UpstreamTest, ConcurrentStreamsShareOneConnection) {
  Backend backend(context_, 100);
  H2Upstream upstream(context_.get_executor(), {backend.endpoint()}, std::chrono::seconds(2));
  std::vector<Answer> answers;
  Run([&]() -> io::Awaitable<void> {
    std::vector<std::shared_ptr<H2Upstream::Stream>> streams;
    for (int i = 0; i < 3; ++i) {
      error_code ec;
      auto stream = co_await upstream.Open(Request("/svc/Put" + std::to_string(i)), false, ec);
      EXPECT_FALSE(ec) << ec.message();
      if (!stream) co_return;
      streams.push_back(stream);
    }
    for (size_t i = 0; i < streams.size(); ++i) {
      EXPECT_TRUE(upstream.Send(*streams[i], "body" + std::to_string(i), false));
      EXPECT_TRUE(upstream.Finish(*streams[i], {{"x-end", "1"}}));
    }
    for (auto& stream : streams) answers.push_back(co_await Collect(upstream, *stream));
  });
  ASSERT_EQ(answers.size(), 3u);
  for (size_t i = 0; i < answers.size(); ++i) {
    SCOPED_TRACE(i);
    EXPECT_EQ(answers[i].status, "200");
    EXPECT_EQ(answers[i].body, "echo:/svc/Put" + std::to_string(i) + ":body" + std::to_string(i));
    EXPECT_EQ(answers[i].grpc_status, "0");
    EXPECT_TRUE(answers[i].ended);
    EXPECT_FALSE(answers[i].reset);
  }
  EXPECT_EQ(backend.accepted, 1);
  EXPECT_EQ(upstream.connections(), 1u);
  backend.Stop();
}

TEST_F(H2UpstreamTest, AFullConnectionOpensAnother) {
  Backend backend(context_, 1);
  H2Upstream upstream(context_.get_executor(), {backend.endpoint()}, std::chrono::seconds(2));
  Run([&]() -> io::Awaitable<void> {
    error_code ec;
    auto first = co_await upstream.Open(Request("/svc/A"), false, ec);
    if (!first) co_return;
    // Until the backend's SETTINGS (one stream at a time) have come, the connection looks roomy.
    io::Timer poll(context_.get_executor());
    while (upstream.room() != 0) {
      poll.expires_after(std::chrono::milliseconds(5));
      co_await poll.async_wait(kTuple);
    }
    auto second = co_await upstream.Open(Request("/svc/B"), true, ec);
    EXPECT_TRUE(second) << ec.message();
    if (!second) co_return;
    upstream.Send(*first, "", true);
    Answer a = co_await Collect(upstream, *first);
    Answer b = co_await Collect(upstream, *second);
    EXPECT_EQ(a.body, "echo:/svc/A:");
    EXPECT_EQ(b.body, "echo:/svc/B:");
  });
  EXPECT_EQ(backend.accepted, 2) << "the second stream needs a second connection";
  backend.Stop();
}

TEST_F(H2UpstreamTest, ABackendThatClosesResetsItsStreamsAndTheNextStreamReconnects) {
  Backend backend(context_, 100);
  H2Upstream upstream(context_.get_executor(), {backend.endpoint()}, std::chrono::seconds(2));
  Run([&]() -> io::Awaitable<void> {
    error_code ec;
    auto doomed = co_await upstream.Open(Request("/close"), true, ec);
    if (!doomed) co_return;
    Answer lost = co_await Collect(upstream, *doomed);
    EXPECT_TRUE(lost.reset) << "a stream whose connection closed ends with a reset";
    EXPECT_FALSE(lost.ended);
    auto next = co_await upstream.Open(Request("/svc/After"), true, ec);
    EXPECT_TRUE(next) << ec.message();
    if (!next) co_return;
    Answer after = co_await Collect(upstream, *next);
    EXPECT_EQ(after.body, "echo:/svc/After:");
  });
  EXPECT_EQ(backend.accepted, 2);
  backend.Stop();
}

TEST_F(H2UpstreamTest, NoBackendIsAnErrorNotAStream) {
  tcp::endpoint nobody;
  {
    io::Acceptor probe(context_, tcp::endpoint(asio::ip::make_address("127.0.0.1"), 0));
    nobody = probe.local_endpoint();
  }  // closed: nothing listens there now
  H2Upstream upstream(context_.get_executor(), {nobody}, std::chrono::seconds(2));
  Run([&]() -> io::Awaitable<void> {
    error_code ec;
    auto stream = co_await upstream.Open(Request("/svc/Put"), true, ec);
    EXPECT_FALSE(stream);
    EXPECT_TRUE(ec);
  });
  EXPECT_EQ(upstream.connections(), 0u);
}

}  // namespace
}  // namespace fencing
