#include "state/file_ops.h"

#include <cerrno>

#include <fcntl.h>
#include <sys/file.h>
#include <unistd.h>

namespace fencing {

int PosixFileOps::Open(const std::string& path, int flags, mode_t mode) {
  return ::open(path.c_str(), flags, mode);
}

int PosixFileOps::Close(int fd) { return ::close(fd); }

ssize_t PosixFileOps::Write(int fd, const void* data, size_t size) { return ::write(fd, data, size); }

ssize_t PosixFileOps::Pread(int fd, void* data, size_t size, off_t offset) {
  return ::pread(fd, data, size, offset);
}

int PosixFileOps::Fdatasync(int fd) { return ::fdatasync(fd); }

int PosixFileOps::Ftruncate(int fd, off_t size) { return ::ftruncate(fd, size); }

int PosixFileOps::Flock(int fd, int operation) { return ::flock(fd, operation); }

int PosixFileOps::Fstat(int fd, struct stat* st) { return ::fstat(fd, st); }

int PosixFileOps::Stat(const std::string& path, struct stat* st) { return ::stat(path.c_str(), st); }

int PosixFileOps::Rename(const std::string& from, const std::string& to) {
  return ::rename(from.c_str(), to.c_str());
}

int PosixFileOps::Unlink(const std::string& path) { return ::unlink(path.c_str()); }

int PosixFileOps::SyncDirectory(const std::string& dir) {
  int fd;
  do {
    fd = ::open(dir.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  } while (fd < 0 && errno == EINTR);
  if (fd < 0) return -1;
  const int rc = ::fsync(fd);
  const int err = errno;
  ::close(fd);
  errno = err;
  return rc;
}

FileOps* DefaultFileOps() {
  static PosixFileOps posix;
  return &posix;
}

}  // namespace fencing
