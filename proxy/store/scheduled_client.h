#pragma once
// An etcd::Client whose answers come on the store's thread: each callback of the client it
// wraps (which runs on that client's own thread) is posted through the Scheduler. The proxy
// wraps the real EtcdClient in it (etcd_fence_store.cpp); the simulation wraps the model of
// etcd, posting through a member's own (pausable) thread.

#include "etcd/kv.h"
#include "store/scheduler.h"

#include <functional>
#include <memory>
#include <string>
#include <utility>

namespace fencing::store {

class ScheduledClient final : public etcd::Client {
 public:
  ScheduledClient(etcd::Client& inner, Scheduler& scheduler) : inner_(inner), scheduler_(scheduler) {}

  void Range(etcd::RangeRequest request, std::function<void(etcd::Status, etcd::RangeResponse)> done) override {
    inner_.Range(std::move(request), Posted(std::move(done)));
  }
  void Txn(etcd::TxnRequest request, std::function<void(etcd::Status, etcd::TxnResponse)> done) override {
    inner_.Txn(std::move(request), Posted(std::move(done)));
  }
  void Put(std::string key, std::string value, int64_t lease,
           std::function<void(etcd::Status, int64_t)> done) override {
    inner_.Put(std::move(key), std::move(value), lease, Posted(std::move(done)));
  }
  void Grant(int64_t ttl, std::function<void(etcd::Status, int64_t, int64_t)> done) override {
    inner_.Grant(ttl, Posted(std::move(done)));
  }
  void KeepAliveOnce(int64_t id, std::function<void(etcd::Status, int64_t, int64_t)> done) override {
    inner_.KeepAliveOnce(id, Posted(std::move(done)));
  }
  void Revoke(int64_t id, std::function<void(etcd::Status)> done) override {
    inner_.Revoke(id, Posted(std::move(done)));
  }
  std::shared_ptr<etcd::WatchHandle> Watch(etcd::WatchOptions options, etcd::WatchEvents on_events,
                                           etcd::WatchEnded on_end) override {
    return inner_.Watch(std::move(options), Posted(std::move(on_events)), Posted(std::move(on_end)));
  }

 private:
  template <typename... Args>
  std::function<void(Args...)> Posted(std::function<void(Args...)> f) {
    return [scheduler = &scheduler_, f = std::move(f)](Args... args) mutable {
      scheduler->Post([f, ... args = std::move(args)]() mutable { f(std::move(args)...); });
    };
  }

  etcd::Client& inner_;
  Scheduler& scheduler_;
};

}  // namespace fencing::store
