// RequestHead (http/request_head.h): the request line, the fields and the framing facts, each
// case also read by Beast's parser (beast_oracle.h), which must read it the same way.

#include <gtest/gtest.h>

#include <boost/beast/http/error.hpp>

#include <string>
#include <string_view>
#include <vector>

#include "http/beast_oracle.h"
#include "http/raw_head.h"
#include "http/request_head.h"
#include "test_heads.h"

namespace fencing {
namespace {

namespace http = boost::beast::http;

constexpr uint64_t kMaxBody = 1000;

struct HeadCase {
  const char* what;
  std::string head;
  http::error error = {};  // {}: none
};

class RequestHeadTest : public testing::TestWithParam<HeadCase> {};

TEST_P(RequestHeadTest, ReadsTheHeadAsBeastsParserDoes) {
  const HeadCase& c = GetParam();
  ASSERT_TRUE(CheckRawHead(c.head).ok) << c.what << ": the cases are heads CheckRawHead lets through";
  RequestHead head;
  const boost::system::error_code ec = head.Parse(c.head, kMaxBody);
  if (c.error == http::error{}) {
    EXPECT_FALSE(ec) << c.what << ": " << ec.message();
  } else {
    EXPECT_EQ(ec, c.error) << c.what << ": " << ec.message();
  }
  EXPECT_EQ(CompareWithBeast(c.head, kMaxBody), "") << c.what;
}

INSTANTIATE_TEST_SUITE_P(
    Heads, RequestHeadTest,
    testing::Values(
        HeadCase{"a plain GET", "GET /a?b=1 HTTP/1.1\r\nHost: h\r\n\r\n"},
        HeadCase{"HTTP/1.0 without fields", "GET / HTTP/1.0\r\n\r\n"},
        HeadCase{"OWS around values, an empty value", "PUT /o HTTP/1.1\r\nHost:h\r\nX-A: \t v \t\r\nX-B:\r\nX-C:   \r\n\r\n"},
        HeadCase{"repeated fields in order", "GET / HTTP/1.1\r\nX-M: 1\r\nHost: h\r\nx-m: 2\r\nX-M: 3\r\n\r\n"},
        HeadCase{"an unknown method", "PURGE /x HTTP/1.1\r\nHost: h\r\n\r\n"},
        HeadCase{"obs-text in a value", "GET / HTTP/1.1\r\nX-U: caf\xc3\xa9\r\n\r\n"},
        HeadCase{"a colon in a value", "GET / HTTP/1.1\r\nReferer: http://a:1/b\r\n\r\n"},
        HeadCase{"Content-Length", "PUT / HTTP/1.1\r\nContent-Length: 007\r\n\r\n"},
        HeadCase{"a Content-Length list of equal numbers", "PUT / HTTP/1.1\r\nContent-Length: 5, 5\r\n\r\n"},
        HeadCase{"two equal Content-Length fields", "PUT / HTTP/1.1\r\nContent-Length: 5\r\nContent-Length: 5\r\n\r\n"},
        HeadCase{"two different Content-Lengths", "PUT / HTTP/1.1\r\nContent-Length: 5\r\nContent-Length: 6\r\n\r\n",
                 http::error::multiple_content_length},
        HeadCase{"a Content-Length list of different numbers", "PUT / HTTP/1.1\r\nContent-Length: 5,6\r\n\r\n",
                 http::error::multiple_content_length},
        HeadCase{"an empty element in a Content-Length list", "PUT / HTTP/1.1\r\nContent-Length: 5,,5\r\n\r\n",
                 http::error::bad_content_length},
        HeadCase{"a Content-Length with a sign", "PUT / HTTP/1.1\r\nContent-Length: +5\r\n\r\n",
                 http::error::bad_content_length},
        HeadCase{"an empty Content-Length", "PUT / HTTP/1.1\r\nContent-Length:\r\n\r\n", http::error::bad_content_length},
        HeadCase{"a Content-Length above 2^64-1", "PUT / HTTP/1.1\r\nContent-Length: 18446744073709551616\r\n\r\n",
                 http::error::bad_content_length},
        HeadCase{"a Content-Length above the body limit", "PUT / HTTP/1.1\r\nContent-Length: 1001\r\n\r\n",
                 http::error::body_limit},
        HeadCase{"a Content-Length at the body limit", "PUT / HTTP/1.1\r\nContent-Length: 1000\r\n\r\n"},
        HeadCase{"chunked", "POST / HTTP/1.1\r\nTransfer-Encoding: chunked\r\n\r\n"},
        HeadCase{"gzip, then chunked", "POST / HTTP/1.1\r\nTransfer-Encoding: gzip, Chunked\r\n\r\n"},
        HeadCase{"chunked, then gzip: not chunked", "POST / HTTP/1.1\r\nTransfer-Encoding: chunked, gzip\r\n\r\n"},
        HeadCase{"Content-Length after chunked", "POST / HTTP/1.1\r\nTransfer-Encoding: chunked\r\nContent-Length: 3\r\n\r\n",
                 http::error::bad_content_length},
        HeadCase{"chunked after Content-Length", "POST / HTTP/1.1\r\nContent-Length: 3\r\nTransfer-Encoding: chunked\r\n\r\n",
                 http::error::bad_transfer_encoding},
        HeadCase{"chunked twice", "POST / HTTP/1.1\r\nTransfer-Encoding: chunked\r\nTransfer-Encoding: chunked\r\n\r\n",
                 http::error::bad_transfer_encoding},
        HeadCase{"Connection: close", "GET / HTTP/1.1\r\nConnection: keep-alive, Close\r\n\r\n"},
        HeadCase{"HTTP/1.0 keep-alive", "GET / HTTP/1.0\r\nConnection: Keep-Alive\r\n\r\n"},
        HeadCase{"Proxy-Connection: close", "GET / HTTP/1.1\r\nProxy-Connection: close\r\n\r\n"},
        HeadCase{"a Connection list that is not one", "GET / HTTP/1.1\r\nConnection: a b\r\n\r\n", http::error::bad_value},
        HeadCase{"HTTP/1.2", "GET / HTTP/1.2\r\n\r\n", http::error::bad_version},
        HeadCase{"HTTP/2.0", "GET / HTTP/2.0\r\n\r\n", http::error::bad_version},
        HeadCase{"http/1.1 in lower case", "GET / http/1.1\r\n\r\n", http::error::bad_version},
        HeadCase{"a version with more digits", "GET / HTTP/1.10\r\n\r\n", http::error::bad_version},
        HeadCase{"a short version", "GET / HTTP/1\r\n\r\n", http::error::bad_version},
        HeadCase{"no version (Beast: need more)", "GET / \r\n\r\n", http::error::bad_version},
        HeadCase{"an empty target", "GET  HTTP/1.1\r\n\r\n", http::error::bad_target}));

TEST(RequestHeadFieldsTest, GivesTheFieldsWithIdsNamesAndTrimmedValues) {
  RequestHead head;
  ASSERT_FALSE(head.Parse("PUT /o/1 HTTP/1.1\r\nhost: h:8\r\nX-Fencing-Token:  7 \r\nX-M: a\r\nX-M: b\r\n\r\n", kMaxBody));
  EXPECT_EQ(head.method(), http::verb::put);
  EXPECT_EQ(head.method_string(), "PUT");
  EXPECT_EQ(head.target(), "/o/1");
  EXPECT_EQ(head.version(), 11u);
  ASSERT_EQ(head.size(), 4u);
  EXPECT_EQ(head[http::field::host], "h:8");
  EXPECT_EQ(head.count(http::field::host), 1u);
  EXPECT_EQ(head[http::field::expect], "");
  EXPECT_EQ(Values(head, "x-fencing-token"), std::vector<std::string>{"7"});
  EXPECT_EQ(Values(head, "X-M"), (std::vector<std::string>{"a", "b"}));
  EXPECT_EQ((*head.begin()).name_string(), "host") << "the name as the client spelled it";
  std::vector<std::string> order;
  for (const auto& field : head) order.emplace_back(field.name_string());
  EXPECT_EQ(order, (std::vector<std::string>{"host", "X-Fencing-Token", "X-M", "X-M"})) << "the head's order";
  EXPECT_FALSE(head.content_length());
  EXPECT_FALSE(head.chunked());
  EXPECT_TRUE(head.keep_alive());
}

TEST(RequestHeadFieldsTest, OwnsItsBytesAcrossCopiesMovesAndReuse) {
  std::string bytes = "GET /first HTTP/1.1\r\nHost: one\r\n\r\n";
  RequestHead head;
  ASSERT_FALSE(head.Parse(bytes, kMaxBody));
  bytes.assign(bytes.size(), 'x');  // the client buffer moves on
  RequestHead copy = head;
  RequestHead moved = std::move(head);
  for (const RequestHead* h : {&copy, &moved}) {
    EXPECT_EQ(h->target(), "/first");
    EXPECT_EQ((*h)[http::field::host], "one");
  }
  // Parsed again, nothing of the last head is left.
  ASSERT_FALSE(moved.Parse("PUT /second HTTP/1.0\r\nContent-Length: 3\r\n\r\n", kMaxBody));
  EXPECT_EQ(moved.target(), "/second");
  EXPECT_EQ(moved.size(), 1u);
  EXPECT_EQ(moved[http::field::host], "");
  EXPECT_EQ(moved.content_length().value_or(0), 3u);
  EXPECT_FALSE(moved.keep_alive()) << "HTTP/1.0 closes by default";
}

TEST(RequestHeadFieldsTest, BuildsAHeadFieldByField) {
  RequestHead head = Request(11, {{"Host", "h"}, {"X-A", "1"}}, http::verb::delete_);
  head.set(http::field::host, "other");
  head.insert(http::field::accept, "*/*");
  EXPECT_EQ(head.method_string(), "DELETE");
  EXPECT_EQ(head.target(), "/orders/1");
  EXPECT_EQ(head[http::field::host], "other");
  EXPECT_EQ(head.count(http::field::host), 1u);
  EXPECT_EQ(Values(head, "Accept"), std::vector<std::string>{"*/*"});
  EXPECT_EQ(head.size(), 3u);
}

}  // namespace
}  // namespace fencing
