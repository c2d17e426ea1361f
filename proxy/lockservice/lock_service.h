#pragma once
// proxy/lockservice: "who holds lock L, and with which number?", asked of etcd or ZooKeeper.
// Asked only for a raise on a verified route (contract "Verified raises"), before the raise
// enters the fence, so an unverified token never holds anyone up:
//
//   the service says                  token == holder's number   otherwise
//   kHeld  (holder key, its number)   verified: the raise goes on 409 token-not-verified
//   kFree  (nobody holds L)           -                          409 token-not-verified
//   kUnavailable, or no answer within the service's timeout       503 lock-service-unavailable
//
// The holder's number is the one that grows from holder to holder, and so is a fencing token:
//   etcd       the key under L/ with the lowest create revision holds L (concurrency.Mutex,
//              `etcdctl lock`); its number is that create revision
//   ZooKeeper  the lowest sequential child of L holds L (kazoo Lock, Curator
//              InterProcessMutex); its number is that child's czxid
//
// Clients never block the caller's thread: FindHolder starts the question and returns; the
// answer comes on a thread of the client.

#include <chrono>
#include <cstdint>
#include <functional>
#include <string>
#include <string_view>
#include <utility>

namespace fencing {

struct HolderAnswer {
  enum class Status { kHeld, kFree, kUnavailable };
  Status status = Status::kUnavailable;
  uint64_t token = 0;  // kHeld: the holder's number
  std::string holder;  // kHeld: the holder's key or znode, for the log; kFree: why, if no such lock can exist
  std::string error;   // kUnavailable: why, for the log and /fences

  static HolderAnswer Free(std::string why = "") {
    HolderAnswer answer;
    answer.status = Status::kFree;
    answer.holder = std::move(why);
    return answer;
  }
  static HolderAnswer Unavailable(std::string why) {
    HolderAnswer answer;
    answer.error = std::move(why);
    return answer;
  }
};

// "250ms": how the clients' errors write a duration.
inline std::string MillisecondsText(std::chrono::milliseconds d) { return std::to_string(d.count()) + "ms"; }

class LockService {
 public:
  using Done = std::function<void(HolderAnswer)>;

  virtual ~LockService() = default;

  // Asks who holds `lock` (an etcd key prefix without the trailing '/', or a znode path). done is
  // called exactly once, on a thread of the client (never inside FindHolder), at the latest
  // about the service's timeout after the call (then kUnavailable, "timed out after ...").
  virtual void FindHolder(std::string_view lock, Done done) = 0;

  // Ends the client: calls still pending complete with kUnavailable. FindHolder should not be
  // called after Stop; if it is, done may run at once, inside it. Stop may be called more than
  // once; the destructor stops too.
  virtual void Stop() = 0;
};

}  // namespace fencing
