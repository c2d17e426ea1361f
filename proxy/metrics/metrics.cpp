#include "metrics/metrics.h"

#include "common/memory.h"
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
#define FP_METRIC_BUILD(type, member, name, help) \
  member##_ = &prometheus::Build##type().Name(name).Help(help).Register(*registry_);
  FP_METRIC_FAMILIES(FP_METRIC_BUILD)
#undef FP_METRIC_BUILD
  fence_store_members_series_ = &fence_store_members_->Add({});
#define FP_FENCE_STORE_OP(op) fence_store_seconds_series_[#op] = &fence_store_seconds_->Add({{"op", #op}}, kLatencyBuckets);
  FP_FENCE_STORE_OPS(FP_FENCE_STORE_OP)
#undef FP_FENCE_STORE_OP
  state_sync_seconds_series_ = &state_sync_seconds_->Add({}, kSyncBuckets);
  connections_series_ = &connections_->Add({});
  connections_refused_series_ = &connections_refused_total_->Add({});
  connections_evicted_series_ = &connections_evicted_total_->Add({});
  access_log_dropped_lines_series_ = &access_log_dropped_lines_total_->Add({});
  state_write_failures_series_ = &state_write_failures_total_->Add({});
  state_compactions_series_ = &state_compactions_total_->Add({{"result", "success"}});
  state_compactions_failed_series_ = &state_compactions_total_->Add({{"result", "failure"}});
  state_compaction_stall_series_ = &state_compaction_stall_seconds_->Add({});
  process_resident_memory_series_ = &process_resident_memory_bytes_->Add({});
  allocator_allocated_series_ = &allocator_bytes_->Add({{"state", "allocated"}});
  allocator_held_series_ = &allocator_bytes_->Add({{"state", "held"}});
  allocator_free_series_ = &allocator_bytes_->Add({{"state", "free"}});
  allocator_cached_series_ = &allocator_bytes_->Add({{"state", "cached"}});
  config_last_reload_successful_series_ = &config_last_reload_successful_->Add({});
  config_last_reload_success_timestamp_series_ = &config_last_reload_success_timestamp_seconds_->Add({});
  config_reloads_success_series_ = &config_reloads_total_->Add({{"result", "success"}});
  config_reloads_failure_series_ = &config_reloads_total_->Add({{"result", "failure"}});
  build_info_->Add({{"version", std::string(Version())}, {"revision", std::string(Revision())}}).Set(1);
}

void Metrics::EnableListenerTls() {
  constexpr const char* kResults[] = {"ok", "failed", "timeout"};  // TlsHandshakeResult's order
  for (size_t i = 0; i < tls_handshakes_series_.size(); ++i) {
    tls_handshakes_series_[i] = &tls_handshakes_total_->Add({{"listener", "listen"}, {"result", kResults[i]}});
  }
  tls_reloads_ok_series_ = &tls_reloads_total_->Add({{"result", "ok"}});
  tls_reloads_failed_series_ = &tls_reloads_total_->Add({{"result", "failed"}});
  tls_last_reload_successful_series_ = &tls_last_reload_successful_->Add({});
  tls_last_reload_successful_series_->Set(1);  // the proxy starts only with files that load
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

const UpstreamTlsMetrics& Metrics::ForUpstreamTls() {
  std::lock_guard lock(mu_);
  if (!upstream_tls_) {
    auto metrics = std::make_unique<UpstreamTlsMetrics>();
    for (size_t i = 0; i < metrics->results.size(); ++i) {
      const std::string_view result = HandshakeResultName(static_cast<HandshakeResult>(i));
      metrics->results[i] = &upstream_tls_handshakes_total_->Add({{"result", std::string(result)}});
    }
    upstream_tls_ = std::move(metrics);
  }
  return *upstream_tls_;
}

void Metrics::Observe(std::string_view op, double seconds) const {
  if (auto it = fence_store_seconds_series_.find(op); it != fence_store_seconds_series_.end()) {
    it->second->Observe(seconds);
  }
}

std::string Metrics::Serialize() const {
  const MemoryStats memory = ReadMemoryStats();
  process_resident_memory_series_->Set(static_cast<double>(memory.resident));
  allocator_allocated_series_->Set(static_cast<double>(memory.allocated));
  allocator_held_series_->Set(static_cast<double>(memory.allocator_held));
  allocator_free_series_->Set(static_cast<double>(memory.allocator_free));
  allocator_cached_series_->Set(static_cast<double>(memory.allocator_cached));
  return prometheus::TextSerializer().Serialize(registry_->Collect());
}

}  // namespace fencing
