// RequestBody::Feed: a body within `keep` is held whole (and can be resent), a longer one stops
// at `keep`, growth out of the relay buffer keeps every byte, and bytes after the body stay in
// the client's buffer for the next pipelined request.

#include <gtest/gtest.h>

#include <boost/asio/buffer.hpp>

#include <cstdio>

#include <string>
#include <string_view>
#include <vector>

#include "server/request_body.h"

namespace fencing {
namespace {

constexpr size_t kRelaySize = 64;

void Append(ClientBuffer& buffer, std::string_view bytes) {
  auto room = buffer.prepare(bytes.size());
  boost::asio::buffer_copy(room, boost::asio::buffer(bytes.data(), bytes.size()));
  buffer.commit(bytes.size());
}

std::string Left(const ClientBuffer& buffer) {
  return std::string(static_cast<const char*>(buffer.data().data()), buffer.size());
}

std::string Held(const RequestBody& body) { return std::string(body.data(), body.size()); }

// Bytes that differ at every position, so a shifted or truncated copy shows.
std::string Pattern(size_t n) {
  std::string s(n, '\0');
  for (size_t i = 0; i < n; ++i) s[i] = static_cast<char>('a' + (i * 7 + i / 26) % 26);
  return s;
}

std::string Chunked(const std::string& body, size_t chunk) {
  std::string out;
  char line[32];
  for (size_t i = 0; i < body.size(); i += chunk) {
    size_t n = std::min(chunk, body.size() - i);
    std::snprintf(line, sizeof line, "%zx\r\n", n);
    out += line + body.substr(i, n) + "\r\n";
  }
  return out + "0\r\n\r\n";
}

const std::string kNext = "GET /next HTTP/1.1\r\nHost: b\r\n\r\n";

TEST(RequestBodyTest, BodyWithinTheRelayBufferIsHeldThere) {
  std::vector<char> relay(kRelaySize);
  const std::string body = Pattern(40);
  RequestBody rb(BodyDecoder::Length(body.size()), relay.data(), relay.size());
  ClientBuffer in;
  Append(in, body + kNext);
  rb.Feed(in, 1024);
  EXPECT_TRUE(rb.complete());
  EXPECT_TRUE(rb.whole());
  EXPECT_TRUE(rb.resendable());
  EXPECT_FALSE(rb.failed());
  EXPECT_EQ(rb.data(), relay.data()) << "no buffer of its own for a body the relay buffer holds";
  EXPECT_EQ(Held(rb), body);
  EXPECT_EQ(Left(in), kNext);
}

TEST(RequestBodyTest, BodyWithinKeepIsHeldWholeBeyondTheRelayBuffer) {
  std::vector<char> relay(kRelaySize);
  const std::string body = Pattern(1000);
  RequestBody rb(BodyDecoder::Length(body.size()), relay.data(), relay.size());
  ClientBuffer in;
  // As the client sends it: in pieces, each fed as it arrives.
  for (size_t i = 0; i < body.size(); i += 37) {
    Append(in, body.substr(i, 37));
    rb.Feed(in, 1024);
    EXPECT_EQ(in.size(), 0u) << "at " << i << ": everything up to keep is taken";
  }
  Append(in, kNext);
  rb.Feed(in, 1024);
  EXPECT_TRUE(rb.complete());
  EXPECT_TRUE(rb.whole());
  EXPECT_TRUE(rb.resendable());
  EXPECT_FALSE(rb.full(1024));
  EXPECT_NE(rb.data(), relay.data());
  EXPECT_EQ(rb.size(), body.size());
  EXPECT_EQ(Held(rb), body);
  EXPECT_EQ(Left(in), kNext);
}

TEST(RequestBodyTest, ChunkedBodyGrowsByDoublingAndKeepsItsBytes) {
  // A chunked body's length is unknown: the held buffer doubles, several times here, and each
  // copy must carry every byte held so far.
  std::vector<char> relay(16);
  const std::string body = Pattern(900);
  const std::string wire = Chunked(body, 50) + kNext;
  RequestBody rb(BodyDecoder::Chunked(1 << 20), relay.data(), relay.size());
  ClientBuffer in;
  for (size_t i = 0; i < wire.size(); i += 11) {
    Append(in, wire.substr(i, 11));
    rb.Feed(in, 4096);
  }
  ASSERT_TRUE(rb.complete()) << rb.decoder().reason();
  EXPECT_TRUE(rb.whole());
  EXPECT_EQ(Held(rb), body);
  EXPECT_EQ(Left(in), kNext);
}

TEST(RequestBodyTest, BodyOverKeepStopsAtKeep) {
  std::vector<char> relay(kRelaySize);
  const size_t keep = 256;
  const std::string body = Pattern(300);
  RequestBody rb(BodyDecoder::Length(body.size()), relay.data(), relay.size());
  ClientBuffer in;
  Append(in, body + kNext);
  rb.Feed(in, keep);
  EXPECT_FALSE(rb.complete());
  EXPECT_FALSE(rb.whole());
  EXPECT_TRUE(rb.resendable()) << "nothing has been written and dropped yet";
  EXPECT_TRUE(rb.full(keep));
  EXPECT_EQ(rb.size(), keep);
  EXPECT_EQ(Held(rb), body.substr(0, keep));
  EXPECT_EQ(Left(in), body.substr(keep) + kNext) << "the rest stays unread";
  // Feeding again while full takes nothing.
  rb.Feed(in, keep);
  EXPECT_EQ(rb.size(), keep);
  EXPECT_EQ(Left(in), body.substr(keep) + kNext);
}

TEST(RequestBodyTest, StreamingHoldsAtMostTheRelayBuffer) {
  // keep 0 (a body announced longer than the buffered limit): the relay buffer is the limit.
  std::vector<char> relay(kRelaySize);
  const std::string body = Pattern(150);
  RequestBody rb(BodyDecoder::Length(body.size()), relay.data(), relay.size());
  ClientBuffer in;
  Append(in, body + kNext);
  std::string sent;
  rb.Feed(in, 0);
  EXPECT_EQ(rb.data(), relay.data());
  EXPECT_EQ(rb.size(), kRelaySize);
  EXPECT_TRUE(rb.full(0));
  // Writing what was held and dropping it, as the exchange does.
  for (int pieces = 0; !rb.complete(); ++pieces) {
    ASSERT_LT(pieces, 10) << "the body never completes";
    ASSERT_LE(rb.size(), kRelaySize);
    sent += Held(rb);
    rb.DropHeld();
    EXPECT_FALSE(rb.resendable());
    EXPECT_EQ(rb.size(), 0u);
    rb.Feed(in, 0);
  }
  sent += Held(rb);
  EXPECT_EQ(sent, body);
  EXPECT_FALSE(rb.whole()) << "complete, but part of it is gone: it cannot be sent again";
  EXPECT_FALSE(rb.resendable());
  EXPECT_EQ(Left(in), kNext);
}

TEST(RequestBodyTest, DropHeldOfNothingKeepsItResendable) {
  std::vector<char> relay(kRelaySize);
  RequestBody rb(BodyDecoder::Length(10), relay.data(), relay.size());
  rb.DropHeld();
  EXPECT_TRUE(rb.resendable());
  ClientBuffer in;
  Append(in, "0123456789");
  rb.Feed(in, 0);
  ASSERT_TRUE(rb.complete());
  EXPECT_TRUE(rb.whole());
  rb.DropHeld();
  EXPECT_FALSE(rb.resendable());
  EXPECT_FALSE(rb.whole());
}

TEST(RequestBodyTest, MalformedChunkedBodyFailsAndLeavesTheRest) {
  std::vector<char> relay(kRelaySize);
  RequestBody rb(BodyDecoder::Chunked(1 << 20), relay.data(), relay.size());
  ClientBuffer in;
  Append(in, "5\r\nhello\r\n3\nabc\r\n0\r\n\r\n");
  rb.Feed(in, 1024);
  EXPECT_TRUE(rb.failed());
  EXPECT_FALSE(rb.complete());
  EXPECT_FALSE(rb.whole());
  EXPECT_EQ(Held(rb), "hello");
  EXPECT_EQ(std::string(rb.decoder().reason()), "a bare LF in the chunk framing");
  EXPECT_EQ(Left(in), "abc\r\n0\r\n\r\n");
}

TEST(RequestBodyTest, NoBodyLeavesTheNextRequestAlone) {
  std::vector<char> relay(kRelaySize);
  RequestBody rb(BodyDecoder(), relay.data(), relay.size());
  ClientBuffer in;
  Append(in, kNext);
  rb.Feed(in, 1024);
  EXPECT_TRUE(rb.whole());
  EXPECT_EQ(rb.size(), 0u);
  EXPECT_EQ(Left(in), kNext);
}

}  // namespace
}  // namespace fencing
