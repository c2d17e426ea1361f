#pragma once
// Tells when files may have changed: at once when something changes in one of their directories
// (inotify, on the directories rather than the files: a Kubernetes ConfigMap or Secret volume
// replaces its files by renaming a "..data" symlink, which a watch on a file would miss), after
// a short settling time (one update is several renames), and every poll_interval in any case
// (file systems where inotify sees nothing, a missed event). It never reads the files: the
// callback decides whether anything changed, by their contents. The route file's reloader and
// the listener's TLS files use it.

#include <chrono>
#include <functional>
#include <string>
#include <string_view>
#include <thread>
#include <vector>

namespace fencing {

class FileWatcher {
 public:
  // changed(trigger) runs on the watcher's thread; trigger is "file change" or "periodic check".
  using Changed = std::function<void(std::string_view trigger)>;

  FileWatcher(std::vector<std::string> directories, std::chrono::milliseconds poll_interval, Changed changed);
  ~FileWatcher();  // stops the thread
  FileWatcher(const FileWatcher&) = delete;
  FileWatcher& operator=(const FileWatcher&) = delete;

 private:
  void Watch();

  const std::vector<std::string> directories_;
  const std::chrono::milliseconds poll_interval_;
  const Changed changed_;
  int stop_fd_ = -1;     // eventfd that wakes the thread to stop
  int inotify_fd_ = -1;  // the directories' watches, in place before the constructor returns
  std::thread thread_;
};

// The directory part of a path ("." for a bare name, "/" for a file in the root).
std::string DirectoryOf(const std::string& path);

}  // namespace fencing
