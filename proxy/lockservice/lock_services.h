#pragma once
// The route file's lock services (lock_services:), built once at start, and the verdict on one
// raise (contract "Verified raises"). A reload keeps them (changing lock_services is
// restart-only); each Runtime points at the entries its routes verify with.
//
//   Judge(answer, token)
//     kHeld and answer.token == token   kVerified     the raise may enter the fence
//     kHeld, another number             kNotHolder    409 token-not-verified
//     kFree                             kNoHolder     409 token-not-verified
//     kUnavailable (or no answer in time) kUnavailable 503 lock-service-unavailable, Retry-After

#include "config/config.h"
#include "lockservice/lock_service.h"

#include <cstdint>
#include <functional>
#include <memory>
#include <mutex>
#include <string>
#include <string_view>
#include <vector>

namespace fencing {

enum class Verdict { kVerified, kNotHolder, kNoHolder, kUnavailable };

struct Verification {
  Verdict verdict = Verdict::kUnavailable;
  uint64_t holder_token = 0;  // kNotHolder: the holder's number
  std::string holder;         // kVerified, kNotHolder: the holder's key or znode; kNoHolder: why, if
                              // no such lock can exist
  std::string error;          // kUnavailable: why
};

// Pure: what an answer of the lock service means for `token`.
Verification Judge(const HolderAnswer& answer, uint64_t token);

// What a lock service's answers are reported to (metrics/metrics.h implements it).
class LockServiceObserver {
 public:
  virtual void Answered(Verdict verdict, double seconds) const = 0;

 protected:
  ~LockServiceObserver() = default;
};

// One lock service: its client, its observer, and what /fences says about it.
class LockServiceEntry {
 public:
  LockServiceEntry(const LockServiceConfig& config, std::unique_ptr<LockService> client,
                   const LockServiceObserver* observer);

  const std::string& name() const { return config_.name; }
  const LockServiceConfig& config() const { return config_; }
  LockService& client() { return *client_; }

  // Reports a verification that took `seconds` (metrics; the last error for /fences).
  void Record(const Verification& verification, double seconds);

  struct Status {
    std::string name;
    std::string kind;        // "etcd" or "zookeeper"
    std::string last_error;  // empty: none since start
    double last_error_age_seconds = 0;  // how long ago (only with last_error)
    uint64_t verified = 0, rejected = 0, unavailable = 0;
  };
  Status status() const;

 private:
  const LockServiceConfig config_;
  std::unique_ptr<LockService> client_;
  const LockServiceObserver* observer_;

  mutable std::mutex mu_;
  std::string last_error_;
  double last_error_at_ = 0;  // steady clock, seconds
  double last_logged_at_ = -1e9;
  uint64_t verified_ = 0, rejected_ = 0, unavailable_ = 0;
};

class LockServiceSet {
 public:
  // Null with *error set when a client cannot start (an unreadable password_file or CA file).
  using Factory = std::function<std::unique_ptr<LockService>(const LockServiceConfig&, std::string* error)>;
  using ObserverFor = std::function<const LockServiceObserver*(std::string_view service)>;

  LockServiceSet() = default;  // none
  // Every client is made; if one cannot start, error() says which and why (start-up fails).
  LockServiceSet(const std::vector<LockServiceConfig>& services, const Factory& make, const ObserverFor& observer);
  const std::string& error() const { return error_; }
  ~LockServiceSet();
  LockServiceSet(const LockServiceSet&) = delete;
  LockServiceSet& operator=(const LockServiceSet&) = delete;

  LockServiceEntry* Find(std::string_view name);
  std::vector<LockServiceEntry::Status> Statuses() const;
  // Ends every client (pending verifications complete as unavailable). Call it before the
  // workers' io_contexts are destroyed: an answer still under way is posted to its worker.
  void Stop();

 private:
  std::vector<std::unique_ptr<LockServiceEntry>> entries_;
  std::string error_;
};

// The clients of this build: etcd (JSON gateway) and ZooKeeper (the C client).
std::unique_ptr<LockService> MakeLockService(const LockServiceConfig& config, std::string* error);

}  // namespace fencing
