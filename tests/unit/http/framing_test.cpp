// Framing checks against request smuggling (http/framing.h), from a table of headers.

#include <gtest/gtest.h>

#include <boost/beast/http.hpp>

#include <ostream>
#include <string>
#include <utility>
#include <vector>

#include "http/framing.h"
#include "test_heads.h"

namespace fencing {
namespace {

namespace http = boost::beast::http;

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

// ---------------------------------------------------------------- ProtectedFieldNamedByConnection

TEST(ProtectedFieldNamedByConnectionTest, FindsHostTheTokenAndTheFramingFieldsInAnyConnectionField) {
  auto named = [](const Fields& fields) {
    return std::string(ProtectedFieldNamedByConnection(Request(11, fields), "X-Lock-Token"));
  };
  EXPECT_EQ(named({{"Connection", "close"}}), "");
  EXPECT_EQ(named({{"Connection", "keep-alive, X-Secret"}}), "");
  EXPECT_EQ(named({{"Connection", "X-Fencing-Token"}}), "") << "only the configured token header counts";
  EXPECT_EQ(named({{"X-Other", "Host"}}), "") << "only Connection names hop-by-hop fields";
  EXPECT_EQ(named({{"Connection", "HOST"}}), "HOST");
  EXPECT_EQ(named({{"Connection", "close, x-lock-token"}}), "x-lock-token");
  EXPECT_EQ(named({{"Connection", "content-length"}}), "content-length");
  EXPECT_EQ(named({{"Connection", "keep-alive"}, {"Connection", " Transfer-Encoding "}}), "Transfer-Encoding");
}

TEST(ProtectedFieldNamedByConnectionTest, FindsTheFenceKeyHeaders) {
  const std::vector<std::string> key_headers = {"X-Tenant", "X-Object-Key"};
  auto named = [&](const Fields& fields) {
    return std::string(ProtectedFieldNamedByConnection(Request(11, fields), "X-Lock-Token", key_headers));
  };
  EXPECT_EQ(named({{"Connection", "close, x-object-key"}}), "x-object-key");
  EXPECT_EQ(named({{"Connection", "X-TENANT"}}), "X-TENANT");
  EXPECT_EQ(named({{"Connection", "X-Tenants, X-Object"}}), "");
  EXPECT_EQ(std::string(ProtectedFieldNamedByConnection(Request(11, {{"Connection", "X-Tenant"}}), "X-Lock-Token")), "")
      << "without key headers, X-Tenant is an ordinary field";
}

}  // namespace
}  // namespace fencing
