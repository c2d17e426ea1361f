#include "common/file_watcher.h"

#include "common/log.h"

#include <cerrno>
#include <cstring>

#include <poll.h>
#include <sys/eventfd.h>
#include <sys/inotify.h>
#include <unistd.h>

namespace fencing {
namespace {

// Lets a burst of events (a ConfigMap or Secret swap is several renames) settle before reading.
constexpr auto kSettleTime = std::chrono::milliseconds(100);

}  // namespace

std::string DirectoryOf(const std::string& path) {
  size_t slash = path.rfind('/');
  if (slash == std::string::npos) return ".";
  if (slash == 0) return "/";
  return path.substr(0, slash);
}

FileWatcher::FileWatcher(std::vector<std::string> directories, std::chrono::milliseconds poll_interval,
                         Changed changed)
    : directories_(std::move(directories)), poll_interval_(poll_interval), changed_(std::move(changed)) {
  stop_fd_ = ::eventfd(0, EFD_CLOEXEC);
  // Watching from here on, not from whenever the thread gets to it: a change right after start
  // is seen too.
  inotify_fd_ = ::inotify_init1(IN_CLOEXEC | IN_NONBLOCK);
  for (const std::string& directory : directories_) {
    const uint32_t mask = IN_CLOSE_WRITE | IN_MOVED_TO | IN_CREATE | IN_DELETE | IN_MODIFY | IN_ATTRIB;
    if (inotify_fd_ < 0 || ::inotify_add_watch(inotify_fd_, directory.c_str(), mask) < 0) {
      LogWarn("cannot watch a directory for changes; relying on the periodic check",
              {{"directory", directory}, {"error", std::strerror(errno)}});
    }
  }
  thread_ = std::thread([this] { Watch(); });
}

FileWatcher::~FileWatcher() {
  uint64_t one = 1;
  [[maybe_unused]] ssize_t n = ::write(stop_fd_, &one, sizeof one);
  thread_.join();
  ::close(stop_fd_);
  if (inotify_fd_ >= 0) ::close(inotify_fd_);
}

void FileWatcher::Watch() {
  const int inotify_fd = inotify_fd_;
  for (;;) {
    pollfd fds[2] = {{stop_fd_, POLLIN, 0}, {inotify_fd, POLLIN, 0}};
    int ready = ::poll(fds, inotify_fd >= 0 ? 2 : 1, static_cast<int>(poll_interval_.count()));
    if (ready < 0 && errno != EINTR) break;
    if (fds[0].revents & POLLIN) break;
    const char* trigger = "periodic check";
    if (inotify_fd >= 0 && (fds[1].revents & POLLIN)) {
      trigger = "file change";
      std::this_thread::sleep_for(kSettleTime);
      char events[4096];
      while (::read(inotify_fd, events, sizeof events) > 0) {
      }
    }
    changed_(trigger);
  }
}

}  // namespace fencing
