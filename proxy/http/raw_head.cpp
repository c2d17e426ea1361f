#include "http/raw_head.h"

#include "http/ascii.h"
#include "http/rules.h"

#include <cstring>

namespace fencing {
namespace {

RawHeadCheck Refuse(const char* reason) { return RawHeadCheck{false, reason}; }

RawHeadCheck CheckRequestLine(std::string_view line) {
  if (line.empty()) return Refuse("an empty request line");
  if (line.front() == ' ' || line.front() == '\t') return Refuse("whitespace before the request line");
  int spaces = 0;
  for (unsigned char c : line) {
    if (c == ' ') {
      ++spaces;
    } else if (c < 0x21 || c >= 0x7f) {
      // Targets must be percent-encoded: raw control, tab or non-ASCII bytes are refused.
      return Refuse("a control, tab or non-ASCII byte in the request line");
    }
  }
  if (spaces != 2) return Refuse("a request line that is not 'METHOD TARGET VERSION'");
  for (char c : line.substr(0, line.find(' '))) {
    if (!IsTokenByte(static_cast<unsigned char>(c))) return Refuse("a method that is not an RFC 9110 token");
  }
  return RawHeadCheck{};
}

RawHeadCheck CheckFieldLine(std::string_view line) {
  if (line.front() == ' ' || line.front() == '\t') return Refuse("a folded header line (obs-fold)");
  size_t colon = line.find(':');
  if (colon == std::string_view::npos) return Refuse("a header line without ':'");
  if (colon == 0) return Refuse("an empty header name");
  for (size_t i = 0; i < colon; ++i) {
    if (!IsTokenByte(static_cast<unsigned char>(line[i]))) {
      return Refuse("a header name with a character that is not allowed (whitespace before ':'?)");
    }
  }
  const std::string_view value = line.substr(colon + 1);
  if (FindNonFieldValueChar(value) != value.size()) return Refuse("a control byte in a header value");
  return RawHeadCheck{};
}

}  // namespace

size_t FindHeadEnd(std::string_view data, size_t* scanned) {
  const char* const begin = data.data();
  const size_t size = data.size();
  size_t i = *scanned;
  while (i < size) {
    // A line at a time: its LF, then one look for a CR anywhere but just before that LF (heads
    // are short, most bytes are neither, and memchr is fast).
    const char* lf = static_cast<const char*>(std::memchr(begin + i, '\n', size - i));
    if (lf == nullptr) {
      const char* cr = static_cast<const char*>(std::memchr(begin + i, '\r', size - i));
      if (cr == nullptr) break;
      const size_t cr_at = static_cast<size_t>(cr - begin);
      if (cr_at + 1 == size) {
        *scanned = cr_at;  // its next byte is still to come: look at this CR again then
        return 0;
      }
      return cr_at + 2;  // a bare CR (no LF follows it): the head ends with the byte after it
    }
    const size_t lf_at = static_cast<size_t>(lf - begin);
    if (lf_at > i + 1) {
      if (const void* cr = std::memchr(begin + i, '\r', lf_at - 1 - i)) {
        return static_cast<size_t>(static_cast<const char*>(cr) - begin) + 2;  // a bare CR
      }
    }
    if (lf_at == 0 || begin[lf_at - 1] != '\r') return lf_at + 1;  // a bare LF
    // CRLF right after the previous line's CRLF: the empty line.
    if (lf_at >= 2 && begin[lf_at - 2] == '\n') return lf_at + 1;
    i = lf_at + 1;
  }
  *scanned = size;
  return 0;
}

size_t LeadingEmptyLines(std::string_view data) {
  size_t at = 0;
  while (at + 1 < data.size() && data[at] == '\r' && data[at + 1] == '\n') at += 2;
  return at;
}

RawHeadCheck CheckRequestLineStart(std::string_view partial) {
  const size_t end = partial.find_first_of("\r\n");
  if (end != std::string_view::npos) return CheckRequestLine(partial.substr(0, end));
  if (partial.empty()) return RawHeadCheck{};
  if (partial.front() == ' ' || partial.front() == '\t') return Refuse("whitespace before the request line");
  // METHOD SP TARGET SP VERSION, as far as it has come.
  int part = 0;
  size_t part_start = 0;
  for (size_t i = 0; i < partial.size(); ++i) {
    const auto c = static_cast<unsigned char>(partial[i]);
    if (c == ' ') {
      if (++part == 3 || i == part_start) return Refuse("a request line that is not 'METHOD TARGET VERSION'");
      part_start = i + 1;
      continue;
    }
    if (c < 0x21 || c >= 0x7f) return Refuse("a control, tab or non-ASCII byte in the request line");
    if (part == 0 && !IsTokenByte(c)) return Refuse("a method that is not an RFC 9110 token");
  }
  if (part == 2) {
    // The version so far must be a beginning of HTTP/d.d.
    constexpr std::string_view kShape = "HTTP/0.0";
    const std::string_view version = partial.substr(part_start);
    if (version.size() > kShape.size()) return Refuse("a request line that is not 'METHOD TARGET VERSION'");
    for (size_t i = 0; i < version.size(); ++i) {
      const bool fits = kShape[i] == '0' ? IsAsciiDigit(version[i]) : version[i] == kShape[i];
      if (!fits) return Refuse("a request line whose version is not HTTP/d.d");
    }
  }
  return RawHeadCheck{};
}

RawHeadCheck CheckRawHead(std::string_view head) {
  size_t start = 0;
  bool first = true;
  while (start < head.size()) {
    size_t lf = head.find('\n', start);
    if (lf == std::string_view::npos) {
      // FindHeadEnd ends a head early at a bare CR: say so rather than that the head is cut short.
      if (head.find('\r', start) != std::string_view::npos) return Refuse("a bare CR");
      return Refuse("a head that does not end with an empty line");
    }
    if (lf == start || head[lf - 1] != '\r') return Refuse("a bare LF line ending");
    std::string_view line = head.substr(start, lf - 1 - start);
    if (line.find('\r') != std::string_view::npos) return Refuse("a bare CR");
    start = lf + 1;
    if (line.empty()) {
      if (first) return Refuse("an empty line before the request line");
      return start == head.size() ? RawHeadCheck{} : Refuse("bytes after the end of the head");
    }
    RawHeadCheck check = first ? CheckRequestLine(line) : CheckFieldLine(line);
    if (!check.ok) return check;
    first = false;
  }
  return Refuse("a head that does not end with an empty line");
}

}  // namespace fencing
