#include "lockservice/zookeeper_client.h"

#include "http/rules.h"

#include "common/log.h"

#include <zookeeper/zookeeper.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <condition_variable>
#include <cstring>
#include <map>
#include <mutex>
#include <thread>
#include <utility>

namespace fencing {

std::optional<uint64_t> SequenceSuffix(std::string_view child_name) {
  constexpr size_t kDigits = 10;  // ZooKeeper appends the parent's counter as "%010d"
  if (child_name.size() < kDigits) return std::nullopt;
  uint64_t value = 0;
  for (char c : child_name.substr(child_name.size() - kDigits)) {
    if (c < '0' || c > '9') return std::nullopt;
    value = value * 10 + static_cast<uint64_t>(c - '0');
  }
  return value;
}

std::optional<std::string> LowestSequentialChild(const std::vector<std::string>& children) {
  const std::string* best = nullptr;
  uint64_t best_sequence = 0;
  for (const std::string& child : children) {
    std::optional<uint64_t> sequence = SequenceSuffix(child);
    if (!sequence) continue;
    // Sequence numbers under one parent are unique; the name only breaks a tie that a
    // hand-made child could cause, so the answer never depends on the server's listing order.
    if (!best || *sequence < best_sequence || (*sequence == best_sequence && child < *best)) {
      best = &child;
      best_sequence = *sequence;
    }
  }
  if (!best) return std::nullopt;
  return *best;
}

namespace {

using Clock = std::chrono::steady_clock;

// A holder that keeps vanishing between the listing and the exists is a lock changing hands
// faster than we can look; after this many listings the call gives up (fail closed) rather
// than spin until its deadline.
constexpr int kMaxListings = 16;
// A request that failed for want of a connection is tried again this soon if the handle says
// it is connected (its session event may not have been delivered yet), never in a tight loop.
constexpr auto kRetryDelay = std::chrono::milliseconds(20);
// zookeeper_init failing (a connect string it cannot parse or resolve) is tried again this often.
constexpr auto kReinitDelay = std::chrono::seconds(1);

// True while this thread runs one of our callbacks from the C client (its completion thread,
// or the thread inside zookeeper_close): zookeeper_close must not be called from there.
thread_local bool in_client_callback = false;

struct CallbackScope {
  CallbackScope() : outer(in_client_callback) { in_client_callback = true; }
  ~CallbackScope() { in_client_callback = outer; }
  bool outer;
  CallbackScope(const CallbackScope&) = delete;
  CallbackScope& operator=(const CallbackScope&) = delete;
};

// Errors that mean "no session to ask right now" (the client reconnects, or we replace the
// handle): the call waits for a connection again, within its deadline. Anything else is an
// answer we cannot use, and the call ends unavailable at once.
bool WaitsForConnection(int rc) {
  return rc == ZCONNECTIONLOSS || rc == ZOPERATIONTIMEOUT || rc == ZSESSIONEXPIRED ||
         rc == ZSESSIONMOVED || rc == ZCLOSING || rc == ZINVALIDSTATE;
}


std::string ChildPath(const std::string& lock, const std::string& child) {
  return lock == "/" ? "/" + child : lock + "/" + child;
}

// The C client's own log lines, at its warning level and above, become debug lines of ours:
// while a server is down it logs every reconnection attempt, which would flood stderr; our
// client logs the transitions (connected, lost, expired) once each instead.
void RouteClientLog(const char* message) {
  if (!LogEnabled(LogLevel::kDebug) || message == nullptr) return;
  std::string_view text(message);
  while (!text.empty() && (text.back() == '\n' || text.back() == '\r')) text.remove_suffix(1);
  Log(LogLevel::kDebug, "zookeeper C client", {{"message", text}});
}

void SetClientLogLevelOnce() {
  static std::once_flag once;
  std::call_once(once, [] { zoo_set_debug_level(ZOO_LOG_LEVEL_WARN); });
}

}  // namespace

struct ZkCall {
  enum class Step { kSync, kChildren, kExists };
  uint64_t id = 0;
  std::string lock;
  LockService::Done done;
  Clock::time_point deadline;
  // The rest is guarded by the service's mutex.
  bool finished = false;
  bool parked = false;      // waiting for a connected session
  bool ever_sent = false;   // some request of it reached a connected handle
  Step step = Step::kSync;  // the request in flight (or last sent), for the timeout message
  std::string child;        // kExists: the lowest sequential child being read
  int listings = 0;
  std::string last_error;   // the last error that sent it back to waiting
};

class ZooKeeperLockService::Impl : public std::enable_shared_from_this<Impl> {
 public:
  Impl(std::string name, ZooKeeperClientConfig config)
      : name_(std::move(name)), config_(std::move(config)) {}

  // Second half of construction: needs shared_from_this.
  void Start() {
    SetClientLogLevelOnce();
    zhandle_t* zh = NewHandle();
    {
      std::lock_guard lock(mu_);
      zh_ = zh;
      if (!zh) {
        replace_handle_ = true;
        reinit_at_ = Clock::now() + kReinitDelay;
      }
    }
    timer_ = std::thread([self = shared_from_this()] { self->TimerLoop(); });
  }

  void FindHolder(std::string_view lock_name, Done done) {
    auto call = std::make_shared<ZkCall>();
    call->lock = std::string(lock_name);
    call->done = std::move(done);
    call->deadline = Clock::now() + config_.timeout;
    std::unique_lock lock(mu_);
    if (stopped_) {
      // The interface says FindHolder is not called after Stop; if it is, there is no thread
      // of ours left to answer on, so the answer comes at once.
      lock.unlock();
      call->done(HolderAnswer::Unavailable("the ZooKeeper client for lock service " + name_ + " is stopped"));
      return;
    }
    call->id = next_id_++;
    if (!ZnodePathProblem(call->lock).empty()) {
      // A lock that names no znode (the route file checks its template, so a fence key such as
      // ".." made it): no znode can exist there, so nobody holds it (409, not a 503 that asks
      // for a retry that cannot help). Answered by the timer (never inside FindHolder), never sent.
      deferred_.push_back(Ready{std::move(call->done),
                                HolderAnswer::Free("not a ZooKeeper path: \"" + call->lock + "\" " +
                                                   ZnodePathProblem(call->lock))});
      cv_.notify_one();
      return;
    }
    // Every call has the same timeout, so a new one never ends before those already pending:
    // the timer needs waking only when it has nothing to wait for.
    bool wake = pending_.empty();
    pending_.emplace(KeyOf(*call), call);
    if (std::optional<Ready> ready = SendLocked(call, ZkCall::Step::kSync)) {
      deferred_.push_back(std::move(*ready));  // never call done inside FindHolder
      wake = true;
    }
    if (wake) cv_.notify_one();
  }

  void Stop() {
    std::vector<Ready> ready;
    zhandle_t* zh = nullptr;
    {
      std::lock_guard lock(mu_);
      if (stopped_) return;
      stopped_ = true;
      ready = std::move(deferred_);
      deferred_.clear();
      while (!pending_.empty()) {
        std::shared_ptr<ZkCall> call = pending_.begin()->second;
        ready.push_back(FinishLocked(
            call, HolderAnswer::Unavailable("the ZooKeeper client for lock service " + name_ + " stopped")));
      }
      zh = std::exchange(zh_, nullptr);
      cv_.notify_all();
    }
    for (Ready& r : ready) r.done(std::move(r.answer));
    if (timer_.joinable()) {
      if (timer_.get_id() == std::this_thread::get_id()) {
        timer_.detach();  // Stop from a done the timer delivered: it ends on its own
      } else {
        timer_.join();
      }
    }
    if (!zh) return;
    if (in_client_callback) {
      // Stop from inside a done on the completion thread: zookeeper_close would wait for that
      // very thread. Close from a thread of its own, which keeps this state alive meanwhile.
      std::thread([self = shared_from_this(), zh] { zookeeper_close(zh); }).detach();
    } else {
      zookeeper_close(zh);  // late completions see their calls finished and only free themselves
    }
  }

  bool CurrentSession(int64_t* session_id, std::string* password) const {
    std::lock_guard lock(mu_);
    if (!zh_) return false;
    const clientid_t* id = zoo_client_id(zh_);
    if (!id) return false;
    *session_id = id->client_id;
    *password = std::string(id->passwd, sizeof(id->passwd));
    return true;
  }

 private:
  struct Ready {
    Done done;
    HolderAnswer answer;
  };
  // What a request carries through the C client: the call and this state, both kept alive by
  // the reference until the completion (which the client runs exactly once, with ZCLOSING at
  // the latest when the handle closes) deletes it.
  struct Request {
    std::shared_ptr<Impl> impl;
    std::shared_ptr<ZkCall> call;
  };
  using Key = std::pair<Clock::time_point, uint64_t>;
  static Key KeyOf(const ZkCall& call) { return {call.deadline, call.id}; }

  zhandle_t* NewHandle() {
    errno = 0;
    const auto session_ms = static_cast<int>(config_.session_timeout.count());
    zhandle_t* zh = zookeeper_init2(config_.hosts.c_str(), &Impl::OnWatch, session_ms, nullptr,
                                    this, 0, &RouteClientLog);
    if (!zh) {
      LogError("cannot create a ZooKeeper client handle; trying again",
               {{"service", name_}, {"hosts", config_.hosts},
                {"error", errno ? std::strerror(errno) : "zookeeper_init failed"}});
    }
    return zh;
  }

  bool ConnectedLocked() const { return zh_ && zoo_state(zh_) == ZOO_CONNECTED_STATE; }

  Ready FinishLocked(const std::shared_ptr<ZkCall>& call, HolderAnswer answer) {
    call->finished = true;
    pending_.erase(KeyOf(*call));
    if (call->parked) parked_.erase(call->id);
    call->parked = false;
    return Ready{std::move(call->done), std::move(answer)};
  }

  void ParkLocked(const std::shared_ptr<ZkCall>& call, bool retry_soon) {
    call->parked = true;
    parked_.emplace(call->id, call);
    if (retry_soon) {
      retry_parked_at_ = std::min(retry_parked_at_, Clock::now() + kRetryDelay);
      cv_.notify_one();
    }
  }

  // Sends the call's next request on the current handle, or parks the call until a session is
  // connected. Returns the call's answer when it ends here (a request the client refused).
  std::optional<Ready> SendLocked(const std::shared_ptr<ZkCall>& call, ZkCall::Step step) {
    call->step = step;
    if (!ConnectedLocked()) {
      ParkLocked(call, false);
      return std::nullopt;
    }
    auto* request = new Request{shared_from_this(), call};
    int rc = ZOK;
    switch (step) {
      case ZkCall::Step::kSync:
        rc = zoo_async(zh_, call->lock.c_str(), &Impl::OnSync, request);
        break;
      case ZkCall::Step::kChildren:
        rc = zoo_aget_children(zh_, call->lock.c_str(), 0, &Impl::OnChildren, request);
        break;
      case ZkCall::Step::kExists:
        rc = zoo_aexists(zh_, ChildPath(call->lock, call->child).c_str(), 0, &Impl::OnExists,
                         request);
        break;
    }
    if (rc == ZOK) {
      call->ever_sent = true;
      return std::nullopt;
    }
    delete request;  // refused: no completion will come
    return FailedLocked(call, rc);
  }

  std::string DescribeLocked(const ZkCall& call) const {
    switch (call.step) {
      case ZkCall::Step::kSync: return "sync " + call.lock;
      case ZkCall::Step::kChildren: return "get_children " + call.lock;
      case ZkCall::Step::kExists: return "exists " + ChildPath(call.lock, call.child);
    }
    return call.lock;
  }

  std::optional<Ready> FailedLocked(const std::shared_ptr<ZkCall>& call, int rc) {
    std::string what = DescribeLocked(*call) + ": " + zerror(rc);
    if (WaitsForConnection(rc) && !stopped_) {
      call->last_error = std::move(what);
      ParkLocked(call, true);
      return std::nullopt;
    }
    return FinishLocked(call, HolderAnswer::Unavailable("ZooKeeper " + what));
  }

  HolderAnswer TimedOutLocked(const ZkCall& call) const {
    std::string error;
    if (call.parked) {
      error = "not connected to ZooKeeper hosts " + config_.hosts + " within " +
              MillisecondsText(config_.timeout);
    } else {
      error = "timed out after " + MillisecondsText(config_.timeout) + " waiting for ZooKeeper hosts " +
              config_.hosts + " to answer " + DescribeLocked(call);
    }
    if (!call.last_error.empty()) error += " (last error: " + call.last_error + ")";
    return HolderAnswer::Unavailable(std::move(error));
  }

  std::vector<Ready> StartParkedLocked() {
    std::vector<Ready> ready;
    std::map<uint64_t, std::shared_ptr<ZkCall>> parked = std::move(parked_);
    parked_.clear();
    for (auto& [id, call] : parked) {
      call->parked = false;
      // After a wait the read starts over with a sync: the session may be on another server.
      if (std::optional<Ready> r = SendLocked(call, ZkCall::Step::kSync)) ready.push_back(std::move(*r));
    }
    return ready;
  }

  static void Deliver(std::vector<Ready>& ready) {
    for (Ready& r : ready) r.done(std::move(r.answer));
  }
  static void Deliver(std::optional<Ready>& ready) {
    if (ready) ready->done(std::move(ready->answer));
  }

  static std::unique_ptr<Request> TakeRequest(const void* data) {
    return std::unique_ptr<Request>(static_cast<Request*>(const_cast<void*>(data)));
  }

  // What every completion does around its own step: take back the request, and unless the call
  // was answered already (deadline, Stop), run the step under mu_ and deliver what it decided
  // once mu_ is released.
  template <typename Step>
  static void Complete(const void* data, Step step) {
    CallbackScope scope;
    std::unique_ptr<Request> request = TakeRequest(data);
    Impl& self = *request->impl;
    const std::shared_ptr<ZkCall>& call = request->call;
    std::optional<Ready> ready;
    {
      std::lock_guard lock(self.mu_);
      if (call->finished) return;
      ready = step(self, call);
    }
    Deliver(ready);
  }

  static void OnSync(int rc, const char* /*path*/, const void* data) {
    Complete(data, [rc](Impl& self, const std::shared_ptr<ZkCall>& call) -> std::optional<Ready> {
      return rc == ZOK ? self.SendLocked(call, ZkCall::Step::kChildren) : self.FailedLocked(call, rc);
    });
  }

  static void OnChildren(int rc, const String_vector* strings, const void* data) {
    Complete(data, [rc, strings](Impl& self, const std::shared_ptr<ZkCall>& call) -> std::optional<Ready> {
      if (rc == ZNONODE) return self.FinishLocked(call, HolderAnswer::Free());
      if (rc != ZOK) return self.FailedLocked(call, rc);
      std::vector<std::string> children;
      if (strings) children.assign(strings->data, strings->data + strings->count);
      ++call->listings;
      std::optional<std::string> lowest = LowestSequentialChild(children);
      if (!lowest) return self.FinishLocked(call, HolderAnswer::Free());
      call->child = std::move(*lowest);
      return self.SendLocked(call, ZkCall::Step::kExists);
    });
  }

  static void OnExists(int rc, const Stat* stat, const void* data) {
    Complete(data, [rc, stat](Impl& self, const std::shared_ptr<ZkCall>& call) -> std::optional<Ready> {
      if (rc == ZOK && stat) {
        HolderAnswer held;
        held.status = HolderAnswer::Status::kHeld;
        held.token = static_cast<uint64_t>(stat->czxid);
        held.holder = ChildPath(call->lock, call->child);
        return self.FinishLocked(call, std::move(held));
      }
      if (rc != ZNONODE) return self.FailedLocked(call, rc == ZOK ? ZSYSTEMERROR : rc);
      // The holder let go between the listing and this read: whoever is lowest now holds.
      if (call->listings >= kMaxListings) {
        return self.FinishLocked(call, HolderAnswer::Unavailable("the holder of ZooKeeper lock " + call->lock +
                                                                 " changed " + std::to_string(call->listings) +
                                                                 " times while it was read"));
      }
      return self.SendLocked(call, ZkCall::Step::kChildren);
    });
  }

  static void OnWatch(zhandle_t* zh, int type, int state, const char* /*path*/, void* context) {
    if (type != ZOO_SESSION_EVENT) return;  // we set no watches; only session events come
    CallbackScope scope;
    static_cast<Impl*>(context)->OnSessionEvent(zh, state);
  }

  void OnSessionEvent(zhandle_t* zh, int state) {
    std::vector<Ready> ready;
    {
      std::lock_guard lock(mu_);
      if (zh != zh_ || stopped_) return;  // a handle being replaced or closed
      if (state == ZOO_CONNECTED_STATE) {
        if (!connected_) {
          connected_ = true;
          // Not zoo_get_current_server: it formats into one static buffer of the library,
          // which its I/O thread rewrites meanwhile (ThreadSanitizer saw the race).
          const clientid_t* id = zoo_client_id(zh);
          LogInfo("connected to ZooKeeper", {{"service", name_},
                                             {"hosts", config_.hosts},
                                             {"session", id ? id->client_id : 0}});
        }
        ready = StartParkedLocked();
      } else if (state == ZOO_EXPIRED_SESSION_STATE || state == ZOO_AUTH_FAILED_STATE) {
        connected_ = false;
        LogWarn(state == ZOO_EXPIRED_SESSION_STATE ? "ZooKeeper session expired; starting a new one"
                                                   : "ZooKeeper authentication failed; starting a new session",
                {{"service", name_}, {"hosts", config_.hosts}});
        replace_handle_ = true;
        reinit_at_ = Clock::now();
        cv_.notify_one();
      } else if (connected_) {
        connected_ = false;
        LogWarn("lost the connection to ZooKeeper; reconnecting",
                {{"service", name_}, {"hosts", config_.hosts}});
      }
    }
    Deliver(ready);
  }

  void TimerLoop() {
    std::unique_lock lock(mu_);
    while (!stopped_) {
      const Clock::time_point now = Clock::now();
      if (!deferred_.empty()) {
        std::vector<Ready> ready = std::move(deferred_);
        deferred_.clear();
        lock.unlock();
        Deliver(ready);
        lock.lock();
        continue;
      }
      if (replace_handle_ && reinit_at_ <= now) {
        ReplaceHandle(lock);
        continue;
      }
      std::vector<Ready> expired;
      while (!pending_.empty() && pending_.begin()->first.first <= now) {
        std::shared_ptr<ZkCall> call = pending_.begin()->second;
        expired.push_back(FinishLocked(call, TimedOutLocked(*call)));
      }
      if (!expired.empty()) {
        lock.unlock();
        Deliver(expired);
        lock.lock();
        continue;
      }
      if (retry_parked_at_ <= now) {
        retry_parked_at_ = Clock::time_point::max();
        if (ConnectedLocked()) {
          std::vector<Ready> ready = StartParkedLocked();
          lock.unlock();
          Deliver(ready);
          lock.lock();
          continue;
        }
        // Not connected: the session event that says so is on its way and starts them.
      }
      Clock::time_point wake = retry_parked_at_;
      if (!pending_.empty()) wake = std::min(wake, pending_.begin()->first.first);
      if (replace_handle_) wake = std::min(wake, reinit_at_);
      if (wake == Clock::time_point::max()) {
        cv_.wait(lock);
      } else {
        cv_.wait_until(lock, wake);
      }
    }
  }

  // After an expiry: the old handle can never reconnect, so close it (here, never on the
  // completion thread, since zookeeper_close waits for it) and start a new session. Calls that
  // were in flight come back with ZCLOSING / ZSESSIONEXPIRED and wait for the new session.
  void ReplaceHandle(std::unique_lock<std::mutex>& lock) {
    replace_handle_ = false;
    zhandle_t* old = std::exchange(zh_, nullptr);
    lock.unlock();
    if (old) zookeeper_close(old);
    zhandle_t* fresh = NewHandle();
    lock.lock();
    if (stopped_) {
      lock.unlock();
      if (fresh) zookeeper_close(fresh);
      lock.lock();
      return;
    }
    zh_ = fresh;
    if (!fresh) {
      replace_handle_ = true;
      reinit_at_ = Clock::now() + kReinitDelay;
      return;
    }
    // Its connected event may have come before zh_ was set, and was then ignored.
    if (ConnectedLocked()) {
      connected_ = true;
      std::vector<Ready> ready = StartParkedLocked();
      lock.unlock();
      Deliver(ready);
      lock.lock();
    }
  }

  const std::string name_;
  const ZooKeeperClientConfig config_;

  mutable std::mutex mu_;
  std::condition_variable cv_;
  zhandle_t* zh_ = nullptr;
  bool connected_ = false;  // for logging the transitions only; requests ask zoo_state
  bool stopped_ = false;
  bool replace_handle_ = false;
  Clock::time_point reinit_at_{};
  Clock::time_point retry_parked_at_ = Clock::time_point::max();
  uint64_t next_id_ = 1;
  std::map<Key, std::shared_ptr<ZkCall>> pending_;            // every unfinished call, by deadline
  std::map<uint64_t, std::shared_ptr<ZkCall>> parked_;        // waiting for a connection
  std::vector<Ready> deferred_;  // answers found inside FindHolder, delivered by the timer
  std::thread timer_;
};

ZooKeeperLockService::ZooKeeperLockService(std::string name, ZooKeeperClientConfig config)
    : impl_(std::make_shared<Impl>(std::move(name), std::move(config))) {
  impl_->Start();
}

ZooKeeperLockService::~ZooKeeperLockService() { Stop(); }

void ZooKeeperLockService::FindHolder(std::string_view lock, Done done) {
  impl_->FindHolder(lock, std::move(done));
}

void ZooKeeperLockService::Stop() { impl_->Stop(); }

bool ZooKeeperLockService::CurrentSession(int64_t* session_id, std::string* password) const {
  return impl_->CurrentSession(session_id, password);
}

}  // namespace fencing
