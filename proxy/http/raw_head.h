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
// 0); a bare "\n\n" also ends a head, so that CheckRawHead can refuse it.
size_t FindHeadEnd(std::string_view data, size_t* scanned);

struct RawHeadCheck {
  bool ok = true;
  const char* reason = "";
};

// head: exactly what FindHeadEnd measured.
RawHeadCheck CheckRawHead(std::string_view head);

}  // namespace fencing
