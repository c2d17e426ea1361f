#pragma once
// The access log: one JSON line per request on stderr, with the same fields as before it was
// buffered, but never a write(2) on a worker's thread.
//
//   worker thread                                  log thread (one per process)
//   FormatAccessLine into AccessLogBuffer (its own) --batch-->       write(2) on stderr,
//   flushed at 32 KiB, at each sweep tick (<= 1 s)                    whole batches, under the
//   and when the worker stops                                         lock Log() writes under
//
// A worker never waits for the log: when the log thread is more than kMaxQueuedBytes behind (a
// slow pipe, a stopped reader) a batch is dropped whole and its lines are counted instead
// (fencing_proxy_access_log_dropped_lines_total). Lines stay whole: a batch holds whole lines and
// is written under the same lock as the other log lines. FlushAccessLog() at exit writes what
// is queued.

#include <chrono>
#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <string_view>

namespace fencing {

// One request's line. The strings are only read while the line is formatted.
struct AccessEntry {
  std::optional<std::string_view> method;  // absent: no request head was parsed
  std::optional<std::string_view> path;
  std::string_view client;
  std::string_view identity;  // the client certificate's identities, comma-separated; empty: not printed
  unsigned status = 0;
  std::optional<std::string_view> route;
  std::string_view decision;
  std::optional<uint64_t> token;
  std::optional<uint64_t> max_token;
  unsigned upstream_status = 0;  // 0: not printed
  unsigned upstream_attempts = 0;
  uint64_t bytes_in = 0;
  uint64_t bytes_out = 0;
  uint64_t duration_us = 0;  // printed as duration_s, in seconds with six decimals
};

// The entry as one JSON line (newline included): "ts", "level":"info", "msg":"access", then the
// fields in the order of AccessEntry. FormatAccessLine writes it at out, which has room for
// AccessLineBound(entry) bytes, and returns its end; AppendAccessLine appends it to a string.
size_t AccessLineBound(const AccessEntry& entry);
char* FormatAccessLine(char* out, const AccessEntry& entry, std::chrono::system_clock::time_point now);
void AppendAccessLine(std::string& out, const AccessEntry& entry,
                      std::chrono::system_clock::time_point now = std::chrono::system_clock::now());

// Whole lines handed to the log thread.
struct AccessBatch {
  std::unique_ptr<char[]> data;
  size_t size = 0;
};

// A worker's lines not yet handed to the log thread. Only its owner's thread touches it.
class AccessLogBuffer {
 public:
  static constexpr size_t kFlushBytes = 32 * 1024;

  // Formats the line; hands the batch over once it reaches kFlushBytes. Returns the lines the
  // log thread had no room for (0 nearly always).
  uint64_t Append(const AccessEntry& entry);
  // Hands over what is buffered (the sweep tick, and the worker's end). Returns lines dropped.
  uint64_t Flush();
  size_t buffered_bytes() const { return size_; }

 private:
  std::unique_ptr<char[]> data_;  // none while nothing is buffered: an idle worker holds nothing
  size_t size_ = 0;
  size_t capacity_ = 0;
  uint64_t lines_ = 0;
};

// The log thread's backlog limit: a batch that would take it past this is dropped.
inline constexpr size_t kMaxQueuedBytes = 4 * 1024 * 1024;

// Hands a batch of whole lines to the log thread (started on first use). Returns false, and
// keeps nothing, when the backlog is full.
bool HandAccessBatch(AccessBatch&& batch);

// Writes everything handed over so far and stops the log thread (a later batch starts it again).
void FlushAccessLog();

}  // namespace fencing
