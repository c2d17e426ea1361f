#pragma once
// Byte-level checks on a request head before any parser sees it. Boost.Beast 1.81 is lenient
// where a backend may be strict (or the other way round): obs-fold, bare CR or LF, NUL and other
// control bytes, whitespace before a colon. A head two parsers could read differently is a
// smuggling vector, so such heads are refused outright.

#include <cstddef>
#include <string_view>

namespace fencing {

// Length of the head (request line, fields, and the empty line that ends it) if `data` holds a
// complete one, else 0. `scanned` carries progress between calls as more bytes arrive (start at
// 0).
//
// A bare CR or LF also ends the head, as soon as the bytes show it, so that the caller hands
// CheckRawHead a head it refuses at once instead of waiting for an empty line that may never
// come (a stalled head is only ended by the header_read timeout, unanswered):
//  - a bare LF (an LF not after a CR) ends it just after that LF;
//  - a bare CR (a CR followed by anything but LF) ends it just after the byte that follows the
//    CR. A CR that is the last byte so far is undecided: 0, and it is looked at again when the
//    next byte is in.
size_t FindHeadEnd(std::string_view data, size_t* scanned);

struct RawHeadCheck {
  bool ok = true;
  const char* reason = "";
};

// head: exactly what FindHeadEnd measured (so a head cut short at a bare CR or LF is refused).
RawHeadCheck CheckRawHead(std::string_view head);

// The bytes of the empty lines (CRLF) that `data` starts with: a server ignores them before a
// request line (RFC 9112 2.2; a client may send one after a POST body). A lone CR at the end is
// not counted (its LF may still come).
size_t LeadingEmptyLines(std::string_view data);

// A request head still arriving (FindHeadEnd found no end yet), checked as its bytes come, each
// byte once: refused at once when it can never become a head CheckRawHead accepts, instead of
// waiting out timeouts.header_read. The request line is checked byte by byte: a first byte that
// cannot start a method (a NUL, a space, a TLS handshake's 0x16), a byte that cannot be in a
// method, a control byte or a third space in the line, a version that cannot become HTTP/d.d.
// A field line is checked as CheckRawHead checks it once it is complete, and its first byte at
// once (obs-fold).
class HeadInProgress {
 public:
  // partial: the head's bytes so far, the same bytes (and perhaps more) at every call.
  RawHeadCheck Check(std::string_view partial);

 private:
  size_t at_ = 0;          // bytes of `partial` looked at already
  size_t line_start_ = 0;  // where the line being read begins
  bool request_line_ = true;
  int part_ = 0;           // of the request line: 0 method, 1 target, 2 version
  size_t part_start_ = 0;  // where that part begins
};

}  // namespace fencing
