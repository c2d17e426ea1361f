// The lock-service clients of this build, by the route file's kind.
#include "lockservice/etcd_lock_service.h"
#include "lockservice/lock_services.h"
#include "lockservice/zookeeper_client.h"

namespace fencing {

std::unique_ptr<LockService> MakeLockService(const LockServiceConfig& config, std::string* error) {
  switch (config.kind) {
    case LockServiceConfig::Kind::kEtcd:
      return EtcdLockService::Create(config.etcd, error);
    case LockServiceConfig::Kind::kZooKeeper:
      return std::make_unique<ZooKeeperLockService>(config.name, config.zookeeper);
  }
  *error = "unknown lock service kind";
  return nullptr;
}

}  // namespace fencing
