#include "http/rules.h"

#include "http/ascii.h"

#include <algorithm>
#include <cstring>
#include <limits>

namespace fencing {

bool IsDecimalDigits(std::string_view text) {
  return !text.empty() && std::all_of(text.begin(), text.end(), IsAsciiDigit);
}

bool ParseDecimalU64(std::string_view text, uint64_t* out) {
  if (text.empty()) return false;
  constexpr uint64_t kMax = std::numeric_limits<uint64_t>::max();
  // Up to 19 digits cannot overflow (10^19 - 1 < 2^64 - 1): no check per digit.
  const bool may_overflow = text.size() >= kMaxU64Digits - 1;
  uint64_t value = 0;
  for (char c : text) {
    const uint64_t digit = static_cast<uint64_t>(static_cast<unsigned char>(c)) - '0';
    if (digit > 9) return false;
    if (may_overflow && value > (kMax - digit) / 10) return false;
    value = value * 10 + digit;
  }
  *out = value;
  return true;
}

size_t FindNonFieldValueChar(std::string_view text) {
  constexpr uint64_t kOnes = 0x0101010101010101ULL;
  constexpr uint64_t kHighBits = 0x8080808080808080ULL;
  size_t i = 0;
  while (i < text.size()) {
    if (text.size() - i >= 8) {
      uint64_t word;
      std::memcpy(&word, text.data() + i, sizeof word);
      // Exact word tests: a byte below 0x20 (w - 0x20.. borrows into a clear high bit), or a
      // byte equal to 0x7f (zero after the xor). Bytes from 0x80 up (obs-text) pass both.
      const uint64_t below_space = (word - kOnes * 0x20) & ~word & kHighBits;
      const uint64_t del = word ^ (kOnes * 0x7f);
      const uint64_t is_del = (del - kOnes) & ~del & kHighBits;
      if ((below_space | is_del) == 0) {
        i += 8;
        continue;
      }
    }
    // A word with a tab or a refused byte in it, or the last few bytes: one at a time.
    const size_t stop = std::min(text.size(), i + 8);
    for (; i < stop; ++i) {
      if (!IsValueByte(static_cast<unsigned char>(text[i]))) return i;
    }
  }
  return text.size();
}

bool IsToken(std::string_view text) {
  return !text.empty() &&
         std::all_of(text.begin(), text.end(), [](char c) { return IsTokenByte(static_cast<unsigned char>(c)); });
}

std::string_view TrimOws(std::string_view text) {
  size_t first = 0;
  size_t last = text.size();
  while (first != last && (text[first] == ' ' || text[first] == '\t')) ++first;
  while (last != first && (text[last - 1] == ' ' || text[last - 1] == '\t')) --last;
  return text.substr(first, last - first);
}

bool IsValidName(std::string_view name) {
  return !name.empty() && name.size() <= kMaxNameLength && std::all_of(name.begin(), name.end(), IsNameChar);
}

bool IsValidFenceKey(std::string_view key) {
  return !key.empty() && key.size() <= kMaxFenceKeyLength && std::all_of(key.begin(), key.end(), IsFenceKeyChar);
}

std::string PathSegmentsProblem(std::string_view path) {
  if (path.find("//") != std::string_view::npos) return "must not contain empty segments ('//')";
  for (size_t start = 1; start <= path.size();) {
    size_t end = path.find('/', start);
    if (end == std::string_view::npos) end = path.size();
    const std::string_view segment = path.substr(start, end - start);
    if (segment == "." || segment == "..") return "must not contain '.' or '..' segments";
    start = end + 1;
  }
  return "";
}

std::string ZnodePathProblem(std::string_view path) {
  if (path.empty() || path.front() != '/') return "must be an absolute znode path (start with '/')";
  if (path == "/") return "must name a znode below the root '/'";
  if (path.back() == '/') return "must not end with '/'";
  for (char c : path) {
    const unsigned char u = static_cast<unsigned char>(c);
    if (u < 0x20 || u == 0x7f) return "must not contain control characters";
  }
  if (std::string problem = PathSegmentsProblem(path); !problem.empty()) return problem;
  if (path == "/zookeeper" || path.starts_with("/zookeeper/")) {
    return "must not be under /zookeeper (ZooKeeper's own znodes)";
  }
  return "";
}

bool IsValidIdentity(std::string_view identity) {
  if (identity.empty() || identity.size() > kMaxIdentityLength) return false;
  return std::all_of(identity.begin(), identity.end(), [](char c) { return c > ' ' && c < 0x7f && c != ','; });
}

bool WriterAdmits(std::string_view writer, std::string_view identity) {
  if (identity.empty()) return false;
  if (!writer.empty() && writer.back() == '*') return identity.starts_with(writer.substr(0, writer.size() - 1));
  return writer == identity;
}

}  // namespace fencing
