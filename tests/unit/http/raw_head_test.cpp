// The byte-level head checks that run before Boost.Beast sees a request (http/raw_head.h):
// FindHeadEnd measures the head as bytes arrive, CheckRawHead refuses every head that two HTTP
// parsers could read differently (obs-fold, bare CR or LF, control bytes, odd names or request
// lines). Both are driven from tables; each refusal must say why.

#include <gtest/gtest.h>

#include <cstddef>
#include <ostream>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "http/raw_head.h"
#include "http/request_head.h"

namespace fencing {
namespace {

// ---------------------------------------------------------------- FindHeadEnd

struct FindCase {
  const char* what;
  std::vector<std::string> parts;  // arrive one after the other; FindHeadEnd runs after each
  size_t end;                      // the head length once every part is in (0: not complete)
};

void PrintTo(const FindCase& c, std::ostream* os) { *os << c.what; }

class FindHeadEndTest : public testing::TestWithParam<FindCase> {};

// Progress covers what was searched: all of it, but a last CR whose next byte is still to come.
void ExpectProgress(const std::string& data, size_t scanned, const char* what) {
  if (!data.empty() && data.back() == '\r') {
    EXPECT_EQ(scanned, data.size() - 1) << what << ": a last CR is looked at again with the next byte";
  } else {
    EXPECT_EQ(scanned, data.size()) << what;
  }
}

TEST_P(FindHeadEndTest, MeasuresTheHeadAsBytesArrive) {
  const FindCase& c = GetParam();
  std::string data;
  size_t scanned = 0;
  size_t found = 0;
  for (size_t i = 0; i < c.parts.size(); ++i) {
    data += c.parts[i];
    found = FindHeadEnd(data, &scanned);
    if (i + 1 < c.parts.size()) {
      ASSERT_EQ(found, 0u) << c.what << ": the head cannot end within part " << i;
      ExpectProgress(data, scanned, c.what);
    }
  }
  EXPECT_EQ(found, c.end) << c.what;
  if (found == 0) ExpectProgress(data, scanned, c.what);
}

TEST_P(FindHeadEndTest, ByteByByteFindsTheSameEnd) {
  const FindCase& c = GetParam();
  std::string whole;
  for (const std::string& part : c.parts) whole += part;
  std::string data;
  size_t scanned = 0;
  size_t found = 0;
  for (char ch : whole) {
    data += ch;
    found = FindHeadEnd(data, &scanned);
    if (found != 0) break;
  }
  EXPECT_EQ(found, c.end) << c.what;
  // And all at once, from a fresh start.
  size_t fresh = 0;
  EXPECT_EQ(FindHeadEnd(whole, &fresh), c.end) << c.what;
}

const std::string kGet = "GET /orders/1 HTTP/1.1\r\nHost: a\r\n\r\n";  // 35 bytes

INSTANTIATE_TEST_SUITE_P(
    Table, FindHeadEndTest,
    testing::Values(
        FindCase{"complete head with CRLFCRLF", {kGet}, kGet.size()},
        FindCase{"request line only", {"GET / HTTP/1.1\r\n\r\n"}, 18},
        FindCase{"body bytes after the head are not counted", {kGet + "hello"}, kGet.size()},
        FindCase{"a second pipelined head after the first is not counted", {kGet + kGet}, kGet.size()},
        FindCase{"no end yet", {"GET / HTTP/1.1\r\nHost: a\r\n"}, 0},
        FindCase{"empty input", {""}, 0},
        FindCase{"a lone CRLF", {"\r\n"}, 0},
        FindCase{"CRLF CR without the last LF", {"GET / HTTP/1.1\r\nHost: a\r\n\r"}, 0},
        FindCase{"a last CR waits for the next byte", {"GET / HTTP/1.1\r"}, 0},
        // A bare CR or LF ends the head at once (just after the byte that shows it), so that
        // CheckRawHead refuses it now rather than the header_read timeout later.
        FindCase{"bare CR: CR CR", {"GET / HTTP/1.1\r\r"}, 16},
        FindCase{"bare CR inside the request line", {"GET / HTTP/1.1\rHost: a\r\r"}, 16},
        FindCase{"bare CR in a value", {"GET / HTTP/1.1\r\nX: a\rb\r\n\r\n"}, 22},
        FindCase{"bare CR, its next byte later", {"GET / HTTP/1.1\r", "H"}, 16},
        FindCase{"bare CR, byte by byte", {"GET / HTTP/1.1\r\nX: a", "\r", "b"}, 22},
        FindCase{"bare LF ends a head at once", {"GET / HTTP/1.1\nHost: a\n\n"}, 15},
        FindCase{"bare LF in the middle", {"GET / HTTP/1.1\r\nHost: a\nX: b\r\n"}, 24},
        FindCase{"LF as the very first byte", {"\nGET / HTTP/1.1\r\n\r\n"}, 1},
        FindCase{"LF CRLF ends a head at its bare LF", {"GET / HTTP/1.1\nHost: a\n\r\n"}, 15},
        FindCase{"CRLF LF ends a head", {"GET / HTTP/1.1\r\nHost: a\r\n\n"}, 26},
        FindCase{"leading CRLF CRLF", {"\r\n\r\nGET / HTTP/1.1\r\n\r\n"}, 4},
        FindCase{"incremental: split inside the request line", {"GET /ord", "ers/1 HTTP/1.1\r\nHost: a\r\n\r\n"},
                 kGet.size()},
        FindCase{"incremental: split between CRLF and CRLF", {"GET /orders/1 HTTP/1.1\r\nHost: a\r\n", "\r\n"},
                 kGet.size()},
        FindCase{"incremental: split inside the final CRLF",
                 {"GET /orders/1 HTTP/1.1\r\nHost: a\r\n\r", "\n"}, kGet.size()},
        FindCase{"incremental: split between CR and LF of the first empty-line half",
                 {"GET /orders/1 HTTP/1.1\r\nHost: a\r", "\n\r\n"}, kGet.size()},
        FindCase{"incremental: bare LF after a split", {"GET / HTTP/1.1", "\n"}, 15},
        FindCase{"incremental: many parts, body in the last",
                 {"G", "ET / HTTP/1.1\r", "\n", "X: y\r\n", "\r", "\nbody"}, 24}));

// ---------------------------------------------------------------- CheckRawHead

struct RawCase {
  const char* what;
  std::string head;  // a whole head; FindHeadEnd cuts it short at a bare CR or LF
  bool ok;
};

void PrintTo(const RawCase& c, std::ostream* os) { *os << c.what; }

class CheckRawHeadTest : public testing::TestWithParam<RawCase> {};

TEST_P(CheckRawHeadTest, RefusesHeadsTwoParsersCouldReadDifferently) {
  const RawCase& c = GetParam();
  size_t scanned = 0;
  const size_t end = FindHeadEnd(c.head, &scanned);
  ASSERT_NE(end, 0u) << c.what << ": FindHeadEnd sees the head end (or a bare CR or LF) without more bytes";
  if (c.ok) {
    ASSERT_EQ(end, c.head.size()) << c.what << ": the table's head is a whole head";
  }
  // As Session::ReadHead does: exactly what FindHeadEnd measured.
  RawHeadCheck check = CheckRawHead(std::string_view(c.head).substr(0, end));
  EXPECT_EQ(check.ok, c.ok) << c.what << ": " << check.reason;
  if (check.ok) {
    EXPECT_STREQ(check.reason, "") << c.what;
  } else {
    EXPECT_STRNE(check.reason, "") << c.what << ": a refusal says why";
  }
}

std::string Head(std::string_view fields) { return "PUT /orders/1 HTTP/1.1\r\n" + std::string(fields) + "\r\n"; }
std::string Line(std::string_view request_line) { return std::string(request_line) + "\r\nHost: a\r\n\r\n"; }
std::string WithByte(std::string_view before, char byte, std::string_view after) {
  std::string s(before);
  s += byte;
  s += after;
  return s;
}

INSTANTIATE_TEST_SUITE_P(
    Accepts, CheckRawHeadTest,
    testing::Values(
        RawCase{"request line only", "GET / HTTP/1.1\r\n\r\n", true},
        RawCase{"several fields", Head("Host: a\r\nX-Fencing-Token: 5\r\nContent-Length: 3\r\nAccept: */*\r\n"), true},
        RawCase{"an empty value", Head("Host: a\r\nX-Empty:\r\n"), true},
        RawCase{"an empty value with a space", Head("X-Empty: \r\n"), true},
        RawCase{"obs-text in a value", Head("X-Name: caf\xc3\xa9 \x80\xff\r\n"), true},
        RawCase{"a tab in a value", Head("X-Tab: a\tb\r\nX-Lead:\t7\t\r\n"), true},
        RawCase{"no space after the colon", Head("Host:a\r\n"), true},
        RawCase{"every token character in a name", Head("!#$%&'*+-.^_`|~09AZaz: v\r\n"), true},
        RawCase{"a colon inside the value", Head("Host: a:8080\r\n"), true},
        RawCase{"query and percent escapes in the target", Line("GET /orders/%41?x=1&y=%2F HTTP/1.1"), true},
        RawCase{"absolute-form target", Line("PUT http://h/orders/1 HTTP/1.1"), true},
        RawCase{"HTTP/1.0", Line("GET / HTTP/1.0"), true},
        RawCase{"an extension method of token characters", Line("M-SEARCH! / HTTP/1.1"), true}));

INSTANTIATE_TEST_SUITE_P(
    Refuses, CheckRawHeadTest,
    testing::Values(
        // Continuation lines: Beast 1.81 folds them into the previous value ("5" + " 1").
        RawCase{"obs-fold with a space", Head("X-Fencing-Token: 5\r\n 1\r\n"), false},
        RawCase{"obs-fold with a tab", Head("X-Fencing-Token: 5\r\n\t1\r\n"), false},
        RawCase{"obs-fold right after the request line", "PUT /orders/1 HTTP/1.1\r\n Host: a\r\n\r\n", false},
        RawCase{"obs-fold of an empty value", Head("X-Fencing-Token:\r\n 10\r\n"), false},
        // Line endings.
        RawCase{"bare LF ends a field line", "PUT /orders/1 HTTP/1.1\r\nHost: a\nX: b\r\n\r\n", false},
        RawCase{"bare LF ends the request line", "PUT /orders/1 HTTP/1.1\nHost: a\r\n\r\n", false},
        RawCase{"bare LF everywhere", "PUT /orders/1 HTTP/1.1\nHost: a\n\n", false},
        RawCase{"bare LF as the empty line", "PUT /orders/1 HTTP/1.1\r\nHost: a\r\n\n", false},
        RawCase{"bare CR inside a value", Head("X-A: a\rb\r\n"), false},
        RawCase{"bare CR inside a name", Head("X\r-A: b\r\n"), false},
        RawCase{"bare CR before CRLF", Head("X-A: a\r\r\n"), false},
        RawCase{"bare CR in the request line", Line("PUT /orders/1\r HTTP/1.1"), false},
        // Control bytes.
        RawCase{"NUL in a value", Head(WithByte("X-A: a", '\0', "b\r\n")), false},
        RawCase{"NUL in a name", Head(WithByte("X-", '\0', "A: b\r\n")), false},
        RawCase{"NUL at the end of a value", Head(WithByte("X-Fencing-Token: 5", '\0', "\r\n")), false},
        RawCase{"0x01 in a value", Head("X-A: a\x01z\r\n"), false},
        RawCase{"0x1f in a value", Head("X-A: a\x1fz\r\n"), false},
        RawCase{"DEL 0x7f in a value", Head("X-A: a\x7fz\r\n"), false},
        RawCase{"vertical tab in a value", Head("X-A: a\vz\r\n"), false},
        RawCase{"form feed in a value", Head("X-A: a\fz\r\n"), false},
        // Names.
        RawCase{"whitespace before ':'", Head("Content-Length : 5\r\n"), false},
        RawCase{"tab before ':'", Head("Content-Length\t: 5\r\n"), false},
        RawCase{"whitespace inside a name", Head("Content Length: 5\r\n"), false},
        RawCase{"an empty name", Head(":x\r\n"), false},
        RawCase{"a line without ':'", Head("Host a\r\n"), false},
        RawCase{"a separator in a name", Head("X(A): b\r\n"), false},
        RawCase{"obs-text in a name", Head("X-\xc3\xa9: b\r\n"), false},
        // The request line.
        RawCase{"a leading empty line", "\r\nGET / HTTP/1.1\r\n\r\n", false},
        RawCase{"only an empty line", "\r\n\r\n", false},
        RawCase{"leading space", Line(" GET / HTTP/1.1"), false},
        RawCase{"leading tab", Line("\tGET / HTTP/1.1"), false},
        RawCase{"request line with 1 space", Line("GET /HTTP/1.1"), false},
        RawCase{"request line with no space", Line("GET"), false},
        RawCase{"request line with 3 spaces", Line("GET / x HTTP/1.1"), false},
        RawCase{"request line with two spaces in a row", Line("GET  / HTTP/1.1"), false},
        RawCase{"request line with a trailing space", Line("GET / HTTP/1.1 "), false},
        RawCase{"HTTP/0.9 style request line", Line("GET /"), false},
        RawCase{"tab in the request line", Line("GET\t/ HTTP/1.1"), false},
        RawCase{"tab instead of the second space", Line("GET /\tHTTP/1.1"), false},
        RawCase{"non-ASCII byte in the target", Line("GET /ord\xc3\xa9rs HTTP/1.1"), false},
        RawCase{"0x80 in the target", Line("GET /\x80 HTTP/1.1"), false},
        RawCase{"control byte in the target", Line("GET /a\x01 HTTP/1.1"), false},
        RawCase{"DEL in the target", Line("GET /a\x7f HTTP/1.1"), false},
        RawCase{"NUL in the target", Line(WithByte("GET /orders", '\0', "/../admin HTTP/1.1")), false},
        RawCase{"vertical tab in the target", Line("GET /a\vb HTTP/1.1"), false},
        // The method is an RFC 9110 token.
        RawCase{"a separator in the method", Line("G(T / HTTP/1.1"), false},
        RawCase{"a slash in the method", Line("GET/ / HTTP/1.1"), false},
        RawCase{"a quote in the method", Line("\"GET\" / HTTP/1.1"), false}));

// A bare CR or LF is refused as soon as its bytes are in, never by the header_read timeout: the
// head FindHeadEnd cuts short there is refused, and says why.
TEST(CheckRawHeadTest, RefusesABareCrOrLfWhereFindHeadEndStops) {
  const std::pair<std::string, const char*> cases[] = {
      {"GET / HTTP/1.1\rHost: a\r\r", "bare CR"},
      {"GET / HTTP/1.1\r\r", "bare CR"},
      {"GET / HTTP/1.1\r\nX-A: a\rContent-Length: 5\r\n", "bare CR"},
      {"GET / HTTP/1.1\r\nX-A: a\r\r\n", "bare CR"},
      {"GET / HTTP/1.1\r\nX\r-A: b", "bare CR"},
      {"GET / HTTP/1.1\nHost: a", "bare LF"},
      {"GET / HTTP/1.1\r\nHost: a\nX: b", "bare LF"},
      {"\nGET / HTTP/1.1", "bare LF"},
  };
  for (const auto& [bytes, why] : cases) {
    size_t scanned = 0;
    const size_t end = FindHeadEnd(bytes, &scanned);
    ASSERT_NE(end, 0u) << bytes << ": FindHeadEnd must not wait for more bytes";
    ASSERT_LE(end, bytes.size());
    RawHeadCheck check = CheckRawHead(std::string_view(bytes).substr(0, end));
    EXPECT_FALSE(check.ok) << bytes;
    EXPECT_NE(std::string_view(check.reason).find(why), std::string_view::npos) << bytes << ": " << check.reason;
  }
}

// A head that can never become valid is refused from the bytes that show it, before the head
// ends (without it, such a request waited out timeouts.header_read); every beginning of a valid
// one is not, whether it comes in one piece or a byte at a time.
RawHeadCheck CheckWhole(std::string_view bytes) { return HeadInProgress().Check(bytes); }
RawHeadCheck CheckByteByByte(std::string_view bytes) {
  HeadInProgress so_far;
  for (size_t n = 0; n <= bytes.size(); ++n) {
    if (RawHeadCheck check = so_far.Check(bytes.substr(0, n)); !check.ok) return check;
  }
  return RawHeadCheck{};
}

TEST(HeadInProgressTest, RefusesWhatCanNeverBecomeValidAndNothingElse) {
  const std::pair<std::string, const char*> refused[] = {
      {std::string("\0", 1), "control"},
      {std::string("\x16\x03\x01\x02\x00\x01", 6), "control"},  // a TLS ClientHello on the plain port
      {" GET / HTTP/1.1", "whitespace before"},
      {"\tGET", "whitespace before"},
      {"GE\x01T / HTTP/1.1", "control"},
      {"G(T /", "method"},
      {"GET /a\x7f", "control"},
      {"GET /\x80", "control"},
      {"GET  /", "METHOD TARGET VERSION"},
      {"GET / HTTP/1.1 x", "METHOD TARGET VERSION"},
      {"GET / HTTX", "version"},
      {"GET / HTTP/x", "version"},
      {"GET / HTTP/1.11", "METHOD TARGET VERSION"},
      {"GET / \r\n", "version"},  // a complete line
      {"GET / HTTP/1\r\n", "version"},
      {"GET /a b HTTP/1.1\r\n", "version"},
      {"GET / HTTP/1.1\r\n folded", "obs-fold"},
      {"GET / HTTP/1.1\r\nHost: a\r\n\tfolded", "obs-fold"},
      {std::string("GET / HTTP/1.1\r\nX\0Y: 1\r\nZ", 25), "header name"},
      {"GET / HTTP/1.1\r\nNo colon\r\nZ", "without ':'"},
      {"GET / HTTP/1.1\r\nX: a\x01b\r\n", "control byte in a header value"},
  };
  for (const auto& [bytes, why] : refused) {
    for (RawHeadCheck check : {CheckWhole(bytes), CheckByteByByte(bytes)}) {
      EXPECT_FALSE(check.ok) << testing::PrintToString(bytes);
      EXPECT_NE(std::string_view(check.reason).find(why), std::string_view::npos)
          << testing::PrintToString(bytes) << ": " << check.reason;
      // What is refused early is refused once whole too (by CheckRawHead, or by the head's reader).
      const std::string whole = bytes + (bytes.ends_with("\r\n") ? "\r\n" : "\r\n\r\n");
      RequestHead head;
      EXPECT_TRUE(!CheckRawHead(whole).ok || head.Parse(whole, 1 << 20)) << testing::PrintToString(bytes);
    }
  }
  const std::string valid = "PATCH /orders/1?x=%41 HTTP/1.1\r\nHost: a\r\nX-Empty:\r\nX-B: b c\r\n";
  HeadInProgress so_far;
  for (size_t n = 0; n <= valid.size(); ++n) {
    EXPECT_TRUE(CheckWhole(valid.substr(0, n)).ok) << valid.substr(0, n);
    EXPECT_TRUE(so_far.Check(valid.substr(0, n)).ok) << valid.substr(0, n);
  }
}

TEST(CheckRawHeadTest, LeadingEmptyLinesAreMeasured) {
  EXPECT_EQ(LeadingEmptyLines("GET"), 0u);
  EXPECT_EQ(LeadingEmptyLines("\r\nGET"), 2u);
  EXPECT_EQ(LeadingEmptyLines("\r\n\r\n\r"), 4u);  // the last CR's LF may still come
  EXPECT_EQ(LeadingEmptyLines("\r\r\n"), 0u);      // a bare CR is not an empty line
  EXPECT_EQ(LeadingEmptyLines("\n\r\n"), 0u);      // nor a bare LF
}

TEST(CheckRawHeadTest, RefusesBytesAfterTheEmptyLineAndHeadsWithoutOne) {
  EXPECT_FALSE(CheckRawHead("GET / HTTP/1.1\r\n\r\nX").ok);
  EXPECT_FALSE(CheckRawHead("GET / HTTP/1.1\r\nHost: a\r\n").ok);
  EXPECT_FALSE(CheckRawHead("GET / HTTP/1.1\r\nHost: a").ok);
  EXPECT_FALSE(CheckRawHead("").ok);
}

}  // namespace
}  // namespace fencing
