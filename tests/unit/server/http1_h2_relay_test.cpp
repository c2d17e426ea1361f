// The head translations of an HTTP/1.1 request relayed to an HTTP/2 backend
// (server/http1_h2_relay.h): the request head as HTTP/2 fields (pseudo-headers, hop-by-hop fields
// left out, lower-cased names, the proxy's own fields and framing), and the backend's response
// head as an HTTP/1.1 head (read back with Beast's parser), refused when a client could be misled.

#include <gtest/gtest.h>

#include <boost/beast/http.hpp>

#include <string>
#include <string_view>
#include <vector>

#include "server/http1_h2_relay.h"
#include "test_heads.h"

namespace fencing {
namespace {

namespace http = boost::beast::http;

RequestHead Parsed(std::string_view text) {
  RequestHead head;
  boost::system::error_code ec = head.Parse(text, 1 << 20);
  EXPECT_FALSE(ec) << ec.message() << " in:\n" << text;
  return head;
}

std::vector<std::string> H2Values(const h2::Headers& fields, std::string_view name) {
  std::vector<std::string> out;
  for (const h2::Header& field : fields) {
    if (field.name == name) out.push_back(field.value);
  }
  return out;
}

H2RequestHeadInput Input(std::string_view target = "/orders/1") {
  H2RequestHeadInput input;
  input.origin_target = target;
  input.backend_host = "backend.internal";
  input.client_ip = "192.0.2.7";
  input.drop = "X-Fencing-Token";
  return input;
}

// ---------------------------------------------------------------- H2RequestHead

TEST(H2RequestHeadTest, PseudoHeadersFirstFromTheRequestLineAndHost) {
  RequestHead client = Parsed("PUT /orders/1?x=2 HTTP/1.1\r\nHost: client.example\r\nContent-Length: 3\r\n\r\n");
  h2::Headers head = H2RequestHead(client, Input("/orders/1?x=2"));
  ASSERT_GE(head.size(), 4u);
  EXPECT_EQ(head[0].name, ":method");
  EXPECT_EQ(head[0].value, "PUT");
  EXPECT_EQ(head[1].name, ":scheme");
  EXPECT_EQ(head[1].value, "http");
  EXPECT_EQ(head[2].name, ":authority");
  EXPECT_EQ(head[2].value, "client.example");
  EXPECT_EQ(head[3].name, ":path");
  EXPECT_EQ(head[3].value, "/orders/1?x=2");
  for (size_t i = 4; i < head.size(); ++i) EXPECT_NE(head[i].name[0], ':') << head[i].name;
  EXPECT_TRUE(H2Values(head, "host").empty()) << "Host goes as :authority only";
  EXPECT_EQ(H2Values(head, "content-length"), std::vector<std::string>{"3"});
}

TEST(H2RequestHeadTest, AnHttpsBackendGetsSchemeHttps) {
  RequestHead client = Parsed("GET /orders/1 HTTP/1.1\r\nHost: client.example\r\n\r\n");
  H2RequestHeadInput input = Input();
  input.https = true;  // backend_protocol h2: HTTP/2 over TLS to an https:// backend
  h2::Headers head = H2RequestHead(client, input);
  ASSERT_GE(head.size(), 2u);
  EXPECT_EQ(head[1].name, ":scheme");
  EXPECT_EQ(head[1].value, "https");
}

TEST(H2RequestHeadTest, AbsoluteFormAuthorityAndMissingHost) {
  RequestHead client = Parsed("GET http://other.example/a HTTP/1.1\r\nHost: other.example\r\n\r\n");
  H2RequestHeadInput input = Input("/a");
  input.host = "other.example";
  EXPECT_EQ(H2RequestHead(client, input)[2].value, "other.example");
  RequestHead old = Parsed("GET /a HTTP/1.0\r\n\r\n");
  EXPECT_EQ(H2RequestHead(old, Input("/a"))[2].value, "backend.internal");
}

TEST(H2RequestHeadTest, LeavesOutHopByHopFieldsAndThoseConnectionNames) {
  RequestHead client = Parsed(
      "POST /orders/1 HTTP/1.1\r\nHost: h\r\nConnection: keep-alive, X-Secret\r\nKeep-Alive: timeout=5\r\n"
      "Proxy-Connection: keep-alive\r\nX-Secret: s\r\nUpgrade: h2c\r\nTE: gzip\r\nTransfer-Encoding: chunked\r\n"
      "Expect: 100-continue\r\nX-Custom: Kept Value\r\nAccept: */*\r\n\r\n");
  h2::Headers head = H2RequestHead(client, Input());
  for (std::string_view gone : {"connection", "keep-alive", "proxy-connection", "x-secret", "upgrade", "te",
                                "transfer-encoding", "expect", "host"}) {
    EXPECT_TRUE(H2Values(head, gone).empty()) << gone << " must not reach an HTTP/2 backend";
  }
  EXPECT_EQ(H2Values(head, "x-custom"), std::vector<std::string>{"Kept Value"}) << "names lower-cased, values as sent";
  EXPECT_EQ(H2Values(head, "accept"), std::vector<std::string>{"*/*"});
  EXPECT_TRUE(H2Values(head, "content-length").empty()) << "a streamed chunked body has no length";
  for (const h2::Header& field : head) {
    for (char c : field.name) EXPECT_FALSE(c >= 'A' && c <= 'Z') << field.name;
  }
}

TEST(H2RequestHeadTest, TeTrailersOnlyWhenExactlyThat) {
  EXPECT_EQ(H2Values(H2RequestHead(Parsed("POST / HTTP/1.1\r\nHost: h\r\nConnection: TE\r\nTE: trailers\r\n\r\n"),
                                   Input()),
                     "te"),
            std::vector<std::string>{"trailers"});
  EXPECT_TRUE(
      H2Values(H2RequestHead(Parsed("POST / HTTP/1.1\r\nHost: h\r\nTE: trailers, deflate\r\n\r\n"), Input()), "te")
          .empty());
  EXPECT_TRUE(ClientAcceptsTrailers(Parsed("GET / HTTP/1.1\r\nHost: h\r\nTE: trailers\r\n\r\n")));
  EXPECT_FALSE(ClientAcceptsTrailers(Parsed("GET / HTTP/1.1\r\nHost: h\r\n\r\n")));
}

TEST(H2RequestHeadTest, TokenForwardedAsReadAndXForwardedForAppended) {
  RequestHead client = Parsed(
      "PUT / HTTP/1.1\r\nHost: h\r\nX-Fencing-Token: 010\r\nX-Forwarded-For: 10.0.0.1\r\nX-Client-Id: forged\r\n"
      "Transfer-Encoding: chunked\r\n\r\n");
  H2RequestHeadInput input = Input();
  input.token = 10;
  input.identity_header = "X-Client-Id";
  input.identity = "spiffe://a";
  input.whole = 42;  // a chunked body held whole goes with its length, as over HTTP/1.1
  h2::Headers head = H2RequestHead(client, input);
  EXPECT_EQ(H2Values(head, "x-fencing-token"), std::vector<std::string>{"10"});
  EXPECT_EQ(H2Values(head, "x-forwarded-for"), std::vector<std::string>{"10.0.0.1, 192.0.2.7"});
  EXPECT_EQ(H2Values(head, "x-client-id"), std::vector<std::string>{"spiffe://a"});
  EXPECT_EQ(H2Values(head, "content-length"), std::vector<std::string>{"42"});
}

// ---------------------------------------------------------------- Http1ResponseFromH2

http::response_header<> ParseResponse(const std::string& text) {
  http::response_parser<http::empty_body> parser;
  parser.eager(false);
  boost::system::error_code ec;
  size_t used = parser.put(boost::asio::buffer(text), ec);
  EXPECT_FALSE(ec) << ec.message() << " in:\n" << text;
  EXPECT_TRUE(parser.is_header_done()) << text;
  EXPECT_EQ(used, text.size()) << text;
  return parser.release().base();
}

TEST(Http1ResponseFromH2Test, StatusLineFieldsAndChunkedWithoutLength) {
  Http1ResponseHead out = Http1ResponseFromH2({{":status", "201"}, {"content-type", "text/plain"}, {"x-b", "1"}},
                                              false, 11, false, true);
  ASSERT_EQ(out.status, 201u) << out.error;
  EXPECT_EQ(out.framing.kind, BodyFraming::kChunked);
  EXPECT_TRUE(out.head.starts_with("HTTP/1.1 201 Created\r\n")) << out.head;
  EXPECT_EQ(out.head.find(":status"), std::string::npos) << "no pseudo-header reaches HTTP/1.1";
  http::response_header<> head = ParseResponse(out.head);
  EXPECT_EQ(head.result_int(), 201u);
  EXPECT_EQ(head[http::field::content_type], "text/plain");
  EXPECT_EQ(head["x-b"], "1");
  EXPECT_EQ(head[http::field::transfer_encoding], "chunked");
  EXPECT_EQ(head.count(http::field::connection), 0u) << "keep-alive is HTTP/1.1's default";
}

TEST(Http1ResponseFromH2Test, LengthFromTheBackendAndEmptyBodies) {
  Http1ResponseHead out = Http1ResponseFromH2({{":status", "200"}, {"content-length", "12"}}, false, 11, false, true);
  ASSERT_EQ(out.status, 200u);
  EXPECT_EQ(out.content_length, 12u);
  EXPECT_EQ(ParseResponse(out.head)[http::field::content_length], "12");
  EXPECT_EQ(ParseResponse(out.head).count(http::field::transfer_encoding), 0u);

  Http1ResponseHead ended = Http1ResponseFromH2({{":status", "200"}}, true, 11, false, true);
  EXPECT_EQ(ParseResponse(ended.head)[http::field::content_length], "0") << "a head that ended the stream";

  Http1ResponseHead no_content = Http1ResponseFromH2({{":status", "204"}, {"content-length", "0"}}, true, 11, false, true);
  EXPECT_TRUE(no_content.no_body);
  EXPECT_EQ(ParseResponse(no_content.head).count(http::field::content_length), 0u);

  Http1ResponseHead head = Http1ResponseFromH2({{":status", "200"}, {"content-length", "7"}}, true, 11, true, true);
  EXPECT_TRUE(head.no_body) << "a HEAD request's answer has no body";
  EXPECT_FALSE(head.content_length) << "no DATA to match";
}

TEST(Http1ResponseFromH2Test, Http10ClientGetsTheCloseAndInterimHeadsAreMarked) {
  Http1ResponseHead out = Http1ResponseFromH2({{":status", "200"}}, false, 10, false, true);
  EXPECT_EQ(out.framing.kind, BodyFraming::kClose);
  EXPECT_FALSE(out.keep_alive);
  EXPECT_TRUE(out.head.starts_with("HTTP/1.0 200 OK\r\n")) << out.head;
  Http1ResponseHead interim = Http1ResponseFromH2({{":status", "103"}, {"link", "</a>"}}, false, 11, false, true);
  EXPECT_TRUE(interim.interim);
}

TEST(Http1ResponseFromH2Test, RefusesHeadsThatCouldMisleadTheClient) {
  const std::vector<h2::Headers> refused = {
      {},                                                              // no :status
      {{":status", "20"}},                                             // not three digits
      {{":status", "600"}},
      {{":status", "101"}},                                            // HTTP/2 has no upgrade
      {{":status", "200"}, {":path", "/"}},                            // a request pseudo-header
      {{"x-a", "1"}, {":status", "200"}},                              // pseudo-header after a field
      {{":status", "200"}, {"x-a", "1\r\nSet-Cookie: s=1"}},           // a line break in a value
      {{":status", "200"}, {"x-a", std::string("a\0b", 3)}},           // NUL
      {{":status", "200"}, {"X-Upper", "1"}},                          // upper-case name
      {{":status", "200"}, {"bad name", "1"}},                         // not a token
      {{":status", "200"}, {"transfer-encoding", "chunked"}},          // connection-specific
      {{":status", "200"}, {"connection", "close"}},
      {{":status", "200"}, {"content-length", "1"}, {"content-length", "2"}},  // conflicting lengths
      {{":status", "200"}, {"content-length", "+1"}},
  };
  for (const h2::Headers& fields : refused) {
    Http1ResponseHead out = Http1ResponseFromH2(fields, false, 11, false, true);
    std::string shown;
    for (const h2::Header& f : fields) shown += f.name + "=" + f.value + " ";
    EXPECT_EQ(out.status, 0u) << "refused: " << shown;
    EXPECT_FALSE(out.error.empty()) << shown;
    EXPECT_TRUE(out.head.empty()) << shown;
  }
}

TEST(ChunkedTrailersTest, LastChunkWithEndToEndTrailersOnly) {
  const std::string out = ChunkedTrailers({{"grpc-status", "0"}, {"content-length", "5"}, {"x-t", "a\nb"}, {"x-u", "ok"}});
  EXPECT_EQ(out, "0\r\ngrpc-status: 0\r\nx-u: ok\r\n\r\n");
  EXPECT_EQ(ChunkedTrailers({}), "0\r\n\r\n");
}

}  // namespace
}  // namespace fencing
