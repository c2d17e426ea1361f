#pragma once
// Fault-injecting FileOps for the state tests (the idea of LevelDB's fault_injection_test, our
// own code). They stack: the store calls the top one, each passes on to the one below.
//
//   DropUnsyncedFileOps  the disk: keeps, per file, what was last made durable, and on a
//                        simulated crash puts every file of one directory back to that
//                        (names too: a create, rename or unlink lasts only once the directory
//                        is synced). Can crash at the Nth call.
//   FailingFileOps       the Nth call of a kind fails with an errno; a disk that fills up
//                        (short write, then ENOSPC); counts calls; a hook before each call.
//   NoSyncFileOps        fdatasync returns 0 and does nothing: the negative control.
//   NamingFileOps        records each call with the names it touched ("write fences.log.tmp"),
//                        to assert which file a sequence of calls went to.

#include "state/file_ops.h"
#include "state/state_log.h"

#include <cerrno>
#include <cstring>
#include <cstdint>
#include <filesystem>
#include <fstream>
#include <functional>
#include <map>
#include <mutex>
#include <optional>
#include <random>
#include <set>
#include <sstream>
#include <string>
#include <vector>

#include <fcntl.h>

namespace fencing {

enum class FileOp {
  kOpen,
  kClose,
  kWrite,
  kPread,
  kFdatasync,
  kFtruncate,
  kFlock,
  kFstat,
  kStat,
  kRename,
  kUnlink,
  kSyncDirectory,
};

inline const char* FileOpName(FileOp op) {
  switch (op) {
    case FileOp::kOpen: return "open";
    case FileOp::kClose: return "close";
    case FileOp::kWrite: return "write";
    case FileOp::kPread: return "pread";
    case FileOp::kFdatasync: return "fdatasync";
    case FileOp::kFtruncate: return "ftruncate";
    case FileOp::kFlock: return "flock";
    case FileOp::kFstat: return "fstat";
    case FileOp::kStat: return "stat";
    case FileOp::kRename: return "rename";
    case FileOp::kUnlink: return "unlink";
    case FileOp::kSyncDirectory: return "fsync(dir)";
  }
  return "?";
}

inline std::string TraceString(const std::vector<FileOp>& trace) {
  std::string out;
  for (FileOp op : trace) out += std::string(out.empty() ? "" : " ") + FileOpName(op);
  return out;
}

// Passes every call on; Before() may fail it first. Close always reaches the layer below, so
// no descriptor leaks whatever a test injects.
class ForwardingFileOps : public FileOps {
 public:
  explicit ForwardingFileOps(FileOps* inner) : inner_(inner) {}

  int Open(const std::string& path, int flags, mode_t mode) override {
    if (int err = Before(FileOp::kOpen)) return Fail(err);
    return inner_->Open(path, flags, mode);
  }
  int Close(int fd) override {
    Before(FileOp::kClose);
    return inner_->Close(fd);
  }
  ssize_t Write(int fd, const void* data, size_t size) override {
    if (int err = Before(FileOp::kWrite)) return Fail(err);
    return inner_->Write(fd, data, size);
  }
  ssize_t Pread(int fd, void* data, size_t size, off_t offset) override {
    if (int err = Before(FileOp::kPread)) return Fail(err);
    return inner_->Pread(fd, data, size, offset);
  }
  int Fdatasync(int fd) override {
    if (int err = Before(FileOp::kFdatasync)) return Fail(err);
    return inner_->Fdatasync(fd);
  }
  int Ftruncate(int fd, off_t size) override {
    if (int err = Before(FileOp::kFtruncate)) return Fail(err);
    return inner_->Ftruncate(fd, size);
  }
  int Flock(int fd, int operation) override {
    if (int err = Before(FileOp::kFlock)) return Fail(err);
    return inner_->Flock(fd, operation);
  }
  int Fstat(int fd, struct stat* st) override {
    if (int err = Before(FileOp::kFstat)) return Fail(err);
    return inner_->Fstat(fd, st);
  }
  int Stat(const std::string& path, struct stat* st) override {
    if (int err = Before(FileOp::kStat)) return Fail(err);
    return inner_->Stat(path, st);
  }
  int Rename(const std::string& from, const std::string& to) override {
    if (int err = Before(FileOp::kRename)) return Fail(err);
    return inner_->Rename(from, to);
  }
  int Unlink(const std::string& path) override {
    if (int err = Before(FileOp::kUnlink)) return Fail(err);
    return inner_->Unlink(path);
  }
  int SyncDirectory(const std::string& dir) override {
    if (int err = Before(FileOp::kSyncDirectory)) return Fail(err);
    return inner_->SyncDirectory(dir);
  }

 protected:
  // Runs before each call; a non-zero errno fails the call with it instead of passing it on.
  virtual int Before(FileOp) { return 0; }
  static int Fail(int err) {
    errno = err;
    return -1;
  }
  FileOps* inner_;
};

// fdatasync succeeds without doing anything: data "acknowledged" through this is not durable.
class NoSyncFileOps : public ForwardingFileOps {
 public:
  using ForwardingFileOps::ForwardingFileOps;
  int Fdatasync(int) override { return 0; }
};

class FailingFileOps : public ForwardingFileOps {
 public:
  explicit FailingFileOps(FileOps* inner = DefaultFileOps()) : ForwardingFileOps(inner) {}

  // The nth call of op from now on (1 = the next one) fails with err; the others pass.
  void FailNth(FileOp op, uint64_t nth, int err) {
    std::lock_guard<std::mutex> lock(mu_);
    faults_.push_back(Fault{op, counts_[op] + nth, err});
  }
  // From now on the disk has this many bytes left: a write that does not fit writes what does
  // and returns that (a short write); once nothing is left, writes fail with ENOSPC.
  void SetSpaceLeft(uint64_t bytes) {
    std::lock_guard<std::mutex> lock(mu_);
    space_left_ = bytes;
  }
  // Called before every call, outside this layer's lock (it may use the file system itself).
  void SetHook(std::function<void(FileOp)> hook) {
    std::lock_guard<std::mutex> lock(mu_);
    hook_ = std::move(hook);
  }
  uint64_t count(FileOp op) const {
    std::lock_guard<std::mutex> lock(mu_);
    auto it = counts_.find(op);
    return it == counts_.end() ? 0 : it->second;
  }
  std::vector<FileOp> trace() const {
    std::lock_guard<std::mutex> lock(mu_);
    return trace_;
  }
  void ClearTrace() {
    std::lock_guard<std::mutex> lock(mu_);
    trace_.clear();
  }

  ssize_t Write(int fd, const void* data, size_t size) override {
    if (int err = Before(FileOp::kWrite)) return Fail(err);
    size_t allowed = size;
    {
      std::lock_guard<std::mutex> lock(mu_);
      if (space_left_) {
        if (*space_left_ == 0) return Fail(ENOSPC);
        allowed = static_cast<size_t>(std::min<uint64_t>(size, *space_left_));
      }
    }
    const ssize_t n = inner_->Write(fd, data, allowed);
    if (n > 0) {
      std::lock_guard<std::mutex> lock(mu_);
      if (space_left_) *space_left_ -= static_cast<uint64_t>(n);
    }
    return n;
  }

 protected:
  int Before(FileOp op) override {
    std::function<void(FileOp)> hook;
    int err = 0;
    {
      std::lock_guard<std::mutex> lock(mu_);
      hook = hook_;
      const uint64_t n = ++counts_[op];
      trace_.push_back(op);
      for (const Fault& f : faults_) {
        if (f.op == op && f.at == n) err = f.err;
      }
    }
    if (hook) hook(op);
    return err;
  }

 private:
  struct Fault {
    FileOp op;
    uint64_t at;  // the value of counts_[op] that fails
    int err;
  };
  mutable std::mutex mu_;
  std::map<FileOp, uint64_t> counts_;
  std::vector<FileOp> trace_;
  std::vector<Fault> faults_;
  std::optional<uint64_t> space_left_;
  std::function<void(FileOp)> hook_;
};

// Records every call as "CALL NAME" (names as basenames; a descriptor by the name it was opened
// under; a failed call gets " -> ERRNO"), so a test can check what went to which file.
class NamingFileOps : public ForwardingFileOps {
 public:
  explicit NamingFileOps(FileOps* inner = DefaultFileOps()) : ForwardingFileOps(inner) {}

  std::vector<std::string> calls() const {
    std::lock_guard<std::mutex> lock(mu_);
    return calls_;
  }
  // The calls whose text starts with one of these words, in order.
  std::vector<std::string> Only(const std::vector<std::string>& words) const {
    std::vector<std::string> out;
    for (const std::string& call : calls()) {
      for (const std::string& word : words) {
        if (call.rfind(word + " ", 0) == 0) {
          out.push_back(call);
          break;
        }
      }
    }
    return out;
  }

  int Open(const std::string& path, int flags, mode_t mode) override {
    const int fd = inner_->Open(path, flags, mode);
    const int err = errno;
    {
      std::lock_guard<std::mutex> lock(mu_);
      if (fd >= 0) fd_name_[fd] = Base(path);
    }
    Note(std::string((flags & O_CREAT) ? "create " : "open ") + Base(path), fd, err);
    return fd;
  }
  int Close(int fd) override {
    Note("close " + NameOf(fd), 0, 0);
    return inner_->Close(fd);
  }
  ssize_t Write(int fd, const void* data, size_t size) override {
    const ssize_t n = inner_->Write(fd, data, size);
    Note("write " + NameOf(fd), n, errno);
    return n;
  }
  int Fdatasync(int fd) override {
    const int rc = inner_->Fdatasync(fd);
    Note("fdatasync " + NameOf(fd), rc, errno);
    return rc;
  }
  int Ftruncate(int fd, off_t size) override {
    const int rc = inner_->Ftruncate(fd, size);
    Note("ftruncate " + NameOf(fd), rc, errno);
    return rc;
  }
  int Flock(int fd, int operation) override {
    const int rc = inner_->Flock(fd, operation);
    Note("flock " + NameOf(fd), rc, errno);
    return rc;
  }
  int Stat(const std::string& path, struct stat* st) override {
    const int rc = inner_->Stat(path, st);
    Note("stat " + Base(path), rc, errno);
    return rc;
  }
  int Rename(const std::string& from, const std::string& to) override {
    const int rc = inner_->Rename(from, to);
    Note("rename " + Base(from) + " " + Base(to), rc, errno);
    return rc;
  }
  int Unlink(const std::string& path) override {
    const int rc = inner_->Unlink(path);
    Note("unlink " + Base(path), rc, errno);
    return rc;
  }
  int SyncDirectory(const std::string& dir) override {
    const int rc = inner_->SyncDirectory(dir);
    Note("fsync(dir) " + Base(dir), rc, errno);
    return rc;
  }

 private:
  static std::string Base(const std::string& path) { return std::filesystem::path(path).filename().string(); }
  std::string NameOf(int fd) const {
    std::lock_guard<std::mutex> lock(mu_);
    auto it = fd_name_.find(fd);
    return it == fd_name_.end() ? "fd" + std::to_string(fd) : it->second;
  }
  void Note(std::string call, ssize_t rc, int err) {
    if (rc < 0) call += " -> " + std::string(std::strerror(err));
    std::lock_guard<std::mutex> lock(mu_);
    calls_.push_back(std::move(call));
    errno = err;
  }

  mutable std::mutex mu_;
  std::map<int, std::string> fd_name_;
  std::vector<std::string> calls_;
};

// The real files in dir play the page cache; this layer remembers what the disk holds.
// Per file (inode) it keeps the content as of the last fdatasync; per directory entry, the
// inode the name held at the last directory sync. Crash() makes the real directory look like
// that durable picture, and every later call (but Close) fails with EIO: the process is dead.
// Options widen what may survive: a prefix of unsynced appends, names never synced.
// Files in dir when the layer is made, or first opened through it, count as durable.
// Every call holds one lock, so a crash from any thread is atomic with the calls.
class DropUnsyncedFileOps : public FileOps {
 public:
  explicit DropUnsyncedFileOps(std::string dir, FileOps* inner = DefaultFileOps())
      : dir_(std::move(dir)), inner_(inner) {
    for (const auto& entry : std::filesystem::directory_iterator(dir_)) {
      if (entry.is_regular_file()) AdoptLocked(entry.path().string());
    }
  }

  // The nth call from now on (1 = the next one) does not happen: the machine crashes first.
  void CrashAtCall(uint64_t nth) {
    std::lock_guard<std::mutex> lock(mu_);
    crash_at_ = calls_ + nth;
  }
  // On a crash, also keep a random prefix of each file's unsynced appended bytes: the kernel
  // may have written back some pages, in order, before power went.
  void KeepRandomUnsyncedPrefix(uint64_t seed) {
    std::lock_guard<std::mutex> lock(mu_);
    keep_prefix_ = true;
    rng_.seed(seed);
  }
  // On a crash, every name as it is now survives (the file system wrote its directory back on
  // its own), while file contents still go back to what was synced: leftover temp files.
  void PersistNamesOnCrash() {
    std::lock_guard<std::mutex> lock(mu_);
    persist_names_ = true;
  }
  void Crash() {
    std::lock_guard<std::mutex> lock(mu_);
    if (!crashed_) CrashLocked();
  }
  bool crashed() const {
    std::lock_guard<std::mutex> lock(mu_);
    return crashed_;
  }
  uint64_t calls() const {
    std::lock_guard<std::mutex> lock(mu_);
    return calls_;
  }
  std::vector<FileOp> trace() const {
    std::lock_guard<std::mutex> lock(mu_);
    return trace_;
  }

  int Open(const std::string& path, int flags, mode_t mode) override {
    std::lock_guard<std::mutex> lock(mu_);
    if (!Enter(FileOp::kOpen)) return Dead();
    const bool tracked = InDir(path);
    if (tracked && names_.count(path) == 0 && std::filesystem::exists(path)) AdoptLocked(path);
    const int fd = inner_->Open(path, flags, mode);
    if (fd >= 0 && tracked) {
      auto it = names_.find(path);
      if (it == names_.end()) {  // created just now: empty on disk, and its name not yet durable
        const int id = next_id_++;
        synced_[id] = "";
        it = names_.emplace(path, id).first;
      }
      fd_inode_[fd] = it->second;
    }
    return fd;
  }
  int Close(int fd) override {
    std::lock_guard<std::mutex> lock(mu_);
    if (!crashed_) Enter(FileOp::kClose);
    fd_inode_.erase(fd);
    return inner_->Close(fd);  // even when dead: the descriptor is the test process's
  }
  ssize_t Write(int fd, const void* data, size_t size) override {
    std::lock_guard<std::mutex> lock(mu_);
    if (!Enter(FileOp::kWrite)) return Dead();
    return inner_->Write(fd, data, size);
  }
  ssize_t Pread(int fd, void* data, size_t size, off_t offset) override {
    std::lock_guard<std::mutex> lock(mu_);
    if (!Enter(FileOp::kPread)) return Dead();
    return inner_->Pread(fd, data, size, offset);
  }
  // The durability is simulated here; a real fdatasync would only make the tests slow.
  int Fdatasync(int fd) override {
    std::lock_guard<std::mutex> lock(mu_);
    if (!Enter(FileOp::kFdatasync)) return Dead();
    auto it = fd_inode_.find(fd);
    if (it == fd_inode_.end()) return inner_->Fdatasync(fd);
    std::string content;
    if (!ReadFd(fd, &content)) return -1;
    synced_[it->second] = std::move(content);
    return 0;
  }
  int Ftruncate(int fd, off_t size) override {
    std::lock_guard<std::mutex> lock(mu_);
    if (!Enter(FileOp::kFtruncate)) return Dead();
    return inner_->Ftruncate(fd, size);
  }
  int Flock(int fd, int operation) override {
    std::lock_guard<std::mutex> lock(mu_);
    if (!Enter(FileOp::kFlock)) return Dead();
    return inner_->Flock(fd, operation);
  }
  int Fstat(int fd, struct stat* st) override {
    std::lock_guard<std::mutex> lock(mu_);
    if (!Enter(FileOp::kFstat)) return Dead();
    return inner_->Fstat(fd, st);
  }
  int Stat(const std::string& path, struct stat* st) override {
    std::lock_guard<std::mutex> lock(mu_);
    if (!Enter(FileOp::kStat)) return Dead();
    return inner_->Stat(path, st);
  }
  int Rename(const std::string& from, const std::string& to) override {
    std::lock_guard<std::mutex> lock(mu_);
    if (!Enter(FileOp::kRename)) return Dead();
    const int rc = inner_->Rename(from, to);
    if (rc == 0) {
      auto it = names_.find(from);
      if (it != names_.end()) {
        const int id = it->second;
        names_.erase(it);
        if (InDir(to)) names_[to] = id;
      } else {
        names_.erase(to);
      }
    }
    return rc;
  }
  int Unlink(const std::string& path) override {
    std::lock_guard<std::mutex> lock(mu_);
    if (!Enter(FileOp::kUnlink)) return Dead();
    const int rc = inner_->Unlink(path);
    if (rc == 0) names_.erase(path);
    return rc;
  }
  int SyncDirectory(const std::string& dir) override {
    std::lock_guard<std::mutex> lock(mu_);
    if (!Enter(FileOp::kSyncDirectory)) return Dead();
    if (dir != dir_) return inner_->SyncDirectory(dir);
    durable_names_ = names_;
    return 0;
  }

 private:
  bool InDir(const std::string& path) const { return ParentDirectory(path) == dir_; }

  // Counts the call; false if the process is dead, or dies now.
  bool Enter(FileOp op) {
    if (crashed_) return false;
    ++calls_;
    trace_.push_back(op);
    if (crash_at_ != 0 && calls_ == crash_at_) {
      CrashLocked();
      return false;
    }
    return true;
  }
  static int Dead() {
    errno = EIO;
    return -1;
  }

  void AdoptLocked(const std::string& path) {
    const int id = next_id_++;
    synced_[id] = ReadPath(path);
    names_[path] = id;
    durable_names_[path] = id;
  }

  bool ReadFd(int fd, std::string* content) {
    struct stat st {};
    if (inner_->Fstat(fd, &st) != 0) return false;
    content->resize(static_cast<size_t>(st.st_size));
    size_t done = 0;
    while (done < content->size()) {
      const ssize_t n = inner_->Pread(fd, content->data() + done, content->size() - done, static_cast<off_t>(done));
      if (n < 0) return false;
      if (n == 0) break;
      done += static_cast<size_t>(n);
    }
    content->resize(done);
    return true;
  }

  static std::string ReadPath(const std::string& path) {
    std::ifstream in(path, std::ios::binary);
    std::ostringstream out;
    out << in.rdbuf();
    return out.str();
  }

  // What the page cache holds for an inode now, if it can still be reached.
  std::optional<std::string> CurrentContent(int id) {
    for (const auto& [fd, inode] : fd_inode_) {
      std::string content;
      if (inode == id && ReadFd(fd, &content)) return content;
    }
    for (const auto& [name, inode] : names_) {
      if (inode == id) return ReadPath(name);
    }
    return std::nullopt;
  }

  void CrashLocked() {
    crashed_ = true;
    if (persist_names_) durable_names_ = names_;
    std::map<std::string, std::string> survivors;
    for (const auto& [name, id] : durable_names_) {
      std::string content = synced_[id];
      if (keep_prefix_) {
        std::optional<std::string> now = CurrentContent(id);
        if (now && now->size() > content.size() && now->compare(0, content.size(), content) == 0) {
          std::uniform_int_distribution<size_t> pick(0, now->size() - content.size());
          content = now->substr(0, content.size() + pick(rng_));
        }
      }
      survivors[name] = std::move(content);
    }
    std::set<std::string> every_name;
    for (const auto& entry : names_) every_name.insert(entry.first);
    for (const auto& entry : durable_names_) every_name.insert(entry.first);
    for (const std::string& name : every_name) std::filesystem::remove(name);
    for (const auto& [name, content] : survivors) {
      std::ofstream out(name, std::ios::binary | std::ios::trunc);
      out.write(content.data(), static_cast<std::streamsize>(content.size()));
    }
  }

  const std::string dir_;
  FileOps* const inner_;
  mutable std::mutex mu_;
  std::map<std::string, int> names_;          // what each name holds now
  std::map<std::string, int> durable_names_;  // and as of the last directory sync
  std::map<int, std::string> synced_;         // inode id -> content as of its last sync
  std::map<int, int> fd_inode_;
  int next_id_ = 1;
  uint64_t calls_ = 0;
  uint64_t crash_at_ = 0;  // 0: no crash planned
  bool crashed_ = false;
  bool keep_prefix_ = false;
  bool persist_names_ = false;
  std::mt19937_64 rng_;
  std::vector<FileOp> trace_;
};

}  // namespace fencing
