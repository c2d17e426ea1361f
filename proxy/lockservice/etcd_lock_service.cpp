#include "lockservice/etcd_lock_service.h"

#include <boost/json/array.hpp>

namespace fencing {

namespace json = boost::json;

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

json::object EtcdLockService::HolderRequest(std::string_view lock) {
  std::string prefix = Prefix(lock);
  // serializable is left out (false): the read goes through the leader's read index, so a lock
  // released or taken a moment ago is seen as it is now.
  return json::object{
      {"key", etcd::Base64Encode(prefix)},
      {"range_end", etcd::Base64Encode(etcd::PrefixRangeEnd(prefix))},
      {"limit", "1"},
      {"sort_order", "ASCEND"},
      {"sort_target", "CREATE"},
      {"keys_only", true},
  };
}

HolderAnswer EtcdLockService::HolderFromRange(std::string_view lock, const EtcdResult& result) {
  std::string where = "etcd range over " + Prefix(lock) + ": ";
  if (!result.ok()) return HolderAnswer::Unavailable(where + result.error);
  const json::value* kvs = result.response.if_contains("kvs");
  if (kvs == nullptr || (kvs->is_array() && kvs->get_array().empty())) return HolderAnswer::Free();
  if (!kvs->is_array() || !kvs->get_array().front().is_object()) {
    return HolderAnswer::Unavailable(where + "\"kvs\" is not an array of objects");
  }
  const json::object& kv = kvs->get_array().front().get_object();
  const json::value* key = kv.if_contains("key");
  std::string name;
  if (key == nullptr || !key->is_string() || !etcd::Base64Decode(key->get_string(), &name)) {
    return HolderAnswer::Unavailable(where + "the holder's key is missing or not base64");
  }
  // The range asked for keys under the prefix only; anything else is a broken answer.
  if (!name.starts_with(Prefix(lock))) return HolderAnswer::Unavailable(where + "etcd answered with key " + name + ", outside the lock");
  int64_t revision = 0;
  std::string error;
  if (!etcd::ReadInt64(kv, "create_revision", &revision, &error)) return HolderAnswer::Unavailable(where + error);
  if (revision <= 0) return HolderAnswer::Unavailable(where + "the holder " + name + " has no create revision");
  HolderAnswer held;
  held.status = HolderAnswer::Status::kHeld;
  held.token = uint64_t(revision);
  held.holder = std::move(name);
  return held;
}

void EtcdLockService::FindHolder(std::string_view lock, Done done) {
  client_->Call("/v3/kv/range", HolderRequest(lock),
                [lock = std::string(lock), done = std::move(done)](EtcdResult result) {
                  done(HolderFromRange(lock, result));
                });
}

void EtcdLockService::Stop() { client_->Stop(); }

}  // namespace fencing
