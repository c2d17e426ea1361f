#include "lockservice/etcd_lock_service.h"

namespace fencing {

namespace {

std::string Prefix(std::string_view lock) { return std::string(lock) + "/"; }

}  // namespace

std::unique_ptr<EtcdLockService> EtcdLockService::Create(const EtcdClientConfig& config, std::string* error) {
  auto client = EtcdClient::Create(config, error);
  if (!client) return nullptr;
  return std::make_unique<EtcdLockService>(std::move(client));
}

EtcdLockService::EtcdLockService(std::unique_ptr<EtcdClient> client) : client_(std::move(client)) {}
EtcdLockService::~EtcdLockService() { Stop(); }

etcd::RangeRequest EtcdLockService::HolderRequest(std::string_view lock) {
  const std::string prefix = Prefix(lock);
  etcd::RangeRequest request;
  request.key = prefix;
  request.range_end = etcd::PrefixRangeEnd(prefix);
  request.limit = 1;
  request.sort_by = etcd::RangeRequest::SortBy::kCreateRevision;
  request.keys_only = true;
  // Linearizable (the client's ranges always are): a lock released or taken a moment ago is seen
  // as it is now.
  return request;
}

HolderAnswer EtcdLockService::HolderFromRange(std::string_view lock, const etcd::Status& status,
                                              const etcd::RangeResponse& range) {
  const std::string where = "etcd range over " + Prefix(lock) + ": ";
  if (!status.ok()) return HolderAnswer::Unavailable(where + status.error);
  if (range.kvs.empty()) return HolderAnswer::Free();
  const etcd::KeyValue& kv = range.kvs.front();
  // The range asked for keys under the prefix only; anything else is a broken answer.
  if (!kv.key.starts_with(Prefix(lock))) {
    return HolderAnswer::Unavailable(where + "etcd answered with key " + kv.key + ", outside the lock");
  }
  if (kv.create_revision <= 0) return HolderAnswer::Unavailable(where + "the holder " + kv.key + " has no create revision");
  HolderAnswer held;
  held.status = HolderAnswer::Status::kHeld;
  held.token = uint64_t(kv.create_revision);
  held.holder = kv.key;
  return held;
}

void EtcdLockService::FindHolder(std::string_view lock, Done done) {
  client_->Range(HolderRequest(lock), [lock = std::string(lock), done = std::move(done)](etcd::Status status,
                                                                                       etcd::RangeResponse range) {
    done(HolderFromRange(lock, status, range));
  });
}

void EtcdLockService::Stop() { client_->Stop(); }

}  // namespace fencing
