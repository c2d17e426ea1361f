#pragma once
// The one thread that touches the state file after start-up. I/O threads submit raises; the
// writer takes every raise queued so far, appends them with one write and one fdatasync
// (group commit), then completes each raise. No I/O thread ever waits on the disk.

#include "state/state_store.h"

#include <condition_variable>
#include <cstdint>
#include <deque>
#include <functional>
#include <mutex>
#include <string>
#include <thread>

namespace fencing {

class StateWriter {
 public:
  // Called on the writer thread once the raise is durable (ok) or has failed (!ok).
  using Done = std::function<void(bool ok)>;
  // Observes the seconds one write+sync took (state_sync_seconds); may be empty.
  using SyncObserver = std::function<void(double seconds)>;

  StateWriter(StateStore& store, SyncObserver observe_sync);
  ~StateWriter();  // stops the thread after completing everything already submitted

  void Submit(std::string fence, uint64_t token, Done done);
  bool failed() const;

 private:
  struct Pending {
    FenceRecord record;
    Done done;
  };
  void Run();

  StateStore& store_;
  SyncObserver observe_sync_;
  mutable std::mutex mu_;
  std::condition_variable cv_;
  std::deque<Pending> queue_;
  bool stopping_ = false;
  bool failed_ = false;
  bool exited_ = false;  // Run() has returned: a late Submit is answered by the caller's thread
  std::thread thread_;
};

}  // namespace fencing
