#pragma once
// The fuzz targets' oracle: a broken property prints what and where, then aborts, which
// libFuzzer records as a crash with the input that caused it.

#include <cstdio>
#include <cstdlib>  // abort
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

}  // namespace fencing::fuzz
