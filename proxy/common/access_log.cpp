#include "common/access_log.h"

#include "common/log.h"

#include <charconv>
#include <condition_variable>
#include <cstdio>
#include <ctime>
#include <deque>
#include <mutex>
#include <thread>

namespace fencing {
namespace {

void AppendNumber(std::string& out, uint64_t value) {
  char digits[20];
  auto end = std::to_chars(digits, digits + sizeof digits, value).ptr;
  out.append(digits, end);
}

// A JSON string: quotes, backslashes and control bytes escaped; other bytes as they are (what
// reaches the log passed the head checks, or is the route file's own text).
void AppendString(std::string& out, std::string_view text) {
  static constexpr char kHex[] = "0123456789abcdef";
  out.push_back('"');
  size_t plain = 0;
  for (size_t i = 0; i < text.size(); ++i) {
    const auto c = static_cast<unsigned char>(text[i]);
    if (c >= 0x20 && c != '"' && c != '\\' && c != 0x7f) continue;
    out.append(text.data() + plain, i - plain);
    plain = i + 1;
    switch (c) {
      case '"': out.append("\\\""); break;
      case '\\': out.append("\\\\"); break;
      case '\n': out.append("\\n"); break;
      case '\r': out.append("\\r"); break;
      case '\t': out.append("\\t"); break;
      default:
        out.append("\\u00");
        out.push_back(kHex[c >> 4]);
        out.push_back(kHex[c & 15]);
    }
  }
  out.append(text.data() + plain, text.size() - plain);
  out.push_back('"');
}

void AppendKey(std::string& out, std::string_view key) {
  out.append(",\"");
  out.append(key);
  out.append("\":");
}

// "2026-12-02T11:30:05.123Z". The part up to the second is formatted once per second and thread.
void AppendTimestamp(std::string& out, std::chrono::system_clock::time_point now) {
  thread_local std::time_t cached_second = -1;
  thread_local char cached[24];  // "YYYY-MM-DDTHH:MM:SS." (20 bytes; wider years are longer)
  thread_local size_t cached_length = 0;
  const auto since_epoch = now.time_since_epoch();
  const std::time_t second = std::chrono::duration_cast<std::chrono::seconds>(since_epoch).count();
  const auto millis = std::chrono::duration_cast<std::chrono::milliseconds>(since_epoch).count() % 1000;
  if (second != cached_second) {
    std::tm tm{};
    gmtime_r(&second, &tm);
    int n = std::snprintf(cached, sizeof cached, "%04d-%02d-%02dT%02d:%02d:%02d.", tm.tm_year + 1900,
                          tm.tm_mon + 1, tm.tm_mday, tm.tm_hour, tm.tm_min, tm.tm_sec);
    cached_length = n > 0 ? std::min(static_cast<size_t>(n), sizeof cached - 1) : 0;
    cached_second = second;
  }
  out.push_back('"');
  out.append(cached, cached_length);
  out.push_back(static_cast<char>('0' + millis / 100));
  out.push_back(static_cast<char>('0' + millis / 10 % 10));
  out.push_back(static_cast<char>('0' + millis % 10));
  out.append("Z\"");
}

// Seconds with microsecond resolution, fixed notation ("0.000153"): what an operator reads, and
// what every JSON parser takes.
void AppendSeconds(std::string& out, double seconds) {
  char text[32];
  if (!(seconds >= 0) || seconds > 1e9) seconds = 0;  // NaN or nonsense: never an invalid number
  auto end = std::to_chars(text, text + sizeof text, seconds, std::chars_format::fixed, 6).ptr;
  out.append(text, end);
}

// The log thread and its backlog.
class AccessLogWriter {
 public:
  bool Hand(std::string&& batch) {
    std::lock_guard lock(mu_);
    if (queued_bytes_ + batch.size() > kMaxQueuedBytes) return false;
    queued_bytes_ += batch.size();
    queue_.push_back(std::move(batch));
    if (!thread_.joinable()) {
      stopping_ = false;
      thread_ = std::thread([this] { Run(); });
    }
    cv_.notify_one();
    return true;
  }

  void Flush() {
    std::thread thread;
    {
      std::lock_guard lock(mu_);
      stopping_ = true;
      cv_.notify_one();
      thread = std::move(thread_);
    }
    if (thread.joinable()) thread.join();
  }

  ~AccessLogWriter() { Flush(); }

 private:
  void Run() {
    std::unique_lock lock(mu_);
    for (;;) {
      cv_.wait(lock, [this] { return stopping_ || !queue_.empty(); });
      if (queue_.empty()) return;  // stopping, and everything is written
      std::string batch = std::move(queue_.front());
      queue_.pop_front();
      lock.unlock();
      WriteLogLines(batch);  // may block on a slow pipe: only this thread waits
      lock.lock();
      queued_bytes_ -= batch.size();
    }
  }

  std::mutex mu_;
  std::condition_variable cv_;
  std::deque<std::string> queue_;
  size_t queued_bytes_ = 0;
  bool stopping_ = false;
  std::thread thread_;
};

AccessLogWriter& Writer() {
  static AccessLogWriter writer;
  return writer;
}

}  // namespace

void AppendAccessLine(std::string& out, const AccessEntry& e, std::chrono::system_clock::time_point now) {
  out.append("{\"ts\":");
  AppendTimestamp(out, now);
  out.append(",\"level\":\"info\",\"msg\":\"access\"");
  if (e.method) {
    AppendKey(out, "method");
    AppendString(out, *e.method);
  }
  if (e.path) {
    AppendKey(out, "path");
    AppendString(out, *e.path);
  }
  AppendKey(out, "client");
  AppendString(out, e.client);
  AppendKey(out, "status");
  AppendNumber(out, e.status);
  if (e.route) {
    AppendKey(out, "route");
    AppendString(out, *e.route);
  }
  AppendKey(out, "decision");
  AppendString(out, e.decision);
  if (e.token) {
    AppendKey(out, "token");
    AppendNumber(out, *e.token);
  }
  if (e.max_token) {
    AppendKey(out, "max_token");
    AppendNumber(out, *e.max_token);
  }
  if (e.upstream_status) {
    AppendKey(out, "upstream_status");
    AppendNumber(out, e.upstream_status);
  }
  AppendKey(out, "upstream_attempts");
  AppendNumber(out, e.upstream_attempts);
  AppendKey(out, "bytes_in");
  AppendNumber(out, e.bytes_in);
  AppendKey(out, "bytes_out");
  AppendNumber(out, e.bytes_out);
  AppendKey(out, "duration_s");
  AppendSeconds(out, e.duration_s);
  out.append("}\n");
}

uint64_t AccessLogBuffer::Append(const AccessEntry& entry) {
  if (buffer_.capacity() < kFlushBytes) buffer_.reserve(kFlushBytes + 1024);
  AppendAccessLine(buffer_, entry);
  ++lines_;
  return buffer_.size() >= kFlushBytes ? Flush() : 0;
}

uint64_t AccessLogBuffer::Flush() {
  if (buffer_.empty()) return 0;
  const uint64_t lines = lines_;
  lines_ = 0;
  std::string batch;
  batch.swap(buffer_);
  return HandAccessBatch(std::move(batch)) ? 0 : lines;
}

bool HandAccessBatch(std::string&& batch) { return Writer().Hand(std::move(batch)); }

void FlushAccessLog() { Writer().Flush(); }

}  // namespace fencing
