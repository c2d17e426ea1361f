#include "http/rules.h"

#include "http/ascii.h"

#include <algorithm>
#include <limits>

namespace fencing {

bool IsDecimalDigits(std::string_view text) {
  return !text.empty() && std::all_of(text.begin(), text.end(), IsAsciiDigit);
}

bool ParseDecimalU64(std::string_view text, uint64_t* out) {
  if (!IsDecimalDigits(text)) return false;
  constexpr uint64_t kMax = std::numeric_limits<uint64_t>::max();
  uint64_t value = 0;
  for (char c : text) {
    const uint64_t digit = static_cast<uint64_t>(c - '0');
    if (value > (kMax - digit) / 10) return false;
    value = value * 10 + digit;
  }
  *out = value;
  return true;
}

bool IsToken(std::string_view text) { return !text.empty() && std::all_of(text.begin(), text.end(), IsTokenChar); }

std::string_view TrimOws(std::string_view text) {
  while (!text.empty() && (text.front() == ' ' || text.front() == '\t')) text.remove_prefix(1);
  while (!text.empty() && (text.back() == ' ' || text.back() == '\t')) text.remove_suffix(1);
  return text;
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

}  // namespace fencing
