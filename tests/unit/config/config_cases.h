#pragma once
// What the route-file tests share: a valid head, the errors of a result as text, and the table
// row "this text is one error at this line:column, saying this".

#include "config/config.h"

#include <gtest/gtest.h>

#include <ostream>
#include <string>

namespace fencing::config_cases {

// Two valid lines; the mistakes in the error tables start on line 3.
inline const std::string kHead =
    "backend: http://127.0.0.1:8081\n"
    "state_file: /var/lib/fp/fences.log\n";

inline std::string DumpErrors(const ConfigResult& r) {
  std::string out;
  for (const ConfigError& e : r.errors) out += "  " + e.ToString() + "\n";
  return out;
}

struct ErrorCase {
  const char* what;
  std::string text;
  int line;
  int column;
  const char* message;  // a key part of the message
};

inline void PrintTo(const ErrorCase& c, std::ostream* os) { *os << c.what; }

// The case's text loads as exactly one error, in routes.yaml, at its line:column, whose message
// contains the case's.
inline void ExpectOneErrorAt(const ErrorCase& c) {
  const ConfigResult r = ParseConfig(c.text, "routes.yaml");
  EXPECT_FALSE(r.ok());
  EXPECT_EQ(r.config, nullptr);
  ASSERT_EQ(r.errors.size(), 1u) << c.what << "\n" << c.text << DumpErrors(r);
  const ConfigError& e = r.errors[0];
  EXPECT_EQ(e.file, "routes.yaml");
  EXPECT_EQ(e.line, c.line) << e.ToString();
  EXPECT_EQ(e.column, c.column) << e.ToString();
  EXPECT_NE(e.message.find(c.message), std::string::npos)
      << "message: " << e.message << "\nexpected to contain: " << c.message;
}

}  // namespace fencing::config_cases
