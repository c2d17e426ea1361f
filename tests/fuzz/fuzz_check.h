#pragma once
// The fuzz targets' oracle: a broken property prints what and where, then aborts, which
// libFuzzer records as a crash with the input that caused it.

#include <cstdio>
#include <cstdlib>
#include <string_view>

#define FUZZ_CHECK(cond, what)                                                                   \
  do {                                                                                           \
    if (!(cond)) {                                                                               \
      std::fprintf(stderr, "%s:%d: oracle failed: %s (%s)\n", __FILE__, __LINE__, what, #cond); \
      std::abort();                                                                              \
    }                                                                                            \
  } while (0)

namespace fencing::fuzz {

inline std::string_view AsView(const unsigned char* data, size_t size) {
  return std::string_view(reinterpret_cast<const char*>(data), size);
}

// Inputs that hit a bug already reported are skipped, or every run would stop on that one bug
// and find nothing else. FP_FUZZ_KNOWN_BUGS=1 runs them anyway, to check a fix; remove a filter
// once its bug is fixed.
inline bool SkipKnownBugs() {
  static const bool skip = [] {
    const char* v = std::getenv("FP_FUZZ_KNOWN_BUGS");
    return !(v && *v == '1');
  }();
  return skip;
}

}  // namespace fencing::fuzz
