#pragma once
// Every metric the proxy exports, declared in one place with the contract's names. Hot-path code
// holds plain pointers resolved once per route or fence, so counting is an atomic add, never a
// label lookup.

#include "fence/fence_observer.h"
#include "http/outcome.h"
#include "lockservice/lock_services.h"
#include "metrics/catalogue.h"
#include "store/fence_store_observer.h"
#include "tls/server_observer.h"
#include "tls/handshake.h"

#include <prometheus/counter.h>
#include <prometheus/family.h>
#include <prometheus/gauge.h>
#include <prometheus/histogram.h>
#include <prometheus/registry.h>

#include <array>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <string_view>

namespace fencing {

// The route label used for requests that match no route (route names cannot contain '(').
inline constexpr std::string_view kNoRouteLabel = "(none)";

struct RouteMetrics {
  std::array<prometheus::Counter*, static_cast<size_t>(Outcome::kCount)> outcomes{};
  prometheus::Gauge* inflight = nullptr;
  prometheus::Histogram* upstream_seconds = nullptr;

  void Count(Outcome outcome) const { outcomes[static_cast<size_t>(outcome)]->Increment(); }
};

struct FenceMetrics final : FenceObserver {
  FenceMetrics(prometheus::Gauge* m, prometheus::Counter* r, prometheus::Histogram* w, prometheus::Gauge* k,
               prometheus::Counter* f)
      : max_token(m), raises(r), raise_wait_seconds(w), keys(k), keys_forgotten(f) {}
  prometheus::Gauge* max_token;  // keyed: the highest max of any key
  prometheus::Counter* raises;
  prometheus::Histogram* raise_wait_seconds;
  prometheus::Gauge* keys;  // 0 for an unkeyed fence: every fence has the series
  prometheus::Counter* keys_forgotten;

  // A float64 gauge: exact up to 2^53, which the metric's help says.
  void MaxToken(uint64_t value) const override { max_token->Set(static_cast<double>(value)); }
  void Raised() const override { raises->Increment(); }
  void RaiseWaited(double seconds) const override { raise_wait_seconds->Observe(seconds); }
  void KeysChanged(int64_t delta) const override { keys->Increment(static_cast<double>(delta)); }
  void KeysForgotten(uint64_t count) const override { keys_forgotten->Increment(static_cast<double>(count)); }
};

// One lock service's answers (lock_service_requests_total{service,result}, lock_service_seconds).
struct LockServiceMetrics final : LockServiceObserver {
  prometheus::Counter* verified = nullptr;     // result="verified": the token is the holder's
  prometheus::Counter* rejected = nullptr;     // result="rejected": another holder's, or nobody's
  prometheus::Counter* unavailable = nullptr;  // result="unavailable": no answer (error, timeout)
  prometheus::Histogram* seconds = nullptr;

  void Answered(Verdict verdict, double took) const override {
    switch (verdict) {
      case Verdict::kVerified: verified->Increment(); break;
      case Verdict::kNotHolder:
      case Verdict::kNoHolder: rejected->Increment(); break;
      case Verdict::kUnavailable: unavailable->Increment(); break;
    }
    seconds->Observe(took);
  }
};

// TLS handshakes with an https backend (upstream_tls_handshakes_total{result}).
struct UpstreamTlsMetrics final : HandshakeObserver {
  std::array<prometheus::Counter*, kHandshakeResults> results{};  // by HandshakeResult

  void Handshake(HandshakeResult result) const override { results[static_cast<size_t>(result)]->Increment(); }
};

// How a TLS handshake on the client listener ended (tls_handshakes_total{result}).
enum class TlsHandshakeResult { kOk, kFailed, kTimeout };

class Metrics final : public FenceRegistryObserver, public FenceStoreObserver, public ServerTlsObserver {
 public:
  Metrics();

  // The client listener's TLS series (tls_handshakes_total{listener="listen"}, tls_reloads_total):
  // made at start-up when the route file has tls, so a plain proxy's /metrics is as before. Call
  // it before counting a handshake.
  void EnableListenerTls();
  prometheus::Counter& tls_handshakes(TlsHandshakeResult result) {
    return *tls_handshakes_series_[static_cast<size_t>(result)];
  }
  void TlsReloaded(bool ok) const override {
    (ok ? tls_reloads_ok_series_ : tls_reloads_failed_series_)->Increment();
    tls_last_reload_successful_series_->Set(ok ? 1 : 0);
  }
  void TlsCertificateExpiry(std::string_view file, int64_t not_after) const override {
    tls_certificate_expiry_timestamp_seconds_->Add({{"file", std::string(file)}}).Set(static_cast<double>(not_after));
  }

  // Stable pointers, created on first use (thread-safe; not for the per-request path).
  const RouteMetrics& ForRoute(std::string_view route);
  const FenceMetrics& ForFence(std::string_view fence) override;
  void StateWriteFailed() override { state_write_failures_series_->Increment(); }
  const LockServiceMetrics& ForLockService(std::string_view service);
  // Made on first use, by a proxy with an https backend: one without has no such series.
  const UpstreamTlsMetrics& ForUpstreamTls();
  // The shared fence store (fence_store_members, fence_store_seconds{op}).
  void Members(int64_t members) const override { fence_store_members_series_->Set(static_cast<double>(members)); }
  void Observe(std::string_view op, double seconds) const override;

  prometheus::Histogram& state_sync_seconds() { return *state_sync_seconds_series_; }
  prometheus::Gauge& connections() { return *connections_series_; }
  prometheus::Counter& connections_refused() { return *connections_refused_series_; }
  prometheus::Counter& connections_evicted() { return *connections_evicted_series_; }
  prometheus::Counter& access_log_dropped_lines() { return *access_log_dropped_lines_series_; }
  prometheus::Counter& state_compactions(bool ok) {
    return ok ? *state_compactions_series_ : *state_compactions_failed_series_;
  }
  prometheus::Gauge& state_compaction_stall_seconds() { return *state_compaction_stall_series_; }
  prometheus::Gauge& config_last_reload_successful() { return *config_last_reload_successful_series_; }
  prometheus::Gauge& config_last_reload_success_timestamp_seconds() {
    return *config_last_reload_success_timestamp_series_;
  }
  prometheus::Counter& config_reloads() { return *config_reloads_success_series_; }
  prometheus::Counter& config_reloads_failed() { return *config_reloads_failure_series_; }

  // The Prometheus text exposition of everything above.
  std::string Serialize() const;

 private:
  std::shared_ptr<prometheus::Registry> registry_;
#define FP_METRIC_MEMBER(type, member, name, help) prometheus::Family<prometheus::type>* member##_;
  FP_METRIC_FAMILIES(FP_METRIC_MEMBER)
#undef FP_METRIC_MEMBER
  // The series of the families without labels, or with a fixed set of them.
  prometheus::Gauge* fence_store_members_series_;
  std::map<std::string, prometheus::Histogram*, std::less<>> fence_store_seconds_series_;  // by op
  prometheus::Histogram* state_sync_seconds_series_;
  prometheus::Gauge* connections_series_;
  prometheus::Counter* connections_refused_series_;
  prometheus::Counter* connections_evicted_series_;
  prometheus::Counter* access_log_dropped_lines_series_;
  prometheus::Counter* state_write_failures_series_;
  prometheus::Counter* state_compactions_series_;
  prometheus::Counter* state_compactions_failed_series_;
  prometheus::Gauge* state_compaction_stall_series_;
  // Read at each scrape (Serialize).
  prometheus::Gauge* process_resident_memory_series_;
  prometheus::Gauge* allocator_allocated_series_;
  prometheus::Gauge* allocator_held_series_;
  prometheus::Gauge* allocator_free_series_;
  prometheus::Gauge* allocator_cached_series_;
  prometheus::Gauge* config_last_reload_successful_series_;
  prometheus::Gauge* config_last_reload_success_timestamp_series_;
  prometheus::Counter* config_reloads_success_series_;
  prometheus::Counter* config_reloads_failure_series_;
  std::array<prometheus::Counter*, 3> tls_handshakes_series_{};  // by TlsHandshakeResult
  prometheus::Counter* tls_reloads_ok_series_ = nullptr;
  prometheus::Counter* tls_reloads_failed_series_ = nullptr;
  prometheus::Gauge* tls_last_reload_successful_series_ = nullptr;

  std::mutex mu_;
  std::map<std::string, std::unique_ptr<RouteMetrics>, std::less<>> routes_;
  std::map<std::string, std::unique_ptr<FenceMetrics>, std::less<>> fences_;
  std::map<std::string, std::unique_ptr<LockServiceMetrics>, std::less<>> lock_services_;
  std::unique_ptr<UpstreamTlsMetrics> upstream_tls_;
};

}  // namespace fencing
