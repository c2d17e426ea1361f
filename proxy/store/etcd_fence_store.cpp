#include "store/etcd_fence_store.h"

#include "common/log.h"
#include "etcd/etcd_client.h"
#include "fence/fence_registry.h"
#include "http/rules.h"

#include <boost/asio/executor_work_guard.hpp>
#include <boost/asio/io_context.hpp>
#include <boost/asio/post.hpp>
#include <boost/asio/steady_timer.hpp>
#include <boost/json/serialize.hpp>

#include <unistd.h>

#include <algorithm>
#include <cinttypes>
#include <cstdio>
#include <ctime>
#include <future>
#include <map>
#include <mutex>
#include <optional>
#include <set>
#include <thread>

namespace fencing {

namespace net = boost::asio;
namespace json = boost::json;
using SteadyClock = std::chrono::steady_clock;

// ================================================================================ pure rules
namespace shared_fence {

std::string TokenText(uint64_t token) {
  char buf[24];
  std::snprintf(buf, sizeof buf, "%020" PRIu64, token);
  return buf;
}

bool ParseToken(std::string_view text, uint64_t* token) {
  return text.size() == kMaxU64Digits && ParseDecimalU64(text, token);
}

std::string MemberId(int64_t lease) {
  char buf[24];
  std::snprintf(buf, sizeof buf, "%016" PRIx64, uint64_t(lease));
  return buf;
}

bool ParseTokenAnd(std::string_view text, uint64_t* token, std::string* word) {
  if (text.size() < kMaxU64Digits + 2 || text[kMaxU64Digits] != ' ') return false;
  if (!ParseToken(text.substr(0, kMaxU64Digits), token)) return false;
  std::string_view rest = text.substr(kMaxU64Digits + 1);
  if (rest.empty() || rest.find(' ') != std::string_view::npos) return false;
  *word = std::string(rest);
  return true;
}

bool SplitTarget(std::string_view target, std::string* fence, std::string* key) {
  size_t slash = target.find('/');
  std::string_view f = target.substr(0, slash);
  std::string_view k = slash == std::string_view::npos ? std::string_view() : target.substr(slash + 1);
  if (f.empty() || (slash != std::string_view::npos && (k.empty() || k.find('/') != std::string_view::npos))) {
    return false;
  }
  *fence = std::string(f);
  *key = std::string(k);
  return true;
}

}  // namespace shared_fence

using shared_fence::TokenText;

namespace {

double Since(SteadyClock::time_point t) { return std::chrono::duration<double>(SteadyClock::now() - t).count(); }

std::string HostName() {
  char buf[256] = {};
  if (gethostname(buf, sizeof buf - 1) != 0) return "unknown";
  return buf;
}

// A target's name from its fence and key: "fence" or "fence/key".
std::string TargetName(const FenceRecord& record) {
  return record.key.empty() ? record.fence : record.fence + "/" + record.key;
}

}  // namespace

// ===================================================================================== Impl
class EtcdFenceStore::Impl : public std::enable_shared_from_this<Impl> {
 public:
  Impl(const FenceStoreConfig& config, std::chrono::milliseconds request_timeout, const FenceStoreObserver* observer)
      : config_(config),
        request_timeout_(request_timeout),
        observer_(observer),
        prefix_(config.prefix + "/"),
        members_prefix_(prefix_ + "members/"),
        roster_prefix_(prefix_ + "roster/"),
        max_prefix_(prefix_ + "max/"),
        pending_prefix_(prefix_ + "pending/"),
        ack_prefix_(prefix_ + "ack/"),
        work_(net::make_work_guard(io_)) {
    for (size_t i = 0; i < config.etcd.endpoints.size(); ++i) {
      endpoints_ += (i ? "," : "") + config.etcd.endpoints[i];
    }
    status_.endpoints = endpoints_;
    status_.prefix = config.prefix;
  }

  bool Start(std::chrono::milliseconds wait, std::string* error) {
    client_ = EtcdClient::Create(config_.etcd, error);
    if (!client_) return false;
    thread_ = std::thread([this] { io_.run(); });
    std::promise<std::string> started;
    auto result = started.get_future();
    net::post(io_, [this, &started] {
      on_started_ = [&started](std::string e) { started.set_value(std::move(e)); };
      Register();
    });
    if (result.wait_for(wait) != std::future_status::ready) {
      *error = "etcd " + endpoints_ + " did not answer within " + std::to_string(wait.count()) +
               " ms (registering this proxy and reading prefix " + config_.prefix + ")" +
               (LastError().empty() ? "" : ": " + LastError());
      Stop(false);
      return false;
    }
    *error = result.get();
    if (!error->empty()) {
      Stop(false);
      return false;
    }
    return true;
  }

  void Attach(FenceRegistry& registry) {
    std::promise<void> attached;
    net::post(io_, [this, &registry, &attached] {
      registry_ = &registry;
      // The pendings seen at the load: blocked here, acknowledged once drained.
      std::vector<std::pair<std::string, Pending>> seen(start_pendings_.begin(), start_pendings_.end());
      start_pendings_.clear();
      for (auto& [name, pending] : seen) OnPendingPut(name, pending);
      if (watch_from_ != 0 && !watch_ && lease_ != 0) StartWatch(watch_from_);
      view_current_ = true;
      OpenGate();
      attached.set_value();
    });
    attached.get_future().wait();
  }

  void Stop(bool left_cleanly) {
    {
      std::lock_guard lock(stop_mu_);
      if (stopped_) return;
      stopped_ = true;
    }
    gate_.Close();
    if (thread_.joinable()) {
      std::promise<void> revoked;
      net::post(io_, [this, &revoked, left_cleanly] {
        stopping_ = true;
        on_started_ = nullptr;
        for (auto& [name, target] : targets_) {
          if (target.op) Complete(target, PersistResult::kNotDurable);
        }
        if (watch_) watch_->Cancel();
        keepalive_timer_.cancel();
        if (lease_ == 0) {
          revoked.set_value();
          return;
        }
        // The member key goes with the lease. With every admitted write ended, the roster entry
        // goes first: the others stop waiting for this proxy now; else they wait
        // timeouts.request after the key has gone.
        auto revoke = [this, &revoked] {
          client_->LeaseRevoke(lease_, [&revoked](EtcdResult) { revoked.set_value(); });
        };
        if (!left_cleanly) {
          revoke();
          return;
        }
        client_->Call("/v3/kv/txn", etcd::Txn({}, {etcd::DeleteOp(roster_prefix_ + member_id_)}, {}),
                      [this, revoke](EtcdResult) { net::post(io_, revoke); });
      });
      revoked.get_future().wait_for(2 * config_.etcd.timeout + std::chrono::milliseconds(500));
    }
    if (client_) client_->Stop();
    work_.reset();
    io_.stop();
    if (thread_.joinable()) thread_.join();
  }

  void Persist(FenceRecord record, Done done) {
    if (record.kind != FenceRecord::Kind::kSetMax) {
      // Keys are not forgotten in the shared store (the route file refuses forget_idle_after).
      done(PersistResult::kNotDurable);
      return;
    }
    net::post(io_, [self = shared_from_this(), record = std::move(record), done = std::move(done)]() mutable {
      self->StartPersist(TargetName(record), record.token, std::move(done));
    });
  }

  const MembershipGate* gate() const { return &gate_; }

  EtcdFenceStore::Status status() const {
    std::lock_guard lock(status_mu_);
    EtcdFenceStore::Status s = status_;
    s.gate_open = gate_.Open();
    s.gate_seconds_left = s.gate_open ? double(gate_.Left()) / 1e9 : 0;
    if (!s.last_error.empty()) s.last_error_seconds_ago = Since(last_error_at_);
    return s;
  }

  std::string LastError() const {
    std::lock_guard lock(status_mu_);
    return status_.last_error;
  }

  FenceMaxima maxima;
  FenceKeyMaxima keys;

 private:
  struct Pending {
    uint64_t token = 0;
    std::string member;
    int64_t revision = 0;  // the pending key's mod revision
    bool operator==(const Pending&) const = default;
  };
  // A persist of ours under way for one target: raising it ourselves, or acknowledging
  // another member's raise.
  struct Op {
    enum class Kind { kRaise, kAck } kind = Kind::kRaise;
    uint64_t token = 0;
    Done done;
    uint64_t id = 0;  // answers for an op that has ended are dropped
    SteadyClock::time_point started = SteadyClock::now();
    SteadyClock::time_point deadline;
    std::unique_ptr<net::steady_timer> timer;
    int attempts = 0;
    // kRaise
    int64_t revision = 0;  // of our pending write, once written
    std::vector<std::string> awaiting;  // the other members registered at that revision
    std::map<std::string, bool> acked;
    std::map<std::string, std::string> early_acks;  // member -> revision, before ours was known
    bool committing = false;
    // kAck
    int64_t pending_revision = 0;
  };
  // A fence or key the store is busy with: another member's raise pending (its Fence pinned
  // here) or a persist of ours. Gone when neither.
  struct Target {
    std::optional<Pending> pending;
    FenceRef fence;
    std::unique_ptr<Op> op;
  };
  struct Member {
    bool alive = true;
    SteadyClock::time_point gone_at{};
    bool cleaning = false;  // its roster entry's delete is under way
  };

  // ------------------------------------------------------------------ errors and metrics
  void NoteError(const std::string& what) {
    bool changed;
    {
      std::lock_guard lock(status_mu_);
      changed = status_.last_error != what || Since(last_error_at_) > 10;
      status_.last_error = what;
      last_error_at_ = SteadyClock::now();
    }
    if (changed) LogWarn("fence store: etcd", {{"prefix", config_.prefix}, {"error", what}});
  }
  void Observe(std::string_view op, double seconds) {
    if (observer_) observer_->Observe(op, seconds);
  }
  void CountMembers() {
    int64_t alive = 0;
    for (const auto& [id, m] : members_) alive += m.alive;
    {
      std::lock_guard lock(status_mu_);
      status_.members = alive;
    }
    if (observer_) observer_->Members(alive);
  }

  std::string MemberKey() const { return members_prefix_ + member_id_; }

  // ----------------------------------------------------------------------- membership
  void Register() {
    const int64_t sent = MembershipGate::NowNanos();
    client_->LeaseGrant(config_.member_ttl.count(), [self = shared_from_this(), sent](EtcdResult r, int64_t id,
                                                                                        int64_t ttl) {
      net::post(self->io_, [self, r = std::move(r), id, ttl, sent] { self->OnGranted(r, id, ttl, sent); });
    });
  }

  void OnGranted(const EtcdResult& r, int64_t id, int64_t ttl, int64_t sent) {
    if (stopping_) return;
    if (!r.ok() || id == 0 || ttl <= 0) {
      NoteError("cannot grant the membership lease: " + (r.ok() ? std::string("no lease in the answer") : r.error));
      RetryLater([this] { Register(); });
      return;
    }
    lease_ = id;
    lease_ttl_ = ttl;
    member_id_ = shared_fence::MemberId(id);
    json::object info{{"host", HostName()}, {"pid", int64_t(getpid())}, {"started_unix", int64_t(time(nullptr))}};
    // The member key lives with the lease; the roster entry outlives it, until the others have
    // waited timeouts.request for the writes it may still have had in flight (CleanRoster).
    const std::string value = json::serialize(info);
    json::object txn = etcd::Txn({}, {etcd::PutOp(MemberKey(), value, id), etcd::PutOp(roster_prefix_ + member_id_, value)}, {});
    client_->Call("/v3/kv/txn", std::move(txn), [self = shared_from_this(), sent, id](EtcdResult r) {
      net::post(self->io_, [self, r = std::move(r), sent, id] {
        if (self->stopping_ || id != self->lease_) return;
        if (!r.ok()) {
          self->NoteError("cannot register this proxy's member key: " + r.error);
          self->lease_ = 0;
          self->RetryLater([self] { self->Register(); });
          return;
        }
        {
          std::lock_guard lock(self->status_mu_);
          self->status_.member_id = self->member_id_;
        }
        self->renewed_sent_ = sent;
        self->Load();
        self->ScheduleKeepAlive(self->KeepAlivePeriod());
      });
    });
  }

  std::chrono::milliseconds KeepAlivePeriod() const {
    return std::max(std::chrono::milliseconds(500), std::chrono::milliseconds(lease_ttl_ * 1000 / 3));
  }
  // The gate's margin: the lease ends at the earliest TTL after our keep-alive was sent; the gate
  // closes this much before.
  int64_t MarginNanos() const { return std::max<int64_t>(500000000, lease_ttl_ * 1000000000 / 5); }

  void OpenGate() {
    if (!view_current_ || lease_ == 0 || stopping_) return;
    const int64_t until = renewed_sent_ + lease_ttl_ * 1000000000 - MarginNanos();
    gate_.OpenUntil(until);
  }

  void ScheduleKeepAlive(std::chrono::milliseconds after) {
    keepalive_timer_.expires_after(after);
    keepalive_timer_.async_wait([self = shared_from_this()](const boost::system::error_code& ec) {
      if (!ec) self->KeepAlive();
    });
  }

  void KeepAlive() {
    if (stopping_ || lease_ == 0) return;
    const int64_t sent = MembershipGate::NowNanos();
    const auto started = SteadyClock::now();
    const int64_t lease = lease_;
    client_->LeaseKeepAlive(lease, [self = shared_from_this(), sent, started, lease](EtcdResult r, int64_t,
                                                                                       int64_t ttl) {
      net::post(self->io_, [self, r = std::move(r), sent, started, lease, ttl] {
        self->OnKeptAlive(r, sent, started, lease, ttl);
      });
    });
  }

  void OnKeptAlive(const EtcdResult& r, int64_t sent, SteadyClock::time_point started, int64_t lease, int64_t ttl) {
    if (stopping_ || lease != lease_) return;
    if (!r.ok()) {
      NoteError("cannot renew the membership lease: " + r.error);
      keepalive_failed_ = true;
      ScheduleKeepAlive(std::chrono::milliseconds(500));
      return;
    }
    Observe("keepalive", Since(started));
    if (ttl <= 0) {
      // The lease ran out (this proxy was cut off, or frozen, for longer than member_ttl): the
      // others no longer wait for it, so nothing may pass here until it is a member again and
      // has read what happened meanwhile.
      LogWarn("fence store: membership lease expired; registering again", {{"prefix", config_.prefix},
                                                                           {"member", member_id_}});
      LoseMembership();
      Register();
      return;
    }
    lease_ttl_ = ttl;
    renewed_sent_ = sent;
    OpenGate();
    CleanRoster();
    if (keepalive_failed_) {
      // etcd was unreachable: the watch may have missed events without noticing (a frozen
      // etcd ends no connection). Read again and watch anew.
      keepalive_failed_ = false;
      Resync();
    }
    ScheduleKeepAlive(KeepAlivePeriod());
  }

  // Takes off the roster the members gone for timeouts.request (their writes have ended), if
  // their member key is still gone: any member may do it, the compare makes it safe.
  void CleanRoster() {
    const auto now = SteadyClock::now();
    for (auto& [id, m] : members_) {
      if (m.alive || m.cleaning || now < m.gone_at + request_timeout_) continue;
      m.cleaning = true;
      json::object txn = etcd::Txn({etcd::CompareModRevision(members_prefix_ + id, 0)},
                                   {etcd::DeleteOp(roster_prefix_ + id)}, {});
      // (A copy: clang does not capture a structured binding.)
      Txn(std::move(txn), [this, member = id](const EtcdResult& r, const etcd::TxnResult&) {
        if (auto it = members_.find(member); it != members_.end() && !r.ok()) it->second.cleaning = false;
      });
    }
  }

  void LoseMembership() {
    gate_.Close();
    view_current_ = false;
    lease_ = 0;
    // Our pendings and acks went with the lease.
    for (auto it = targets_.begin(); it != targets_.end();) {
      if (it->second.op) Complete(it->second, PersistResult::kNotDurable);
      it = Prune(it);
    }
    if (watch_) {
      watch_->Cancel();
      watch_.reset();
    }
    ++watch_generation_;
  }

  template <typename F>
  void RetryLater(F f, std::chrono::milliseconds after = std::chrono::milliseconds(500)) {
    auto timer = std::make_shared<net::steady_timer>(io_, after);
    timer->async_wait([self = shared_from_this(), timer, f = std::move(f)](const boost::system::error_code& ec) {
      if (!ec && !self->stopping_) f();
    });
  }

  // ----------------------------------------------------------------------- the full read
  void Resync() {
    if (watch_) {
      watch_->Cancel();
      watch_.reset();
    }
    ++watch_generation_;
    Load();
  }

  struct LoadState {
    int64_t revision = 0;
    std::vector<etcd::KeyValue> kvs;
    SteadyClock::time_point started = SteadyClock::now();
  };

  void Load() {
    auto state = std::make_shared<LoadState>();
    LoadPage(state, prefix_, watch_generation_);
  }

  void LoadPage(std::shared_ptr<LoadState> state, std::string from, uint64_t generation) {
    client_->Call("/v3/kv/range", etcd::RangeRequest(from, etcd::PrefixRangeEnd(prefix_), state->revision, 1000),
                  [self = shared_from_this(), state, generation](EtcdResult r) {
                    net::post(self->io_, [self, state, generation, r = std::move(r)] {
                      self->OnPage(state, generation, r);
                    });
                  });
  }

  void OnPage(std::shared_ptr<LoadState> state, uint64_t generation, const EtcdResult& r) {
    if (stopping_ || generation != watch_generation_ || lease_ == 0) return;
    std::vector<etcd::KeyValue> kvs;
    bool more = false;
    std::string error;
    const bool read = r.ok() && etcd::ReadRange(r.response, &kvs, &more, &error);
    if (!read) {
      NoteError("cannot read prefix " + config_.prefix + ": " + (r.ok() ? error : r.error));
      RetryLater([self = shared_from_this(), generation] {
        if (generation == self->watch_generation_) self->Load();
      });
      return;
    }
    if (state->revision == 0) state->revision = etcd::HeaderRevision(r.response);
    for (auto& kv : kvs) state->kvs.push_back(std::move(kv));
    if (more && !state->kvs.empty()) {
      LoadPage(state, state->kvs.back().key + std::string(1, '\0'), generation);
      return;
    }
    Observe("load", Since(state->started));
    ApplyLoad(*state);
    if (registry_) {
      StartWatch(state->revision + 1);
    } else {
      // The first load: the watch starts at Attach, from this revision on, so that nothing it
      // brings lands in the maxima the registry is being made from.
      watch_from_ = state->revision + 1;
    }
  }

  void ApplyLoad(const LoadState& state) {
    std::map<std::string, Pending> pendings;
    std::map<std::string, bool> members;
    std::vector<std::string> roster;
    for (const etcd::KeyValue& kv : state.kvs) {
      std::string_view key(kv.key);
      if (key.starts_with(members_prefix_)) {
        members[std::string(key.substr(members_prefix_.size()))] = true;
      } else if (key.starts_with(roster_prefix_)) {
        roster.emplace_back(key.substr(roster_prefix_.size()));
      } else if (key.starts_with(max_prefix_)) {
        uint64_t token = 0;
        std::string fence, k;
        if (!shared_fence::ParseToken(kv.value, &token) ||
            !shared_fence::SplitTarget(key.substr(max_prefix_.size()), &fence, &k)) {
          NoteError("ignored a malformed key " + kv.key);
          continue;
        }
        OnMaxPut(std::string(key.substr(max_prefix_.size())), fence, k, token);
      } else if (key.starts_with(pending_prefix_)) {
        Pending p;
        if (!shared_fence::ParseTokenAnd(kv.value, &p.token, &p.member)) continue;
        p.revision = kv.mod_revision;
        pendings[std::string(key.substr(pending_prefix_.size()))] = p;
      } else if (key.starts_with(ack_prefix_)) {
        OnAckPut(key.substr(ack_prefix_.size()), kv.value);
      }
    }
    // Members: those that left while we did not watch are gone from now on.
    const auto now = SteadyClock::now();
    for (auto& [id, m] : members_) {
      if (!members.contains(id) && m.alive) {
        m.alive = false;
        m.gone_at = now;
      }
    }
    for (const auto& [id, alive] : members) members_[id] = Member{};
    // On the roster without a member key: gone, when exactly we cannot know, so from now (its
    // admitted writes may run timeouts.request past its lease).
    for (const std::string& id : roster) {
      if (members.contains(id)) continue;
      if (auto [it, added] = members_.try_emplace(id); added || it->second.alive) {
        it->second.alive = false;
        it->second.gone_at = now;
      }
    }
    CountMembers();
    if (!registry_) {
      start_pendings_ = std::move(pendings);
    } else {
      for (auto it = targets_.begin(); it != targets_.end(); ++it) {
        if (it->second.pending && !pendings.contains(it->first)) OnPendingDeleted(it->first);
      }
      for (auto& [name, p] : pendings) OnPendingPut(name, p);
      PruneAll();
      for (auto& [name, target] : targets_) CheckRaise(name, target);
      view_current_ = true;
      OpenGate();
    }
    if (on_started_) {
      auto started = std::move(on_started_);
      on_started_ = nullptr;
      started(std::string());
    }
  }

  // ----------------------------------------------------------------------- the watch
  void StartWatch(int64_t from) {
    const uint64_t generation = watch_generation_;
    EtcdClient::WatchOptions options;
    options.key = prefix_;
    options.range_end = etcd::PrefixRangeEnd(prefix_);
    options.start_revision = from;
    watch_ = client_->Watch(
        options,
        [self = shared_from_this(), generation](int64_t, std::vector<etcd::WatchEvent> events) {
          net::post(self->io_, [self, generation, events = std::move(events)] {
            if (generation == self->watch_generation_ && !self->stopping_) self->OnEvents(events);
          });
        },
        [self = shared_from_this(), generation](EtcdClient::WatchEnd end) {
          net::post(self->io_, [self, generation, end = std::move(end)] {
            if (generation != self->watch_generation_ || self->stopping_) return;
            if (end.reason == EtcdClient::WatchEnd::Reason::kCompacted) {
              LogInfo("fence store: watch compacted; reading the prefix again",
                      {{"prefix", self->config_.prefix}, {"compact_revision", end.compact_revision}});
            } else {
              self->NoteError("watch ended: " + end.error);
            }
            self->watch_.reset();
            ++self->watch_generation_;
            const uint64_t next = self->watch_generation_;
            self->RetryLater([self, next] {
              if (next == self->watch_generation_ && self->lease_ != 0) self->Load();
            }, std::chrono::milliseconds(200));
          });
        });
  }

  void OnEvents(const std::vector<etcd::WatchEvent>& events) {
    for (const etcd::WatchEvent& e : events) {
      std::string_view key(e.kv.key);
      const bool put = e.type == etcd::WatchEvent::Type::kPut;
      if (key.starts_with(members_prefix_)) {
        std::string id(key.substr(members_prefix_.size()));
        if (put) {
          members_[id] = Member{};
        } else if (auto it = members_.find(id); it != members_.end() && it->second.alive) {
          it->second.alive = false;
          it->second.gone_at = SteadyClock::now();
        }
        CountMembers();
        if (!put) {
          // A raise waiting for it can go once timeouts.request has passed.
          for (auto& [name, target] : targets_) CheckRaise(name, target);
        }
      } else if (key.starts_with(roster_prefix_)) {
        // Off the roster: nobody waits for it any more.
        if (auto it = members_.find(std::string(key.substr(roster_prefix_.size()))); !put && it != members_.end() &&
                                                                                   !it->second.alive) {
          members_.erase(it);
        }
      } else if (key.starts_with(max_prefix_)) {
        uint64_t token = 0;
        std::string fence, k;
        if (!put || !shared_fence::ParseToken(e.kv.value, &token) ||
            !shared_fence::SplitTarget(key.substr(max_prefix_.size()), &fence, &k)) {
          continue;
        }
        OnMaxPut(std::string(key.substr(max_prefix_.size())), fence, k, token);
      } else if (key.starts_with(pending_prefix_)) {
        std::string name(key.substr(pending_prefix_.size()));
        if (!put) {
          OnPendingDeleted(name);
          continue;
        }
        Pending p;
        if (!shared_fence::ParseTokenAnd(e.kv.value, &p.token, &p.member)) continue;
        p.revision = e.kv.mod_revision;
        OnPendingPut(name, p);
      } else if (key.starts_with(ack_prefix_) && put) {
        OnAckPut(key.substr(ack_prefix_.size()), e.kv.value);
      }
    }
    PruneAll();
  }

  // ------------------------------------------------------------------ what others do
  void OnMaxPut(const std::string& name, const std::string& fence, const std::string& key, uint64_t token) {
    auto it = targets_.find(name);
    if (it != targets_.end() && it->second.op && token >= it->second.op->token) {
      Target& target = it->second;
      if (target.op->kind == Op::Kind::kAck) {
        Observe("ack", Since(target.op->started));
      } else if (token == target.op->token && target.op->committing) {
        CountRaise(*target.op);  // our commit, seen on the watch before its txn's answer
      }
      // Ours (its commit's answer may come later) or a higher one committed elsewhere.
      if (token > target.op->token && registry_) registry_->SharedCommitted(fence, key, token);
      Complete(target, token == target.op->token ? PersistResult::kDurable : PersistResult::kNotDurable);
      return;
    }
    if (registry_) {
      registry_->SharedCommitted(fence, key, token);
    } else if (key.empty()) {
      maxima[fence] = std::max(maxima[fence], token);
    } else {
      uint64_t& max = keys[fence][key];
      max = std::max(max, token);
    }
  }

  void OnPendingPut(const std::string& name, const Pending& p) {
    if (!registry_) {
      start_pendings_[name] = p;
      return;
    }
    Target& target = targets_[name];
    if (target.pending == p) return;
    target.pending = p;
    if (p.member == member_id_) {
      // Ours: the raise under way (its answer may come after the watch shows it), or one left
      // from an answer that never came, which is withdrawn.
      const bool under_way = target.op && target.op->kind == Op::Kind::kRaise &&
                             (target.op->revision == p.revision || target.op->revision == 0);
      // (A raise of ours that has ended already: the watch shows its pending late.)
      if (!under_way && !recent_own_.contains(p.revision)) Withdraw(name, p.revision);
      return;
    }
    if (target.op) {
      Op& op = *target.op;
      const bool superseded = op.kind == Op::Kind::kRaise ? op.revision != 0 || p.token > op.token
                                                          : p.revision != op.pending_revision;
      if (!superseded) return;
      // Ours lost to a higher raise, or what we acknowledged is gone: give it up (the fence
      // keeps a higher pending raise and asks for it next).
      const bool higher = p.token > op.token;
      if (higher) ApplyPending(name, target);
      Complete(target, PersistResult::kNotDurable);
      if (!higher) ApplyPending(name, target);
      return;
    }
    ApplyPending(name, target);
  }

  // Blocks tokens below the pending one here: the fence drains and then asks for it (Persist,
  // which acknowledges). With no Fence here for it, nothing can be admitted under it: at once.
  void ApplyPending(const std::string& name, Target& target) {
    std::string fence, key;
    if (!shared_fence::SplitTarget(name, &fence, &key)) return;
    const Pending p = *target.pending;
    if (!target.fence) target.fence = registry_->ForShared(fence, key, p.token);
    if (target.fence) {
      target.fence->RemotePending(p.token);
    } else {
      PutAck(name, p, 0);
    }
  }

  void OnPendingDeleted(const std::string& name) {
    auto it = targets_.find(name);
    if (it == targets_.end() || !it->second.pending) return;
    Target& target = it->second;
    const Pending p = *target.pending;
    target.pending.reset();
    if (target.op) {
      Op& op = *target.op;
      if (op.kind == Op::Kind::kAck && op.pending_revision == p.revision) {
        // Deleted without a commit first (a commit puts the max before it deletes): withdrawn.
        Observe("ack", Since(op.started));
        Complete(target, PersistResult::kNotDurable);
      } else if (op.kind == Op::Kind::kRaise && op.revision == p.revision && !op.committing) {
        Complete(target, PersistResult::kNotDurable);
      }
    } else if (target.fence && p.member != member_id_) {
      target.fence->RemoteWithdrawn(p.token);
    }
    if (!target.op) target.fence.reset();
  }

  void OnAckPut(std::string_view rest, std::string_view value) {
    size_t slash = rest.find('/');
    if (slash == std::string_view::npos) return;
    std::string member(rest.substr(0, slash));
    auto it = targets_.find(std::string(rest.substr(slash + 1)));
    if (it == targets_.end() || !it->second.op || it->second.op->kind != Op::Kind::kRaise) return;
    Op& op = *it->second.op;
    uint64_t token = 0;
    std::string revision;
    if (!shared_fence::ParseTokenAnd(value, &token, &revision)) return;
    if (token != op.token) return;
    if (op.revision == 0) {
      op.early_acks[member] = revision;  // the watch can be ahead of our txn's answer
      return;
    }
    if (revision == std::to_string(op.revision)) {
      op.acked[member] = true;
      CheckRaise(it->first, it->second);
    }
  }

  // ------------------------------------------------------------------ our persists
  void StartPersist(std::string name, uint64_t token, Done done) {
    if (stopping_ || !registry_ || lease_ == 0 || !gate_.Open()) {
      done(PersistResult::kNotDurable);
      return;
    }
    Target& target = targets_[name];
    if (target.op) {  // one persist per Fence at a time: never
      done(PersistResult::kNotDurable);
      return;
    }
    target.op = std::make_unique<Op>();
    Op& op = *target.op;
    op.token = token;
    op.done = std::move(done);
    op.id = ++next_op_id_;
    if (target.pending && target.pending->member != member_id_) {
      if (target.pending->token == token) {
        StartAck(name, target);
        return;
      }
      if (target.pending->token > token) {
        ApplyPending(name, target);
        Complete(target, PersistResult::kNotDurable);
        PruneOne(name);
        return;
      }
    }
    op.kind = Op::Kind::kRaise;
    if (keepalive_failed_) {
      // etcd did not answer the last renewal: a raise now would only wait for its timeout.
      Complete(target, PersistResult::kNotDurable);
      PruneOne(name);
      return;
    }
    // Only a raise has a bound. An acknowledgement, once written, is never given up while its
    // pending raise stands: the raiser may commit on it, so the fence must stay blocked.
    op.deadline = SteadyClock::now() + std::chrono::seconds(config_.member_ttl) + request_timeout_ +
                  std::chrono::seconds(1);
    op.timer = std::make_unique<net::steady_timer>(io_);
    op.timer->expires_at(op.deadline);
    op.timer->async_wait([self = shared_from_this(), name, id = op.id](const boost::system::error_code& ec) {
      if (!ec) self->OnDeadline(name, id);
    });
    // The max key's revision is not kept per key (a million keys): the first try assumes there
    // is none, and a failed compare answers with the real one.
    const int64_t pending_revision = target.pending ? target.pending->revision : 0;
    PendingTxn(name, op.id, 0, pending_revision);
  }

  void StartAck(const std::string& name, Target& target) {
    Op& op = *target.op;
    op.kind = Op::Kind::kAck;
    op.pending_revision = target.pending->revision;
    PutAck(name, *target.pending, op.id);
  }

  // Our acknowledgement of p; retried while it still matters (op_id 0: with no Fence here).
  void PutAck(const std::string& name, const Pending& p, uint64_t op_id) {
    json::object put{{"key", etcd::Base64Encode(ack_prefix_ + member_id_ + "/" + name)},
                     {"value", etcd::Base64Encode(TokenText(p.token) + " " + std::to_string(p.revision))},
                     {"lease", std::to_string(lease_)}};
    client_->Call("/v3/kv/put", std::move(put), [self = shared_from_this(), name, p, op_id](EtcdResult r) {
      net::post(self->io_, [self, name, p, op_id, r = std::move(r)] {
        if (self->stopping_ || r.ok()) {
          if (r.ok()) {
            std::lock_guard lock(self->status_mu_);
            ++self->status_.acks;
          }
          return;
        }
        self->NoteError("cannot acknowledge a raise of " + name + ": " + r.error);
        self->RetryLater([self, name, p, op_id] {
          auto it = self->targets_.find(name);
          if (it == self->targets_.end() || it->second.pending != p || self->lease_ == 0) return;
          if (op_id != 0 && (!it->second.op || it->second.op->id != op_id)) return;
          self->PutAck(name, p, op_id);
        }, std::chrono::milliseconds(200));
      });
    });
  }

  std::string MaxKey(const std::string& name) const { return max_prefix_ + name; }
  std::string PendingKey(const std::string& name) const { return pending_prefix_ + name; }

  void Txn(json::object request, std::function<void(const EtcdResult&, const etcd::TxnResult&)> done) {
    const auto started = SteadyClock::now();
    client_->Call("/v3/kv/txn", std::move(request),
                  [self = shared_from_this(), started, done = std::move(done)](EtcdResult r) {
                    net::post(self->io_, [self, started, done, r = std::move(r)]() mutable {
                      etcd::TxnResult txn;
                      std::string error;
                      if (r.ok() && !etcd::ReadTxn(r.response, &txn, &error)) {
                        r.error = "unreadable txn answer: " + error;
                      }
                      if (r.ok()) self->Observe("txn", Since(started));
                      if (!self->stopping_) done(r, txn);
                    });
                  });
  }

  Op* FindOp(const std::string& name, uint64_t id) {
    auto it = targets_.find(name);
    if (it == targets_.end() || !it->second.op || it->second.op->id != id) return nullptr;
    return it->second.op.get();
  }

  // pending := T, if max and pending are as we believe; members read in the same revision.
  void PendingTxn(const std::string& name, uint64_t id, int64_t max_revision, int64_t pending_revision) {
    Op* op = FindOp(name, id);
    // The roster, not only the members: one whose lease ended a moment ago may still have writes
    // in flight, and is waited for like any member whose key is gone.
    const std::string roster_end = etcd::PrefixRangeEnd(roster_prefix_);
    json::object request = etcd::Txn(
        {etcd::CompareModRevision(MaxKey(name), max_revision), etcd::CompareModRevision(PendingKey(name), pending_revision)},
        {etcd::PutOp(PendingKey(name), TokenText(op->token) + " " + member_id_, lease_),
         etcd::RangeOp(roster_prefix_, roster_end)},
        {etcd::RangeOp(MaxKey(name)), etcd::RangeOp(PendingKey(name))});
    Txn(std::move(request), [this, name, id](const EtcdResult& r, const etcd::TxnResult& txn) {
      OnPendingTxn(name, id, r, txn);
    });
  }

  // The max and pending of a failed compare's answer.
  bool ReadCurrent(const etcd::TxnResult& txn, uint64_t* max, int64_t* max_revision, std::optional<Pending>* pending) {
    if (txn.responses.size() != 2) return false;
    std::vector<etcd::KeyValue> kvs;
    bool more = false;
    std::string error;
    *max = 0;
    *max_revision = 0;
    pending->reset();
    if (!etcd::ReadRange(txn.responses[0], &kvs, &more, &error)) return false;
    if (!kvs.empty()) {
      if (!shared_fence::ParseToken(kvs[0].value, max)) return false;
      *max_revision = kvs[0].mod_revision;
    }
    kvs.clear();
    if (!etcd::ReadRange(txn.responses[1], &kvs, &more, &error)) return false;
    if (!kvs.empty()) {
      Pending p;
      if (!shared_fence::ParseTokenAnd(kvs[0].value, &p.token, &p.member)) return false;
      p.revision = kvs[0].mod_revision;
      *pending = p;
    }
    return true;
  }

  void OnPendingTxn(const std::string& name, uint64_t id, const EtcdResult& r, const etcd::TxnResult& txn) {
    Op* op = FindOp(name, id);
    if (!op) return;
    Target& target = targets_[name];
    if (!r.ok()) {
      // It may have been written all the same: a pending of ours that no raise owns is withdrawn
      // when the watch shows it.
      NoteError("cannot write the pending raise of " + name + ": " + r.error);
      Complete(target, PersistResult::kNotDurable);
      PruneOne(name);
      return;
    }
    if (!txn.succeeded) {
      uint64_t max = 0;
      int64_t max_revision = 0;
      std::optional<Pending> pending;
      if (!ReadCurrent(txn, &max, &max_revision, &pending) || ++op->attempts > 5) {
        NoteError("cannot write the pending raise of " + name + ": the keys kept changing or were unreadable");
        Complete(target, PersistResult::kNotDurable);
        PruneOne(name);
        return;
      }
      if (max >= op->token) {
        std::string fence, key;
        shared_fence::SplitTarget(name, &fence, &key);
        if (max > op->token) registry_->SharedCommitted(fence, key, max);
        Complete(target, max == op->token ? PersistResult::kDurable : PersistResult::kNotDurable);
        PruneOne(name);
        return;
      }
      if (pending && pending->member != member_id_ && pending->token >= op->token) {
        target.pending = pending;
        if (pending->token == op->token) {
          StartAck(name, target);
        } else {
          ApplyPending(name, target);
          Complete(target, PersistResult::kNotDurable);
          PruneOne(name);
        }
        return;
      }
      PendingTxn(name, id, max_revision, pending ? pending->revision : 0);
      return;
    }
    std::vector<etcd::KeyValue> members;
    bool more = false;
    std::string error;
    if (txn.responses.size() != 2 || !etcd::ReadRange(txn.responses[1], &members, &more, &error)) {
      NoteError("unreadable member list in the pending raise's answer: " + error);
      Withdraw(name, txn.revision);
      Complete(target, PersistResult::kNotDurable);
      PruneOne(name);
      return;
    }
    op->revision = txn.revision;
    target.pending = Pending{op->token, member_id_, txn.revision};
    recent_own_.insert(txn.revision);
    if (recent_own_.size() > 4096) recent_own_.erase(recent_own_.begin());
    for (const auto& [member, revision] : op->early_acks) {
      if (revision == std::to_string(op->revision)) op->acked[member] = true;
    }
    op->early_acks.clear();
    for (const etcd::KeyValue& kv : members) {
      std::string member = kv.key.substr(roster_prefix_.size());
      if (member != member_id_) op->awaiting.push_back(member);
    }
    CheckRaise(name, target);
  }

  void CheckRaise(const std::string& name, Target& target) {
    if (!target.op || target.op->kind != Op::Kind::kRaise || target.op->revision == 0 || target.op->committing) return;
    Op& op = *target.op;
    const auto now = SteadyClock::now();
    std::optional<SteadyClock::time_point> recheck;
    bool ready = true;
    for (const std::string& m : op.awaiting) {
      if (op.acked[m]) continue;
      auto it = members_.find(m);
      if (it != members_.end() && !it->second.alive) {
        const auto free_at = it->second.gone_at + request_timeout_;
        if (now >= free_at) continue;
        recheck = recheck ? std::min(*recheck, free_at) : free_at;
      }
      ready = false;
    }
    if (ready) {
      Commit(name, op.id);
      return;
    }
    if (recheck) {
      RetryAt(*recheck, [self = shared_from_this(), name, id = op.id] {
        if (self->FindOp(name, id)) self->CheckRaise(name, self->targets_[name]);
      });
    }
  }

  template <typename F>
  void RetryAt(SteadyClock::time_point at, F f) {
    auto timer = std::make_shared<net::steady_timer>(io_, at);
    timer->async_wait([self = shared_from_this(), timer, f = std::move(f)](const boost::system::error_code& ec) {
      if (!ec && !self->stopping_) f();
    });
  }

  // max := T and the pending deleted, if the pending is still ours.
  void Commit(const std::string& name, uint64_t id) {
    Op* op = FindOp(name, id);
    if (!op) return;
    op->committing = true;
    json::object request = etcd::Txn({etcd::CompareModRevision(PendingKey(name), op->revision)},
                                     {etcd::PutOp(MaxKey(name), TokenText(op->token)), etcd::DeleteOp(PendingKey(name))},
                                     {etcd::RangeOp(MaxKey(name)), etcd::RangeOp(PendingKey(name))});
    Txn(std::move(request), [this, name, id](const EtcdResult& r, const etcd::TxnResult& txn) {
      Op* op = FindOp(name, id);
      if (!op) return;
      Target& target = targets_[name];
      if (!r.ok()) {
        // Perhaps committed: the compare makes a second try safe, and its answer says. Never
        // given up: the others may already admit T, so the fence stays blocked until it knows.
        NoteError("cannot commit the raise of " + name + ": " + r.error);
        RetryLater([this, name, id] {
          if (FindOp(name, id)) Commit(name, id);
        }, std::chrono::milliseconds(100));
        return;
      }
      uint64_t max = op->token;
      if (!txn.succeeded) {
        int64_t max_revision = 0;
        std::optional<Pending> pending;
        if (!ReadCurrent(txn, &max, &max_revision, &pending)) max = 0;
        if (pending && pending->member != member_id_ && pending->token > op->token) {
          target.pending = pending;
          ApplyPending(name, target);
        }
      }
      if (max == op->token) {
        CountRaise(*op);
        target.pending.reset();
        Complete(target, PersistResult::kDurable);
      } else {
        Complete(target, PersistResult::kNotDurable);
      }
      PruneOne(name);
    });
  }

  void CountRaise(const Op& op) {
    Observe("raise", Since(op.started));
    std::lock_guard lock(status_mu_);
    ++status_.raises;
  }

  void OnDeadline(const std::string& name, uint64_t id) {
    Op* op = FindOp(name, id);
    if (!op || op->committing) return;  // a commit is never given up (above)
    Target& target = targets_[name];
    if (op->kind == Op::Kind::kRaise) {
      NoteError("a raise of " + name + " was given up: not every member acknowledged it within member_ttl + "
                "timeouts.request");
      if (op->revision != 0) Withdraw(name, op->revision);
    }
    Complete(target, PersistResult::kNotDurable);
    PruneOne(name);
  }

  void Withdraw(const std::string& name, int64_t revision) {
    json::object request =
        etcd::Txn({etcd::CompareModRevision(PendingKey(name), revision)}, {etcd::DeleteOp(PendingKey(name))}, {});
    Txn(std::move(request), [this, name](const EtcdResult& r, const etcd::TxnResult&) {
      if (!r.ok()) NoteError("cannot withdraw the pending raise of " + name + ": " + r.error);
    });
  }

  // Ends our persist: the fence hears the result (and may ask for the next raise at once).
  void Complete(Target& target, PersistResult result) {
    if (!target.op) return;
    std::unique_ptr<Op> op = std::move(target.op);
    if (op->timer) op->timer->cancel();
    if (result != PersistResult::kDurable) {
      std::lock_guard lock(status_mu_);
      ++status_.raises_refused;
    }
    op->done(result);
  }

  std::map<std::string, Target>::iterator Prune(std::map<std::string, Target>::iterator it) {
    if (!it->second.op && !it->second.pending) return targets_.erase(it);
    return std::next(it);
  }
  void PruneOne(const std::string& name) {
    if (auto it = targets_.find(name); it != targets_.end()) Prune(it);
  }
  void PruneAll() {
    for (auto it = targets_.begin(); it != targets_.end();) it = Prune(it);
  }

  const FenceStoreConfig config_;
  const std::chrono::milliseconds request_timeout_;
  const FenceStoreObserver* observer_;
  const std::string prefix_, members_prefix_, roster_prefix_, max_prefix_, pending_prefix_, ack_prefix_;
  std::string endpoints_;

  net::io_context io_;
  net::executor_work_guard<net::io_context::executor_type> work_;
  net::steady_timer keepalive_timer_{io_};
  std::unique_ptr<EtcdClient> client_;
  std::thread thread_;
  MembershipGate gate_;

  // The store's thread only.
  FenceRegistry* registry_ = nullptr;
  std::function<void(std::string)> on_started_;
  std::map<std::string, Pending> start_pendings_;
  int64_t watch_from_ = 0;  // the first load's revision + 1, until Attach starts the watch
  int64_t lease_ = 0;
  int64_t lease_ttl_ = 0;
  int64_t renewed_sent_ = 0;  // CLOCK_BOOTTIME ns when the last successful renewal was sent
  std::string member_id_;
  bool keepalive_failed_ = false;
  bool view_current_ = false;
  bool stopping_ = false;
  std::shared_ptr<EtcdClient::WatchHandle> watch_;
  uint64_t watch_generation_ = 0;
  uint64_t next_op_id_ = 0;
  std::map<std::string, Target> targets_;
  std::map<std::string, Member> members_;
  std::set<int64_t> recent_own_;  // revisions of our latest pending writes

  mutable std::mutex status_mu_;
  EtcdFenceStore::Status status_;
  SteadyClock::time_point last_error_at_{};

  std::mutex stop_mu_;
  bool stopped_ = false;
};

// ================================================================================= facade
std::unique_ptr<EtcdFenceStore> EtcdFenceStore::Open(const FenceStoreConfig& config,
                                                     std::chrono::milliseconds request_timeout,
                                                     std::chrono::milliseconds wait, const FenceStoreObserver* observer,
                                                     std::string* error) {
  auto impl = std::make_shared<Impl>(config, request_timeout, observer);
  if (!impl->Start(wait, error)) return nullptr;
  std::unique_ptr<EtcdFenceStore> store(new EtcdFenceStore(std::move(impl)));
  return store;
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
