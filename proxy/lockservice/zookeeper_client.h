#pragma once
// ZooKeeper as a LockService (contract "Verified raises"), on Debian's official C client
// (libzookeeper-mt), driven only through its asynchronous API so that no caller ever waits:
//
//   FindHolder(L)   sync(L)  ->  get_children(L)  ->  exists(L/lowest)  ->  done(answer)
//                   ZNONODE on L: kFree; no sequential child: kFree; the child gone before its
//                   exists: list again (within the call's deadline)
//
// Threads: FindHolder only queues a request (or parks the call while the session is not
// connected) and returns. The answers arrive on the C client's completion thread, which issues
// the next step and finally calls done. One timer thread of this client ends the calls whose
// deadline (the config's timeout) passes first, restarts parked calls, and replaces the
// session's handle after an expiry: zookeeper_close waits for the handle's threads, so it must
// never run on the completion thread, and it never runs on a caller's.
//
// Every call's state is reference-counted and shared by the timer and every request in flight:
// whichever finishes it first calls done, the others find it finished and drop their reference,
// so a completion that arrives after the deadline (or after Stop) is harmless.

#include "lockservice/lock_service.h"

#include "config/config.h"

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace fencing {

// The sequence number ZooKeeper appended to a sequential znode's name: its last 10 characters,
// all decimal digits ("%010d"), or nullopt for a name that does not end so (not a contender).
std::optional<uint64_t> SequenceSuffix(std::string_view child_name);

// The holder among a lock's children: the name with the lowest sequence suffix, or nullopt when
// no child is sequential. By the suffix, never by the whole name: the recipes put a random
// prefix before it (kazoo "<uuid>__lock__0000000003", Curator "_c_<uuid>-lock-0000000003"), so
// names sort by that prefix, not by when the contender queued.
std::optional<std::string> LowestSequentialChild(const std::vector<std::string>& children);


class ZooKeeperLockService final : public LockService {
 public:
  // Starts connecting (zookeeper_init does not wait for the server; it resolves the hosts'
  // names). `name` is the lock service's name in the route file, for the log.
  ZooKeeperLockService(std::string name, ZooKeeperClientConfig config);
  ~ZooKeeperLockService() override;
  ZooKeeperLockService(const ZooKeeperLockService&) = delete;
  ZooKeeperLockService& operator=(const ZooKeeperLockService&) = delete;

  void FindHolder(std::string_view lock, Done done) override;
  // Completes every pending call with kUnavailable, then closes the session (which may take a
  // moment: zookeeper_close says goodbye to the server). Call it, or destroy the client, from a
  // thread of your own, not from inside a done callback.
  void Stop() override;

  // The current session's id and password, when there is a handle: for diagnostics and for the
  // tests, which end the session from another connection to see the client replace it.
  bool CurrentSession(int64_t* session_id, std::string* password) const;

  class Impl;

 private:
  std::shared_ptr<Impl> impl_;
};

}  // namespace fencing
