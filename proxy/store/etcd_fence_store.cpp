#include "store/etcd_fence_store.h"

#include "common/log.h"
#include "etcd/etcd_client.h"
#include "fence/fence_registry.h"
#include "store/member.h"
#include "store/scheduled_client.h"
#include "store/scheduler.h"

#include <boost/asio/executor_work_guard.hpp>
#include <boost/asio/io_context.hpp>
#include <boost/asio/post.hpp>
#include <boost/asio/steady_timer.hpp>

#include <future>
#include <mutex>
#include <thread>

namespace fencing {

namespace net = boost::asio;

namespace {

// The real clock (CLOCK_BOOTTIME, as the gate's) and the store's io_context.
class IoScheduler final : public store::Scheduler {
 public:
  explicit IoScheduler(net::io_context& io) : io_(io) {}
  int64_t NowNanos() const override { return MembershipGate::NowNanos(); }
  void Post(std::function<void()> f) override { net::post(io_, std::move(f)); }
  std::unique_ptr<Timer> At(int64_t at_ns, std::function<void()> f) override {
    auto timer = std::make_unique<AsioTimer>(io_);
    timer->Start(std::max<int64_t>(0, at_ns - NowNanos()), std::move(f));
    return timer;
  }

 private:
  class AsioTimer final : public Timer {
   public:
    explicit AsioTimer(net::io_context& io) : timer_(io) {}
    ~AsioTimer() override { Cancel(); }
    void Start(int64_t delay_ns, std::function<void()> f) {
      timer_.expires_after(std::chrono::nanoseconds(delay_ns));
      timer_.async_wait([alive = alive_, f = std::move(f)](const boost::system::error_code& ec) {
        if (!ec && *alive) f();
      });
    }
    void Cancel() override {
      *alive_ = false;
      timer_.cancel();
    }

   private:
    net::steady_timer timer_;
    std::shared_ptr<bool> alive_ = std::make_shared<bool>(true);
  };
  net::io_context& io_;
};

}  // namespace

class EtcdFenceStore::Impl final : public store::Reporter {
 public:
  Impl(const FenceStoreConfig& config, std::chrono::milliseconds request_timeout, const FenceStoreObserver* observer)
      : config_(config), observer_(observer), request_timeout_(request_timeout) {
    for (size_t i = 0; i < config.etcd.endpoints.size(); ++i) {
      status_.endpoints += (i ? "," : "") + config.etcd.endpoints[i];
    }
    status_.prefix = config.prefix;
  }
  ~Impl() { Stop(false); }

  bool Start(std::chrono::milliseconds wait, std::string* error) {
    client_ = EtcdClient::Create(config_.etcd, error);
    if (!client_) return false;
    posting_ = std::make_unique<store::ScheduledClient>(*client_, scheduler_);
    member_ = std::make_unique<store::Member>(
        store::Member::Options{config_.prefix, config_.member_ttl.count(),
                               std::chrono::duration_cast<std::chrono::nanoseconds>(request_timeout_).count()},
        *posting_, scheduler_, gate_, *this);
    thread_ = std::thread([this] { io_.run(); });
    std::promise<void> started;
    auto ready = started.get_future();
    net::post(io_, [this, &started] {
      member_->Start([this, &started] {
        maxima = member_->protocol().maxima;
        keys = std::move(member_->protocol().keys);
        started.set_value();
      });
    });
    if (ready.wait_for(wait) != std::future_status::ready) {
      *error = "etcd " + status_.endpoints + " did not answer within " + std::to_string(wait.count()) +
               " ms (registering this proxy and reading prefix " + config_.prefix + ")" +
               (LastError().empty() ? "" : ": " + LastError());
      Stop(false);
      return false;
    }
    return true;
  }

  void Attach(FenceRegistry& registry) {
    OnThread([this, &registry] { member_->Attach(registry); });
  }

  void Stop(bool left_cleanly) {
    {
      std::lock_guard lock(stop_mu_);
      if (stopped_) return;
      stopped_ = true;
    }
    gate_.Close();
    if (thread_.joinable()) {
      auto revoked = std::make_shared<std::promise<void>>();
      auto done = revoked->get_future();
      net::post(io_, [this, revoked, left_cleanly] { member_->Stop(left_cleanly, [revoked] { revoked->set_value(); }); });
      done.wait_for(2 * config_.etcd.timeout + std::chrono::milliseconds(500));
    }
    if (client_) client_->Stop();
    work_.reset();
    io_.stop();
    if (thread_.joinable()) thread_.join();
  }

  void Persist(FenceRecord record, Done done) {
    net::post(io_, [this, record = std::move(record), done = std::move(done)]() mutable {
      member_->Persist(record, std::move(done));
    });
  }

  const MembershipGate* gate() const { return &gate_; }

  EtcdFenceStore::Status status() const {
    std::lock_guard lock(status_mu_);
    EtcdFenceStore::Status s = status_;
    s.gate_open = gate_.Open();
    s.gate_seconds_left = s.gate_open ? double(gate_.Left()) / 1e9 : 0;
    if (!s.last_error.empty()) {
      s.last_error_seconds_ago = std::chrono::duration<double>(std::chrono::steady_clock::now() - last_error_at_).count();
    }
    return s;
  }

  FenceMaxima maxima;
  FenceKeyMaxima keys;

 private:
  // ---- store::Reporter (the store's thread)
  void Error(const std::string& what) override {
    bool changed;
    {
      std::lock_guard lock(status_mu_);
      changed = status_.last_error != what || std::chrono::steady_clock::now() - last_error_at_ > std::chrono::seconds(10);
      status_.last_error = what;
      last_error_at_ = std::chrono::steady_clock::now();
    }
    if (changed) LogWarn("fence store: etcd", {{"prefix", config_.prefix}, {"error", what}});
  }
  void Observe(std::string_view op, double seconds) override {
    if (observer_) observer_->Observe(op, seconds);
  }
  void Members(int64_t alive) override {
    {
      std::lock_guard lock(status_mu_);
      status_.members = alive;
    }
    if (observer_) observer_->Members(alive);
  }
  void MemberId(const std::string& id) override {
    std::lock_guard lock(status_mu_);
    status_.member_id = id;
  }
  void Add(Count what) override {
    std::lock_guard lock(status_mu_);
    switch (what) {
      case Count::kRaised: ++status_.raises; break;
      case Count::kAcked: ++status_.acks; break;
      case Count::kRaiseRefused: ++status_.raises_refused; break;
    }
  }

  std::string LastError() const {
    std::lock_guard lock(status_mu_);
    return status_.last_error;
  }

  template <typename F>
  void OnThread(F f) {
    std::promise<void> done;
    net::post(io_, [&f, &done] {
      f();
      done.set_value();
    });
    done.get_future().wait();
  }

  const FenceStoreConfig config_;
  const FenceStoreObserver* observer_;
  const std::chrono::milliseconds request_timeout_;
  net::io_context io_;
  net::executor_work_guard<net::io_context::executor_type> work_ = net::make_work_guard(io_);
  IoScheduler scheduler_{io_};
  MembershipGate gate_;
  std::unique_ptr<EtcdClient> client_;
  std::unique_ptr<store::ScheduledClient> posting_;
  std::unique_ptr<store::Member> member_;
  std::thread thread_;

  mutable std::mutex status_mu_;
  EtcdFenceStore::Status status_;
  std::chrono::steady_clock::time_point last_error_at_{};
  std::mutex stop_mu_;
  bool stopped_ = false;
};

std::unique_ptr<EtcdFenceStore> EtcdFenceStore::Open(const FenceStoreConfig& config,
                                                     std::chrono::milliseconds request_timeout,
                                                     std::chrono::milliseconds wait, const FenceStoreObserver* observer,
                                                     std::string* error) {
  auto impl = std::make_shared<Impl>(config, request_timeout, observer);
  if (!impl->Start(wait, error)) return nullptr;
  return std::unique_ptr<EtcdFenceStore>(new EtcdFenceStore(std::move(impl)));
}

EtcdFenceStore::EtcdFenceStore(std::shared_ptr<Impl> impl) : impl_(std::move(impl)) {}
EtcdFenceStore::~EtcdFenceStore() { Stop(false); }
const FenceMaxima& EtcdFenceStore::maxima() const { return impl_->maxima; }
FenceKeyMaxima EtcdFenceStore::TakeKeyMaxima() { return std::move(impl_->keys); }
void EtcdFenceStore::Attach(FenceRegistry& registry) { impl_->Attach(registry); }
void EtcdFenceStore::Stop(bool left_cleanly) { impl_->Stop(left_cleanly); }
void EtcdFenceStore::Persist(FenceRecord record, Done done) { impl_->Persist(std::move(record), std::move(done)); }
const MembershipGate* EtcdFenceStore::gate() const { return impl_->gate(); }
EtcdFenceStore::Status EtcdFenceStore::status() const { return impl_->status(); }

}  // namespace fencing
