#include "lockservice/lock_services.h"

#include "common/log.h"

#include <chrono>

namespace fencing {

namespace {

constexpr double kErrorLogInterval = 10.0;  // seconds

double SteadySeconds() {
  return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count();
}

}  // namespace

Verification Judge(const HolderAnswer& answer, uint64_t token) {
  Verification v;
  switch (answer.status) {
    case HolderAnswer::Status::kHeld:
      v.holder = answer.holder;
      if (answer.token == token) {
        v.verdict = Verdict::kVerified;
      } else {
        v.verdict = Verdict::kNotHolder;
        v.holder_token = answer.token;
      }
      return v;
    case HolderAnswer::Status::kFree:
      v.verdict = Verdict::kNoHolder;
      v.holder = answer.holder;  // why nobody can hold it, when the lock cannot exist
      return v;
    case HolderAnswer::Status::kUnavailable:
      v.verdict = Verdict::kUnavailable;
      v.error = answer.error.empty() ? "the lock service gave no reason" : answer.error;
      return v;
  }
  return v;
}

LockServiceEntry::LockServiceEntry(const LockServiceConfig& config, std::unique_ptr<LockService> client,
                                   const LockServiceObserver* observer)
    : config_(config), client_(std::move(client)), observer_(observer) {}

void LockServiceEntry::Record(const Verification& verification, double seconds) {
  if (observer_) observer_->Answered(verification.verdict, seconds);
  bool log = false;
  uint64_t unavailable = 0;
  {
    std::lock_guard lock(mu_);
    switch (verification.verdict) {
      case Verdict::kVerified:
        ++verified_;
        break;
      case Verdict::kNotHolder:
      case Verdict::kNoHolder:
        ++rejected_;
        break;
      case Verdict::kUnavailable: {
        unavailable = ++unavailable_;
        const double now = SteadySeconds();
        // One line when the service starts failing or its error changes, then one per
        // interval: an outage under load must not flood the log.
        log = verification.error != last_error_ || now - last_logged_at_ >= kErrorLogInterval;
        if (log) last_logged_at_ = now;
        last_error_ = verification.error;
        last_error_at_ = now;
        break;
      }
    }
  }
  if (log) {  // not under mu_: a slow log pipe must not hold up the other workers' verdicts
    LogWarn("lock service could not be asked; raises on its routes get 503",
            {{"lock_service", config_.name}, {"error", verification.error}, {"unavailable", unavailable}});
  }
}

LockServiceEntry::Status LockServiceEntry::status() const {
  Status s;
  s.name = config_.name;
  s.kind = config_.kind == LockServiceConfig::Kind::kEtcd ? "etcd" : "zookeeper";
  std::lock_guard lock(mu_);
  s.last_error = last_error_;
  if (!last_error_.empty()) s.last_error_age_seconds = SteadySeconds() - last_error_at_;
  s.verified = verified_;
  s.rejected = rejected_;
  s.unavailable = unavailable_;
  return s;
}

LockServiceSet::LockServiceSet(const std::vector<LockServiceConfig>& services, const Factory& make,
                               const ObserverFor& observer) {
  entries_.reserve(services.size());
  for (const LockServiceConfig& service : services) {
    std::string why;
    std::unique_ptr<LockService> client = make(service, &why);
    if (!client) {
      if (error_.empty()) error_ = "lock service '" + service.name + "' cannot start: " + why;
      continue;
    }
    entries_.push_back(
        std::make_unique<LockServiceEntry>(service, std::move(client), observer ? observer(service.name) : nullptr));
  }
}

LockServiceSet::~LockServiceSet() { Stop(); }

LockServiceEntry* LockServiceSet::Find(std::string_view name) {
  for (auto& entry : entries_) {
    if (entry->name() == name) return entry.get();
  }
  return nullptr;
}

std::vector<LockServiceEntry::Status> LockServiceSet::Statuses() const {
  std::vector<LockServiceEntry::Status> out;
  out.reserve(entries_.size());
  for (const auto& entry : entries_) out.push_back(entry->status());
  return out;
}

void LockServiceSet::Stop() {
  for (auto& entry : entries_) entry->client().Stop();
}

}  // namespace fencing
