#include "metrics/metrics.h"

#include "common/version.h"

#include <prometheus/text_serializer.h>

namespace fencing {
namespace {

// Latency buckets from 100 µs (loopback backend) to 30 s (the default request timeout).
const prometheus::Histogram::BucketBoundaries kLatencyBuckets = {
    0.0001, 0.00025, 0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30};
// fdatasync: from a fast NVMe (50 µs) to a struggling network disk (5 s).
const prometheus::Histogram::BucketBoundaries kSyncBuckets = {
    0.00005, 0.0001, 0.00025, 0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 5};

}  // namespace

Metrics::Metrics() : registry_(std::make_shared<prometheus::Registry>()) {
  using prometheus::BuildCounter;
  using prometheus::BuildGauge;
  using prometheus::BuildHistogram;
  requests_total_ = &BuildCounter()
                         .Name("fencing_proxy_requests_total")
                         .Help("Requests by route and outcome.")
                         .Register(*registry_);
  inflight_requests_ = &BuildGauge()
                            .Name("fencing_proxy_inflight_requests")
                            .Help("Requests forwarded to the backend and not yet answered.")
                            .Register(*registry_);
  upstream_request_seconds_ = &BuildHistogram()
                                   .Name("fencing_proxy_upstream_request_seconds")
                                   .Help("Time from forwarding a request to the end of the backend's response.")
                                   .Register(*registry_);
  fence_keys_ = &BuildGauge()
                     .Name("fencing_proxy_fence_keys")
                     .Help("Keys a keyed fence holds (0 for a fence without keys); keys are never labels.")
                     .Register(*registry_);
  fence_keys_forgotten_total_ = &BuildCounter()
                                     .Name("fencing_proxy_fence_keys_forgotten_total")
                                     .Help("Idle keys forgotten into their fence's floor (forget_idle_keys_after).")
                                     .Register(*registry_);
  max_token_ = &BuildGauge()
                    .Name("fencing_proxy_max_token")
                    .Help("Highest durable fencing token per fence (a float64: exact up to 2^53).")
                    .Register(*registry_);
  token_raises_total_ = &BuildCounter()
                             .Name("fencing_proxy_token_raises_total")
                             .Help("Durable raises of a fence's max_token.")
                             .Register(*registry_);
  raise_wait_seconds_ = &BuildHistogram()
                             .Name("fencing_proxy_raise_wait_seconds")
                             .Help("Time a raise waited for older in-flight writes of its fence to complete.")
                             .Register(*registry_);
  lock_service_requests_total_ = &BuildCounter()
                                     .Name("fencing_proxy_lock_service_requests_total")
                                     .Help("Raises a lock service was asked to confirm, by result: verified (the "
                                           "holder's token), rejected (not the holder's, or no holder), "
                                           "unavailable (no answer within its timeout).")
                                     .Register(*registry_);
  lock_service_seconds_ = &BuildHistogram()
                               .Name("fencing_proxy_lock_service_seconds")
                               .Help("Time a lock service took to say who holds a lock (a raise's verification).")
                               .Register(*registry_);
  fence_store_members_ = &BuildGauge()
                              .Name("fencing_proxy_fence_store_members")
                              .Help("Proxies registered in the shared fence store's prefix, this one included, as "
                                    "its watch sees them (0 with the state file).")
                              .Register(*registry_)
                              .Add({});
  auto& fence_store_seconds = BuildHistogram()
                                  .Name("fencing_proxy_fence_store_seconds")
                                  .Help("Shared fence store (etcd): raise (pending written to committed, as the "
                                        "raiser sees it), ack (acknowledged to committed or withdrawn), txn (one "
                                        "transaction), keepalive (one membership renewal), load (a full read).")
                                  .Register(*registry_);
  for (const char* op : {"raise", "ack", "txn", "keepalive", "load"}) {
    fence_store_seconds_[op] = &fence_store_seconds.Add({{"op", op}}, kLatencyBuckets);
  }
  state_sync_seconds_ = &BuildHistogram()
                             .Name("fencing_proxy_state_sync_seconds")
                             .Help("Duration of one write and fdatasync of the state file.")
                             .Register(*registry_)
                             .Add({}, kSyncBuckets);
  connections_ = &BuildGauge()
                      .Name("fencing_proxy_connections")
                      .Help("Open client connections.")
                      .Register(*registry_)
                      .Add({});
  connections_refused_ = &BuildCounter()
                              .Name("fencing_proxy_connections_refused_total")
                              .Help("Client connections closed at once because max_connections was reached.")
                              .Register(*registry_)
                              .Add({});
  connections_evicted_ = &BuildCounter()
                              .Name("fencing_proxy_connections_evicted_total")
                              .Help("Idle keep-alive connections closed at max_connections to admit a new one.")
                              .Register(*registry_)
                              .Add({});
  access_log_dropped_lines_ = &BuildCounter()
                                  .Name("fencing_proxy_access_log_dropped_lines_total")
                                  .Help("Access log lines dropped because stderr fell more than 4 MiB behind.")
                                  .Register(*registry_)
                                  .Add({});
  state_write_failures_ = &BuildCounter()
                               .Name("fencing_proxy_state_write_failures_total")
                               .Help("Failed writes or syncs of the state file (the first one is terminal).")
                               .Register(*registry_)
                               .Add({});
  auto& compactions = BuildCounter()
                          .Name("fencing_proxy_state_compactions_total")
                          .Help("Rewrites of the state file as a snapshot (keeps it small), by result.")
                          .Register(*registry_);
  state_compactions_ = &compactions.Add({{"result", "success"}});
  state_compactions_failed_ = &compactions.Add({{"result", "failure"}});
  config_last_reload_successful_ = &BuildGauge()
                                        .Name("fencing_proxy_config_last_reload_successful")
                                        .Help("1 if the last route-file load was applied, 0 if it was refused.")
                                        .Register(*registry_)
                                        .Add({});
  config_last_reload_success_timestamp_ =
      &BuildGauge()
           .Name("fencing_proxy_config_last_reload_success_timestamp_seconds")
           .Help("Unix time of the last route-file load that was applied (start-up counts).")
           .Register(*registry_)
           .Add({});
  auto& reloads = BuildCounter()
                      .Name("fencing_proxy_config_reloads_total")
                      .Help("Route-file reloads by result.")
                      .Register(*registry_);
  config_reloads_success_ = &reloads.Add({{"result", "success"}});
  config_reloads_failure_ = &reloads.Add({{"result", "failure"}});
  BuildGauge()
      .Name("fencing_proxy_build_info")
      .Help("Version and revision of the running binary.")
      .Register(*registry_)
      .Add({{"version", std::string(Version())}, {"revision", std::string(Revision())}})
      .Set(1);
}

const RouteMetrics& Metrics::ForRoute(std::string_view route) {
  std::lock_guard lock(mu_);
  if (auto it = routes_.find(route); it != routes_.end()) return *it->second;
  auto metrics = std::make_unique<RouteMetrics>();
  std::string name(route);
  for (size_t i = 0; i < metrics->outcomes.size(); ++i) {
    metrics->outcomes[i] =
        &requests_total_->Add({{"route", name}, {"outcome", std::string(OutcomeName(static_cast<Outcome>(i)))}});
  }
  metrics->inflight = &inflight_requests_->Add({{"route", name}});
  metrics->upstream_seconds = &upstream_request_seconds_->Add({{"route", name}}, kLatencyBuckets);
  return *routes_.emplace(std::move(name), std::move(metrics)).first->second;
}

const FenceMetrics& Metrics::ForFence(std::string_view fence) {
  std::lock_guard lock(mu_);
  if (auto it = fences_.find(fence); it != fences_.end()) return *it->second;
  std::string name(fence);
  auto metrics = std::make_unique<FenceMetrics>(&max_token_->Add({{"fence", name}}),
                                                &token_raises_total_->Add({{"fence", name}}),
                                                &raise_wait_seconds_->Add({{"fence", name}}, kLatencyBuckets),
                                                &fence_keys_->Add({{"fence", name}}),
                                                &fence_keys_forgotten_total_->Add({{"fence", name}}));
  return *fences_.emplace(std::move(name), std::move(metrics)).first->second;
}

const LockServiceMetrics& Metrics::ForLockService(std::string_view service) {
  std::lock_guard lock(mu_);
  if (auto it = lock_services_.find(service); it != lock_services_.end()) return *it->second;
  std::string name(service);
  auto metrics = std::make_unique<LockServiceMetrics>();
  metrics->verified = &lock_service_requests_total_->Add({{"service", name}, {"result", "verified"}});
  metrics->rejected = &lock_service_requests_total_->Add({{"service", name}, {"result", "rejected"}});
  metrics->unavailable = &lock_service_requests_total_->Add({{"service", name}, {"result", "unavailable"}});
  metrics->seconds = &lock_service_seconds_->Add({{"service", name}}, kLatencyBuckets);
  return *lock_services_.emplace(std::move(name), std::move(metrics)).first->second;
}

void Metrics::Observe(std::string_view op, double seconds) const {
  if (auto it = fence_store_seconds_.find(op); it != fence_store_seconds_.end()) it->second->Observe(seconds);
}

std::string Metrics::Serialize() const {
  return prometheus::TextSerializer().Serialize(registry_->Collect());
}

}  // namespace fencing
