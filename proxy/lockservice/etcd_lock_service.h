#pragma once
// LockService on etcd: the holder of lock L is the key under "L/" with the lowest create
// revision (clientv3 concurrency.Mutex, `etcdctl lock`), and its number is that create revision.
// One linearizable range read per question (limit 1, sorted by create revision, keys only).

#include "etcd/etcd_client.h"
#include "lockservice/lock_service.h"

#include <memory>
#include <string>
#include <string_view>

namespace fencing {

class EtcdLockService : public LockService {
 public:
  // Null with a readable error when the client cannot start (see EtcdClient::Create).
  static std::unique_ptr<EtcdLockService> Create(const EtcdClientConfig& config, std::string* error);
  explicit EtcdLockService(std::unique_ptr<EtcdClient> client);
  ~EtcdLockService() override;

  void FindHolder(std::string_view lock, Done done) override;
  void Stop() override;

  // The range that finds the holder of lock (pure): the keys under "lock/", the lowest create
  // revision first, limit 1, keys only, linearizable.
  static etcd::RangeRequest HolderRequest(std::string_view lock);
  // The answer to HolderRequest(lock) as a HolderAnswer (pure). An error, or anything unexpected
  // in the range (a key outside the lock, no create revision), is kUnavailable: never a guessed
  // holder. (An answer that is not a RangeResponse is the client's error already.)
  static HolderAnswer HolderFromRange(std::string_view lock, const etcd::Status& status,
                                      const etcd::RangeResponse& range);

 private:
  std::unique_ptr<EtcdClient> client_;
};

}  // namespace fencing
