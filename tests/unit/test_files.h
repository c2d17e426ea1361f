#pragma once
// Small file and string helpers shared by the unit tests that work on real files.

#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>

#include <stdlib.h>

namespace fencing {

// Substring check without gmock (the unit tests link gtest only).
inline ::testing::AssertionResult Contains(const std::string& haystack, const std::string& needle) {
  if (haystack.find(needle) != std::string::npos) return ::testing::AssertionSuccess();
  return ::testing::AssertionFailure() << "\"" << haystack << "\" does not contain \"" << needle << "\"";
}

inline std::string ReadBytes(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  std::ostringstream out;
  out << in.rdbuf();
  return out.str();
}

inline void WriteBytes(const std::string& path, const std::string& data) {
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  out.write(data.data(), static_cast<std::streamsize>(data.size()));
  ASSERT_TRUE(out.good()) << "cannot write " << path;
}

// A fixture with a fresh directory per test holding the state file's path (nothing created):
// dir_, path_ (dir_/fences.log) and tmp_ (where a new file or a snapshot is written first).
class StateDirTest : public ::testing::Test {
 protected:
  void SetUp() override {
    std::string tmpl = (std::filesystem::temp_directory_path() / "fp_state_dir_test_XXXXXX").string();
    ASSERT_NE(::mkdtemp(tmpl.data()), nullptr);
    dir_ = tmpl;
    path_ = dir_ + "/fences.log";
    tmp_ = path_ + ".tmp";
  }
  void TearDown() override { std::filesystem::remove_all(dir_); }

  // Empties the directory (a test that starts over on the same path).
  void ClearDir() {
    for (const auto& entry : std::filesystem::directory_iterator(dir_)) std::filesystem::remove_all(entry.path());
  }

  std::string dir_;
  std::string path_;
  std::string tmp_;
};

}  // namespace fencing
