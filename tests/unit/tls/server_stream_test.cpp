// The listener's TLS stream (tls/server_stream.h) over a real loopback TCP connection, against
// Asio's own ssl::stream as the client: the handshake, a megabyte each way at once through
// small socket buffers (reads and writes that wait for readiness, partial writes), the
// close_notify and the client's end with and without one, a cancelled read that can be read
// again (the sweep's cooling), and what OpenSSL holds back for the idle wait.

#include <gtest/gtest.h>

#include "tls/server_context.h"
#include "tls/server_stream.h"
#include "tls/test_certs.h"

#include <boost/asio/co_spawn.hpp>
#include <boost/asio/detached.hpp>
#include <boost/asio/io_context.hpp>
#include <boost/asio/read.hpp>
#include <boost/asio/ssl/context.hpp>
#include <boost/asio/ssl/error.hpp>
#include <boost/asio/ssl/stream.hpp>
#include <boost/asio/write.hpp>

#include <array>
#include <chrono>
#include <memory>
#include <optional>
#include <string>
#include <vector>

namespace fencing {
namespace {

namespace asio = boost::asio;
namespace ssl = boost::asio::ssl;
using asio::ip::tcp;
using boost::system::error_code;
using io::kTuple;
using tls::ServerStream;
using namespace test_certs;  // NOLINT(google-build-using-namespace)

using ClientSocket = asio::basic_stream_socket<tcp, io::Executor>;
using ClientStream = ssl::stream<ClientSocket>;

class ServerStreamTest : public testing::Test {
 protected:
  void SetUp() override {
    ca_ = Ca();
    LeafSpec spec;
    spec.cn = "proxy";
    spec.sans = {"DNS:localhost"};
    server_cert_ = Leaf(ca_, spec);
    ListenTlsConfig config;
    config.cert_file = "/tls/tls.crt";
    config.key_file = "/tls/tls.key";
    tls::LoadError error;
    server_context_ = tls::ServerContext::Build(
        config, tls::ServerFiles{server_cert_.cert_pem(), server_cert_.key_pem(), ""}, &error);
    ASSERT_NE(server_context_, nullptr) << error.message;

    client_context_.set_verify_mode(ssl::verify_peer);
    const std::string ca = ca_.cert_pem();
    client_context_.add_certificate_authority(asio::buffer(ca));
    SSL_CTX_set_alpn_protos(client_context_.native_handle(), reinterpret_cast<const unsigned char*>("\x08http/1.1"), 9);

    // A connected pair on loopback.
    io::Acceptor acceptor(context_, tcp::endpoint(asio::ip::make_address("127.0.0.1"), 0));
    client_.emplace(ClientSocket(context_), client_context_);
    client_->next_layer().connect(acceptor.local_endpoint());
    io::Socket accepted(context_);
    acceptor.accept(accepted);
    server_ = std::make_unique<ServerStream>(std::move(accepted));
    server_->StartTls(*server_context_);
  }

  // Small kernel buffers on both sides (smaller still, and TCP's small windows make the test
  // slow): a megabyte cannot go in one write, so writes end part way and wait for the peer.
  void ShrinkBuffers() {
    server_->socket().set_option(asio::socket_base::send_buffer_size(65536));
    server_->socket().set_option(asio::socket_base::receive_buffer_size(65536));
    client_->next_layer().set_option(asio::socket_base::send_buffer_size(65536));
    client_->next_layer().set_option(asio::socket_base::receive_buffer_size(65536));
    // As the proxy's sockets: no Nagle (with it, small buffers wait for delayed ACKs).
    server_->socket().set_option(tcp::no_delay(true));
    client_->next_layer().set_option(tcp::no_delay(true));
  }

  // Both handshakes, each side in its own coroutine.
  void Handshake() {
    std::optional<error_code> server_ec, client_ec;
    asio::co_spawn(context_, [&]() -> io::Awaitable<void> {
      auto [ec] = co_await server_->async_handshake(kTuple);
      server_ec = ec;
    }, asio::detached);
    asio::co_spawn(context_, [&]() -> io::Awaitable<void> {
      auto [ec] = co_await client_->async_handshake(ssl::stream_base::client, kTuple);
      client_ec = ec;
    }, asio::detached);
    context_.run();
    context_.restart();
    ASSERT_TRUE(server_ec && client_ec);
    ASSERT_FALSE(*server_ec) << server_ec->message();
    ASSERT_FALSE(*client_ec) << client_ec->message();
  }

  // Reads with async_read_some until `want` bytes or an error.
  static io::Awaitable<error_code> ReadAll(ServerStream& stream, std::string& into, size_t want) {
    std::vector<char> chunk(7000);  // not a record's size: reads end inside records
    while (into.size() < want) {
      auto [ec, n] = co_await stream.async_read_some(asio::buffer(chunk), kTuple);
      into.append(chunk.data(), n);
      if (ec) co_return ec;
    }
    co_return error_code{};
  }
  static io::Awaitable<error_code> WriteAll(ServerStream& stream, const std::string& data) {
    size_t done = 0;
    while (done < data.size()) {
      auto [ec, n] = co_await stream.async_write_some(asio::buffer(data.data() + done, data.size() - done), kTuple);
      done += n;
      if (ec) co_return ec;
    }
    co_return error_code{};
  }

  static std::string Pattern(size_t size, char seed) {
    std::string data(size, '\0');
    for (size_t i = 0; i < size; ++i) data[i] = static_cast<char>(seed + i * 31 + i / 4099);
    return data;
  }

  asio::io_context context_;
  Issued ca_, server_cert_;
  std::shared_ptr<const tls::ServerContext> server_context_;
  ssl::context client_context_{ssl::context::tls_client};
  std::optional<ClientStream> client_;
  std::unique_ptr<ServerStream> server_;
};

TEST_F(ServerStreamTest, AMegabyteEachWayAtOnceThroughSmallBuffers) {
  ShrinkBuffers();
  Handshake();
  const std::string to_server = Pattern(1 << 20, 'a');
  const std::string to_client = Pattern(1 << 20, 'q');
  std::string server_got, client_got(to_client.size(), '\0');
  std::optional<error_code> server_read, server_wrote, client_read, client_wrote;
  asio::co_spawn(context_, [&]() -> io::Awaitable<void> {
    server_read = co_await ReadAll(*server_, server_got, to_server.size());
  }, asio::detached);
  asio::co_spawn(context_, [&]() -> io::Awaitable<void> {
    server_wrote = co_await WriteAll(*server_, to_client);
  }, asio::detached);
  // The client reads and writes nothing yet: the server's read waits for readability, and its
  // write fills the buffers and then waits for writability.
  context_.poll();
  ASSERT_FALSE(server_read);
  ASSERT_FALSE(server_wrote);
  asio::co_spawn(context_, [&]() -> io::Awaitable<void> {
    auto [ec, n] = co_await asio::async_read(*client_, asio::buffer(client_got), kTuple);
    client_read = ec;
  }, asio::detached);
  asio::co_spawn(context_, [&]() -> io::Awaitable<void> {
    auto [ec, n] = co_await asio::async_write(*client_, asio::buffer(to_server), kTuple);
    client_wrote = ec;
  }, asio::detached);
  context_.run();
  ASSERT_TRUE(server_read && server_wrote && client_read && client_wrote);
  EXPECT_FALSE(*server_read) << server_read->message();
  EXPECT_FALSE(*server_wrote) << server_wrote->message();
  EXPECT_FALSE(*client_read) << client_read->message();
  EXPECT_FALSE(*client_wrote) << client_wrote->message();
  EXPECT_TRUE(server_got == to_server);
  EXPECT_TRUE(client_got == to_client);
  EXPECT_FALSE(server_->HasBufferedInput());
}

TEST_F(ServerStreamTest, AWriteThatFillsTheSocketWaitsForTheClientToReadNotToWrite) {
  ShrinkBuffers();
  Handshake();
  const std::string to_client = Pattern(1 << 20, 'w');
  std::string client_got(to_client.size(), '\0');
  std::optional<error_code> server_wrote, client_read;
  asio::co_spawn(context_, [&]() -> io::Awaitable<void> {
    server_wrote = co_await WriteAll(*server_, to_client);
  }, asio::detached);
  context_.poll();
  ASSERT_FALSE(server_wrote);  // waiting for writability
  // The client only reads, and sends nothing the server could mistake for its cue.
  asio::co_spawn(context_, [&]() -> io::Awaitable<void> {
    auto [ec, n] = co_await asio::async_read(*client_, asio::buffer(client_got), kTuple);
    client_read = ec;
  }, asio::detached);
  context_.run_for(std::chrono::seconds(20));  // a bound for a hang, not a wait: done in ms
  ASSERT_TRUE(server_wrote && client_read) << "the server's write never resumed";
  EXPECT_FALSE(*server_wrote) << server_wrote->message();
  EXPECT_FALSE(*client_read) << client_read->message();
  EXPECT_TRUE(client_got == to_client);
}

TEST_F(ServerStreamTest, AWriteOfSeveralSmallBuffersIsOneRecord) {
  Handshake();
  // A response as the exchange writes it: head, chunk size, data, chunk end, last chunk.
  const std::string head = "HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n";
  const std::string size = "5\r\n", data = "hello", end = "\r\n", last = "0\r\n\r\n";
  const std::array<asio::const_buffer, 6> parts{asio::buffer(head), asio::buffer(size), asio::const_buffer(),
                                                asio::buffer(data), asio::buffer(end), asio::buffer(last)};
  const std::string whole = head + size + data + end + last;
  std::optional<error_code> wrote;
  size_t written = 0;
  asio::co_spawn(context_, [&]() -> io::Awaitable<void> {
    auto [ec, n] = co_await server_->async_write_some(parts, kTuple);
    wrote = ec;
    written = n;
  }, asio::detached);
  context_.run();
  context_.restart();
  ASSERT_TRUE(wrote);
  EXPECT_FALSE(*wrote);
  EXPECT_EQ(written, whole.size());  // all of it in one write_some
  // One record: the client's first read returns all of it.
  std::string got(whole.size() + 10, '\0');
  got.resize(client_->read_some(asio::buffer(got)));
  EXPECT_EQ(got, whole);
}

TEST_F(ServerStreamTest, CloseNotifyIsTheClientsEndOfStreamAndTheClientsIsOurs) {
  Handshake();
  std::optional<error_code> closed, client_eof, server_eof;
  asio::co_spawn(context_, [&]() -> io::Awaitable<void> {
    auto [ec] = co_await server_->async_close_notify(kTuple);
    closed = ec;
  }, asio::detached);
  asio::co_spawn(context_, [&]() -> io::Awaitable<void> {
    char byte;
    auto [ec, n] = co_await client_->async_read_some(asio::buffer(&byte, 1), kTuple);
    client_eof = ec;
    co_await client_->async_shutdown(kTuple);  // the client answers with its own close_notify
    std::string got;
    server_eof = co_await ReadAll(*server_, got, 1);
  }, asio::detached);
  context_.run();
  ASSERT_TRUE(closed && client_eof && server_eof);
  EXPECT_FALSE(*closed) << closed->message();
  EXPECT_EQ(*client_eof, asio::error::eof) << client_eof->message();
  EXPECT_EQ(*server_eof, asio::error::eof) << server_eof->message();
}

TEST_F(ServerStreamTest, AClientGoneWithoutCloseNotifyIsATruncatedStream) {
  Handshake();
  // The TCP end without TLS's: a FIN, no close_notify (a close would send a reset, since the
  // client has not read the server's session tickets).
  client_->next_layer().shutdown(tcp::socket::shutdown_send);
  std::optional<error_code> read;
  asio::co_spawn(context_, [&]() -> io::Awaitable<void> {
    std::string got;
    read = co_await ReadAll(*server_, got, 1);
  }, asio::detached);
  context_.run();
  ASSERT_TRUE(read);
  EXPECT_EQ(*read, ssl::error::stream_truncated) << read->message();
}

TEST_F(ServerStreamTest, ACancelledReadEndsAbortedAndTheNextReadGetsTheData) {
  Handshake();
  std::optional<error_code> first;
  std::string got;
  asio::co_spawn(context_, [&]() -> io::Awaitable<void> {
    first = co_await ReadAll(*server_, got, 1);
  }, asio::detached);
  context_.poll();  // the read now waits for the socket
  ASSERT_FALSE(first);
  error_code ec;
  server_->socket().cancel(ec);
  context_.run();
  context_.restart();
  ASSERT_TRUE(first);
  EXPECT_EQ(*first, asio::error::operation_aborted);
  EXPECT_FALSE(server_->HasBufferedInput());

  // Two records in one write: the first read takes what fits, OpenSSL holds the rest.
  asio::write(*client_, asio::buffer(std::string("hello")));
  asio::write(*client_, asio::buffer(std::string("world")));
  std::optional<error_code> second;
  asio::co_spawn(context_, [&]() -> io::Awaitable<void> {
    second = co_await ReadAll(*server_, got, 10);
  }, asio::detached);
  context_.run();
  ASSERT_TRUE(second);
  EXPECT_FALSE(*second) << second->message();
  EXPECT_EQ(got, "helloworld");
}

TEST_F(ServerStreamTest, WholeRecordsReadAheadAreBufferedInput) {
  Handshake();
  // Two records sent before the server reads: one read of the socket takes both (read-ahead),
  // the first SSL read returns the first record's bytes, and the second record waits in OpenSSL,
  // not in the socket.
  asio::write(*client_, asio::buffer(std::string("first")));
  asio::write(*client_, asio::buffer(std::string("second")));
  // Let both records reach the server's socket.
  char peek[256];
  for (;;) {  // loopback: already there, in practice the first time
    error_code ec;
    const size_t available = server_->socket().receive(asio::buffer(peek), tcp::socket::message_peek, ec);
    ASSERT_TRUE(!ec || ec == asio::error::would_block) << ec.message();
    if (!ec && available >= 2 * (5 + 5 + 16)) break;  // two records: header, text, tag at least
  }
  std::optional<error_code> read;
  std::string got;
  asio::co_spawn(context_, [&]() -> io::Awaitable<void> {
    char buffer[64];
    auto [ec, n] = co_await server_->async_read_some(asio::buffer(buffer), kTuple);
    got.assign(buffer, n);
    read = ec;
  }, asio::detached);
  context_.run();
  ASSERT_TRUE(read);
  EXPECT_FALSE(*read);
  EXPECT_EQ(got, "first");
  EXPECT_TRUE(server_->HasBufferedInput());
}

}  // namespace
}  // namespace fencing
