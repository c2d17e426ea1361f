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

RawHeadCheck HeadInProgress::Check(std::string_view partial) {
  constexpr std::string_view kVersionShape = "HTTP/0.0";  // '0': any digit
  const size_t size = partial.size();
  while (at_ < size) {
    if (!request_line_) {
      // A field line: its first byte at once (a fold), the rest when the line is complete.
      if (at_ == line_start_ && (partial[at_] == ' ' || partial[at_] == '\t')) {
        return Refuse("a folded header line (obs-fold)");
      }
      const void* cr = std::memchr(partial.data() + at_, '\r', size - at_);
      if (cr == nullptr) {
        at_ = size;
        break;
      }
      const size_t cr_at = static_cast<size_t>(static_cast<const char*>(cr) - partial.data());
      if (cr_at + 1 == size) {
        at_ = cr_at;  // its LF is still to come: looked at again then
        break;
      }
      // (no head end yet, so this CR has its LF and the line is not empty)
      if (RawHeadCheck line = CheckFieldLine(partial.substr(line_start_, cr_at - line_start_)); !line.ok) return line;
      line_start_ = at_ = cr_at + 2;
      continue;
    }
    const auto c = static_cast<unsigned char>(partial[at_]);
    if (c == '\r' || c == '\n') {
      if (at_ + 1 == size) break;  // its LF is still to come
      if (RawHeadCheck line = CheckRequestLine(partial.substr(0, at_)); !line.ok) return line;
      if (at_ - part_start_ != kVersionShape.size()) return Refuse("a request line whose version is not HTTP/d.d");
      request_line_ = false;
      line_start_ = at_ = at_ + 2;
      continue;
    }
    if (at_ == 0 && (c == ' ' || c == '\t')) return Refuse("whitespace before the request line");
    if (c == ' ') {
      if (++part_ == 3 || at_ == part_start_) return Refuse("a request line that is not 'METHOD TARGET VERSION'");
      part_start_ = at_ + 1;
    } else if (c < 0x21 || c >= 0x7f) {
      return Refuse("a control, tab or non-ASCII byte in the request line");
    } else if (part_ == 0 && !IsTokenByte(c)) {
      return Refuse("a method that is not an RFC 9110 token");
    } else if (part_ == 2) {
      const size_t i = at_ - part_start_;
      if (i >= kVersionShape.size()) return Refuse("a request line that is not 'METHOD TARGET VERSION'");
      const bool fits = kVersionShape[i] == '0' ? IsAsciiDigit(static_cast<char>(c)) : c == static_cast<unsigned char>(kVersionShape[i]);
      if (!fits) return Refuse("a request line whose version is not HTTP/d.d");
    }
    ++at_;
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
