#include "store/membership.h"

#include <unistd.h>

#include <algorithm>
#include <climits>
#include <ctime>

namespace fencing::store {

namespace {

constexpr int64_t kSecond = 1'000'000'000;
constexpr int64_t kRetry = kSecond / 2;

std::string MemberInfo() {
  char host[256] = {};
  if (gethostname(host, sizeof host - 1) != 0) std::snprintf(host, sizeof host, "unknown");
  std::string h;
  for (const char* c = host; *c; ++c) {
    if (*c != '"' && *c != '\\' && static_cast<unsigned char>(*c) >= 0x20) h += *c;
  }
  return "{\"host\":\"" + h + "\",\"pid\":" + std::to_string(getpid()) +
         ",\"started_unix\":" + std::to_string(time(nullptr)) + "}";
}

}  // namespace

Membership::Membership(const Layout& layout, etcd::Kv& kv, etcd::Lease& lease, Scheduler& scheduler,
                       MembershipGate& gate, Options options, Listener& listener, Reporter& reporter)
    : layout_(layout),
      kv_(kv),
      lease_api_(lease),
      scheduler_(scheduler),
      gate_(gate),
      options_(options),
      listener_(listener),
      reporter_(reporter) {}

void Membership::Start() { Register(); }

int64_t Membership::Period() const { return std::max<int64_t>(kRetry, ttl_ * kSecond / 3); }

void Membership::Register() {
  if (stopping_) return;
  const int64_t sent = scheduler_.NowNanos();
  const uint64_t epoch = ++epoch_;
  lease_api_.Grant(options_.ttl_seconds, [this, sent, epoch](etcd::Status s, int64_t id, int64_t ttl) {
    if (epoch == epoch_) OnGranted(s, id, ttl, sent);
  });
}

void Membership::OnGranted(const etcd::Status& status, int64_t id, int64_t ttl, int64_t sent) {
  if (stopping_) return;
  if (!status.ok() || id == 0 || ttl <= 0) {
    reporter_.Error("cannot grant the membership lease: " + (status.ok() ? std::string("no lease in the answer")
                                                                        : status.error));
    retry_timer_ = scheduler_.After(kRetry, [this] { Register(); });
    return;
  }
  const std::string member = MemberId(id);
  const std::string info = MemberInfo();
  etcd::TxnRequest txn;
  txn.success = {etcd::Op::Put(layout_.Member(member), info, id), etcd::Op::Put(layout_.Roster(member), info)};
  const uint64_t epoch = epoch_;
  kv_.Txn(std::move(txn), [this, epoch, id, ttl, sent, member](etcd::Status s, etcd::TxnResponse) {
    if (stopping_ || epoch != epoch_) return;
    if (!s.ok()) {
      reporter_.Error("cannot register this proxy's member key: " + s.error);
      retry_timer_ = scheduler_.After(kRetry, [this] { Register(); });
      return;
    }
    lease_ = id;
    ttl_ = ttl;
    id_ = member;
    renewed_sent_ = sent;
    renewal_failing_ = false;
    members_[member] = Member{};
    reporter_.MemberId(id_);
    Counted();
    ScheduleRenewal(Period());
    listener_.OnRegistered();
  });
}

void Membership::SetViewCurrent(bool current) {
  view_current_ = current;
  if (current) {
    OpenGate();
  } else {
    gate_.Close();
  }
}

void Membership::OpenGate() {
  if (!view_current_ || lease_ == 0 || stopping_) return;
  const int64_t margin = std::max<int64_t>(kRetry, ttl_ * kSecond / 5);
  gate_.OpenUntil(renewed_sent_ + ttl_ * kSecond - margin);
}

void Membership::ScheduleRenewal(int64_t after_ns) {
  renewal_timer_ = scheduler_.After(after_ns, [this] { Renew(); });
}

void Membership::Renew() {
  if (stopping_ || lease_ == 0) return;
  const int64_t sent = scheduler_.NowNanos();
  const int64_t lease = lease_;
  lease_api_.KeepAliveOnce(lease, [this, sent, lease](etcd::Status s, int64_t ttl, int64_t revision) {
    OnRenewal(s, ttl, revision, sent, lease);
  });
}

void Membership::OnRenewal(const etcd::Status& status, int64_t ttl, int64_t revision, int64_t sent, int64_t lease) {
  if (stopping_ || lease != lease_) return;
  if (!status.ok()) {
    reporter_.Error("cannot renew the membership lease: " + status.error);
    renewal_failing_ = true;
    ScheduleRenewal(kRetry);
    return;
  }
  reporter_.Observe("keepalive", double(scheduler_.NowNanos() - sent) / 1e9);
  if (ttl <= 0) {
    // The lease ran out (this proxy was cut off, or frozen, for longer than member_ttl): the
    // others no longer wait for it, so nothing passes here until it is a member again and has
    // read what happened meanwhile.
    reporter_.Error("the membership lease expired; registering again");
    gate_.Close();
    view_current_ = false;
    former_.insert(id_);
    lease_ = 0;
    id_.clear();
    reporter_.MemberId(id_);
    listener_.OnLost();
    Register();
    return;
  }
  const bool after_failures = renewal_failing_;
  renewal_failing_ = false;
  ttl_ = ttl;
  renewed_sent_ = sent;
  OpenGate();
  CleanRoster();
  ScheduleRenewal(Period());
  listener_.OnRenewed(revision, after_failures);
}

void Membership::Stop(bool left_cleanly, std::function<void()> done) {
  stopping_ = true;
  gate_.Close();
  renewal_timer_.reset();
  retry_timer_.reset();
  if (lease_ == 0) {
    done();
    return;
  }
  // The member key goes with the lease. With every admitted write ended, the roster entry goes
  // first: the others stop waiting for this proxy now; else they wait timeouts.request after
  // the key has gone.
  auto revoke = [this, done] { lease_api_.Revoke(lease_, [done](etcd::Status) { done(); }); };
  if (!left_cleanly) {
    revoke();
    return;
  }
  etcd::TxnRequest txn;
  txn.success = {etcd::Op::Delete(layout_.Roster(id_))};
  kv_.Txn(std::move(txn), [revoke](etcd::Status, etcd::TxnResponse) { revoke(); });
}

// ------------------------------------------------------------------------------ the roster
void Membership::Gone(Member& m) {
  if (!m.alive) return;
  m.alive = false;
  m.gone_at = scheduler_.NowNanos();
}

void Membership::Counted() {
  reporter_.Members(alive());
  listener_.OnMembersChanged();
}

void Membership::ApplyLoad(const std::set<std::string>& members, const std::set<std::string>& roster,
                           int64_t revision) {
  for (auto it = members_.begin(); it != members_.end();) {
    if (!roster.contains(it->first) && !members.contains(it->first)) {
      it = members_.erase(it);  // off the roster
      continue;
    }
    if (!members.contains(it->first)) Gone(it->second);
    ++it;
  }
  for (const std::string& id : members) {
    auto [it, added] = members_.try_emplace(id);
    if (!added && !it->second.alive) it->second = Member{};
  }
  // On the roster without a member key: gone, when exactly we cannot know, so from now (its
  // admitted writes may run timeouts.request past its lease).
  for (const std::string& id : roster) {
    if (auto [it, added] = members_.try_emplace(id); added && !members.contains(id)) Gone(it->second);
  }
  view_revision_ = std::max(view_revision_, revision);
  Counted();
}

void Membership::OnMemberPut(const std::string& member) {
  members_[member] = Member{};
  Counted();
}

void Membership::OnMemberDeleted(const std::string& member) {
  if (auto it = members_.find(member); it != members_.end()) Gone(it->second);
  Counted();
}

void Membership::OnRosterDeleted(const std::string& member) {
  if (auto it = members_.find(member); it != members_.end() && !it->second.alive) members_.erase(it);
  Counted();
}

void Membership::NoteRevision(int64_t revision) { view_revision_ = std::max(view_revision_, revision); }

void Membership::CleanRoster() {
  const int64_t now = scheduler_.NowNanos();
  for (auto& [id, m] : members_) {
    if (m.alive || m.cleaning || now < m.gone_at + options_.request_timeout_ns) continue;
    m.cleaning = true;
    etcd::TxnRequest txn;
    txn.compare = {etcd::Compare{layout_.Member(id), 0}};
    txn.success = {etcd::Op::Delete(layout_.Roster(id))};
    kv_.Txn(std::move(txn), [this, member = id](etcd::Status s, etcd::TxnResponse) {
      if (auto it = members_.find(member); it != members_.end() && !s.ok()) it->second.cleaning = false;
    });
  }
}

int64_t Membership::WaitFor(const std::string& member, int64_t raise_revision) const {
  if (IsSelf(member)) return 0;  // our own writes: the fence drained them before it asked
  auto it = members_.find(member);
  if (it == members_.end()) {
    // Not on the roster as we see it: taken off (a member gone for timeouts.request), unless
    // the view has not yet reached the raise's revision (it was on the roster then).
    return view_revision_ >= raise_revision ? 0 : INT64_MAX;
  }
  if (it->second.alive) return INT64_MAX;
  const int64_t free_at = it->second.gone_at + options_.request_timeout_ns;
  return free_at <= scheduler_.NowNanos() ? 0 : free_at;
}

bool Membership::Alive(const std::string& member) const {
  auto it = members_.find(member);
  return it != members_.end() && it->second.alive;
}

int64_t Membership::alive() const {
  return std::count_if(members_.begin(), members_.end(), [](const auto& m) { return m.second.alive; });
}

}  // namespace fencing::store
