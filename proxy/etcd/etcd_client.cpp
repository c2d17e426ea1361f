#include "etcd/etcd_client.h"

#include "etcd/codec.h"
#include "etcd/transport.h"
#include "etcd/watch_stream.h"

#include <boost/asio/executor_work_guard.hpp>
#include <boost/asio/io_context.hpp>
#include <boost/asio/post.hpp>
#include <boost/json/serialize.hpp>

#include <atomic>
#include <mutex>
#include <thread>
#include <unordered_map>
#include <utility>

namespace fencing {

namespace net = boost::asio;
namespace json = boost::json;
using etcd::Reply;
using etcd::Request;
using etcd::Status;

namespace {

constexpr const char* kStopped = "etcd client stopped";

etcd::WatchEnd Stopped() { return etcd::WatchEnd{etcd::WatchEnd::Reason::kError, 0, kStopped}; }

// The call's status: the transport's error, or an answer that read(&error) could not read.
template <typename ReadFn>
Status Read(Reply& reply, const char* what, ReadFn read) {
  if (!reply.status.ok()) return std::move(reply.status);
  std::string error;
  if (read(&error)) return Status{};
  return Status{"etcd " + reply.endpoint + ": an unreadable " + what + " answer: " + error, -1};
}

}  // namespace

class EtcdClient::Impl : public std::enable_shared_from_this<Impl> {
 public:
  Impl() : work_(net::make_work_guard(ioc_)) {}
  ~Impl() { Stop(); }

  bool Start(const EtcdClientConfig& config, std::string* error) {
    transport_ = etcd::Transport::Create(ioc_, config, error);
    if (!transport_) return false;
    thread_ = std::thread([this] { ioc_.run(); });
    return true;
  }

  // One request of the transport; done runs on the client's thread (at once after Stop).
  void Send(Request request, etcd::Transport::Done done) {
    std::unique_lock lock(stop_mutex_);
    if (stopped_) {
      lock.unlock();
      done(Reply{Status{kStopped, -1}, {}, nullptr, ""});
      return;
    }
    // Posted under the lock: Stop's handler, posted after it, finds the request started.
    net::post(ioc_, [this, request = std::move(request), done = std::move(done)]() mutable {
      transport_->Start(std::move(request), std::move(done));
    });
  }

  class Handle final : public etcd::WatchHandle {
   public:
    Handle(std::weak_ptr<Impl> impl, uint64_t id) : impl_(std::move(impl)), id_(id) {}
    void Cancel() override {
      if (auto impl = impl_.lock()) impl->CancelWatch(id_);
    }

   private:
    std::weak_ptr<Impl> impl_;
    const uint64_t id_;
  };

  std::shared_ptr<etcd::WatchHandle> StartWatch(etcd::WatchOptions options, etcd::WatchEvents on_events,
                                                etcd::WatchEnded on_end) {
    const uint64_t id = next_watch_id_.fetch_add(1);
    auto handle = std::make_shared<Handle>(weak_from_this(), id);
    std::unique_lock lock(stop_mutex_);
    if (stopped_) {
      lock.unlock();
      on_end(Stopped());
      return handle;
    }
    net::post(ioc_, [this, id, options = std::move(options), on_events = std::move(on_events),
                     on_end = std::move(on_end)]() mutable {
      // The watch leaves watches_ as it ends, just before its on_end.
      auto w = std::make_shared<etcd::Watch>(ioc_, *transport_, std::move(on_events),
                                             [this, id, on_end = std::move(on_end)](etcd::WatchEnd end) {
                                               watches_.erase(id);
                                               on_end(std::move(end));
                                             });
      watches_.emplace(id, w);
      w->Start(options);
    });
    return handle;
  }

  void CancelWatch(uint64_t id) {
    std::lock_guard lock(stop_mutex_);
    if (stopped_) return;  // Stop has ended it (or will, in the handler it posted)
    net::post(ioc_, [this, id] {
      auto it = watches_.find(id);
      if (it == watches_.end()) return;
      std::shared_ptr<etcd::Watch> w = it->second;  // alive through End, which erases the entry
      w->End(etcd::WatchEnd{etcd::WatchEnd::Reason::kCancelled, 0, ""});
    });
  }

  void Stop() {
    {
      std::lock_guard lock(stop_mutex_);
      if (stopped_) return;
      stopped_ = true;
      net::post(ioc_, [this] {
        auto watches = watches_;  // End erases
        for (auto& [id, w] : watches) w->End(Stopped());
        transport_->Abort(kStopped);
        // Coroutines still suspended (a resolve) are destroyed with the io_context.
        ioc_.stop();
      });
    }
    if (thread_.joinable()) thread_.join();
  }

  std::chrono::milliseconds timeout() const { return transport_->timeout(); }

 private:
  // Declared first: destroyed last, after everything that holds its executor.
  net::io_context ioc_{1};
  net::executor_work_guard<net::io_context::executor_type> work_;
  std::thread thread_;
  std::mutex stop_mutex_;
  bool stopped_ = false;  // under stop_mutex_
  std::atomic<uint64_t> next_watch_id_{1};  // taken on the caller's thread: the handle knows its watch

  // The io thread's.
  std::unique_ptr<etcd::Transport> transport_;
  std::unordered_map<uint64_t, std::shared_ptr<etcd::Watch>> watches_;
};

std::unique_ptr<EtcdClient> EtcdClient::Create(const EtcdClientConfig& config, std::string* error) {
  auto impl = std::make_shared<Impl>();
  if (!impl->Start(config, error)) return nullptr;
  return std::unique_ptr<EtcdClient>(new EtcdClient(std::move(impl)));
}

EtcdClient::EtcdClient(std::shared_ptr<Impl> impl) : impl_(std::move(impl)) {}
EtcdClient::~EtcdClient() { Stop(); }

void EtcdClient::Stop() { impl_->Stop(); }

std::chrono::milliseconds EtcdClient::timeout() const { return impl_->timeout(); }

void EtcdClient::Range(etcd::RangeRequest request, std::function<void(Status, etcd::RangeResponse)> done) {
  impl_->Send(Request{"/v3/kv/range", json::serialize(etcd::ToJson(request))}, [done = std::move(done)](Reply reply) {
    etcd::RangeResponse out;
    Status status = Read(reply, "range", [&](std::string* e) { return etcd::ReadRangeResponse(reply.response, &out, e); });
    if (!status.ok()) out = {};
    done(std::move(status), std::move(out));
  });
}

void EtcdClient::Txn(etcd::TxnRequest request, std::function<void(Status, etcd::TxnResponse)> done) {
  std::string body = json::serialize(etcd::ToJson(request));
  impl_->Send(Request{"/v3/kv/txn", std::move(body)}, [request = std::move(request), done = std::move(done)](Reply reply) {
    etcd::TxnResponse out;
    Status status =
        Read(reply, "txn", [&](std::string* e) { return etcd::ReadTxnResponse(reply.response, request, &out, e); });
    if (!status.ok()) out = {};
    done(std::move(status), std::move(out));
  });
}

void EtcdClient::Put(std::string key, std::string value, int64_t lease, std::function<void(Status, int64_t)> done) {
  impl_->Send(Request{"/v3/kv/put", json::serialize(etcd::PutJson(key, value, lease))}, [done = std::move(done)](Reply reply) {
    int64_t revision = 0;
    Status status = Read(reply, "put", [&](std::string* e) { return etcd::ReadPutResponse(reply.response, &revision, e); });
    if (!status.ok()) revision = 0;
    done(std::move(status), revision);
  });
}

void EtcdClient::Grant(int64_t ttl_seconds, std::function<void(Status, int64_t, int64_t)> done) {
  impl_->Send(Request{"/v3/lease/grant", json::serialize(etcd::LeaseGrantJson(ttl_seconds))},
              [done = std::move(done)](Reply reply) {
                int64_t id = 0, ttl = 0;
                Status status = Read(reply, "lease grant", [&](std::string* e) {
                  return etcd::ReadLeaseGrantResponse(reply.response, &id, &ttl, e);
                });
                if (!status.ok()) id = ttl = 0;
                done(std::move(status), id, ttl);
              });
}

void EtcdClient::KeepAliveOnce(int64_t id, std::function<void(Status, int64_t, int64_t)> done) {
  // A stream's one message: after it etcd sees the request body end and ends the answer.
  impl_->Send(Request{"/v3/lease/keepalive", json::serialize(etcd::LeaseIdJson(id)), /*stream=*/true},
              [done = std::move(done)](Reply reply) {
                int64_t ttl = 0, revision = 0;
                Status status = Read(reply, "lease keep-alive", [&](std::string* e) {
                  return etcd::ReadLeaseKeepAliveResponse(reply.response, &ttl, &revision, e);
                });
                if (!status.ok()) ttl = revision = 0;
                done(std::move(status), ttl, revision);
              });
}

void EtcdClient::Revoke(int64_t id, std::function<void(Status)> done) {
  impl_->Send(Request{"/v3/lease/revoke", json::serialize(etcd::LeaseIdJson(id))},
              [done = std::move(done)](Reply reply) { done(std::move(reply.status)); });
}

std::shared_ptr<etcd::WatchHandle> EtcdClient::Watch(etcd::WatchOptions options, etcd::WatchEvents on_events,
                                                     etcd::WatchEnded on_end) {
  return impl_->StartWatch(std::move(options), std::move(on_events), std::move(on_end));
}

}  // namespace fencing
