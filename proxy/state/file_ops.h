#pragma once
// The file-system calls the state store makes, behind one small interface, so that tests can
// drop unsynced data, fail a sync or fill the disk (tests/unit/state_fault_file_ops.h).
// Each method behaves like the POSIX call it is named after: the same return value, errno set
// on failure. EINTR is the caller's to handle, as with the real calls.

#include <cstddef>
#include <string>

#include <sys/stat.h>
#include <sys/types.h>

namespace fencing {

class FileOps {
 public:
  virtual ~FileOps() = default;

  virtual int Open(const std::string& path, int flags, mode_t mode) = 0;
  virtual int Close(int fd) = 0;
  virtual ssize_t Write(int fd, const void* data, size_t size) = 0;
  virtual ssize_t Pread(int fd, void* data, size_t size, off_t offset) = 0;
  virtual int Fdatasync(int fd) = 0;
  virtual int Ftruncate(int fd, off_t size) = 0;
  virtual int Flock(int fd, int operation) = 0;
  virtual int Fstat(int fd, struct stat* st) = 0;
  virtual int Stat(const std::string& path, struct stat* st) = 0;
  virtual int Rename(const std::string& from, const std::string& to) = 0;
  virtual int Unlink(const std::string& path) = 0;
  // fsync(2) of the directory itself: what makes a create, rename or unlink in it durable.
  virtual int SyncDirectory(const std::string& dir) = 0;
};

// The real calls.
class PosixFileOps final : public FileOps {
 public:
  int Open(const std::string& path, int flags, mode_t mode) override;
  int Close(int fd) override;
  ssize_t Write(int fd, const void* data, size_t size) override;
  ssize_t Pread(int fd, void* data, size_t size, off_t offset) override;
  int Fdatasync(int fd) override;
  int Ftruncate(int fd, off_t size) override;
  int Flock(int fd, int operation) override;
  int Fstat(int fd, struct stat* st) override;
  int Stat(const std::string& path, struct stat* st) override;
  int Rename(const std::string& from, const std::string& to) override;
  int Unlink(const std::string& path) override;
  int SyncDirectory(const std::string& dir) override;
};

// A process-wide PosixFileOps: what every FileOps* parameter left null means.
FileOps* DefaultFileOps();

}  // namespace fencing
