// ResponseParser (http/response_parser.h): the backend's response read as
// http::response_parser<http::buffer_body> reads it (status, reason, fields, framing, body bytes,
// errors; the comparison is CompareResponseWithBeast in beast_oracle.h), stricter where it says
// so, with the fields in HeadFields and the body in the caller's buffer.

#include <gtest/gtest.h>

#include <boost/asio/buffer.hpp>
#include <boost/beast/http.hpp>

#include <string>
#include <string_view>
#include <vector>

#include "beast_oracle.h"
#include "http/response_parser.h"

namespace fencing {
namespace {

namespace http = boost::beast::http;

const char* const kResponses[] = {
    "HTTP/1.1 200 OK\r\nContent-Length: 5\r\nX-A: 1\r\nx-a: 2\r\nServer: s\r\n\r\nhello",
    "HTTP/1.1 201 Created\r\nTransfer-Encoding: chunked\r\n\r\n3\r\nabc\r\n10;ext=1\r\n0123456789abcdef\r\n0\r\nT: 1\r\n\r\n",
    "HTTP/1.1 200 OK\r\nTransfer-Encoding: gzip, chunked\r\n\r\n0\r\n\r\n",
    "HTTP/1.0 200 OK\r\nContent-Type: text/plain\r\n\r\nuntil the connection closes",
    "HTTP/1.1 200 OK\r\nTransfer-Encoding: gzip\r\n\r\nuntil the close, too",
    "HTTP/1.0 200 OK\r\nConnection: keep-alive\r\nContent-Length: 2\r\n\r\nok",
    "HTTP/1.1 200 OK\r\nConnection: Keep-Alive, Close\r\nContent-Length: 0\r\n\r\n",
    "HTTP/1.1 200 OK\r\nProxy-Connection: close\r\nContent-Length: 0\r\n\r\n",
    "HTTP/1.1 204 No Content\r\nX-Folded: a\r\n  b\r\n\r\n",
    "HTTP/1.1 204 No Content\r\nX-Folded:\r\n  b \r\n\t\r\n c\r\nX-Two: 2\r\n\r\n",
    "HTTP/1.1 304 Not Modified\r\nContent-Length: 10\r\n\r\n",
    "HTTP/1.1 100 Continue\r\n\r\n",
    "HTTP/1.1 200  \r\nContent-Length: 0\r\nConnection: close\r\n\r\n",
    "HTTP/1.1 200 \r\nContent-Length: 1\r\n\r\nx",
    "HTTP/1.1 200 R\xe9sum\xe9\tok\r\nX-Obs: caf\xe9\r\nContent-Length: 0\r\n\r\n",
    "HTTP/1.1 200 OK\r\nContent-Length: 3, 3\r\n\r\nabc",
    "HTTP/1.1 200 OK\r\nContent-Length: 18446744073709551616\r\n\r\n",
    "HTTP/1.1 200 OK\r\nContent-Length: 3\r\nContent-Length: 4\r\n\r\nabcd",
    "HTTP/1.1 200 OK\r\nContent-Length: 3\r\nContent-Length: 3\r\n\r\nabc",
    "HTTP/1.1 200 OK\r\nContent-Length: 3,\r\n\r\nabc",
    "HTTP/1.1 200 OK\r\nContent-Length: 3\r\nTransfer-Encoding: chunked\r\n\r\n0\r\n\r\n",
    "HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\nContent-Length: 3\r\n\r\nabc",
    "HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\nTransfer-Encoding: chunked\r\n\r\n0\r\n\r\n",
    "HTTP/1.1 200 OK\r\nConnection: ,,\r\n\r\n",
    "HTTP/1.1 200 OK\r\nConnection: a b\r\n\r\n",
    "HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\nzz\r\n",
    "HTTP/1.1 200 OK\r\nContent-Length: 10\r\n\r\ncut short",
    "HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n5\r\nab",
    "HTTP/1.1 200 OK\r\nX: 1\r\n",
    "HTTP/1.1 2000 OK\r\n\r\n",
    "HTTP/1.1 200\r\n\r\n",
    "HTTP/1.1 20x OK\r\n\r\n",
    "HTTP/1.2 200 OK\r\n\r\n",
    "HTTP/2.0 200 OK\r\n\r\n",
    "HTTP/1.1  200 OK\r\n\r\n",
    "http/1.1 200 OK\r\n\r\n",
    "HTTP/1.1 200 O\x01K\r\n\r\n",
    "HTTP/1.1 200 OK\r\nX-A: a\x7f\r\n\r\n",
    "HTTP/1.1 200 OK\r\nX-A: a\rb\r\n\r\n",
    "HTTP/1.1 200 OK\r\nX A: 1\r\n\r\n",
    "HTTP/1.1 200 OK\r\n: 1\r\n\r\n",
    "HTTP/1.1 200 OK\r\nNoColon\r\n\r\n",
    "HTTP/1.1 200 OK\r\n folded-first: 1\r\n\r\n",
    "\r\nHTTP/1.1 200 OK\r\n\r\n",
};

TEST(ResponseParserTest, ReadsResponsesAsBeastsBufferBodyParserDoes) {
  for (const char* wire : kResponses) {
    for (size_t step : {1, 7, 4096}) {
      for (size_t room : {1, 4, 4096}) {
        EXPECT_EQ(CompareResponseWithBeast(wire, step, room, /*same_error=*/true), "")
            << wire << " step " << step << " room " << room;
      }
    }
  }
}

// Where it is stricter than Beast (response_parser.h): Beast reads these on; ResponseParser
// refuses them, with this error, however the bytes are cut.
TEST(ResponseParserTest, RefusesWhatTwoReadersCouldFrameDifferently) {
  namespace http = boost::beast::http;
  const std::pair<const char*, http::error> cases[] = {
      {"HTTP/1.1 200 OK\r\nTransfer-Encoding: gzip\r\nContent-Length: 3\r\n\r\nabc", http::error::bad_content_length},
      {"HTTP/1.1 099 Odd\r\nContent-Length: 0\r\n\r\n", http::error::bad_status},
      {"HTTP/1.1 000 Odd\r\nContent-Length: 0\r\n\r\n", http::error::bad_status},
      {"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n00000000000000003\r\nabc\r\n0\r\n\r\n", http::error::bad_chunk},
  };
  for (const auto& [wire, error] : cases) {
    for (size_t step : {1, 7, 4096}) {
      const ResponseRead beasts = ReadResponseBeasts(wire, step, 4096);
      EXPECT_FALSE(beasts.ec) << wire << ": Beast reads it on (" << beasts.ec.message() << ")";
      EXPECT_EQ(ReadResponseOurs(wire, step, 4096).ec, error) << wire << " step " << step;
      EXPECT_EQ(CompareResponseWithBeast(wire, step, 4096, true), "") << "an allowed difference";
    }
  }
  // A status line without the SP before an empty reason: taken with an empty reason (RFC 9112 4;
  // nginx relays it), where Beast refuses it.
  for (size_t step : {1, 7, 4096}) {
    const char* wire = "HTTP/1.1 200\r\nContent-Length: 2\r\n\r\nok";
    const ResponseRead ours = ReadResponseOurs(wire, step, 4096);
    EXPECT_FALSE(ours.ec) << ours.ec.message();
    EXPECT_EQ(ours.status, 200u);
    EXPECT_EQ(ours.reason, "");
    EXPECT_EQ(ours.body, "ok");
    EXPECT_EQ(ReadResponseBeasts(wire, step, 4096).ec, http::error::bad_status);
    EXPECT_EQ(CompareResponseWithBeast(wire, step, 4096, true), "") << "an allowed difference";
    EXPECT_EQ(ReadResponseOurs("HTTP/1.1 200x\r\n\r\n", step, 4096).ec, http::error::bad_status);
  }
  // A bare LF: Beast refuses it too, naming the part of the line, or waits for a CRLF.
  for (const char* wire : {"HTTP/1.1 200 OK\nX: 1\r\n\r\n", "HTTP/1.1 200 OK\r\nX: 1\n\r\n", "HTTP/1.1 200 OK\r\nX: 1\r\n\n"}) {
    for (size_t step : {1, 4096}) {
      EXPECT_EQ(ReadResponseOurs(wire, step, 64).ec, http::error::bad_line_ending) << wire;
      const ResponseRead beasts = ReadResponseBeasts(wire, step, 64);
      EXPECT_TRUE(beasts.ec || !beasts.header_done) << wire;
    }
  }
}

// A head that comes in pieces is refused as soon as a bare CR has a byte after it, and held
// (need_more) while the CR is the last byte so far; one that cannot fit is header_limit.
TEST(ResponseParserTest, HeadsInPiecesAreRefusedAtOnceOrHeldToTheLimit) {
  namespace http = boost::beast::http;
  boost::system::error_code ec;
  {
    ResponseParser parser;
    EXPECT_EQ(parser.put(boost::asio::buffer(std::string_view("HTTP/1.1 200 OK\r\nX: a\r")), ec), 0u);
    EXPECT_EQ(ec, http::error::need_more);
    EXPECT_TRUE(parser.got_some());
    EXPECT_EQ(parser.put(boost::asio::buffer(std::string_view("HTTP/1.1 200 OK\r\nX: a\rb")), ec), 0u);
    EXPECT_EQ(ec, http::error::bad_line_ending) << "refused before any empty line";
    EXPECT_FALSE(parser.is_header_done());
  }
  {
    ResponseParser parser;
    parser.header_limit(64);
    std::string wire = "HTTP/1.1 200 OK\r\nX-Long: ";
    EXPECT_EQ(parser.put(boost::asio::buffer(wire), ec), 0u);
    EXPECT_EQ(ec, http::error::need_more);
    wire += std::string(64, 'x');
    EXPECT_EQ(parser.put(boost::asio::buffer(wire), ec), 0u);
    EXPECT_EQ(ec, http::error::header_limit);
  }
  {
    // Whole after pieces: the head alone is used, the body waits for its buffer.
    ResponseParser parser;
    const std::string wire = "HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nok";
    for (size_t n = 1; n < wire.size() - 2; ++n) {
      ASSERT_EQ(parser.put(boost::asio::buffer(wire.data(), n), ec), 0u) << n;
      ASSERT_EQ(ec, http::error::need_more) << n;
    }
    EXPECT_EQ(parser.put(boost::asio::buffer(wire), ec), wire.size() - 2);
    EXPECT_FALSE(ec);
    EXPECT_TRUE(parser.is_header_done());
    EXPECT_FALSE(parser.is_done());
    EXPECT_EQ(parser.fields()[boost::beast::http::field::content_length], "2");
  }
}

TEST(ResponseParserTest, AResponseToHeadHasNoBodyWhateverItsFieldsSay) {
  ResponseParser parser;
  parser.skip(true);
  boost::system::error_code ec;
  const std::string wire = "HTTP/1.1 200 OK\r\nContent-Length: 100\r\n\r\n";
  EXPECT_EQ(parser.put(boost::asio::buffer(wire), ec), wire.size());
  EXPECT_FALSE(ec);
  EXPECT_TRUE(parser.is_done());
  EXPECT_TRUE(parser.keep_alive());
  EXPECT_EQ(parser.content_length(), std::optional<uint64_t>(100));
}

TEST(ResponseParserTest, KeepsTheHeadAndFillsTheBodyBuffer) {
  const ResponseRead read =
      ReadResponseOurs("HTTP/1.1 200 Fine\r\nX-B:  two words \r\nX-Folded: a\r\n  b\r\nX-C: c\r\nX-Again: d\r\n\te\r\n"
                       "Content-Length: 6\r\n\r\nabcdef",
                       5, 4);
  ASSERT_FALSE(read.ec) << read.ec.message();
  EXPECT_TRUE(read.done);
  EXPECT_EQ(read.status, 200u);
  EXPECT_EQ(read.reason, "Fine");
  EXPECT_EQ(read.body, "abcdef") << "through a 4-byte buffer, in pieces";
  const std::vector<std::pair<std::string, std::string>> fields = {
      {"X-B", "two words"}, {"X-Folded", "a b"}, {"X-C", "c"}, {"X-Again", "d e"}, {"Content-Length", "6"}};
  EXPECT_EQ(read.fields, fields) << "in order; two folded values, each where its field is";
}

}  // namespace
}  // namespace fencing
