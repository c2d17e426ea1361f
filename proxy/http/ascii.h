#pragma once
// ASCII helpers for protocol text: never locale-dependent, never Unicode. Boost.Beast 1.81's
// iequals reads one byte past both strings when they differ only in case at their last byte (an
// ASan heap-buffer-overflow on a method string), so the proxy compares names with this instead.

#include <string>
#include <string_view>

namespace fencing {

constexpr bool IsAsciiDigit(char c) { return c >= '0' && c <= '9'; }
constexpr bool IsAsciiLower(char c) { return c >= 'a' && c <= 'z'; }
constexpr bool IsAsciiUpper(char c) { return c >= 'A' && c <= 'Z'; }
constexpr bool IsAsciiAlpha(char c) { return IsAsciiLower(c) || IsAsciiUpper(c); }

constexpr char AsciiLower(char c) { return IsAsciiUpper(c) ? static_cast<char>(c - 'A' + 'a') : c; }
constexpr char AsciiUpper(char c) { return IsAsciiLower(c) ? static_cast<char>(c - 'a' + 'A') : c; }

constexpr bool EqualsIgnoreCase(std::string_view a, std::string_view b) {
  if (a.size() != b.size()) return false;
  for (size_t i = 0; i < a.size(); ++i) {
    if (AsciiLower(a[i]) != AsciiLower(b[i])) return false;
  }
  return true;
}

constexpr bool StartsWithIgnoreCase(std::string_view s, std::string_view prefix) {
  return s.size() >= prefix.size() && EqualsIgnoreCase(s.substr(0, prefix.size()), prefix);
}

// The text with A-Z folded to a-z: the form case-insensitive prefixes are stored and matched in.
inline std::string ToAsciiLower(std::string_view text) {
  std::string folded(text);
  for (char& c : folded) c = AsciiLower(c);
  return folded;
}

}  // namespace fencing
