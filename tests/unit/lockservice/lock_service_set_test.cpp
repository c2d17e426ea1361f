// Judge (the verdict on one raise) and the set of lock services (/fences' view of them).
#include "lockservice/lock_services.h"

#include <gtest/gtest.h>

#include <memory>
#include <string>
#include <vector>

namespace fencing {
namespace {

TEST(JudgeTest, OnlyTheHoldersOwnNumberVerifies) {
  HolderAnswer held{HolderAnswer::Status::kHeld, 42, "/locks/a/694d", ""};
  EXPECT_EQ(Judge(held, 42).verdict, Verdict::kVerified);
  EXPECT_EQ(Judge(held, 43).verdict, Verdict::kNotHolder) << "above the holder's number is not the holder's";
  EXPECT_EQ(Judge(held, 41).verdict, Verdict::kNotHolder);
  EXPECT_EQ(Judge(held, 43).holder_token, 42u);
  EXPECT_EQ(Judge(HolderAnswer{HolderAnswer::Status::kFree, 0, "", ""}, 42).verdict, Verdict::kNoHolder);
  Verification down = Judge(HolderAnswer{HolderAnswer::Status::kUnavailable, 42, "", ""}, 42);
  EXPECT_EQ(down.verdict, Verdict::kUnavailable) << "no answer is never a yes, whatever the number";
  EXPECT_FALSE(down.error.empty());
}

// A client that answers nothing: the set only owns it, stops it and names it.
class SilentService final : public LockService {
 public:
  explicit SilentService(int* stops) : stops_(stops) {}
  void FindHolder(std::string_view, Done) override {}
  void Stop() override { ++*stops_; }

 private:
  int* stops_;
};

struct CountingObserver final : LockServiceObserver {
  mutable std::vector<Verdict> verdicts;
  void Answered(Verdict verdict, double) const override { verdicts.push_back(verdict); }
};

TEST(LockServiceSetTest, RecordsVerdictsAndTheLastErrorPerService) {
  std::vector<LockServiceConfig> configs(2);
  configs[0].name = "main-etcd";
  configs[0].kind = LockServiceConfig::Kind::kEtcd;
  configs[1].name = "main-zk";
  configs[1].kind = LockServiceConfig::Kind::kZooKeeper;
  int stops = 0;
  CountingObserver etcd_observer;
  LockServiceSet set(
      configs, [&](const LockServiceConfig&, std::string*) { return std::make_unique<SilentService>(&stops); },
      [&](std::string_view name) -> const LockServiceObserver* { return name == "main-etcd" ? &etcd_observer : nullptr; });

  EXPECT_TRUE(set.error().empty());
  ASSERT_NE(set.Find("main-etcd"), nullptr);
  ASSERT_NE(set.Find("main-zk"), nullptr);
  EXPECT_EQ(set.Find("main"), nullptr);
  LockServiceEntry& etcd = *set.Find("main-etcd");
  etcd.Record(Verification{Verdict::kVerified, 0, "k", ""}, 0.001);
  etcd.Record(Verification{Verdict::kNotHolder, 3, "k", ""}, 0.001);
  etcd.Record(Verification{Verdict::kNoHolder, 0, "", ""}, 0.001);
  etcd.Record(Verification{Verdict::kUnavailable, 0, "", "connection refused"}, 1.0);
  set.Find("main-zk")->Record(Verification{Verdict::kVerified, 0, "n", ""}, 0.002);

  std::vector<LockServiceEntry::Status> statuses = set.Statuses();
  ASSERT_EQ(statuses.size(), 2u);
  EXPECT_EQ(statuses[0].name, "main-etcd");
  EXPECT_EQ(statuses[0].kind, "etcd");
  EXPECT_EQ(statuses[0].verified, 1u);
  EXPECT_EQ(statuses[0].rejected, 2u) << "another holder's number and no holder are both refusals";
  EXPECT_EQ(statuses[0].unavailable, 1u);
  EXPECT_EQ(statuses[0].last_error, "connection refused");
  EXPECT_GE(statuses[0].last_error_age_seconds, 0.0);
  EXPECT_EQ(statuses[1].kind, "zookeeper");
  EXPECT_EQ(statuses[1].verified, 1u);
  EXPECT_TRUE(statuses[1].last_error.empty());
  EXPECT_EQ(etcd_observer.verdicts.size(), 4u) << "every verdict reaches the metrics";

  set.Stop();
  EXPECT_EQ(stops, 2) << "Stop ends every client";
}

TEST(LockServiceSetTest, AClientThatCannotStartIsAnErrorNamingIt) {
  std::vector<LockServiceConfig> configs(1);
  configs[0].name = "secure-etcd";
  LockServiceSet set(
      configs,
      [](const LockServiceConfig&, std::string* error) -> std::unique_ptr<LockService> {
        *error = "cannot read password_file /run/secrets/etcd: No such file or directory";
        return nullptr;
      },
      nullptr);
  EXPECT_EQ(set.error(),
            "lock service 'secure-etcd' cannot start: cannot read password_file /run/secrets/etcd: No such file or "
            "directory");
  EXPECT_EQ(set.Find("secure-etcd"), nullptr);
  EXPECT_TRUE(set.Statuses().empty());
}

}  // namespace
}  // namespace fencing
