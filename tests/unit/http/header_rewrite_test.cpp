// The heads written for the next hop (http/header_rewrite.h): hop-by-hop fields,
// X-Forwarded-For, Host and framing, read back with Beast's parser.

#include <gtest/gtest.h>

#include <boost/beast/http.hpp>

#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "http/header_rewrite.h"
#include "test_heads.h"

namespace fencing {
namespace {

namespace http = boost::beast::http;

// ---------------------------------------------------------------- UpstreamRequestHead

// Reads a serialised head back with Beast's parser, so the checks are about what a backend sees.
template <bool kIsRequest>
http::header<kIsRequest> ParseHead(const std::string& text) {
  http::parser<kIsRequest, http::empty_body> parser;
  parser.eager(false);
  boost::system::error_code ec;
  size_t used = parser.put(boost::asio::buffer(text), ec);
  EXPECT_FALSE(ec) << ec.message() << " in:\n" << text;
  EXPECT_TRUE(parser.is_header_done()) << text;
  EXPECT_EQ(used, text.size()) << "the head is exactly what was written: " << text;
  return parser.release().base();
}
http::request_header<> ParseRequestHead(const std::string& text) { return ParseHead<true>(text); }
http::response_header<> ParseResponseHead(const std::string& text) { return ParseHead<false>(text); }

TEST(UpstreamRequestHeadTest, RemovesHopByHopFieldsAndKeepsEndToEndOnes) {
  RequestHead client = Request(11, {{"Host", "client.example"},
                                               {"Connection", "close, X-Secret"},
                                               {"Keep-Alive", "timeout=5"},
                                               {"Proxy-Connection", "keep-alive"},
                                               {"TE", "trailers"},
                                               {"Trailer", "X-Checksum"},
                                               {"Transfer-Encoding", "chunked"},
                                               {"Upgrade", "websocket"},
                                               {"Expect", "100-continue"},
                                               {"Content-Length", "5"},
                                               {"X-Secret", "hunter2"},
                                               {"Accept", "*/*"},
                                               {"X-Custom", "1"},
                                               {"X-Multi", "a"},
                                               {"X-Multi", "b"},
                                               {"X-Fencing-Token", "7"}});
  http::request_header<> up =
      ParseRequestHead(UpstreamRequestHead(client, NextHopFraming::Length(5), "/orders/1?x=1", "", "127.0.0.1", "backend:8081", ""));

  for (const char* gone : {"Connection", "Keep-Alive", "Proxy-Connection", "TE", "Trailer", "Transfer-Encoding",
                           "Upgrade", "Expect", "X-Secret"}) {
    EXPECT_TRUE(Values(up, gone).empty()) << gone << " reached the backend";
  }
  EXPECT_EQ(Values(up, "Content-Length"), std::vector<std::string>{"5"}) << "the client's framing, set afresh";
  EXPECT_EQ(Values(up, "Accept"), std::vector<std::string>{"*/*"});
  EXPECT_EQ(Values(up, "X-Custom"), std::vector<std::string>{"1"});
  EXPECT_EQ(Values(up, "X-Multi"), (std::vector<std::string>{"a", "b"})) << "repeated fields keep their order";
  EXPECT_EQ(Values(up, "X-Fencing-Token"), std::vector<std::string>{"7"}) << "no drop header given";
  EXPECT_EQ(Values(up, "Host"), std::vector<std::string>{"client.example"});
  EXPECT_EQ(up.method(), http::verb::post);
  EXPECT_EQ(up.target(), "/orders/1?x=1");
  EXPECT_EQ(up.version(), 11u);
}

TEST(UpstreamRequestHeadTest, DropsTheTokenHeaderCaseInsensitively) {
  RequestHead client = Request(11, {{"x-fencing-TOKEN", "7"}, {"X-Other", "1"}});
  http::request_header<> up =
      ParseRequestHead(UpstreamRequestHead(client, NextHopFraming::None(), "/o", "", "10.0.0.1", "b", "X-Fencing-Token"));
  EXPECT_TRUE(Values(up, "X-Fencing-Token").empty());
  EXPECT_EQ(Values(up, "X-Other"), std::vector<std::string>{"1"});
}

// A route's identity_header: whatever the client sent under that name is dropped (any case,
// every repeat), and the proxy's one field carries the client's identities, or none is written.
TEST(UpstreamRequestHeadTest, ReplacesTheIdentityHeader) {
  RequestHead client = Request(11, {{"X-Client-Identity", "spiffe://forged"},
                                    {"x-client-identity", "dns:forged"},
                                    {"X-Fencing-Token", "7"},
                                    {"X-Other", "1"}});
  http::request_header<> up = ParseRequestHead(
      UpstreamRequestHead(client, NextHopFraming::None(), "/o", "", "10.0.0.1", "b", "X-Fencing-Token", true, 7,
                          "X-Client-Identity", "spiffe://td/ns/shop/sa/w, dns:batch.shop.svc"));
  EXPECT_EQ(Values(up, "X-Client-Identity"), std::vector<std::string>{"spiffe://td/ns/shop/sa/w, dns:batch.shop.svc"});
  EXPECT_EQ(Values(up, "X-Fencing-Token"), std::vector<std::string>{"7"});
  EXPECT_EQ(Values(up, "X-Other"), std::vector<std::string>{"1"});

  // A client without an identity: the forged fields go, nothing comes in their place.
  http::request_header<> none = ParseRequestHead(UpstreamRequestHead(
      client, NextHopFraming::None(), "/o", "", "10.0.0.1", "b", "", true, std::nullopt, "X-Client-Identity", ""));
  EXPECT_TRUE(Values(none, "X-Client-Identity").empty());
  EXPECT_EQ(Values(none, "X-Fencing-Token"), std::vector<std::string>{"7"});
}

TEST(UpstreamRequestHeadTest, DropsFieldsNamedWithAnUnderscoreUnlessTold) {
  RequestHead client = Request(11, {{"X-Fencing-Token", "7"}, {"X_Fencing_Token", "99"},
                                               {"a_b", "1"}, {"_", "2"}, {"X-Kept", "3"}});
  http::request_header<> dropped =
      ParseRequestHead(UpstreamRequestHead(client, NextHopFraming::None(), "/o", "", "10.0.0.1", "b", "", /*drop_underscored=*/true));
  EXPECT_EQ(Values(dropped, "X-Fencing-Token"), std::vector<std::string>{"7"});
  for (const char* gone : {"X_Fencing_Token", "a_b", "_"}) EXPECT_TRUE(Values(dropped, gone).empty()) << gone;
  EXPECT_EQ(Values(dropped, "X-Kept"), std::vector<std::string>{"3"});

  http::request_header<> kept =
      ParseRequestHead(UpstreamRequestHead(client, NextHopFraming::None(), "/o", "", "10.0.0.1", "b", "", /*drop_underscored=*/false));
  EXPECT_EQ(Values(kept, "X_Fencing_Token"), std::vector<std::string>{"99"});
  EXPECT_EQ(Values(kept, "a_b"), std::vector<std::string>{"1"});
}

TEST(UpstreamRequestHeadTest, ConnectionTokensAreMatchedCaseInsensitivelyAcrossFields) {
  RequestHead client = Request(11, {{"Connection", "keep-alive"},
                                               {"Connection", "x-secret , X-Other"},
                                               {"X-SECRET", "1"},
                                               {"x-other", "2"},
                                               {"X-Kept", "3"}});
  http::request_header<> up = ParseRequestHead(UpstreamRequestHead(client, NextHopFraming::None(), "/o", "", "10.0.0.1", "b", ""));
  EXPECT_TRUE(Values(up, "X-Secret").empty());
  EXPECT_TRUE(Values(up, "X-Other").empty());
  EXPECT_EQ(Values(up, "X-Kept"), std::vector<std::string>{"3"});
}

TEST(UpstreamRequestHeadTest, AppendsTheClientToAllForwardedForFieldsAsOne) {
  RequestHead client =
      Request(11, {{"X-Forwarded-For", "a"}, {"Accept", "*/*"}, {"x-forwarded-for", "b"}});
  http::request_header<> up = ParseRequestHead(UpstreamRequestHead(client, NextHopFraming::None(), "/o", "", "127.0.0.1", "b", ""));
  EXPECT_EQ(Values(up, "X-Forwarded-For"), std::vector<std::string>{"a, b, 127.0.0.1"});
}

TEST(UpstreamRequestHeadTest, StartsForwardedForWhenAbsent) {
  RequestHead client = Request(11, {});
  http::request_header<> up = ParseRequestHead(UpstreamRequestHead(client, NextHopFraming::None(), "/o", "", "::1", "b", ""));
  EXPECT_EQ(Values(up, "X-Forwarded-For"), std::vector<std::string>{"::1"});
}

// An absolute-form target's authority is the Host the backend sees (RFC 9112 section 3.2.2).
TEST(UpstreamRequestHeadTest, AGivenHostReplacesTheClientsHost) {
  RequestHead client = Request(11, {{"Host", "client.example"}, {"Accept", "*/*"}, {"host", "again"}});
  http::request_header<> up =
      ParseRequestHead(UpstreamRequestHead(client, NextHopFraming::None(), "/o", "other.example:81", "1.2.3.4", "b", ""));
  EXPECT_EQ(Values(up, "Host"), std::vector<std::string>{"other.example:81"});
  EXPECT_EQ(Values(up, "Accept"), std::vector<std::string>{"*/*"});

  http::request_header<> old =
      ParseRequestHead(UpstreamRequestHead(Request(10, {}), NextHopFraming::None(), "/o", "[::1]", "1.2.3.4", "b", ""));
  EXPECT_EQ(Values(old, "Host"), std::vector<std::string>{"[::1]"}) << "and stands in for a missing one";
}

TEST(UpstreamRequestHeadTest, SetsHostToTheBackendOnlyWhenAbsent) {
  http::request_header<> up =
      ParseRequestHead(UpstreamRequestHead(Request(10, {}), NextHopFraming::None(), "/o", "", "1.2.3.4", "backend:8081", ""));
  EXPECT_EQ(Values(up, "Host"), std::vector<std::string>{"backend:8081"});
  EXPECT_EQ(up.version(), 11u) << "the upstream hop is always HTTP/1.1";
}

TEST(UpstreamRequestHeadTest, CopiesAnExtensionMethod) {
  RequestHead client = Request(11, {});
  client.method_string("PURGE");
  http::request_header<> up = ParseRequestHead(UpstreamRequestHead(client, NextHopFraming::None(), "/o", "", "1.2.3.4", "b", ""));
  EXPECT_EQ(up.method_string(), "PURGE");
}

TEST(UpstreamRequestHeadTest, ChunkedBodyStaysChunked) {
  RequestHead client = Request(11, {{"Transfer-Encoding", "chunked"}});
  http::request_header<> up = ParseRequestHead(UpstreamRequestHead(client, NextHopFraming::Chunked(), "/o", "", "1.2.3.4", "b", ""));
  EXPECT_EQ(Values(up, "Transfer-Encoding"), std::vector<std::string>{"chunked"});
  EXPECT_TRUE(Values(up, "Content-Length").empty());
}

// The exact bytes, field by field in order: the writers size the head before they fill it, so
// every kind of line is pinned here (hop-by-hop and Connection-listed fields left out, the
// client's X-Forwarded-For fields folded into one after the rest, Host replaced, kept or added,
// Content-Length or chunked), not only what a parser reads back.
TEST(UpstreamRequestHeadTest, WritesExactlyTheseBytes) {
  RequestHead client = Request(11, {{"Host", "client.example"},
                                    {"connection", "Keep-Alive, x-hop"},
                                    {"X-Forwarded-For", "10.0.0.1"},
                                    {"Accept", "*/*"},
                                    {"X-Hop", "gone"},
                                    {"Keep-Alive", "timeout=5"},
                                    {"x-forwarded-for", "10.0.0.2, 10.0.0.3"},
                                    {"X_Under", "gone"},
                                    {"X-Fencing-Token", "7"},
                                    {"Expect", "100-continue"},
                                    {"Content-Length", "12"},
                                    {"X-Empty", ""}});
  EXPECT_EQ(UpstreamRequestHead(client, NextHopFraming::Length(12), "/orders/1?a=b", "", "192.0.2.1", "backend:8081", "x-fencing-token"),
            "POST /orders/1?a=b HTTP/1.1\r\n"
            "Host: client.example\r\n"
            "Accept: */*\r\n"
            "X-Empty: \r\n"
            "X-Forwarded-For: 10.0.0.1, 10.0.0.2, 10.0.0.3, 192.0.2.1\r\n"
            "Content-Length: 12\r\n"
            "\r\n");

  RequestHead chunked = Request(10, {{"Transfer-Encoding", "chunked"}, {"Host", "client.example"}, {"X_Kept", "1"}},
                                boost::beast::http::verb::put);
  EXPECT_EQ(UpstreamRequestHead(chunked, NextHopFraming::Chunked(), "/p", "authority.example", "::1", "backend:8081", "",
                                /*drop_underscored=*/false),
            "PUT /p HTTP/1.1\r\n"
            "X_Kept: 1\r\n"
            "X-Forwarded-For: ::1\r\n"
            "Host: authority.example\r\n"
            "Transfer-Encoding: chunked\r\n"
            "\r\n");

  RequestHead bare = Request(10, {}, boost::beast::http::verb::get);
  EXPECT_EQ(UpstreamRequestHead(bare, NextHopFraming::None(), "/", "", "127.0.0.1", "backend:8081", "X-Fencing-Token"),
            "GET / HTTP/1.1\r\n"
            "X-Forwarded-For: 127.0.0.1\r\n"
            "Host: backend:8081\r\n"
            "\r\n");
}

// The client's framing bytes never reach the backend: a Content-Length spelled "0300" (octal 192
// to a lenient reader), a list, or a chunked coding, are left out; the proxy writes the framing it
// was given, in plain decimal.
TEST(UpstreamRequestHeadTest, WritesItsOwnFramingNeverTheClients) {
  RequestHead client = Request(11, {{"Host", "h"}, {"Content-Length", "0300"}, {"X-A", "1"}});
  EXPECT_EQ(UpstreamRequestHead(client, NextHopFraming::Length(300), "/o", "", "1.2.3.4", "b", ""),
            "POST /o HTTP/1.1\r\nHost: h\r\nX-A: 1\r\nX-Forwarded-For: 1.2.3.4\r\nContent-Length: 300\r\n\r\n");
  RequestHead listed = Request(11, {{"Host", "h"}, {"Content-Length", "5, 5"}, {"Transfer-Encoding", "chunked"}});
  EXPECT_EQ(UpstreamRequestHead(listed, NextHopFraming::Length(18446744073709551615u), "/o", "", "1.2.3.4", "b", ""),
            "POST /o HTTP/1.1\r\nHost: h\r\nX-Forwarded-For: 1.2.3.4\r\nContent-Length: 18446744073709551615\r\n\r\n");
  EXPECT_EQ(UpstreamRequestHead(listed, NextHopFraming::Length(0), "/o", "", "1.2.3.4", "b", ""),
            "POST /o HTTP/1.1\r\nHost: h\r\nX-Forwarded-For: 1.2.3.4\r\nContent-Length: 0\r\n\r\n");
  EXPECT_EQ(UpstreamRequestHead(listed, NextHopFraming::None(), "/o", "", "1.2.3.4", "b", ""),
            "POST /o HTTP/1.1\r\nHost: h\r\nX-Forwarded-For: 1.2.3.4\r\n\r\n");
}

// A fenced request's token goes on as the proxy read it: every client field of the token header
// (any case) is left out, one is written with the value in plain decimal.
TEST(UpstreamRequestHeadTest, WritesTheTokenAsParsed) {
  RequestHead client = Request(11, {{"Host", "h"}, {"x-fencing-token", "010"}, {"X-A", "1"}});
  EXPECT_EQ(UpstreamRequestHead(client, NextHopFraming::None(), "/o", "", "1.2.3.4", "b", "X-Fencing-Token",
                                true, 10),
            "POST /o HTTP/1.1\r\nHost: h\r\nX-A: 1\r\nX-Forwarded-For: 1.2.3.4\r\nX-Fencing-Token: 10\r\n\r\n");
  RequestHead longest = Request(11, {{"X-Fencing-Token", "18446744073709551615"}});
  EXPECT_EQ(UpstreamRequestHead(longest, NextHopFraming::None(), "/o", "", "1.2.3.4", "b", "X-Fencing-Token", true,
                                18446744073709551615u),
            "POST /o HTTP/1.1\r\nX-Forwarded-For: 1.2.3.4\r\nHost: b\r\nX-Fencing-Token: 18446744073709551615\r\n\r\n");
}

// A head longer than any first guess at its size.
TEST(UpstreamRequestHeadTest, WritesALongHeadWhole) {
  Fields fields;
  std::string expected_fields;
  for (int i = 0; i < 40; ++i) {
    fields.emplace_back("X-Field-" + std::to_string(i), std::string(50 + i, static_cast<char>('a' + i % 26)));
    expected_fields += fields.back().first + ": " + fields.back().second + "\r\n";
  }
  const std::string target = "/" + std::string(3000, 't');
  EXPECT_EQ(UpstreamRequestHead(Request(11, fields), NextHopFraming::None(), target, "", "127.0.0.1", "b", ""),
            "POST " + target + " HTTP/1.1\r\n" + expected_fields + "X-Forwarded-For: 127.0.0.1\r\nHost: b\r\n\r\n");
}

// A backend's response head, as the exchange's parser (ResponseParser) hands its fields over.
HeadFields Response(const Fields& fields) {
  HeadFields res;
  for (const auto& [name, value] : fields) res.Add(http::string_to_field(name), name, value);
  return res;
}

TEST(ClientResponseHeadTest, CopiesEndToEndFieldsAndSetsFramingAfresh) {
  HeadFields from = Response({{"Content-Type", "text/plain"},
                              {"Content-Length", "12"},
                              {"Transfer-Encoding", "chunked"},
                              {"Connection", "keep-alive, X-Hop"},
                              {"X-Hop", "1"},
                              {"Set-Cookie", "a=1"},
                              {"Set-Cookie", "b=2"}});
  http::response_header<> to =
      ParseResponseHead(ClientResponseHead(201, "Created", from, 11, NextHopFraming::Length(12), true));
  EXPECT_EQ(to.result_int(), 201u);
  EXPECT_EQ(to.reason(), "Created");
  EXPECT_EQ(to.version(), 11u);
  EXPECT_EQ(Values(to, "Content-Type"), std::vector<std::string>{"text/plain"});
  EXPECT_EQ(Values(to, "Set-Cookie"), (std::vector<std::string>{"a=1", "b=2"}));
  EXPECT_EQ(Values(to, "Content-Length"), std::vector<std::string>{"12"});
  for (const char* gone : {"Transfer-Encoding", "Connection", "X-Hop"}) {
    EXPECT_TRUE(Values(to, gone).empty()) << gone;
  }
}

TEST(ClientResponseHeadTest, FramingAndConnectionFollowTheClientsVersion) {
  HeadFields from = Response({{"Transfer-Encoding", "chunked"}});
  http::response_header<> chunked = ParseResponseHead(ClientResponseHead(200, "OK", from, 11, NextHopFraming::Chunked(), true));
  EXPECT_EQ(Values(chunked, "Transfer-Encoding"), std::vector<std::string>{"chunked"});
  EXPECT_TRUE(Values(chunked, "Connection").empty()) << "keep-alive is HTTP/1.1's default";
  http::response_header<> closing = ParseResponseHead(ClientResponseHead(200, "OK", from, 11, NextHopFraming::Chunked(), false));
  EXPECT_EQ(Values(closing, "Connection"), std::vector<std::string>{"close"});
  http::response_header<> old = ParseResponseHead(ClientResponseHead(200, "OK", from, 10, NextHopFraming::Close(), false));
  EXPECT_EQ(old.version(), 10u);
  EXPECT_TRUE(Values(old, "Transfer-Encoding").empty()) << "HTTP/1.0 has no chunked coding";
  EXPECT_TRUE(Values(old, "Connection").empty()) << "close is HTTP/1.0's default";
  http::response_header<> old_kept = ParseResponseHead(ClientResponseHead(200, "OK", from, 10, NextHopFraming::None(), true));
  EXPECT_EQ(Values(old_kept, "Connection"), std::vector<std::string>{"keep-alive"});
}

TEST(ClientResponseHeadTest, WritesExactlyTheseBytes) {
  HeadFields from = Response({{"Server", "nginx"},
                              {"Connection", "keep-alive, X-Hop"},
                              {"Content-Length", "2"},
                              {"x-hop", "gone"},
                              {"Transfer-Encoding", "chunked"},
                              {"Upgrade", "h2c"},
                              {"Set-Cookie", "a=1"},
                              {"X-Forwarded-For", "kept in a response"},
                              {"X_Under", "kept in a response"}});
  const std::string fields =
      "Server: nginx\r\n"
      "Set-Cookie: a=1\r\n"
      "X-Forwarded-For: kept in a response\r\n"
      "X_Under: kept in a response\r\n";
  EXPECT_EQ(ClientResponseHead(200, "OK", from, 11, NextHopFraming::Length(2), true),
            "HTTP/1.1 200 OK\r\n" + fields + "Content-Length: 2\r\n\r\n");
  EXPECT_EQ(ClientResponseHead(404, "Not Found", from, 11, NextHopFraming::Chunked(), false),
            "HTTP/1.1 404 Not Found\r\n" + fields + "Transfer-Encoding: chunked\r\nConnection: close\r\n\r\n");
  EXPECT_EQ(ClientResponseHead(599, "", from, 10, NextHopFraming::Close(), false),
            "HTTP/1.0 599 \r\n" + fields + "\r\n");
  EXPECT_EQ(ClientResponseHead(204, "No Content", from, 10, NextHopFraming::None(), true),
            "HTTP/1.0 204 No Content\r\n" + fields + "Connection: keep-alive\r\n\r\n");
  EXPECT_EQ(ClientResponseHead(100, "Continue", HeadFields(), 11, NextHopFraming::None(), true),
            "HTTP/1.1 100 Continue\r\n\r\n");
  // A status is three digits from a backend; the writer does not depend on it.
  EXPECT_EQ(ClientResponseHead(0, "x", HeadFields(), 11, NextHopFraming::None(), true), "HTTP/1.1 0 x\r\n\r\n");
  EXPECT_EQ(ClientResponseHead(4294967295u, "x", HeadFields(), 11, NextHopFraming::None(), true),
            "HTTP/1.1 4294967295 x\r\n\r\n");
}

// A backend's "Content-Length: 2, 2" or "002" reaches the client as the one length the parser read.
TEST(ClientResponseHeadTest, WritesItsOwnContentLengthNeverTheBackends) {
  HeadFields from = Response({{"Content-Length", "2, 2"}, {"Content-Length", "002"}, {"X-A", "1"}});
  EXPECT_EQ(ClientResponseHead(200, "", from, 11, NextHopFraming::Length(2), true),
            "HTTP/1.1 200 \r\nX-A: 1\r\nContent-Length: 2\r\n\r\n");
}

TEST(ClientResponseHeadTest, WritesALongHeadWhole) {
  Fields fields;
  std::string expected_fields;
  for (int i = 0; i < 40; ++i) {
    fields.emplace_back("X-Field-" + std::to_string(i), std::string(50 + i, static_cast<char>('a' + i % 26)));
    expected_fields += fields.back().first + ": " + fields.back().second + "\r\n";
  }
  const std::string reason(1000, 'r');
  EXPECT_EQ(ClientResponseHead(200, reason, Response(fields), 11, NextHopFraming::None(), true),
            "HTTP/1.1 200 " + reason + "\r\n" + expected_fields + "\r\n");
}

}  // namespace
}  // namespace fencing
