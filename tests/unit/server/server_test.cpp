// The server's pure pieces: framing checks against request smuggling, the header rewrite for the
// upstream request (hop-by-hop fields, X-Forwarded-For, Host), and the problem+json rejections.

#include <gtest/gtest.h>

#include "common/ascii.h"

#include <boost/beast/http.hpp>
#include <boost/json/parse.hpp>
#include <boost/json/value.hpp>

#include <cstdint>
#include <limits>
#include <ostream>
#include <sstream>
#include <string>
#include <utility>
#include <vector>

#include "server/framing.h"
#include "server/header_rewrite.h"
#include "server/problem.h"

namespace fencing {
namespace {

namespace http = boost::beast::http;
namespace json = boost::json;

using Fields = std::vector<std::pair<std::string, std::string>>;

http::request_header<> Request(unsigned version, const Fields& fields, http::verb method = http::verb::post) {
  http::request_header<> h;
  h.method(method);
  h.target("/orders/1");
  h.version(version);
  for (const auto& [name, value] : fields) h.insert(name, value);  // insert: duplicates stay separate
  return h;
}

std::vector<std::string> Values(const http::fields& f, std::string_view name) {
  std::vector<std::string> out;
  for (const auto& field : f) {
    if (EqualsIgnoreCase(field.name_string(), name)) out.emplace_back(field.value());
  }
  return out;
}

// ---------------------------------------------------------------- CheckRequestFraming

struct FramingCase {
  const char* what;
  unsigned version;
  Fields fields;
  bool ok;
};

void PrintTo(const FramingCase& c, std::ostream* os) { *os << c.what; }

class FramingTest : public testing::TestWithParam<FramingCase> {};

TEST_P(FramingTest, AcceptsOnlyUnambiguousFraming) {
  const FramingCase& c = GetParam();
  FramingCheck check = CheckRequestFraming(Request(c.version, c.fields));
  EXPECT_EQ(check.ok, c.ok) << c.what << ": " << check.reason;
  if (!check.ok) {
    EXPECT_STRNE(check.reason, "") << c.what;
  }
}

INSTANTIATE_TEST_SUITE_P(
    Table, FramingTest,
    testing::Values(
        FramingCase{"no body framing at all", 11, {}, true},
        FramingCase{"no body framing on HTTP/1.0", 10, {}, true},
        FramingCase{"one valid Content-Length", 11, {{"Content-Length", "10"}}, true},
        FramingCase{"Content-Length zero", 11, {{"Content-Length", "0"}}, true},
        FramingCase{"Content-Length on HTTP/1.0", 10, {{"Content-Length", "3"}}, true},
        FramingCase{"Content-Length with OWS", 11, {{"Content-Length", " 5\t"}}, true},
        FramingCase{"chunked", 11, {{"Transfer-Encoding", "chunked"}}, true},
        FramingCase{"Chunked (coding names are case-insensitive)", 11, {{"Transfer-Encoding", "Chunked"}}, true},
        FramingCase{"CHUNKED", 11, {{"transfer-encoding", "CHUNKED"}}, true},
        FramingCase{"unrelated headers", 11, {{"X-Content-Length", "1, 2"}, {"X-Transfer-Encoding", "gzip"}}, true},

        FramingCase{"two equal Content-Lengths", 11, {{"Content-Length", "3"}, {"Content-Length", "3"}}, false},
        FramingCase{"two different Content-Lengths", 11, {{"Content-Length", "3"}, {"Content-Length", "4"}}, false},
        FramingCase{"Content-Length list in one field", 11, {{"Content-Length", "3, 3"}}, false},
        FramingCase{"Content-Length abc", 11, {{"Content-Length", "abc"}}, false},
        FramingCase{"Content-Length empty", 11, {{"Content-Length", ""}}, false},
        FramingCase{"Content-Length negative", 11, {{"Content-Length", "-1"}}, false},
        FramingCase{"Content-Length with a sign", 11, {{"Content-Length", "+3"}}, false},
        FramingCase{"Content-Length in hex", 11, {{"Content-Length", "0x10"}}, false},
        FramingCase{"Content-Length with inner space", 11, {{"Content-Length", "1 0"}}, false},
        FramingCase{"Content-Length and Transfer-Encoding", 11,
                    {{"Content-Length", "3"}, {"Transfer-Encoding", "chunked"}}, false},
        FramingCase{"Transfer-Encoding and Content-Length", 11,
                    {{"Transfer-Encoding", "chunked"}, {"Content-Length", "3"}}, false},
        FramingCase{"Transfer-Encoding gzip", 11, {{"Transfer-Encoding", "gzip"}}, false},
        FramingCase{"Transfer-Encoding chunked, gzip", 11, {{"Transfer-Encoding", "chunked, gzip"}}, false},
        FramingCase{"Transfer-Encoding gzip, chunked", 11, {{"Transfer-Encoding", "gzip, chunked"}}, false},
        FramingCase{"Transfer-Encoding chunked, chunked", 11, {{"Transfer-Encoding", "chunked, chunked"}}, false},
        FramingCase{"Transfer-Encoding identity", 11, {{"Transfer-Encoding", "identity"}}, false},
        FramingCase{"Transfer-Encoding empty", 11, {{"Transfer-Encoding", ""}}, false},
        FramingCase{"Transfer-Encoding with a parameter", 11, {{"Transfer-Encoding", "chunked;x=1"}}, false},
        FramingCase{"two Transfer-Encoding fields", 11,
                    {{"Transfer-Encoding", "chunked"}, {"Transfer-Encoding", "chunked"}}, false},
        FramingCase{"Transfer-Encoding on HTTP/1.0", 10, {{"Transfer-Encoding", "chunked"}}, false},
        FramingCase{"CR LF inside a value", 11, {{"X-A", "a\r\nContent-Length: 5"}}, false},
        FramingCase{"bare LF inside a value", 11, {{"X-A", "a\nb"}}, false},
        FramingCase{"NUL inside a value", 11, {{"X-A", std::string("a\0b", 3)}}, false}));

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
  http::request_header<> client = Request(11, {{"Host", "client.example"},
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
  http::request_header<> up = ParseRequestHead(UpstreamRequestHead(client, "/orders/1?x=1", "127.0.0.1", "backend:8081", ""));

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
  http::request_header<> client = Request(11, {{"x-fencing-TOKEN", "7"}, {"X-Other", "1"}});
  http::request_header<> up = ParseRequestHead(UpstreamRequestHead(client, "/o", "10.0.0.1", "b", "X-Fencing-Token"));
  EXPECT_TRUE(Values(up, "X-Fencing-Token").empty());
  EXPECT_EQ(Values(up, "X-Other"), std::vector<std::string>{"1"});
}

TEST(UpstreamRequestHeadTest, ConnectionTokensAreMatchedCaseInsensitivelyAcrossFields) {
  http::request_header<> client = Request(11, {{"Connection", "keep-alive"},
                                               {"Connection", "x-secret , X-Other"},
                                               {"X-SECRET", "1"},
                                               {"x-other", "2"},
                                               {"X-Kept", "3"}});
  http::request_header<> up = ParseRequestHead(UpstreamRequestHead(client, "/o", "10.0.0.1", "b", ""));
  EXPECT_TRUE(Values(up, "X-Secret").empty());
  EXPECT_TRUE(Values(up, "X-Other").empty());
  EXPECT_EQ(Values(up, "X-Kept"), std::vector<std::string>{"3"});
}

TEST(UpstreamRequestHeadTest, AppendsTheClientToAllForwardedForFieldsAsOne) {
  http::request_header<> client =
      Request(11, {{"X-Forwarded-For", "a"}, {"Accept", "*/*"}, {"x-forwarded-for", "b"}});
  http::request_header<> up = ParseRequestHead(UpstreamRequestHead(client, "/o", "127.0.0.1", "b", ""));
  EXPECT_EQ(Values(up, "X-Forwarded-For"), std::vector<std::string>{"a, b, 127.0.0.1"});
}

TEST(UpstreamRequestHeadTest, StartsForwardedForWhenAbsent) {
  http::request_header<> client = Request(11, {});
  http::request_header<> up = ParseRequestHead(UpstreamRequestHead(client, "/o", "::1", "b", ""));
  EXPECT_EQ(Values(up, "X-Forwarded-For"), std::vector<std::string>{"::1"});
}

TEST(UpstreamRequestHeadTest, SetsHostToTheBackendOnlyWhenAbsent) {
  http::request_header<> up = ParseRequestHead(UpstreamRequestHead(Request(10, {}), "/o", "1.2.3.4", "backend:8081", ""));
  EXPECT_EQ(Values(up, "Host"), std::vector<std::string>{"backend:8081"});
  EXPECT_EQ(up.version(), 11u) << "the upstream hop is always HTTP/1.1";
}

TEST(UpstreamRequestHeadTest, CopiesAnExtensionMethod) {
  http::request_header<> client = Request(11, {});
  client.method_string("PURGE");
  http::request_header<> up = ParseRequestHead(UpstreamRequestHead(client, "/o", "1.2.3.4", "b", ""));
  EXPECT_EQ(up.method_string(), "PURGE");
}

TEST(UpstreamRequestHeadTest, ChunkedBodyStaysChunked) {
  http::request_header<> up =
      ParseRequestHead(UpstreamRequestHead(Request(11, {{"Transfer-Encoding", "chunked"}}), "/o", "1.2.3.4", "b", ""));
  EXPECT_EQ(Values(up, "Transfer-Encoding"), std::vector<std::string>{"chunked"});
  EXPECT_TRUE(Values(up, "Content-Length").empty());
}

http::response_header<> Response(unsigned status, const Fields& fields) {
  http::response_header<> res;
  res.result(status);
  res.version(11);
  for (const auto& [name, value] : fields) res.insert(name, value);
  return res;
}

TEST(ClientResponseHeadTest, CopiesEndToEndFieldsAndSetsFramingAfresh) {
  http::response_header<> from = Response(201, {{"Content-Type", "text/plain"},
                                                {"Content-Length", "12"},
                                                {"Transfer-Encoding", "chunked"},
                                                {"Connection", "keep-alive, X-Hop"},
                                                {"X-Hop", "1"},
                                                {"Set-Cookie", "a=1"},
                                                {"Set-Cookie", "b=2"}});
  http::response_header<> to = ParseResponseHead(ClientResponseHead(from, 11, BodyFraming::kLength, true));
  EXPECT_EQ(to.result_int(), 201u);
  EXPECT_EQ(to.version(), 11u);
  EXPECT_EQ(Values(to, "Content-Type"), std::vector<std::string>{"text/plain"});
  EXPECT_EQ(Values(to, "Set-Cookie"), (std::vector<std::string>{"a=1", "b=2"}));
  EXPECT_EQ(Values(to, "Content-Length"), std::vector<std::string>{"12"});
  for (const char* gone : {"Transfer-Encoding", "Connection", "X-Hop"}) {
    EXPECT_TRUE(Values(to, gone).empty()) << gone;
  }
}

TEST(ClientResponseHeadTest, FramingAndConnectionFollowTheClientsVersion) {
  http::response_header<> from = Response(200, {{"Transfer-Encoding", "chunked"}});
  http::response_header<> chunked = ParseResponseHead(ClientResponseHead(from, 11, BodyFraming::kChunked, true));
  EXPECT_EQ(Values(chunked, "Transfer-Encoding"), std::vector<std::string>{"chunked"});
  EXPECT_TRUE(Values(chunked, "Connection").empty()) << "keep-alive is HTTP/1.1's default";
  http::response_header<> closing = ParseResponseHead(ClientResponseHead(from, 11, BodyFraming::kChunked, false));
  EXPECT_EQ(Values(closing, "Connection"), std::vector<std::string>{"close"});
  http::response_header<> old = ParseResponseHead(ClientResponseHead(from, 10, BodyFraming::kClose, false));
  EXPECT_EQ(old.version(), 10u);
  EXPECT_TRUE(Values(old, "Transfer-Encoding").empty()) << "HTTP/1.0 has no chunked coding";
  EXPECT_TRUE(Values(old, "Connection").empty()) << "close is HTTP/1.0's default";
  http::response_header<> old_kept = ParseResponseHead(ClientResponseHead(from, 10, BodyFraming::kNone, true));
  EXPECT_EQ(Values(old_kept, "Connection"), std::vector<std::string>{"keep-alive"});
}

// ---------------------------------------------------------------- problems

constexpr uint64_t kMaxToken = std::numeric_limits<uint64_t>::max();

Problem StaleProblem() {
  Problem p = MakeProblem(http::status::conflict, "stale-token", "Stale fencing token",
                          "token 3 is below the fence's max_token");
  p.route = "orders";
  p.fence = "orders-fence";
  p.token = 3;
  p.max_token = kMaxToken;
  return p;
}

TEST(ProblemJsonTest, HasEveryFieldWithItsJsonType) {
  std::string text = ProblemJson(StaleProblem());
  json::value v = json::parse(text);
  ASSERT_TRUE(v.is_object()) << text;
  const json::object& o = v.as_object();
  EXPECT_EQ(o.at("type").as_string(), "urn:fencing-proxy:problem:stale-token");
  EXPECT_EQ(o.at("title").as_string(), "Stale fencing token");
  EXPECT_EQ(o.at("detail").as_string(), "token 3 is below the fence's max_token");
  EXPECT_EQ(o.at("route").as_string(), "orders");
  EXPECT_EQ(o.at("fence").as_string(), "orders-fence");
  ASSERT_TRUE(o.at("status").is_number());
  EXPECT_EQ(o.at("status").to_number<int64_t>(), 409);
  ASSERT_TRUE(o.at("token").is_number()) << "tokens are JSON numbers, not strings";
  EXPECT_EQ(o.at("token").to_number<uint64_t>(), 3u);
  // 2^64-1 does not fit a double or an int64: it must be written out exactly.
  ASSERT_TRUE(o.at("max_token").is_uint64()) << text;
  EXPECT_EQ(o.at("max_token").as_uint64(), kMaxToken);
  EXPECT_NE(text.find("\"max_token\":18446744073709551615"), std::string::npos) << text;
}

TEST(ProblemJsonTest, OmitsWhatDoesNotApply) {
  Problem p = MakeProblem(http::status::bad_request, "bad-path", "Bad path", "a dot segment");
  json::object o = json::parse(ProblemJson(p)).as_object();
  EXPECT_EQ(o.at("status").to_number<int64_t>(), 400);
  for (const char* key : {"route", "fence", "token", "max_token"}) EXPECT_FALSE(o.contains(key)) << key;
}

TEST(ProblemJsonTest, TokenZeroIsStillWritten) {
  Problem p = StaleProblem();
  p.token = 0;
  p.max_token = 0;
  json::object o = json::parse(ProblemJson(p)).as_object();
  EXPECT_EQ(o.at("token").to_number<uint64_t>(), 0u);
  EXPECT_EQ(o.at("max_token").to_number<uint64_t>(), 0u);
}

TEST(ProblemJsonTest, EscapesTheDetail) {
  Problem p = MakeProblem(http::status::bad_request, "x", "X", "quote \" backslash \\ newline \n ctl \x01 é");
  json::object o = json::parse(ProblemJson(p)).as_object();
  EXPECT_EQ(o.at("detail").as_string(), "quote \" backslash \\ newline \n ctl \x01 é");
}

TEST(MakeProblemResponseTest, ConflictCarriesTheMaxHeaderAndAProblemBody) {
  auto res = MakeProblemResponse(StaleProblem(), 11, true);
  EXPECT_EQ(res.result(), http::status::conflict);
  EXPECT_EQ(res.version(), 11u);
  EXPECT_EQ(res[http::field::content_type], "application/problem+json");
  EXPECT_EQ(res["X-Fencing-Token-Max"], "18446744073709551615");
  EXPECT_TRUE(res.keep_alive());
  EXPECT_TRUE(Values(res.base(), "Connection").empty()) << "HTTP/1.1 keeps alive without saying so";
  EXPECT_EQ(res[http::field::content_length], std::to_string(res.body().size()));
  json::object o = json::parse(res.body()).as_object();
  EXPECT_EQ(o.at("max_token").as_uint64(), kMaxToken);
  EXPECT_EQ(o.at("status").to_number<int64_t>(), 409);
}

TEST(MakeProblemResponseTest, MaxHeaderOnlyOnConflict) {
  for (http::status s : {http::status::bad_request, http::status::precondition_required,
                         http::status::service_unavailable}) {
    Problem p = StaleProblem();
    p.status = s;
    auto res = MakeProblemResponse(p, 11, true);
    EXPECT_EQ(res.result(), s);
    EXPECT_TRUE(Values(res.base(), "X-Fencing-Token-Max").empty()) << static_cast<unsigned>(s);
    EXPECT_EQ(res[http::field::content_type], "application/problem+json");
  }
  Problem no_max = StaleProblem();
  no_max.max_token.reset();
  EXPECT_TRUE(Values(MakeProblemResponse(no_max, 11, true).base(), "X-Fencing-Token-Max").empty());
}

TEST(MakeProblemResponseTest, ConnectionCloseWhenNotKeepingAlive) {
  auto res = MakeProblemResponse(StaleProblem(), 11, false);
  EXPECT_EQ(Values(res.base(), "Connection"), std::vector<std::string>{"close"});
  EXPECT_FALSE(res.keep_alive());

  auto old = MakeProblemResponse(StaleProblem(), 10, false);
  EXPECT_EQ(old.version(), 10u);
  EXPECT_FALSE(old.keep_alive());
  EXPECT_EQ(Values(old.base(), "Connection"), std::vector<std::string>{}) << "HTTP/1.0 closes by default";
}

TEST(MakeProblemResponseTest, SerializesToAWellFormedMessage) {
  auto res = MakeProblemResponse(StaleProblem(), 11, false);
  std::ostringstream out;
  out << res;
  std::string wire = out.str();
  EXPECT_EQ(wire.rfind("HTTP/1.1 409 Conflict\r\n", 0), 0u) << wire;
  size_t blank = wire.find("\r\n\r\n");
  ASSERT_NE(blank, std::string::npos);
  EXPECT_EQ(wire.substr(blank + 4), res.body());
}

}  // namespace
}  // namespace fencing
