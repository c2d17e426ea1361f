#include "store/prefix_view.h"

#include <map>
#include <set>

namespace fencing::store {

namespace {
constexpr int64_t kMillisecond = 1'000'000;
constexpr int64_t kPageSize = 1000;
}  // namespace

PrefixView::PrefixView(const Layout& layout, etcd::Kv& kv, etcd::Watcher& watcher, Scheduler& scheduler,
                       Membership& membership, RaiseProtocol& protocol, Reporter& reporter, int64_t ttl_ns)
    : layout_(layout),
      kv_(kv),
      watcher_(watcher),
      scheduler_(scheduler),
      membership_(membership),
      protocol_(protocol),
      reporter_(reporter),
      ttl_ns_(ttl_ns) {}

void PrefixView::Stop() {
  stopping_ = true;
  ++generation_;
  if (watch_) watch_->Cancel();
  watch_.reset();
  liveness_.reset();
  retry_.reset();
}

void PrefixView::Reload() {
  if (stopping_) return;
  ++generation_;
  if (watch_) watch_->Cancel();
  watch_.reset();
  probe_revision_ = 0;
  auto load = std::make_shared<Load>();
  load->started = scheduler_.NowNanos();
  ReadPage(load, layout_.root(), generation_);
}

void PrefixView::ReadPage(std::shared_ptr<Load> load, std::string from, uint64_t generation) {
  etcd::RangeRequest request{from, etcd::PrefixRangeEnd(layout_.root()), load->revision, kPageSize};
  kv_.Range(std::move(request), [this, load, generation](etcd::Status s, etcd::RangeResponse r) {
    if (stopping_ || generation != generation_) return;
    if (!s.ok()) {
      reporter_.Error("cannot read prefix " + layout_.prefix() + ": " + s.error);
      retry_ = scheduler_.After(500 * kMillisecond, [this, generation] {
        if (generation == generation_) Reload();
      });
      return;
    }
    if (load->revision == 0) load->revision = r.revision;
    for (auto& kv : r.kvs) load->kvs.push_back(std::move(kv));
    if (r.more && !load->kvs.empty()) {
      ReadPage(load, load->kvs.back().key + std::string(1, '\0'), generation);
      return;
    }
    reporter_.Observe("load", double(scheduler_.NowNanos() - load->started) / 1e9);
    Apply(*load);
    if (watching_) Watch(load->revision + 1);
    if (loaded) loaded();
  });
}

// Members first (a pending's raiser is looked up), then maxima, pendings and acks.
void PrefixView::Apply(const Load& load) {
  std::set<std::string> members, roster, pendings;
  std::vector<std::pair<Layout::Key, const etcd::KeyValue*>> maxima, pending, acks;
  for (const etcd::KeyValue& kv : load.kvs) {
    Layout::Key key = layout_.Classify(kv.key);
    switch (key.kind) {
      case Layout::Key::Kind::kMember: members.insert(key.member); break;
      case Layout::Key::Kind::kRoster: roster.insert(key.member); break;
      case Layout::Key::Kind::kMax: maxima.emplace_back(std::move(key), &kv); break;
      case Layout::Key::Kind::kPending: pending.emplace_back(std::move(key), &kv); break;
      case Layout::Key::Kind::kAck: acks.emplace_back(std::move(key), &kv); break;
      case Layout::Key::Kind::kProbe: break;
      case Layout::Key::Kind::kOther: reporter_.Error("ignored a key that is not the fence store's: " + kv.key); break;
    }
  }
  loaded_revision_ = load.revision;
  membership_.NoteRevision(load.revision);
  membership_.ApplyLoad(members, roster, load.revision);
  for (const auto& [key, kv] : maxima) {
    uint64_t token = 0;
    if (ParseToken(kv->value, &token)) {
      protocol_.OnMax(key, token);
    } else {
      reporter_.Error("ignored a malformed key " + kv->key);
    }
  }
  for (const auto& [key, kv] : pending) {
    PendingValue value;
    if (!ParsePending(kv->value, &value)) {
      reporter_.Error("ignored a malformed key " + kv->key);
      continue;
    }
    pendings.insert(key.target);
    protocol_.OnPending(key, value, kv->mod_revision);
  }
  protocol_.OnLoaded(pendings, load.revision);
  for (const auto& [key, kv] : acks) {
    uint64_t token = 0;
    int64_t revision = 0;
    if (ParseAck(kv->value, &token, &revision)) protocol_.OnAck(key, token, revision);
  }
}

void PrefixView::StartWatching() {
  watching_ = true;
  if (!watch_ && loaded_revision_ != 0) Watch(loaded_revision_ + 1);
}

void PrefixView::Watch(int64_t from) {
  const uint64_t generation = generation_;
  watch_revision_ = from - 1;
  last_message_ = scheduler_.NowNanos();
  etcd::WatchOptions options;
  options.key = layout_.root();
  options.range_end = etcd::PrefixRangeEnd(layout_.root());
  options.start_revision = from;
  watch_ = watcher_.Watch(
      options,
      [this, generation](int64_t revision, std::vector<etcd::WatchEvent> events) {
        if (generation == generation_ && !stopping_) OnMessage(revision, events);
      },
      [this, generation](etcd::WatchEnd end) {
        if (generation == generation_ && !stopping_) OnWatchEnd(end);
      });
  liveness_ = scheduler_.After(ttl_ns_ / 4, [this] { CheckLiveness(); });
}

void PrefixView::OnMessage(int64_t revision, const std::vector<etcd::WatchEvent>& events) {
  last_message_ = scheduler_.NowNanos();
  for (const etcd::WatchEvent& e : events) {
    const bool put = e.type == etcd::WatchEvent::Type::kPut;
    const etcd::KeyValue& kv = e.kv;
    // Everything before this event's revision is known now (events come in revision order); a
    // member taken off the roster before it is no longer waited for.
    membership_.NoteRevision(kv.mod_revision - 1);
    Layout::Key key = layout_.Classify(kv.key);
    switch (key.kind) {
      case Layout::Key::Kind::kMember:
        if (put) {
          membership_.OnMemberPut(key.member);
        } else {
          membership_.OnMemberDeleted(key.member);
        }
        break;
      case Layout::Key::Kind::kRoster:
        membership_.NoteRevision(kv.mod_revision);
        if (!put) membership_.OnRosterDeleted(key.member);
        break;
      case Layout::Key::Kind::kMax: {
        uint64_t token = 0;
        if (put && ParseToken(kv.value, &token)) protocol_.OnMax(key, token);
        break;
      }
      case Layout::Key::Kind::kPending: {
        PendingValue value;
        if (!put) {
          protocol_.OnPendingDeleted(key, kv.mod_revision);
        } else if (ParsePending(kv.value, &value)) {
          protocol_.OnPending(key, value, kv.mod_revision);
        }
        break;
      }
      case Layout::Key::Kind::kAck: {
        uint64_t token = 0;
        int64_t pending_revision = 0;
        if (put && ParseAck(kv.value, &token, &pending_revision)) protocol_.OnAck(key, token, pending_revision);
        break;
      }
      case Layout::Key::Kind::kProbe:
      case Layout::Key::Kind::kOther:
        break;
    }
  }
  // The view has reached the last event's revision. Not the message's own revision: a watch
  // catching up from an older revision is told the store's current revision first (in its
  // "created" message) and gets the older events after it.
  if (!events.empty()) membership_.NoteRevision(events.back().kv.mod_revision);
  watch_revision_ = std::max(watch_revision_, revision);
  if (probe_revision_ != 0 && watch_revision_ >= probe_revision_) probe_revision_ = 0;
  protocol_.OnMembersChanged();  // a raise waiting for a member the view had not reached
}

void PrefixView::OnWatchEnd(const etcd::WatchEnd& end) {
  if (end.reason == etcd::WatchEnd::Reason::kCancelled) return;
  if (end.reason == etcd::WatchEnd::Reason::kCompacted) {
    reporter_.Error("the watch's history was compacted (revision " + std::to_string(end.compact_revision) +
                    "); reading the prefix again");
  } else {
    reporter_.Error("watch ended: " + end.error);
  }
  watch_.reset();
  ++generation_;
  const uint64_t generation = generation_;
  retry_ = scheduler_.After(200 * kMillisecond, [this, generation] {
    if (generation == generation_) Reload();
  });
}

void PrefixView::CheckLiveness() {
  if (stopping_ || !watch_) return;
  const int64_t now = scheduler_.NowNanos();
  const int64_t quarter = ttl_ns_ / 4;
  if (probe_revision_ != 0 && now - probe_sent_ >= quarter) {
    reporter_.Error("the watch showed nothing of a write made " + std::to_string((now - probe_sent_) / kMillisecond) +
                    " ms ago (stalled); reading the prefix again and watching anew");
    Reload();
    return;
  }
  if (probe_revision_ == 0 && now - last_message_ >= quarter && membership_.registered()) {
    probe_sent_ = now;
    probe_revision_ = INT64_MAX;  // until the put's answer gives its revision
    const uint64_t generation = generation_;
    kv_.Put(layout_.Probe(membership_.id()), std::to_string(++probes_), membership_.lease(),
            [this, generation](etcd::Status s, int64_t revision) {
              if (generation != generation_ || stopping_) return;
              if (!s.ok() || revision == 0) {
                probe_revision_ = 0;  // etcd itself did not answer: the renewals notice that
                return;
              }
              probe_revision_ = watch_revision_ >= revision ? 0 : revision;
            });
  }
  liveness_ = scheduler_.After(quarter, [this] { CheckLiveness(); });
}

}  // namespace fencing::store
