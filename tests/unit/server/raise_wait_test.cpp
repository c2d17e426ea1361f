// RaiseInbox: the waiters of one raise, spread over several workers, resolved by one thread (as
// the state writer resolves a group commit) all get the admission, on their own worker's
// thread, with one eventfd wake per worker; a waiter resolved on its own thread is resolved in
// place.

#include <gtest/gtest.h>

#include <boost/asio/executor_work_guard.hpp>
#include <boost/asio/post.hpp>

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <future>
#include <memory>
#include <mutex>
#include <thread>
#include <vector>

#include "fence/fence.h"
#include "server/raise_wait.h"

namespace fencing {
namespace {

namespace asio = boost::asio;
using namespace std::chrono_literals;

// Records what the fence asks to persist; the test answers.
class RecordingPersister final : public FencePersister {
 public:
  void Persist(Fence&, uint64_t token) override { asked.push_back(token); }
  std::vector<uint64_t> asked;  // written on the worker that admitted first, read after a join
};

// One worker: an io_context on its own thread, with its inbox.
struct TestWorker {
  asio::io_context io{BOOST_ASIO_CONCURRENCY_HINT_UNSAFE_IO};
  std::optional<RaiseInbox> inbox;
  asio::executor_work_guard<asio::io_context::executor_type> work{io.get_executor()};
  std::thread thread;
  TestWorker() {
    inbox.emplace(io);
    thread = std::thread([this] { io.run(); });
  }
  ~TestWorker() {
    io.stop();
    thread.join();
    inbox.reset();
  }
  template <typename F>
  auto RunOn(F f) {  // f on the worker's thread; returns its result
    std::packaged_task<decltype(f())()> task(std::move(f));
    auto result = task.get_future();
    asio::post(io, [&task] { task(); });
    return result.get();
  }
};

// What a waiter saw when its wait ended, recorded on the worker's thread.
struct Outcome {
  bool on_worker_thread = false;
  bool resolved = false;
  Admission admission = Admission::kFailed;
  uint64_t max_token = 0;
};

struct Results {
  std::mutex mu;
  std::condition_variable cv;
  std::vector<Outcome> outcomes;
  bool WaitFor(size_t n) {
    std::unique_lock lock(mu);
    return cv.wait_for(lock, 10s, [&] { return outcomes.size() >= n; });
  }
};

// On the worker's thread: a waiter for token on fence, its timer waiting up to 30 s (a
// resolution cancels it).
void StartWaiter(TestWorker& w, Fence& fence, uint64_t token, Results& results,
                 std::vector<std::shared_ptr<RaiseWait>>& keep) {
  auto wait = std::make_shared<RaiseWait>(w.io.get_executor(), *w.inbox);
  keep.push_back(wait);
  AdmitResult r = fence.Admit(token, *wait);
  ASSERT_EQ(r.admission, Admission::kWaiting);
  wait->timer().expires_after(30s);
  wait->timer().async_wait([&w, &results, wait](boost::system::error_code) {
    Outcome o{w.io.get_executor().running_in_this_thread(), wait->resolved(), wait->admission(), wait->max_token()};
    std::lock_guard lock(results.mu);
    results.outcomes.push_back(o);
    results.cv.notify_all();
  });
}

TEST(RaiseInboxTest, GroupCommitResolvesWaitersOnEveryWorkerWithOneWakeEach) {
  constexpr int kWorkers = 3;
  constexpr int kWaitersEach = 8;
  constexpr int kRaises = 3;  // one after another: each inbox is drained and woken again
  RecordingPersister persister;
  std::atomic<bool> failed{false};
  Fence fence("f", 10, persister, failed, [] { return 0.0; }, nullptr);
  std::vector<std::unique_ptr<TestWorker>> workers;
  for (int i = 0; i < kWorkers; ++i) workers.push_back(std::make_unique<TestWorker>());
  for (int raise = 1; raise <= kRaises; ++raise) {
    const uint64_t token = 10 + raise;
    Results results;
    std::vector<std::vector<std::shared_ptr<RaiseWait>>> keep(kWorkers);
    for (int i = 0; i < kWorkers; ++i) {
      workers[i]->RunOn([&, i] {
        for (int k = 0; k < kWaitersEach; ++k) StartWaiter(*workers[i], fence, token, results, keep[i]);
        return 0;
      });
    }
    ASSERT_EQ(persister.asked.size(), size_t(raise));
    ASSERT_EQ(persister.asked.back(), token);
    EXPECT_EQ(fence.Snapshot().waiting, uint64_t(kWorkers * kWaitersEach));

    // Every worker busy while the raise is answered: each inbox gathers all its resolutions
    // before its worker can drain any.
    std::promise<void> release;
    std::shared_future<void> released = release.get_future().share();
    std::atomic<int> blocked{0};
    for (auto& w : workers) {
      asio::post(w->io, [released, &blocked] {
        ++blocked;
        released.wait();
      });
    }
    while (blocked.load() != kWorkers) std::this_thread::sleep_for(1ms);
    fence.OnPersisted(token, PersistResult::kDurable);  // this thread plays the state writer
    for (auto& w : workers) EXPECT_EQ(w->inbox->wakes(), uint64_t(raise));
    release.set_value();

    ASSERT_TRUE(results.WaitFor(kWorkers * kWaitersEach)) << "raise " << raise;
    {
      std::lock_guard lock(results.mu);
      for (const Outcome& o : results.outcomes) {
        EXPECT_TRUE(o.on_worker_thread);
        EXPECT_TRUE(o.resolved);
        EXPECT_EQ(o.admission, Admission::kAdmitted);
        EXPECT_EQ(o.max_token, token);
      }
    }
    FenceSnapshot s = fence.Snapshot();
    EXPECT_EQ(s.max_token, token);
    EXPECT_EQ(s.inflight, uint64_t(kWorkers * kWaitersEach));
    EXPECT_EQ(s.waiting, 0u);
    for (int i = 0; i < kWorkers * kWaitersEach; ++i) fence.Release();
    EXPECT_TRUE(fence.Idle());
  }
}

TEST(RaiseInboxTest, NewerRaiseOnOneWorkerMakesWaitersOnOthersStale) {
  RecordingPersister persister;
  std::atomic<bool> failed{false};
  Fence fence("f", 10, persister, failed, [] { return 0.0; }, nullptr);
  TestWorker a, b;
  Results results;
  std::vector<std::shared_ptr<RaiseWait>> keep_a, keep_b;
  a.RunOn([&] {
    for (int k = 0; k < 4; ++k) StartWaiter(a, fence, 11, results, keep_a);
    return 0;
  });
  // On b's thread: a newer holder. a's waiters are resolved from b's thread through a's inbox.
  b.RunOn([&] {
    StartWaiter(b, fence, 12, results, keep_b);
    return 0;
  });
  ASSERT_TRUE(results.WaitFor(4));
  {
    std::lock_guard lock(results.mu);
    for (const Outcome& o : results.outcomes) {
      EXPECT_TRUE(o.on_worker_thread);
      EXPECT_EQ(o.admission, Admission::kStale);
      EXPECT_EQ(o.max_token, 12u);
    }
  }
  fence.OnPersisted(11, PersistResult::kDurable);  // the first raise, written meanwhile
  fence.OnPersisted(12, PersistResult::kDurable);  // asked for once 11 was written
  ASSERT_TRUE(results.WaitFor(5));
  std::lock_guard lock(results.mu);
  EXPECT_EQ(results.outcomes.back().admission, Admission::kAdmitted);
  EXPECT_EQ(results.outcomes.back().max_token, 12u);
  EXPECT_EQ(persister.asked, (std::vector<uint64_t>{11, 12}));
  fence.Release();
}

TEST(RaiseInboxTest, ResolvedOnItsOwnThreadInPlace) {
  TestWorker w;
  bool resolved_at_once = w.RunOn([&] {
    auto wait = std::make_shared<RaiseWait>(w.io.get_executor(), *w.inbox);
    wait->Resolve(Admission::kFailed, 7);
    return wait->resolved() && wait->admission() == Admission::kFailed && wait->max_token() == 7;
  });
  EXPECT_TRUE(resolved_at_once);
  EXPECT_EQ(w.inbox->wakes(), 0u);
}

}  // namespace
}  // namespace fencing
