#include "simulation.h"

#include "fake_etcd.h"
#include "sim_scheduler.h"

#include "fence/fence_registry.h"
#include "store/layout.h"
#include "store/member.h"
#include "store/scheduled_client.h"

#include <algorithm>
#include <cstdio>
#include <deque>
#include <map>
#include <memory>
#include <optional>
#include <random>
#include <set>
#include <sstream>

namespace fencing::sim {
namespace {

constexpr int64_t kMs = 1'000'000;
constexpr int64_t kSecond = 1'000'000'000;
constexpr const char* kPrefix = "/sim";
constexpr const char* kFence = "f";

// ------------------------------------------------------------------------------ a member's thread
// Everything a member does runs here: frozen while paused (SIGSTOP: its clock runs on, its work
// waits), gone when killed.
class MemberThread final : public store::Scheduler {
 public:
  explicit MemberThread(SimScheduler& world) : world_(world) {}
  ~MemberThread() override { *alive_ = false; }

  int64_t NowNanos() const override { return world_.NowNanos(); }
  void Post(std::function<void()> f) override {
    world_.Post([this, alive = alive_, f = std::move(f)]() mutable {
      if (*alive) Run(std::move(f));
    });
  }
  std::unique_ptr<Timer> At(int64_t at_ns, std::function<void()> f) override {
    auto cancelled = std::make_shared<bool>(false);
    auto inner = world_.At(at_ns, [this, alive = alive_, cancelled, f = std::move(f)]() mutable {
      if (!*alive || *cancelled) return;
      Run([cancelled, f = std::move(f)] {
        if (!*cancelled) f();
      });
    });
    return std::make_unique<Handle>(std::move(inner), cancelled);
  }

  void Pause() { paused_ = true; }
  void Resume() {
    paused_ = false;
    std::deque<std::function<void()>> deferred;
    deferred.swap(deferred_);
    for (auto& f : deferred) Post(std::move(f));
  }
  bool paused() const { return paused_; }

 private:
  class Handle final : public Timer {
   public:
    Handle(std::unique_ptr<Timer> inner, std::shared_ptr<bool> cancelled)
        : inner_(std::move(inner)), cancelled_(std::move(cancelled)) {}
    ~Handle() override { Cancel(); }
    void Cancel() override {
      *cancelled_ = true;
      if (inner_) inner_->Cancel();
    }

   private:
    std::unique_ptr<Timer> inner_;
    std::shared_ptr<bool> cancelled_;
  };
  void Run(std::function<void()> f) {
    if (paused_) {
      deferred_.push_back(std::move(f));
    } else {
      f();
    }
  }

  SimScheduler& world_;
  std::shared_ptr<bool> alive_ = std::make_shared<bool>(true);
  bool paused_ = false;
  std::deque<std::function<void()>> deferred_;
};

class NoMetrics final : public FenceRegistryObserver, public FenceObserver {
 public:
  const FenceObserver& ForFence(std::string_view) override { return *this; }
  void StateWriteFailed() override {}
  void MaxToken(uint64_t) const override {}
  void Raised() const override {}
  void RaiseWaited(double) const override {}
};

int64_t SimClock(const void* scheduler) { return static_cast<const SimScheduler*>(scheduler)->NowNanos(); }

class World;

// ------------------------------------------------------------------------------ one proxy
struct Node final : store::Reporter, RaiseStore {
  Node(World& world, int index, int incarnation);
  ~Node() override;

  // store::Reporter
  void Error(const std::string& what) override;
  void Observe(std::string_view, double) override {}
  void Members(int64_t) override {}
  void MemberId(const std::string& id) override { member_id = id; }
  void Add(Count what) override;
  // RaiseStore: the fences' persists go to the member's thread, as EtcdFenceStore posts them.
  void Persist(FenceRecord record, Done done) override {
    thread->Post([this, record = std::move(record), done = std::move(done)]() mutable {
      member->Persist(record, std::move(done));
    });
  }
  const MembershipGate* gate() const override { return &gate_; }

  Fence& fence() { return registry->GetOrCreate(kFence); }

  World& world;
  const int index, incarnation;
  std::string name, member_id;
  std::unique_ptr<MemberThread> thread;
  std::unique_ptr<FakeEtcdClient> link;
  std::unique_ptr<store::ScheduledClient> client;
  MembershipGate gate_;
  NoMetrics metrics;
  std::unique_ptr<store::Member> member;
  std::unique_ptr<FenceRegistry> registry;
  bool ready = false;
};

// One request of a lock holder.
struct Request final : RaiseWaiter {
  World* world = nullptr;
  uint64_t id = 0, token = 0;
  int node = 0, incarnation = 0;
  int64_t issued = 0;
  int ordinal = 0;  // among the requests carrying its token (World::Carried)
  int64_t last_word = 0;  // when it gives up even a held wait
  bool lapsed = false;    // given up at the last word, held for a lapsed membership
  bool answered = false, waiting = false;
  std::unique_ptr<store::Scheduler::Timer> timeout;
  void Resolve(Admission admission, uint64_t max_token) override;
};

// ------------------------------------------------------------------------------ the world
class World {
 public:
  explicit World(const SimulationOptions& o)
      : options(o), rng(o.seed ^ 0x5eed5eed5eedULL), etcd(scheduler, o.seed, EtcdOptions()) {
    etcd.SetObserver([this](const EtcdWrite& w) { OnEtcdWrite(w); });
    etcd.SetTrace([this](int64_t now, const std::string& line) { Trace(now, "etcd " + line); });
  }
  ~World() {
    requests.clear();
    for (auto& n : nodes) n.reset();
  }

  static FakeEtcdOptions EtcdOptions() {
    FakeEtcdOptions e;
    e.slow_one_in = 50;
    e.slow_max_ns = 800 * kMs;
    return e;
  }

  SimulationResult Run();

  // ---- the backend and the answers
  void Answered(Request& r, Admission admission, uint64_t max_token);
  void Refused(const Request& r, Admission admission);  // answered 409 or 503
  void GiveUp(Request& req, Node& n);
  void Fail(const std::string& what) {
    if (!result.ok) return;
    result.ok = false;
    result.failure = "t=" + Time() + " " + what;
    Trace(scheduler.NowNanos(), "FAILED: " + what);
  }
  void Trace(int64_t now, const std::string& line) {
    char t[32];
    std::snprintf(t, sizeof t, "%10.6f ", double(now - SimScheduler::kStartNanos) / 1e9);
    std::string entry = t + line;
    if (options.trace) std::fprintf(stderr, "%s\n", entry.c_str());
    trace.push_back(std::move(entry));
    if (trace.size() > 400) trace.pop_front();
  }
  std::string Time() const {
    char t[32];
    std::snprintf(t, sizeof t, "%.6f", double(scheduler.NowNanos() - SimScheduler::kStartNanos) / 1e9);
    return t;
  }
  uint64_t Draw(uint64_t n) { return n == 0 ? 0 : rng() % n; }
  int64_t Between(int64_t lo, int64_t hi) { return lo + int64_t(Draw(uint64_t(hi - lo) + 1)); }

  const SimulationOptions options;
  std::mt19937_64 rng;
  SimScheduler scheduler;
  FakeEtcd etcd;
  store::Layout layout{kPrefix};
  std::vector<std::unique_ptr<Node>> nodes;
  std::vector<int> incarnations;
  std::map<uint64_t, std::unique_ptr<Request>> requests;
  SimulationResult result;
  std::deque<std::string> trace;

 private:
  friend struct Node;
  void StartNode(int i);
  void KillNode(int i);
  void Issue(int node, uint64_t token);
  void StartWrite(const Request& r);
  void OnEtcdWrite(const EtcdWrite& w);
  void HolderStep(int holder);
  void NemesisStep();
  void HealAll();
  bool Settle();

  uint64_t grants_ = 0;
  std::vector<uint64_t> holder_tokens_;
  uint64_t next_request_ = 0;
  bool stopping_ = false;
  // The backend: writes running now (token -> count), the highest token started.
  std::map<uint64_t, int> running_;
  uint64_t highest_started_ = 0;
  // The checker's memory.
  uint64_t etcd_max_ = 0;
  uint64_t highest_pending_ = 0;  // the highest token etcd held as a pending raise (or withdrawn)
  struct PendingWrite {
    uint64_t token = 0;
    std::string member;
    int64_t at = 0;
  };
  std::optional<PendingWrite> pending_;  // etcd's pending key now
  struct Refusal {
    std::string member;  // who answered
    int64_t at;
  };
  std::multimap<uint64_t, Refusal> unavailable_;  // token answered 503
  struct Carried {
    int taken = 0, refused = 0;  // requests carrying a token the proxies took, and refused (409, 503)
    // Once the token is the max: how many had been taken by then, and how many of those are
    // refused so far (all of them: the token became the max though every request was refused).
    int64_t committed_at = -1;
    int before = 0, before_refused = 0;
  };
  std::map<uint64_t, Carried> carried_;
  uint64_t highest_taken_ = 0;  // the highest token a request carried to a proxy
  std::map<uint64_t, int64_t> stale_;  // token answered 409 (above etcd's max then) -> when first
  // Faults under way: what heals them.
  std::vector<std::unique_ptr<store::Scheduler::Timer>> heals_;
  std::vector<std::unique_ptr<store::Scheduler::Timer>> loops_;
};

Node::Node(World& w, int i, int inc) : world(w), index(i), incarnation(inc), gate_(&SimClock, &w.scheduler) {
  name = std::string(1, char('A' + i)) + std::to_string(inc);
  thread = std::make_unique<MemberThread>(world.scheduler);
  link = world.etcd.Connect(name, kSecond);
  client = std::make_unique<store::ScheduledClient>(*link, *thread);
  member = std::make_unique<store::Member>(
      store::Member::Options{kPrefix, world.options.ttl_seconds, world.options.request_timeout_ns}, *client, *thread,
      gate_, *this);
  thread->Post([this] {
    member->Start([this] {
      registry = std::make_unique<FenceRegistry>(member->protocol().maxima, std::move(member->protocol().keys), *this,
                                                 metrics);
      member->Attach(*registry);
      ready = true;
      world.Trace(world.scheduler.NowNanos(), name + " attached as " + member_id);
    });
  });
}

Node::~Node() {
  // A killed process: nothing is told, its lease runs out. The member first (it pins fences).
  thread.reset();
  member.reset();
  registry.reset();
  client.reset();
  link.reset();
}

void Node::Error(const std::string& what) { world.Trace(world.scheduler.NowNanos(), name + " error: " + what); }

void Node::Add(Count what) {
  if (what == Count::kRaised) ++world.result.raises_committed;
}

void Request::Resolve(Admission admission, uint64_t max_token) { world->Answered(*this, admission, max_token); }

void World::StartNode(int i) {
  ++incarnations[i];
  nodes[i] = std::make_unique<Node>(*this, i, incarnations[i]);
  Trace(scheduler.NowNanos(), nodes[i]->name + " started");
}

void World::KillNode(int i) {
  if (!nodes[i]) return;
  Trace(scheduler.NowNanos(), nodes[i]->name + " killed");
  nodes[i].reset();
}

// A holder's write through node i: the proxy takes it when it runs (a paused one later).
void World::Issue(int i, uint64_t token) {
  if (!nodes[i] || !nodes[i]->ready) return;  // not listening: the connection is refused
  auto r = std::make_unique<Request>();
  r->world = this;
  r->id = ++next_request_;
  r->token = token;
  r->node = i;
  r->incarnation = incarnations[i];
  r->issued = scheduler.NowNanos();
  Request* req = r.get();
  requests.emplace(r->id, std::move(r));
  Node& n = *nodes[i];
  n.thread->Post([this, req, &n] {
    req->issued = scheduler.NowNanos();
    Trace(req->issued, n.name + " request " + std::to_string(req->id) + " token " + std::to_string(req->token));
    req->ordinal = ++carried_[req->token].taken;
    highest_taken_ = std::max(highest_taken_, req->token);
    AdmitResult a = n.fence().Admit(req->token, *req);
    if (a.admission != Admission::kWaiting) {
      Answered(*req, a.admission, a.max_token);
      return;
    }
    req->waiting = true;
    // The request's deadline, as the session's (Config::RaiseWait with a fence store).
    const int64_t raise_wait = options.request_timeout_ns + options.ttl_seconds * kSecond + kSecond;
    req->last_word = scheduler.NowNanos() + raise_wait + options.ttl_seconds * kSecond;
    req->timeout = n.thread->After(raise_wait, [this, req, &n] { GiveUp(*req, n); });
  });
}

// The request's deadline passed: as the session's, asks the fence again every 100 ms while it
// holds the request (its raise in the store's hands, or committed as the membership lapsed)
// until the last word (Config::HeldWait later).
void World::GiveUp(Request& req, Node& n) {
  if (req.answered) return;
  const bool last_word = scheduler.NowNanos() >= req.last_word;
  if (n.fence().Abandon(req, last_word)) {
    // Held for a membership that was not renewed in time, with its token committed: counted
    // apart (the promise's bounded exception), not as a refusal of the raise.
    req.lapsed = last_word && !n.gate()->Open() && etcd_max_ == req.token;
    if (req.lapsed) ++result.held_lapsed;
    Answered(req, Admission::kUnavailable, 0);
    return;
  }
  if (req.answered) return;
  req.timeout = n.thread->After(100 * kMs, [this, &req, &n] { GiveUp(req, n); });
}

void World::Answered(Request& r, Admission admission, uint64_t max_token) {
  if (r.answered) return Fail("request " + std::to_string(r.id) + " answered twice");
  r.answered = true;
  const bool was_waiting = r.waiting;
  r.waiting = false;
  r.timeout.reset();
  const int64_t now = scheduler.NowNanos();
  switch (admission) {
    case Admission::kAdmitted: {
      ++result.writes_admitted;
      if (r.token > etcd_max_) {
        Fail("token " + std::to_string(r.token) + " admitted while etcd's committed max is " + std::to_string(etcd_max_));
      }
      StartWrite(r);
      break;
    }
    case Admission::kStale:
      ++result.refused_stale;
      Trace(now, "request " + std::to_string(r.id) + " token " + std::to_string(r.token) + ": 409 (max " +
                     std::to_string(max_token) + ")");
      if (etcd_max_ == r.token && max_token == r.token) Fail("token " + std::to_string(r.token) + " refused as stale at its own max");
      Refused(r, admission);
      if (r.token > etcd_max_) stale_.emplace(r.token, now);
      break;
    default: {
      ++result.refused_unavailable;
      Refused(r, admission);
      // A raise that failed: the request waited for it, and the membership is open (a closed one
      // refuses every write, a raise that went through included: that 503 says "not now").
      const Node* n = nodes[r.node] && incarnations[r.node] == r.incarnation ? nodes[r.node].get() : nullptr;
      if (n && was_waiting && n->gate()->Open()) unavailable_.emplace(r.token, Refusal{n->member_id, now});
      Trace(now, "request " + std::to_string(r.id) + " token " + std::to_string(r.token) + ": 503");
      break;
    }
  }
}

void World::Refused(const Request& r, Admission admission) {
  Carried& c = carried_[r.token];
  ++c.refused;
  if (r.lapsed) return;
  // Taken before the token became the max, refused after while it still is: if every one of
  // those is refused, a refused token became the max all the same. Unless they lost the lock
  // before they could go: a higher raise stood in etcd, or (a 409) a newer holder's token had
  // reached a proxy; the 409 says so.
  const bool superseded = etcd_max_ > r.token || (pending_ && pending_->token > r.token) ||
                          (admission == Admission::kStale && highest_taken_ > r.token);
  if (c.committed_at >= 0 && r.ordinal <= c.before && ++c.before_refused == c.before && !superseded) {
    Fail("token " + std::to_string(r.token) + " became the max at t=" + std::to_string(double(c.committed_at - SimScheduler::kStartNanos) / 1e9) +
         ", but every request carrying it taken by then was refused");
  }
}

void World::StartWrite(const Request& r) {
  const int64_t now = scheduler.NowNanos();
  ++result.backend_writes;
  Trace(now, "backend starts request " + std::to_string(r.id) + " token " + std::to_string(r.token));
  if (r.token < highest_started_) {
    Fail("order: the backend started token " + std::to_string(r.token) + " after token " +
         std::to_string(highest_started_));
  }
  for (const auto& [token, count] : running_) {
    if (token != r.token && count > 0) {
      Fail("order: the backend started token " + std::to_string(r.token) + " while a write with token " +
           std::to_string(token) + " was running");
    }
  }
  highest_started_ = std::max(highest_started_, r.token);
  ++running_[r.token];
  // The exchange lasts less than timeouts.request (the proxy ends it then).
  const int64_t duration = Draw(4) == 0 ? Between(kMs, options.request_timeout_ns * 8 / 10) : Between(kMs, 30 * kMs);
  const uint64_t token = r.token;
  const int node = r.node, incarnation = r.incarnation;
  loops_.push_back(scheduler.At(now + duration, [this, token, node, incarnation] {
    if (--running_[token] == 0) running_.erase(token);
    // The proxy's exchange ends: the fence releases it (later if the proxy is frozen).
    if (nodes[node] && incarnations[node] == incarnation) {
      Node* n = nodes[node].get();
      n->thread->Post([n] { n->fence().Release(); });
    }
  }));
}

// Raises in etcd only go up: a pending raise (or a withdrawn one) is replaced only by a higher
// one, and the max only ever takes the token of the pending raise it commits, never one below a
// raise that was pending (so a token refused against that raise, 409, never becomes the max);
// and a pending raise whose raiser answered 503 is never committed after that answer, nor a token
// any member answered 409, nor one every request of which was refused (409 or 503).
void World::OnEtcdWrite(const EtcdWrite& w) {
  store::Layout::Key key = layout.Classify(w.event.kv.key);
  if (key.kind == store::Layout::Key::Kind::kPending) {
    if (w.event.type != etcd::WatchEvent::Type::kPut) {
      pending_.reset();
      return;
    }
    store::PendingValue p;
    if (!store::ParsePending(w.event.kv.value, &p)) return Fail("unreadable pending " + w.event.kv.value);
    if (p.token < highest_pending_) {
      Fail("a pending raise to " + std::to_string(p.token) + " after one to " + std::to_string(highest_pending_));
    }
    highest_pending_ = std::max(highest_pending_, p.token);
    pending_ = PendingWrite{p.token, p.member, w.time_ns};
    return;
  }
  if (key.kind != store::Layout::Key::Kind::kMax || w.event.type != etcd::WatchEvent::Type::kPut) return;
  uint64_t token = 0;
  if (!store::ParseToken(w.event.kv.value, &token)) return Fail("unreadable max " + w.event.kv.value);
  if (token <= etcd_max_) {
    Fail("etcd's max went from " + std::to_string(etcd_max_) + " to " + std::to_string(token));
  }
  if (token < highest_pending_) {
    Fail("etcd's max became " + std::to_string(token) + " after a raise to " + std::to_string(highest_pending_) +
         " had been pending");
  }
  etcd_max_ = token;
  Trace(w.time_ns, "etcd max := " + std::to_string(token));
  if (!pending_ || pending_->token != token) return Fail("a max committed without its pending raise");
  if (auto it = stale_.find(token); it != stale_.end()) {
    Fail("token " + std::to_string(token) + " was answered 409 at t=" + std::to_string(double(it->second) / 1e9) +
         " and then became the max");
  }
  // A refused raise never commits later: some request carrying the token is waiting for it.
  Carried& c = carried_[token];
  if (c.refused == c.taken) {
    Fail("token " + std::to_string(token) + " became the max, but all " + std::to_string(c.taken) +
         " requests carrying it were refused (409 or 503)");
  }
  c.committed_at = w.time_ns;
  c.before = c.taken;
  c.before_refused = c.refused;
  for (auto [it, end] = unavailable_.equal_range(token); it != end; ++it) {
    if (it->second.member == pending_->member && it->second.at > pending_->at) {
      Fail("token " + std::to_string(token) + " was committed by the member that had answered its raise 503");
    }
  }
}

// ------------------------------------------------------------------------------ holders, nemesis
void World::HolderStep(int h) {
  if (stopping_) return;
  if (holder_tokens_[h] == 0 || Draw(10) == 0) {
    holder_tokens_[h] = ++grants_;  // a new grant: every other holder is stale from now
    Trace(scheduler.NowNanos(), "holder " + std::to_string(h) + " granted " + std::to_string(holder_tokens_[h]));
  }
  Issue(int(Draw(nodes.size())), holder_tokens_[h]);
  loops_.push_back(scheduler.At(scheduler.NowNanos() + Between(5 * kMs, 400 * kMs), [this, h] { HolderStep(h); }));
}

void World::NemesisStep() {
  if (stopping_) return;
  ++result.faults;
  const int i = int(Draw(nodes.size()));
  const int64_t ttl = options.ttl_seconds * kSecond;
  const int64_t now = scheduler.NowNanos();
  auto heal_at = [this](int64_t at, std::function<void()> f) { heals_.push_back(scheduler.At(at, std::move(f))); };
  std::string what;
  switch (Draw(10)) {
    case 0:
    case 1: {  // pause a member, short or past its TTL
      if (!nodes[i] || nodes[i]->thread->paused()) break;
      const int64_t d = Draw(2) ? Between(100 * kMs, ttl / 2) : Between(ttl, 2 * ttl);
      what = nodes[i]->name + " paused for " + std::to_string(d / kMs) + " ms";
      nodes[i]->thread->Pause();
      const int inc = incarnations[i];
      heal_at(now + d, [this, i, inc] {
        if (nodes[i] && incarnations[i] == inc) nodes[i]->thread->Resume();
      });
      break;
    }
    case 2: {  // kill, restart later
      if (!nodes[i]) break;
      what = nodes[i]->name + " killed";
      KillNode(i);
      heal_at(now + Between(100 * kMs, 2 * ttl), [this, i] {
        if (!nodes[i]) StartNode(i);
      });
      break;
    }
    case 3:
    case 4: {  // partition its link
      if (!nodes[i]) break;
      const int64_t d = Draw(2) ? Between(100 * kMs, ttl / 2) : Between(ttl, 2 * ttl);
      what = nodes[i]->name + " partitioned for " + std::to_string(d / kMs) + " ms";
      nodes[i]->link->SetPartitioned(true);
      const int inc = incarnations[i];
      heal_at(now + d, [this, i, inc] {
        if (nodes[i] && incarnations[i] == inc) nodes[i]->link->SetPartitioned(false);
      });
      break;
    }
    case 5: {  // its watch alone stalls
      if (!nodes[i]) break;
      const int64_t d = Between(100 * kMs, 3 * ttl);
      what = nodes[i]->name + " watch stalled for " + std::to_string(d / kMs) + " ms";
      nodes[i]->link->SetWatchStalled(true);
      const int inc = incarnations[i];
      heal_at(now + d, [this, i, inc] {
        if (nodes[i] && incarnations[i] == inc) nodes[i]->link->SetWatchStalled(false);
      });
      break;
    }
    case 6: {  // its watch lags
      if (!nodes[i]) break;
      const int64_t lag = Between(10 * kMs, ttl / 2);
      what = nodes[i]->name + " watch lags " + std::to_string(lag / kMs) + " ms";
      nodes[i]->link->SetWatchLag(lag);
      const int inc = incarnations[i];
      heal_at(now + Between(100 * kMs, 2 * ttl), [this, i, inc] {
        if (nodes[i] && incarnations[i] == inc) nodes[i]->link->SetWatchLag(0);
      });
      break;
    }
    case 7:
      if (!nodes[i]) break;
      what = nodes[i]->name + " watches cancelled by etcd";
      nodes[i]->link->CancelWatches();
      break;
    case 8: {
      if (etcd.unavailable()) break;
      const int64_t d = Between(100 * kMs, ttl);
      what = "etcd unavailable for " + std::to_string(d / kMs) + " ms";
      etcd.SetUnavailable(true);
      heal_at(now + d, [this] { etcd.SetUnavailable(false); });
      break;
    }
    case 9:
      if (Draw(2)) {
        what = "etcd leader change";
        etcd.LeaderChange();
      } else {
        what = "etcd compacted at " + std::to_string(etcd.Revision());
        etcd.Compact(etcd.Revision());
      }
      break;
  }
  if (!what.empty()) Trace(now, "nemesis: " + what);
  loops_.push_back(scheduler.At(now + Between(200 * kMs, 2 * kSecond), [this] { NemesisStep(); }));
}

void World::HealAll() {
  heals_.clear();
  etcd.SetUnavailable(false);
  for (size_t i = 0; i < nodes.size(); ++i) {
    if (!nodes[i]) {
      StartNode(int(i));
      continue;
    }
    if (nodes[i]->thread->paused()) nodes[i]->thread->Resume();
    nodes[i]->link->SetPartitioned(false);
    nodes[i]->link->SetWatchStalled(false);
    nodes[i]->link->SetWatchLag(0);
  }
  Trace(scheduler.NowNanos(), "nemesis: every fault healed");
}

// After the faults: nothing left standing, every member at etcd's max, and a new holder's raise
// goes through each member within its bound.
bool World::Settle() {
  const int64_t bound = options.ttl_seconds * kSecond + options.request_timeout_ns + kSecond;
  scheduler.RunFor(3 * bound);
  if (!result.ok) return false;
  if (auto pending = etcd.Get(layout.Pending(kFence))) {
    store::PendingValue p;
    if (!store::ParsePending(pending->value, &p) || !p.withdrawn) {
      Fail("a pending raise left standing after every fault healed: " + pending->value);
      return false;
    }
  }
  for (const auto& n : nodes) {
    if (!n->ready) return Fail(n->name + " never became ready again"), false;
    FenceSnapshot s = n->fence().Snapshot();
    if (s.pending != 0 || s.inflight != 0 || s.waiting != 0 || s.max_token != etcd_max_) {
      Fail(n->name + " did not settle: max " + std::to_string(s.max_token) + " (etcd " + std::to_string(etcd_max_) +
           "), pending " + std::to_string(s.pending) + ", inflight " + std::to_string(s.inflight) + ", waiting " +
           std::to_string(s.waiting));
      return false;
    }
  }
  // A new holder's raise through each member, retried after a 503 as a client would (etcd's slow
  // answers, one in 50 here, can time a call out): admitted within two bounds.
  const uint64_t token = ++grants_;
  for (size_t i = 0; i < nodes.size(); ++i) {
    const int64_t deadline = scheduler.NowNanos() + 2 * bound;
    for (int attempt = 0; result.ok && etcd_max_ != token && scheduler.NowNanos() < deadline; ++attempt) {
      if (attempt > 0) scheduler.RunFor(200 * kMs);  // as a client backs off after a 503
      const uint64_t id = next_request_ + 1;
      Issue(int(i), token);
      while (scheduler.NowNanos() < deadline && !(requests.contains(id) && requests[id]->answered)) {
        if (!scheduler.Step()) break;
      }
      if (!requests.contains(id) || !requests[id]->answered) {
        Fail("a new holder's write through " + nodes[i]->name + " was not answered within " +
             std::to_string(2 * bound / kMs) + " ms after every fault healed");
        return false;
      }
    }
    if (result.ok && etcd_max_ != token) {
      Fail("a new holder's write through " + nodes[i]->name + " was not admitted after every fault healed (max " +
           std::to_string(etcd_max_) + ", token " + std::to_string(token) + ")");
      return false;
    }
  }
  return result.ok;
}

SimulationResult World::Run() {
  nodes.resize(options.members);
  incarnations.assign(options.members, 0);
  for (int i = 0; i < options.members; ++i) StartNode(i);
  // Everyone registered and attached before the holders start.
  scheduler.RunFor(2 * kSecond);
  holder_tokens_.assign(options.holders, 0);
  for (int h = 0; h < options.holders; ++h) {
    loops_.push_back(scheduler.At(scheduler.NowNanos() + Between(0, 200 * kMs), [this, h] { HolderStep(h); }));
  }
  if (options.faults) loops_.push_back(scheduler.At(scheduler.NowNanos() + kSecond, [this] { NemesisStep(); }));
  const int64_t end = scheduler.NowNanos() + options.run_ns;
  int64_t instant = -1;
  uint64_t at_instant = 0;
  while (result.ok && scheduler.NowNanos() < end && scheduler.Step()) {
    ++result.events;
    // A livelock (work that posts work at the same virtual instant forever) fails the seed
    // instead of hanging the run.
    at_instant = scheduler.NowNanos() == instant ? at_instant + 1 : 0;
    instant = scheduler.NowNanos();
    if (at_instant > 100'000) Fail("livelock: over 100,000 events at one instant");
  }
  stopping_ = true;
  if (result.ok) {
    HealAll();
    Settle();
  }
  if (!result.ok) {
    std::ostringstream out;
    out << result.failure << "\nseed " << options.seed << "; the run's last events:\n";
    for (const std::string& line : trace) out << "  " << line << "\n";
    result.failure = out.str();
  }
  return result;
}

}  // namespace

SimulationResult RunSimulation(const SimulationOptions& options) {
  World world(options);
  return world.Run();
}

}  // namespace fencing::sim
