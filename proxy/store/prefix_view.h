#pragma once
// What this member knows of the prefix: one full read (in pages, all at one revision), then a
// watch from the next revision, each key classified once (Layout::Classify) and handed to the
// membership (members, roster) and the raise protocol (max, pending, ack).
//
//   event                                  what the view does
//   -------------------------------------  ------------------------------------------------
//   registered (a new id), renewals that   read everything again, then watch from there
//   failed before a good one               (etcd may have been cut off: the watch may have
//                                          missed events without noticing)
//   the watch ends (error, compacted)      read everything again, then watch
//   the watch silent for a quarter of the  probe: put probe/<me>; if the watch has not shown
//   TTL                                    that revision a quarter of the TTL later, it is
//                                          stalled: read everything again, watch anew
//
// So a watch that stops delivering while etcd answers is noticed and reopened within about
// three quarters of member_ttl.

#include "etcd/kv.h"
#include "store/layout.h"
#include "store/membership.h"
#include "store/raise_protocol.h"
#include "store/reporter.h"
#include "store/scheduler.h"

#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

namespace fencing::store {

class PrefixView {
 public:
  PrefixView(const Layout& layout, etcd::Kv& kv, etcd::Watcher& watcher, Scheduler& scheduler,
             Membership& membership, RaiseProtocol& protocol, Reporter& reporter, int64_t ttl_ns);

  // Reads everything again (and watches from there, once watching is on). loaded runs after
  // each full read has been applied.
  void Reload();
  std::function<void()> loaded;
  // The watch starts (from the last full read on) and stays on from now.
  void StartWatching();
  void Stop();

 private:
  struct Load {
    int64_t revision = 0;
    std::vector<etcd::KeyValue> kvs;
    int64_t started = 0;
  };
  void ReadPage(std::shared_ptr<Load> load, std::string from, uint64_t generation);
  void Apply(const Load& load);
  void Watch(int64_t from);
  void OnMessage(int64_t revision, const std::vector<etcd::WatchEvent>& events);
  void OnWatchEnd(const etcd::WatchEnd& end);
  void CheckLiveness();

  const Layout& layout_;
  etcd::Kv& kv_;
  etcd::Watcher& watcher_;
  Scheduler& scheduler_;
  Membership& membership_;
  RaiseProtocol& protocol_;
  Reporter& reporter_;
  const int64_t ttl_ns_;

  bool watching_ = false;  // StartWatching was called
  bool stopping_ = false;
  uint64_t generation_ = 0;  // answers of an earlier read or watch are dropped
  int64_t loaded_revision_ = 0;
  std::shared_ptr<etcd::WatchHandle> watch_;
  int64_t watch_revision_ = 0;   // the newest revision the watch has shown
  int64_t last_message_ = 0;     // when it last said anything
  int64_t probe_revision_ = 0;   // a probe put the watch has yet to show; 0: none
  int64_t probe_sent_ = 0;
  uint64_t probes_ = 0;
  std::unique_ptr<Scheduler::Timer> liveness_, retry_;
};

}  // namespace fencing::store
