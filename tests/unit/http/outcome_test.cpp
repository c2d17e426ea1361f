// The outcome list (http/outcome.h): enum and label come from one list, every label is the
// contract's, and none is used twice.

#include <gtest/gtest.h>

#include <set>
#include <string_view>
#include <utility>

#include "http/outcome.h"

namespace fencing {
namespace {

TEST(OutcomeTest, EachOutcomeHasItsContractLabel) {
  const std::pair<Outcome, std::string_view> expected[] = {
      {Outcome::kForwarded, "forwarded"},
      {Outcome::kUnfenced, "unfenced"},
      {Outcome::kRejectedStale, "rejected_stale"},
      {Outcome::kRejectedMissing, "rejected_missing"},
      {Outcome::kRejectedMalformed, "rejected_malformed"},
      {Outcome::kObservedStale, "observed_stale"},
      {Outcome::kObservedMissing, "observed_missing"},
      {Outcome::kObservedMalformed, "observed_malformed"},
      {Outcome::kRaiseFailed, "raise_failed"},
      {Outcome::kUpstreamError, "upstream_error"},
      {Outcome::kRejectedPath, "rejected_path"},
      {Outcome::kUnmatched, "unmatched"},
      {Outcome::kRejectedRequest, "rejected_request"},
      {Outcome::kRejectedJump, "rejected_jump"},
      {Outcome::kObservedJump, "observed_jump"},
      {Outcome::kRejectedKey, "rejected_key"},
      {Outcome::kRejectedKeyLimit, "rejected_key_limit"},
      {Outcome::kRejectedUnverified, "rejected_unverified"},
      {Outcome::kObservedUnverified, "observed_unverified"},
      {Outcome::kLockServiceUnavailable, "lock_service_unavailable"},
      {Outcome::kFenceStoreUnavailable, "fence_store_unavailable"},
      {Outcome::kRejectedWriter, "rejected_writer"},
  };
  EXPECT_EQ(std::size(expected), static_cast<size_t>(Outcome::kCount)) << "a new outcome needs a row here";
  for (const auto& [outcome, label] : expected) EXPECT_EQ(OutcomeName(outcome), label);
}

TEST(OutcomeTest, LabelsAreUniquePrometheusLabelValues) {
  std::set<std::string_view> seen;
  for (size_t i = 0; i < static_cast<size_t>(Outcome::kCount); ++i) {
    const std::string_view label = OutcomeName(static_cast<Outcome>(i));
    EXPECT_TRUE(seen.insert(label).second) << label << " names two outcomes";
    EXPECT_FALSE(label.empty()) << i;
    for (char c : label) EXPECT_TRUE((c >= 'a' && c <= 'z') || c == '_') << label;
  }
}

}  // namespace
}  // namespace fencing
