#include "http/raw_head.h"

#include "http/rules.h"

#include <array>
#include <cstring>

namespace fencing {
namespace {

RawHeadCheck Refuse(const char* reason) { return RawHeadCheck{false, reason}; }

// Byte classes, looked up in a table: the check runs on every byte of every request head.
enum : unsigned char { kToken = 1, kValue = 2 };

constexpr std::array<unsigned char, 256> MakeByteClasses() {
  std::array<unsigned char, 256> classes{};
  for (int c = 0; c < 256; ++c) {
    // A field value may hold visible ASCII, obs-text (0x80-0xFF), space and tab; nothing else.
    if (c == '\t' || c == ' ' || (c > 0x20 && c != 0x7f)) classes[c] |= kValue;
    if (IsTokenChar(static_cast<char>(c))) classes[c] |= kToken;
  }
  return classes;
}
constexpr std::array<unsigned char, 256> kByteClasses = MakeByteClasses();

bool IsTokenChar(unsigned char c) { return kByteClasses[c] & kToken; }
bool IsValueChar(unsigned char c) { return kByteClasses[c] & kValue; }

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
  return RawHeadCheck{};
}

RawHeadCheck CheckFieldLine(std::string_view line) {
  if (line.front() == ' ' || line.front() == '\t') return Refuse("a folded header line (obs-fold)");
  size_t colon = line.find(':');
  if (colon == std::string_view::npos) return Refuse("a header line without ':'");
  if (colon == 0) return Refuse("an empty header name");
  for (size_t i = 0; i < colon; ++i) {
    if (!IsTokenChar(static_cast<unsigned char>(line[i]))) {
      return Refuse("a header name with a character that is not allowed (whitespace before ':'?)");
    }
  }
  for (size_t i = colon + 1; i < line.size(); ++i) {
    if (!IsValueChar(static_cast<unsigned char>(line[i]))) return Refuse("a control byte in a header value");
  }
  return RawHeadCheck{};
}

}  // namespace

size_t FindHeadEnd(std::string_view data, size_t* scanned) {
  for (size_t i = *scanned; i < data.size(); ++i) {
    const void* lf = std::memchr(data.data() + i, '\n', data.size() - i);
    if (lf == nullptr) break;
    i = static_cast<size_t>(static_cast<const char*>(lf) - data.data());
    // An empty line: "\n" right after the previous line's "\n" (optionally with "\r" between).
    if (i >= 1 && data[i - 1] == '\n') return i + 1;
    if (i >= 2 && data[i - 1] == '\r' && data[i - 2] == '\n') return i + 1;
  }
  *scanned = data.size();
  return 0;
}

RawHeadCheck CheckRawHead(std::string_view head) {
  size_t start = 0;
  bool first = true;
  while (start < head.size()) {
    size_t lf = head.find('\n', start);
    if (lf == std::string_view::npos) return Refuse("a head that does not end with an empty line");
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
