// An HTTP/2 stream's head as an HTTP/1.1 backend gets it, and the backend's response head as the
// HTTP/2 client gets it (server/h2_http1_relay.h), without sockets.

#include <gtest/gtest.h>

#include "http/response_parser.h"
#include "server/h2_http1_relay.h"

#include <boost/asio/buffer.hpp>

#include <algorithm>
#include <cctype>

#include <string>
#include <vector>

namespace fencing {
namespace {

// The head's lines, without the empty line at its end.
std::vector<std::string> Lines(const std::string& head) {
  std::vector<std::string> lines;
  size_t at = 0;
  while (at < head.size()) {
    size_t end = head.find("\r\n", at);
    if (end == std::string::npos || end == at) break;
    lines.push_back(head.substr(at, end - at));
    at = end + 2;
  }
  return lines;
}

size_t Count(const std::vector<std::string>& lines, const std::string& line) {
  size_t n = 0;
  for (const std::string& l : lines) n += l == line ? 1 : 0;
  return n;
}

bool HasName(const std::vector<std::string>& lines, const std::string& lower_name) {
  for (const std::string& l : lines) {
    std::string name = l.substr(0, l.find(':'));
    for (char& c : name) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
    if (name == lower_name) return true;
  }
  return false;
}

RequestPlan PlanFor(const H2Request& request) {
  RequestPlan plan;
  plan.action = RequestPlan::Action::kForward;
  plan.origin_target = request.head.target();
  return plan;
}

const Http1HeadContext kContext{"10.0.0.7", "backend.internal", true, ""};

TEST(H2RequestHeadTest, PseudoHeadersBecomeTheRequestLineAndAuthorityTheHost) {
  H2Request request;
  ReadH2Request({{":method", "PUT"},
                 {":scheme", "http"},
                 {":authority", "orders.example:8080"},
                 {":path", "/orders/1?x=1"},
                 {"content-type", "text/plain"},
                 {"content-length", "6"}},
                request);
  EXPECT_EQ(request.method, "PUT");
  EXPECT_EQ(request.authority, "orders.example:8080");
  EXPECT_FALSE(request.grpc);
  EXPECT_EQ(request.content_length, 6u);
  EXPECT_FALSE(request.bad_content_length);
  const auto lines = Lines(Http1RequestHead(request, PlanFor(request), NextHopFraming::Length(6), kContext));
  ASSERT_FALSE(lines.empty());
  EXPECT_EQ(lines[0], "PUT /orders/1?x=1 HTTP/1.1");
  EXPECT_EQ(Count(lines, "Host: orders.example:8080"), 1u) << ":authority is the Host";
  EXPECT_EQ(Count(lines, "Content-Length: 6"), 1u) << "framing written by the proxy, once";
  EXPECT_EQ(Count(lines, "content-length: 6"), 0u) << "the client's framing field is never copied";
  EXPECT_EQ(Count(lines, "content-type: text/plain"), 1u);
  EXPECT_EQ(Count(lines, "X-Forwarded-For: 10.0.0.7"), 1u);
  for (const std::string& line : lines) EXPECT_NE(line[0], ':') << "no pseudo-header reaches HTTP/1.1: " << line;
}

TEST(H2RequestHeadTest, AHostFieldWinsOverAuthority) {
  H2Request request;
  ReadH2Request({{":method", "GET"}, {":authority", "a.example"}, {":path", "/"}, {"host", "b.example"}}, request);
  const auto lines = Lines(Http1RequestHead(request, PlanFor(request), NextHopFraming::None(), kContext));
  EXPECT_EQ(Count(lines, "host: b.example"), 1u);
  EXPECT_EQ(Count(lines, "Host: a.example"), 0u);
  EXPECT_FALSE(HasName(lines, "content-length"));
  EXPECT_FALSE(HasName(lines, "transfer-encoding"));
}

TEST(H2RequestHeadTest, NoAuthorityAndNoHostTakesTheBackendsHost) {
  H2Request request;
  ReadH2Request({{":method", "GET"}, {":path", "/"}}, request);
  const auto lines = Lines(Http1RequestHead(request, PlanFor(request), NextHopFraming::None(), kContext));
  EXPECT_EQ(Count(lines, "Host: backend.internal"), 1u);
}

TEST(H2RequestHeadTest, TeAndConnectionSpecificFieldsAreDropped) {
  H2Request request;
  // (the codec refuses connection-specific fields from a client; te: trailers is the one HTTP/2
  // allows, and it means nothing to an HTTP/1.1 backend)
  ReadH2Request({{":method", "POST"}, {":path", "/x"}, {"te", "trailers"}, {"accept", "*/*"}}, request);
  const auto lines = Lines(Http1RequestHead(request, PlanFor(request), NextHopFraming::Chunked(), kContext));
  EXPECT_FALSE(HasName(lines, "te"));
  EXPECT_EQ(Count(lines, "accept: */*"), 1u);
  EXPECT_EQ(Count(lines, "Transfer-Encoding: chunked"), 1u) << "a body of unknown length goes chunked";
}

TEST(H2RequestHeadTest, CookieCrumbsAreJoinedIntoOneField) {
  H2Request request;
  ReadH2Request({{":method", "GET"}, {":path", "/"}, {"cookie", "a=1"}, {"cookie", "b=2"}, {"cookie", "c=3"}},
                request);
  const auto lines = Lines(Http1RequestHead(request, PlanFor(request), NextHopFraming::None(), kContext));
  EXPECT_EQ(Count(lines, "Cookie: a=1; b=2; c=3"), 1u) << "RFC 9113 8.2.3";
  size_t cookies = 0;
  for (const std::string& line : lines) cookies += line.starts_with("Cookie:") || line.starts_with("cookie:");
  EXPECT_EQ(cookies, 1u);
}

TEST(H2RequestHeadTest, TheTokenGoesOnAsTheFenceReadIt) {
  H2Request request;
  ReadH2Request({{":method", "PUT"}, {":path", "/orders/1"}, {"x-fencing-token", "010"}}, request);
  RequestPlan plan = PlanFor(request);
  plan.drop_header = "X-Fencing-Token";
  plan.rewrite_token = true;
  plan.token = 10;
  const auto lines = Lines(Http1RequestHead(request, plan, NextHopFraming::Length(0), kContext));
  EXPECT_EQ(Count(lines, "X-Fencing-Token: 10"), 1u);
  EXPECT_EQ(Count(lines, "x-fencing-token: 010"), 0u);
}

TEST(H2RequestHeadTest, ContentLengthOnlyWhenOnePlainDecimal) {
  H2Request twice;
  ReadH2Request({{":method", "PUT"}, {":path", "/"}, {"content-length", "3"}, {"content-length", "3"}}, twice);
  EXPECT_TRUE(twice.bad_content_length);
  EXPECT_FALSE(twice.content_length);
  H2Request sign;
  ReadH2Request({{":method", "PUT"}, {":path", "/"}, {"content-length", "+3"}}, sign);
  EXPECT_TRUE(sign.bad_content_length);
  H2Request grpc;
  ReadH2Request({{":method", "POST"}, {":path", "/a.B/C"}, {"content-type", "application/grpc+proto"}}, grpc);
  EXPECT_TRUE(grpc.grpc);
}

TEST(H2ResponseHeadTest, ConnectionSpecificFieldsAreDroppedAndTheLengthIsTheProxys) {
  ResponseParser parser;
  const std::string wire =
      "HTTP/1.1 200 OK\r\nContent-Type: text/plain\r\nConnection: keep-alive, X-Hop\r\nKeep-Alive: timeout=5\r\n"
      "X-Hop: 1\r\nProxy-Connection: keep-alive\r\nUpgrade: h2c\r\nContent-Length: 0005\r\nX-End: yes\r\n\r\nhello";
  boost::system::error_code ec;
  parser.put(boost::asio::buffer(wire), ec);
  ASSERT_FALSE(ec) << ec.message();
  ASSERT_TRUE(parser.is_header_done());
  const h2::Headers head = H2ResponseHead(parser.status(), parser.fields(), parser.content_length());
  ASSERT_FALSE(head.empty());
  EXPECT_EQ(head[0].name, ":status");
  EXPECT_EQ(head[0].value, "200");
  std::vector<std::string> names;
  for (const h2::Header& field : head) names.push_back(field.name + ": " + field.value);
  auto has = [&](const std::string& line) { return std::find(names.begin(), names.end(), line) != names.end(); };
  EXPECT_TRUE(has("content-type: text/plain"));
  EXPECT_TRUE(has("x-end: yes"));
  EXPECT_TRUE(has("content-length: 5")) << "in plain decimal, from the parsed framing";
  for (std::string_view gone : {"connection", "keep-alive", "x-hop", "proxy-connection", "upgrade"}) {
    for (const h2::Header& field : head) EXPECT_NE(field.name, gone) << "a connection-specific field reached HTTP/2";
  }
  for (const h2::Header& field : head) {
    for (char c : field.name) EXPECT_FALSE(c >= 'A' && c <= 'Z') << "HTTP/2 field names are lower-case: " << field.name;
  }
}

TEST(H2ResponseHeadTest, AChunkedResponseHasNoLengthAndNoTransferEncoding) {
  ResponseParser parser;
  const std::string wire = "HTTP/1.1 201 Created\r\nTransfer-Encoding: chunked\r\nLocation: /x\r\n\r\n";
  boost::system::error_code ec;
  parser.put(boost::asio::buffer(wire), ec);
  ASSERT_FALSE(ec) << ec.message();
  const h2::Headers head = H2ResponseHead(parser.status(), parser.fields(), parser.content_length());
  EXPECT_EQ(head[0].value, "201");
  for (const h2::Header& field : head) {
    EXPECT_NE(field.name, "transfer-encoding");
    EXPECT_NE(field.name, "content-length");
  }
}

TEST(H2BodyDecoderTest, AnEndStreamBodyEndsAtEndOfStreamAndALengthMustMatch) {
  char out[16];
  BodyDecoder open = BodyDecoder::UntilEnd(8);
  EXPECT_EQ(open.Decode("abc", out, sizeof out).produced, 3u);
  EXPECT_FALSE(open.done());
  open.EndOfStream();
  EXPECT_TRUE(open.done());

  BodyDecoder big = BodyDecoder::UntilEnd(4);
  big.Decode("abcde", out, sizeof out);
  EXPECT_EQ(big.status(), BodyDecoder::Status::kTooLarge);

  BodyDecoder short_one = BodyDecoder::Length(5);
  short_one.Decode("abc", out, sizeof out);
  short_one.EndOfStream();
  EXPECT_TRUE(short_one.failed()) << "fewer DATA bytes than the content-length";

  BodyDecoder long_one = BodyDecoder::Length(2);
  EXPECT_EQ(long_one.Decode("abc", out, sizeof out).consumed, 2u);
  long_one.Overrun();
  EXPECT_TRUE(long_one.failed()) << "more DATA bytes than the content-length";

  BodyDecoder exact = BodyDecoder::Length(3);
  exact.Decode("abc", out, sizeof out);
  exact.EndOfStream();
  EXPECT_TRUE(exact.done());
}

}  // namespace
}  // namespace fencing
