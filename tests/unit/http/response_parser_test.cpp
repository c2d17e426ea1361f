// ResponseParser (http/response_parser.h): the backend's response read as
// http::response_parser<http::buffer_body> reads it (status, reason, fields, framing, body bytes,
// errors), with the fields in HeadFields and the body in the caller's buffer.

#include <gtest/gtest.h>

#include <boost/asio/buffer.hpp>
#include <boost/beast/http.hpp>

#include <string>
#include <string_view>
#include <vector>

#include "http/response_parser.h"
#include "test_heads.h"

namespace fencing {
namespace {

namespace http = boost::beast::http;

struct Read {
  boost::system::error_code ec;
  bool done = false;
  unsigned status = 0;
  std::string reason;
  std::vector<std::pair<std::string, std::string>> fields;
  std::string body;
  bool chunked = false;
  bool keep_alive = false;
};

// Feeds `wire` in pieces of `step` bytes, the body through a buffer of `room` bytes.
template <typename Parser>
Read Feed(Parser& parser, std::string_view wire, size_t step, size_t room,
          void (*set_buffer)(Parser&, char*, size_t), size_t (*left)(const Parser&)) {
  Read out;
  std::string pending;
  std::vector<char> buffer(room);
  size_t at = 0;
  while (!parser.is_done()) {
    if (at < wire.size()) {
      pending.append(wire.substr(at, step));
      at += step;
    } else if (pending.empty()) {
      break;
    }
    // As the exchange's relay does: one buffer, filled by as many puts as the bytes allow, then
    // handed on whole.
    for (;;) {
      set_buffer(parser, buffer.data(), buffer.size());
      for (;;) {
        size_t used = parser.put(boost::asio::buffer(pending), out.ec);
        pending.erase(0, used);
        if (out.ec == http::error::need_buffer) out.ec = {};
        if (out.ec || parser.is_done() || used == 0 || left(parser) == 0) break;
      }
      out.body.append(buffer.data(), buffer.size() - left(parser));
      if (out.ec == http::error::need_more) out.ec = {};
      if (out.ec || parser.is_done() || left(parser) != 0) break;  // full: hand it on, fill it again
    }
    if (out.ec) return out;
  }
  out.done = parser.is_done();
  if (parser.is_header_done()) {
    out.chunked = parser.chunked();
    out.keep_alive = parser.keep_alive();
  }
  return out;
}

Read Ours(std::string_view wire, size_t step, size_t room) {
  ResponseParser parser;
  parser.body_limit(boost::none);
  Read out = Feed<ResponseParser>(
      parser, wire, step, room, [](ResponseParser& p, char* d, size_t n) { p.SetBodyBuffer(d, n); },
      [](const ResponseParser& p) { return p.room(); });
  if (parser.is_header_done()) {
    out.status = parser.status();
    out.reason = std::string(parser.reason());
    for (const auto& f : parser.fields()) out.fields.emplace_back(f.name_string(), f.value());
  }
  return out;
}

Read Beasts(std::string_view wire, size_t step, size_t room) {
  using Parser = http::response_parser<http::buffer_body>;
  Parser parser;
  parser.body_limit(boost::none);
  Read out = Feed<Parser>(
      parser, wire, step, room,
      [](Parser& p, char* d, size_t n) {
        p.get().body().data = d;
        p.get().body().size = n;
      },
      [](const Parser& p) { return p.get().body().size; });
  if (parser.is_header_done()) {
    out.status = parser.get().result_int();
    out.reason = std::string(parser.get().reason());
    for (const auto& f : parser.get()) out.fields.emplace_back(f.name_string(), f.value());
  }
  return out;
}

void ExpectSame(const Read& ours, const Read& beasts, const std::string& what) {
  EXPECT_EQ(ours.ec, beasts.ec) << what << ": " << ours.ec.message() << " / " << beasts.ec.message();
  EXPECT_EQ(ours.done, beasts.done) << what;
  EXPECT_EQ(ours.status, beasts.status) << what;
  EXPECT_EQ(ours.reason, beasts.reason) << what;
  EXPECT_EQ(ours.body, beasts.body) << what;
  EXPECT_EQ(ours.chunked, beasts.chunked) << what;
  EXPECT_EQ(ours.keep_alive, beasts.keep_alive) << what;
  // Beast's fields put a repeated field beside the earlier ones of its name; compare per name.
  for (const auto& [name, value] : ours.fields) {
    std::vector<std::string> mine, theirs;
    for (const auto& f : ours.fields) if (EqualsIgnoreCase(f.first, name)) mine.push_back(f.second);
    for (const auto& f : beasts.fields) if (EqualsIgnoreCase(f.first, name)) theirs.push_back(f.second);
    EXPECT_EQ(mine, theirs) << what << ": " << name;
  }
  EXPECT_EQ(ours.fields.size(), beasts.fields.size()) << what;
}

const char* const kResponses[] = {
    "HTTP/1.1 200 OK\r\nContent-Length: 5\r\nX-A: 1\r\nx-a: 2\r\nServer: s\r\n\r\nhello",
    "HTTP/1.1 201 Created\r\nTransfer-Encoding: chunked\r\n\r\n3\r\nabc\r\n10;ext=1\r\n0123456789abcdef\r\n0\r\nT: 1\r\n\r\n",
    "HTTP/1.0 200 OK\r\nContent-Type: text/plain\r\n\r\nuntil the connection closes",
    "HTTP/1.1 204 No Content\r\nX-Folded: a\r\n  b\r\n\r\n",
    "HTTP/1.1 200  \r\nContent-Length: 0\r\nConnection: close\r\n\r\n",
    "HTTP/1.1 200 OK\r\nContent-Length: 3\r\nContent-Length: 4\r\n\r\nabcd",
    "HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\nzz\r\n",
    "HTTP/1.1 2000 OK\r\n\r\n",
};

TEST(ResponseParserTest, ReadsResponsesAsBeastsBufferBodyParserDoes) {
  for (const char* wire : kResponses) {
    for (size_t step : {1, 7, 4096}) {
      for (size_t room : {1, 4, 4096}) {
        const std::string what = std::string(wire).substr(0, 40) + " step " + std::to_string(step) + " room " +
                                 std::to_string(room);
        ExpectSame(Ours(wire, step, room), Beasts(wire, step, room), what);
      }
    }
  }
}

TEST(ResponseParserTest, KeepsTheHeadAndFillsTheBodyBuffer) {
  const Read read = Ours("HTTP/1.1 200 Fine\r\nX-B:  two words \r\nX-Folded: a\r\n  b\r\nContent-Length: 6\r\n\r\nabcdef", 5, 4);
  ASSERT_FALSE(read.ec) << read.ec.message();
  EXPECT_TRUE(read.done);
  EXPECT_EQ(read.status, 200u);
  EXPECT_EQ(read.reason, "Fine");
  EXPECT_EQ(read.body, "abcdef") << "through a 4-byte buffer, in pieces";
  ASSERT_EQ(read.fields.size(), 3u);
  EXPECT_EQ(read.fields[0], (std::pair<std::string, std::string>{"X-B", "two words"}));
  EXPECT_EQ(read.fields[1], (std::pair<std::string, std::string>{"X-Folded", "a b"})) << "a folded value, copied";
  EXPECT_EQ(read.fields[2], (std::pair<std::string, std::string>{"Content-Length", "6"}));
}

}  // namespace
}  // namespace fencing
