#pragma once
// ASCII helpers for protocol text. Boost.Beast 1.81's iequals reads one byte past both strings
// when they differ only in case at their last byte (an ASan heap-buffer-overflow on a method
// string), so the proxy compares names with this instead.

#include <string_view>

namespace fencing {

constexpr char AsciiLower(char c) { return c >= 'A' && c <= 'Z' ? static_cast<char>(c - 'A' + 'a') : c; }

constexpr bool EqualsIgnoreCase(std::string_view a, std::string_view b) {
  if (a.size() != b.size()) return false;
  for (size_t i = 0; i < a.size(); ++i) {
    if (AsciiLower(a[i]) != AsciiLower(b[i])) return false;
  }
  return true;
}

}  // namespace fencing
