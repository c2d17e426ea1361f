// Watching files' directories (common/file_watcher.h): a Kubernetes-style "..data" symlink swap
// is seen at once, by inotify on the directory (a watch on the file itself would miss it), and
// the periodic check runs without any change. Each wait is bounded.

#include <gtest/gtest.h>

#include "common/file_watcher.h"

#include <unistd.h>

#include <chrono>
#include <condition_variable>
#include <filesystem>
#include <fstream>
#include <mutex>
#include <string>
#include <vector>

namespace fencing {
namespace {

namespace fs = std::filesystem;
using namespace std::chrono_literals;

class Triggers {
 public:
  void Add(std::string_view trigger) {
    std::lock_guard lock(mu_);
    seen_.emplace_back(trigger);
    cv_.notify_all();
  }
  // The first trigger seen, waiting at most `timeout`; "" if none came.
  std::string First(std::chrono::milliseconds timeout) {
    std::unique_lock lock(mu_);
    cv_.wait_for(lock, timeout, [this] { return !seen_.empty(); });
    return seen_.empty() ? "" : seen_.front();
  }

 private:
  std::mutex mu_;
  std::condition_variable cv_;
  std::vector<std::string> seen_;
};

std::string TempDir(const char* name) {
  const std::string dir = testing::TempDir() + name + std::to_string(::getpid());
  fs::remove_all(dir);
  fs::create_directories(dir + "/..v1");
  std::ofstream(dir + "/..v1/tls.crt") << "one";
  fs::create_directory_symlink("..v1", dir + "/..data");
  fs::create_symlink("..data/tls.crt", dir + "/tls.crt");
  return dir;
}

TEST(FileWatcherTest, SeesASymlinkSwapAtOnce) {
  const std::string dir = TempDir("file_watcher_swap_");
  Triggers triggers;
  {
    // A poll interval far beyond the wait: only the directory watch can be seen in time.
    FileWatcher watcher({dir}, 1h, [&](std::string_view trigger) { triggers.Add(trigger); });
    fs::create_directories(dir + "/..v2");
    std::ofstream(dir + "/..v2/tls.crt") << "two";
    fs::create_directory_symlink("..v2", dir + "/..data_tmp");
    fs::rename(dir + "/..data_tmp", dir + "/..data");
    EXPECT_EQ(triggers.First(5s), "file change");
  }
  fs::remove_all(dir);
}

TEST(FileWatcherTest, ChecksPeriodicallyWithoutAnyChange) {
  const std::string dir = TempDir("file_watcher_poll_");
  Triggers triggers;
  {
    FileWatcher watcher({dir}, 20ms, [&](std::string_view trigger) { triggers.Add(trigger); });
    EXPECT_EQ(triggers.First(5s), "periodic check");
  }
  fs::remove_all(dir);
}

TEST(FileWatcherTest, DirectoryOf) {
  EXPECT_EQ(DirectoryOf("/etc/tls/tls.crt"), "/etc/tls");
  EXPECT_EQ(DirectoryOf("/tls.crt"), "/");
  EXPECT_EQ(DirectoryOf("tls.crt"), ".");
  EXPECT_EQ(DirectoryOf("a/b"), "a");
}

}  // namespace
}  // namespace fencing
