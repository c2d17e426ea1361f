#include "store/member.h"

namespace fencing::store {

namespace {
constexpr int64_t kSecond = 1'000'000'000;
}

Member::Member(Options options, etcd::Client& etcd, Scheduler& scheduler, MembershipGate& gate, Reporter& reporter)
    : layout_(options.prefix),
      membership_(layout_, etcd, etcd, scheduler, gate, {options.ttl_seconds, options.request_timeout_ns}, *this,
                  reporter),
      protocol_(layout_, etcd, scheduler, membership_, reporter,
                {options.ttl_seconds * kSecond, options.request_timeout_ns}),
      view_(layout_, etcd, etcd, scheduler, membership_, protocol_, reporter, options.ttl_seconds * kSecond) {
  view_.loaded = [this] {
    // A member that registered again must know every pending raise before it admits anything:
    // the gate opens only after a full read under the current id.
    if (attached_ && membership_.registered()) membership_.SetViewCurrent(true);
    if (started_) {
      auto started = std::move(started_);
      started_ = nullptr;
      started();
    }
  };
}

void Member::Start(std::function<void()> started) {
  started_ = std::move(started);
  membership_.Start();
}

void Member::Attach(FenceRegistry& registry) {
  attached_ = true;
  protocol_.Attach(registry);
  view_.StartWatching();
  if (membership_.registered()) membership_.SetViewCurrent(true);
}

void Member::Persist(const FenceRecord& record, RaiseStore::Done done) {
  if (record.kind != FenceRecord::Kind::kSetMax) {
    // Keys are not forgotten in the shared store (the route file refuses forget_idle_after).
    done(PersistResult::kNotDurable);
    return;
  }
  protocol_.Persist(record.key.empty() ? record.fence : record.fence + "/" + record.key, record.token,
                    std::move(done));
}

void Member::Stop(bool left_cleanly, std::function<void()> done) {
  started_ = nullptr;
  view_.Stop();
  protocol_.Stop();
  membership_.Stop(left_cleanly, std::move(done));
}

void Member::OnRegistered() {
  membership_.SetViewCurrent(false);
  protocol_.OnRegistered();
  view_.Reload();
}

void Member::OnLost() { protocol_.OnLost(); }

void Member::OnRenewed(int64_t, bool after_failures) {
  // etcd was unreachable: the watch may have missed events without noticing (a frozen etcd
  // ends no connection). Read again and watch anew.
  if (after_failures) view_.Reload();
}

void Member::OnMembersChanged() { protocol_.OnMembersChanged(); }

}  // namespace fencing::store
