// FakeEtcdClient: one member's side of the model. Calls in flight and their deadline, watches
// and their delivery, and the member's link faults. The state they act on is FakeEtcd's
// (fake_etcd.cpp).

#include "fake_etcd.h"

#include <algorithm>
#include <deque>
#include <utility>

namespace fencing::sim {
namespace {

using etcd::Status;
using etcd::WatchEnd;

Status Stopped() { return Status{"etcd client stopped", -1}; }
WatchEnd WatchError(std::string text) { return WatchEnd{WatchEnd::Reason::kError, 0, std::move(text)}; }
std::string Millis(int64_t ns) { return std::to_string(ns / 1'000'000) + " ms"; }

struct Nothing {};

}  // namespace

struct FakeEtcdClient::WatchState {
  struct Message {
    int64_t due_ns = 0;
    int64_t revision = 0;
    std::vector<etcd::WatchEvent> events;
    std::optional<WatchEnd> end;  // the last message: how etcd ended the watch
  };
  uint64_t id = 0;
  etcd::WatchOptions options;
  etcd::WatchEvents on_events;
  etcd::WatchEnded on_end;
  bool registered = false;  // reached etcd: it gets the events from here on
  bool created = false;     // the "created" message was delivered
  bool closing = false;     // etcd ended it: nothing more is queued
  bool ended = false;       // on_end is on its way; nothing is delivered any more
  std::deque<Message> queue;
  int64_t last_due_ns = 0;  // messages come in order
  std::unique_ptr<store::Scheduler::Timer> pump, deadline, broken, progress;
};

class FakeEtcdClient::Handle final : public etcd::WatchHandle {
 public:
  Handle(FakeEtcdClient* client, std::weak_ptr<WatchState> watch) : client_(client), watch_(std::move(watch)) {}
  // The watch lives only as long as its client (the client's map is its one owner).
  void Cancel() override {
    if (auto w = watch_.lock(); w && !w->ended) client_->End(*w, WatchEnd{WatchEnd::Reason::kCancelled, 0, ""});
  }

 private:
  FakeEtcdClient* client_;
  std::weak_ptr<WatchState> watch_;
};

FakeEtcdClient::FakeEtcdClient(FakeEtcd& etcd, uint64_t id, std::string name, int64_t call_timeout_ns)
    : etcd_(etcd), id_(id), name_(std::move(name)), call_timeout_ns_(call_timeout_ns), timers_(etcd.scheduler_) {}

FakeEtcdClient::~FakeEtcdClient() { etcd_.clients_.erase(id_); }

// ------------------------------------------------------------------------------ unary calls

template <typename R>
void FakeEtcdClient::Unary(const char* what, std::function<Status(FakeEtcd&, R*)> apply,
                           std::function<void(Status, R)> done) {
  FakeEtcd& e = etcd_;
  const int64_t now = e.Now();
  auto callback = std::make_shared<std::function<void(Status, R)>>(std::move(done));
  const uint64_t call = next_call_++;
  const std::string label = name_ + " " + what + "#" + std::to_string(call);
  if (stopped_) {
    timers_.At(now, [callback] { (*callback)(Stopped(), R{}); });
    return;
  }
  PendingCall& pending = pending_[call];
  pending.fail = [callback](Status s) { (*callback)(std::move(s), R{}); };
  pending.timeout = e.scheduler_.At(now + call_timeout_ns_, [this, call, what] {
    Fail(call, Status{std::string("etcd ") + what + " timed out after " + Millis(call_timeout_ns_), -1});
  });
  bool answer_lost = false;
  if (partitioned_) {
    if (!e.Chance(e.options_.partition_applied_percent)) {
      e.Trace(label + " lost in the partition");
      return;
    }
    answer_lost = true;
  }
  e.Trace(label + " sent");
  std::weak_ptr<std::function<void(Status, R)>> weak = callback;
  const uint64_t client = id_;
  e.network_.At(now + e.Latency(), [&e, client, call, label, answer_lost, apply = std::move(apply), weak] {
    if (e.unavailable_) {  // nothing applied
      e.Trace(label + " refused: no leader");
      e.network_.At(e.Now() + e.Latency(), [&e, client, call] {
        if (FakeEtcdClient* c = e.Client(client)) c->Complete(call, {}, Status{"etcdserver: no leader", 14});
      });
      return;
    }
    R result{};
    Status status = apply(e, &result);
    e.Trace(label + (status.ok() ? " applied" : " failed: " + status.error) + (answer_lost ? ", answer lost" : ""));
    if (answer_lost) return;
    std::function<void()> answer = [weak, status, result] {
      if (auto cb = weak.lock()) (*cb)(status, result);
    };
    e.network_.At(e.Now() + e.Latency(), [&e, client, call, answer = std::move(answer)] {
      if (FakeEtcdClient* c = e.Client(client)) c->Complete(call, answer, {});
    });
  });
}

void FakeEtcdClient::Complete(uint64_t call, std::function<void()> answer, Status error) {
  const std::string label = name_ + " #" + std::to_string(call);
  if (partitioned_) {
    etcd_.Trace(label + " answer lost in the partition");
    return;
  }
  auto it = pending_.find(call);
  if (it == pending_.end()) {
    etcd_.Trace(label + " answer came too late");
    return;
  }
  PendingCall pending = std::move(it->second);  // keeps the callback alive for answer
  pending_.erase(it);
  pending.timeout.reset();
  etcd_.Trace(label + " answered" + (answer ? "" : ": " + error.error));
  if (answer) {
    answer();
  } else {
    pending.fail(std::move(error));
  }
}

void FakeEtcdClient::Fail(uint64_t call, Status error) {
  auto it = pending_.find(call);
  if (it == pending_.end()) return;
  PendingCall pending = std::move(it->second);
  pending_.erase(it);
  etcd_.Trace(name_ + " #" + std::to_string(call) + " failed: " + error.error);
  pending.fail(std::move(error));
}

void FakeEtcdClient::Range(etcd::RangeRequest request, std::function<void(Status, etcd::RangeResponse)> done) {
  Unary<etcd::RangeResponse>(
      "range", [request = std::move(request)](FakeEtcd& e, etcd::RangeResponse* r) { return e.ApplyRange(request, r); },
      std::move(done));
}

void FakeEtcdClient::Txn(etcd::TxnRequest request, std::function<void(Status, etcd::TxnResponse)> done) {
  Unary<etcd::TxnResponse>(
      "txn", [request = std::move(request)](FakeEtcd& e, etcd::TxnResponse* r) { return e.ApplyTxn(request, r); },
      std::move(done));
}

void FakeEtcdClient::Put(std::string key, std::string value, int64_t lease,
                         std::function<void(Status, int64_t revision)> done) {
  Unary<int64_t>(
      "put",
      [key = std::move(key), value = std::move(value), lease](FakeEtcd& e, int64_t* revision) {
        return e.ApplyPut(key, value, lease, revision);
      },
      std::move(done));
}

void FakeEtcdClient::Grant(int64_t ttl_seconds, std::function<void(Status, int64_t id, int64_t ttl_seconds)> done) {
  using Granted = std::pair<int64_t, int64_t>;
  Unary<Granted>(
      "grant", [ttl_seconds](FakeEtcd& e, Granted* r) { return e.ApplyGrant(ttl_seconds, &r->first, &r->second); },
      [done = std::move(done)](Status s, Granted r) { done(std::move(s), r.first, r.second); });
}

void FakeEtcdClient::KeepAliveOnce(int64_t id,
                                   std::function<void(Status, int64_t ttl_seconds, int64_t revision)> done) {
  using Kept = std::pair<int64_t, int64_t>;
  Unary<Kept>(
      "keepalive", [id](FakeEtcd& e, Kept* r) { return e.ApplyKeepAlive(id, &r->first, &r->second); },
      [done = std::move(done)](Status s, Kept r) { done(std::move(s), r.first, r.second); });
}

void FakeEtcdClient::Revoke(int64_t id, std::function<void(Status)> done) {
  Unary<Nothing>(
      "revoke", [id](FakeEtcd& e, Nothing*) { return e.ApplyRevoke(id); },
      [done = std::move(done)](Status s, Nothing) { done(std::move(s)); });
}

// ------------------------------------------------------------------------------ watches

std::shared_ptr<etcd::WatchHandle> FakeEtcdClient::Watch(etcd::WatchOptions options, etcd::WatchEvents on_events,
                                                         etcd::WatchEnded on_end) {
  FakeEtcd& e = etcd_;
  auto w = std::make_shared<WatchState>();
  w->id = next_watch_++;
  w->options = std::move(options);
  w->on_events = std::move(on_events);
  w->on_end = std::move(on_end);
  watches_[w->id] = w;
  auto handle = std::make_shared<Handle>(this, w);
  const std::string label = name_ + " watch#" + std::to_string(w->id);
  if (stopped_) {
    End(*w, WatchError(Stopped().error));
    return handle;
  }
  // The real client's one deadline on a watch: connect and the "created" message.
  w->deadline = e.scheduler_.At(e.Now() + call_timeout_ns_, [this, raw = w.get()] {
    if (!raw->created) End(*raw, WatchError("etcd watch: not created within " + Millis(call_timeout_ns_)));
  });
  if (partitioned_) {
    e.Trace(label + " lost in the partition");
    return handle;
  }
  e.Trace(label + " sent from " + std::to_string(w->options.start_revision));
  e.network_.At(e.Now() + e.Latency(), [&e, client = id_, watch = w->id] {
    FakeEtcdClient* c = e.Client(client);
    std::shared_ptr<WatchState> w = c != nullptr ? c->Find(watch) : nullptr;
    if (w == nullptr || w->closing) return;
    if (e.unavailable_) {
      c->Enqueue(*w, e.revision_, {}, WatchError("etcdserver: no leader (gRPC code 14)"));
    } else {
      c->Register(w);
    }
  });
  return handle;
}

std::shared_ptr<FakeEtcdClient::WatchState> FakeEtcdClient::Find(uint64_t watch_id) const {
  auto it = watches_.find(watch_id);
  return it == watches_.end() ? nullptr : it->second;
}

void FakeEtcdClient::Register(const std::shared_ptr<WatchState>& w) {
  FakeEtcd& e = etcd_;
  const etcd::WatchOptions& o = w->options;
  w->registered = true;
  Enqueue(*w, e.revision_, {});  // "created"
  if (o.start_revision != 0 && o.start_revision < e.compact_revision_) {
    Enqueue(*w, e.revision_, {}, WatchEnd{WatchEnd::Reason::kCompacted, e.compact_revision_, ""});
    return;
  }
  if (o.start_revision != 0) {  // the history first, one message per revision
    auto it = std::lower_bound(e.log_.begin(), e.log_.end(), o.start_revision,
                               [](const EtcdWrite& write, int64_t rev) { return write.event.kv.mod_revision < rev; });
    std::vector<etcd::WatchEvent> events;
    for (; it != e.log_.end(); ++it) {
      const int64_t rev = it->event.kv.mod_revision;
      if (FakeEtcd::InRange(it->event.kv.key, o.key, o.range_end)) events.push_back(it->event);
      if (!events.empty() && (std::next(it) == e.log_.end() || std::next(it)->event.kv.mod_revision != rev)) {
        Enqueue(*w, rev, std::move(events));
        events.clear();
      }
    }
  }
  ArmProgress(*w);
}

void FakeEtcdClient::Notify(int64_t revision, const std::vector<etcd::WatchEvent>& events) {
  for (const auto& [id, w] : watches_) {
    if (!w->registered || w->closing) continue;
    std::vector<etcd::WatchEvent> mine;
    for (const etcd::WatchEvent& event : events) {
      if (FakeEtcd::InRange(event.kv.key, w->options.key, w->options.range_end)) mine.push_back(event);
    }
    if (!mine.empty()) Enqueue(*w, revision, std::move(mine));
  }
}

void FakeEtcdClient::Enqueue(WatchState& w, int64_t revision, std::vector<etcd::WatchEvent> events,
                             std::optional<WatchEnd> end) {
  const int64_t due = std::max(w.last_due_ns, etcd_.Now() + etcd_.Latency() + watch_lag_ns_);
  w.last_due_ns = due;
  if (end) w.closing = true;
  w.queue.push_back(WatchState::Message{due, revision, std::move(events), std::move(end)});
  Arm(w);
}

void FakeEtcdClient::Arm(WatchState& w) {
  if (w.pump || w.ended || w.queue.empty() || Held()) return;
  w.pump = etcd_.scheduler_.At(w.queue.front().due_ns, [this, raw = &w] { Pump(*raw); });
}

void FakeEtcdClient::Pump(WatchState& w) {
  w.pump.reset();
  const std::shared_ptr<WatchState> keep = Find(w.id);  // through the callbacks
  while (!w.ended && !Held() && !w.queue.empty() && w.queue.front().due_ns <= etcd_.Now()) {
    WatchState::Message m = std::move(w.queue.front());
    w.queue.pop_front();
    if (m.end) {
      End(w, std::move(*m.end));
      return;
    }
    if (!w.created) {
      w.created = true;
      w.deadline.reset();
    }
    if (etcd_.trace_) {
      std::string line = name_ + " watch#" + std::to_string(w.id) + " @" + std::to_string(m.revision);
      for (const etcd::WatchEvent& event : m.events) line += " " + event.kv.key;
      etcd_.Trace(line);
    }
    w.on_events(m.revision, std::move(m.events));
  }
  Arm(w);
}

void FakeEtcdClient::End(WatchState& w, WatchEnd end) {
  if (w.ended) return;
  w.ended = w.closing = true;
  w.queue.clear();
  w.pump.reset();
  w.deadline.reset();
  w.broken.reset();
  w.progress.reset();
  std::shared_ptr<WatchState> self = Find(w.id);
  watches_.erase(w.id);
  etcd_.Trace(name_ + " watch#" + std::to_string(w.id) + " ended: " +
              (end.reason == WatchEnd::Reason::kCancelled   ? "cancelled"
               : end.reason == WatchEnd::Reason::kCompacted ? "compacted at " + std::to_string(end.compact_revision)
                                                            : end.error));
  timers_.At(etcd_.Now(), [self, end = std::move(end)] {
    etcd::WatchEnded on_end = std::move(self->on_end);
    self->on_events = nullptr;
    on_end(end);
  });
}

void FakeEtcdClient::ArmProgress(WatchState& w) {
  const int64_t interval = etcd_.options_.progress_interval_ns;
  if (interval <= 0 || !w.options.progress_notify) return;
  w.progress = etcd_.scheduler_.At(etcd_.Now() + interval, [this, raw = &w] {
    if (!raw->closing && raw->queue.empty()) Enqueue(*raw, etcd_.revision_, {});
    ArmProgress(*raw);
  });
}

// ------------------------------------------------------------------------------ link faults

void FakeEtcdClient::SetPartitioned(bool partitioned) {
  if (partitioned == partitioned_) return;
  partitioned_ = partitioned;
  etcd_.Trace(name_ + (partitioned ? " partitioned" : " reconnected"));
  const FakeEtcdOptions& o = etcd_.options_;
  for (const auto& [id, w] : watches_) {
    if (partitioned) {
      const int64_t after = etcd_.Between(o.partition_watch_end_min_ns, o.partition_watch_end_max_ns);
      w->broken = etcd_.scheduler_.At(etcd_.Now() + after,
                                      [this, raw = w.get()] { End(*raw, WatchError("etcd watch: connection lost")); });
    } else {
      w->broken.reset();
      Arm(*w);
    }
  }
}

void FakeEtcdClient::SetWatchStalled(bool stalled) {
  if (stalled == watch_stalled_) return;
  watch_stalled_ = stalled;
  etcd_.Trace(name_ + (stalled ? " watches stalled" : " watches unstalled"));
  if (stalled) return;
  std::vector<std::shared_ptr<WatchState>> watches;
  for (const auto& [id, w] : watches_) watches.push_back(w);
  for (const auto& w : watches) {
    if (etcd_.Chance(etcd_.options_.unstall_resume_percent)) {
      Arm(*w);
    } else {
      End(*w, WatchError("etcd watch: the stream broke after a stall"));
    }
  }
}

void FakeEtcdClient::CancelWatches() {
  etcd_.Trace(name_ + " watches cancelled by etcd");
  for (const auto& [id, w] : watches_) {
    if (!w->closing) Enqueue(*w, etcd_.revision_, {}, WatchError("etcd canceled the watch: canceled"));
  }
}

void FakeEtcdClient::Stop() {
  if (stopped_) return;
  stopped_ = true;
  etcd_.Trace(name_ + " stopped");
  for (auto& [call, pending] : pending_) {
    timers_.At(etcd_.Now(), [fail = std::move(pending.fail)] { fail(Stopped()); });
  }
  pending_.clear();
  std::vector<std::shared_ptr<WatchState>> watches;
  for (const auto& [id, w] : watches_) watches.push_back(w);
  for (const auto& w : watches) End(*w, WatchError(Stopped().error));
}

}  // namespace fencing::sim
