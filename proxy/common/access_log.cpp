#include "common/access_log.h"

#include "common/log.h"

#include <algorithm>
#include <array>
#include <cstring>
#include <condition_variable>
#include <deque>
#include <mutex>
#include <thread>

namespace fencing {
namespace {

// The formatting writes through a raw pointer into room reserved up front (AccessLineBound):
// appending piece by piece to a std::string cost some 3,700 instructions a line, this a fifth.

char* Put(char* out, std::string_view text) {
  std::memcpy(out, text.data(), text.size());
  return out + text.size();
}

// A literal: its length is known here, so the copy is a few moves, not a call.
template <size_t N>
char* Put(char* out, const char (&literal)[N]) {
  std::memcpy(out, literal, N - 1);
  return out + N - 1;
}

// Decimal digits written straight into place, two at a time.
char* PutNumber(char* out, uint64_t value) {
  static constexpr char kPairs[] =
      "00010203040506070809101112131415161718192021222324252627282930313233343536373839"
      "40414243444546474849505152535455565758596061626364656667686970717273747576777879"
      "8081828384858687888990919293949596979899";
  size_t length = 1;
  for (uint64_t rest = value; rest >= 10; rest /= 10) ++length;
  char* end = out + length;
  char* p = end;
  while (value >= 100) {
    const auto pair = static_cast<size_t>(value % 100) * 2;
    value /= 100;
    *--p = kPairs[pair + 1];
    *--p = kPairs[pair];
  }
  if (value >= 10) {
    *--p = kPairs[value * 2 + 1];
    *--p = kPairs[value * 2];
  } else {
    *--p = static_cast<char>('0' + value);
  }
  return end;
}

// The bytes a JSON string cannot hold as they are: control bytes, DEL, quote and backslash.
constexpr std::array<bool, 256> kNeedsEscape = [] {
  std::array<bool, 256> table{};
  for (int c = 0; c < 0x20; ++c) table[c] = true;
  table['"'] = table['\\'] = table[0x7f] = true;
  return table;
}();

// A JSON string: quotes, backslashes and control bytes escaped; other bytes as they are (what
// reaches the log passed the head checks, or is the route file's own text). At most 6 bytes out
// per byte in, plus the quotes. Runs without such bytes are copied whole.
char* PutString(char* out, std::string_view text) {
  static constexpr char kHex[] = "0123456789abcdef";
  *out++ = '"';
  const char* p = text.data();
  const char* end = p + text.size();
  while (p != end) {
    const char* run = p;
    while (p != end && !kNeedsEscape[static_cast<unsigned char>(*p)]) ++p;
    out = Put(out, std::string_view(run, static_cast<size_t>(p - run)));
    if (p == end) break;
    const auto c = static_cast<unsigned char>(*p++);
    *out++ = '\\';
    switch (c) {
      case '"': *out++ = '"'; break;
      case '\\': *out++ = '\\'; break;
      case '\n': *out++ = 'n'; break;
      case '\r': *out++ = 'r'; break;
      case '\t': *out++ = 't'; break;
      default:
        *out++ = 'u';
        *out++ = '0';
        *out++ = '0';
        *out++ = kHex[c >> 4];
        *out++ = kHex[c & 15];
    }
  }
  *out++ = '"';
  return out;
}

char* PutTimestamp(char* out, std::chrono::system_clock::time_point now) {
  *out++ = '"';
  out = FormatTimestamp(out, now);
  *out++ = '"';
  return out;
}

// Seconds with microsecond resolution, fixed notation ("0.000153"): what an operator reads, and
// what every JSON parser takes.
char* PutMicroseconds(char* out, uint64_t micros) {
  out = PutNumber(out, micros / 1000000);
  *out++ = '.';
  uint64_t fraction = micros % 1000000;
  for (int i = 5; i >= 0; --i) {
    out[i] = static_cast<char>('0' + fraction % 10);
    fraction /= 10;
  }
  return out + 6;
}

// Everything but the strings' own bytes: keys, punctuation, numbers (20 digits each), the
// timestamp (kTimestampBound).
constexpr size_t kFixedBound = 512;

size_t StringBound(const std::optional<std::string_view>& text) { return text ? text->size() * 6 : 0; }

// The log thread and its backlog.
class AccessLogWriter {
 public:
  bool Hand(AccessBatch&& batch) {
    std::lock_guard lock(mu_);
    if (queued_bytes_ + batch.size > kMaxQueuedBytes) return false;
    queued_bytes_ += batch.size;
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
      AccessBatch batch = std::move(queue_.front());
      queue_.pop_front();
      lock.unlock();
      WriteLogLines(std::string_view(batch.data.get(), batch.size));  // may block on a slow pipe: only this thread waits
      lock.lock();
      queued_bytes_ -= batch.size;
    }
  }

  std::mutex mu_;
  std::condition_variable cv_;
  std::deque<AccessBatch> queue_;
  size_t queued_bytes_ = 0;
  bool stopping_ = false;
  std::thread thread_;
};

AccessLogWriter& Writer() {
  static AccessLogWriter writer;
  return writer;
}

}  // namespace

size_t AccessLineBound(const AccessEntry& e) {
  return kFixedBound + StringBound(e.method) + StringBound(e.path) + StringBound(e.client) + StringBound(e.route) +
         StringBound(e.decision) + (e.identity.empty() ? 0 : sizeof(",\"identity\":") + StringBound(e.identity));
}

char* FormatAccessLine(char* out, const AccessEntry& e, std::chrono::system_clock::time_point now) {
  out = Put(out, "{\"ts\":");
  out = PutTimestamp(out, now);
  out = Put(out, ",\"level\":\"info\",\"msg\":\"access\"");
  if (e.method) out = PutString(Put(out, ",\"method\":"), *e.method);
  if (e.path) out = PutString(Put(out, ",\"path\":"), *e.path);
  out = PutString(Put(out, ",\"client\":"), e.client);
  if (!e.identity.empty()) out = PutString(Put(out, ",\"identity\":"), e.identity);
  out = PutNumber(Put(out, ",\"status\":"), e.status);
  if (e.route) out = PutString(Put(out, ",\"route\":"), *e.route);
  out = PutString(Put(out, ",\"decision\":"), e.decision);
  if (e.token) out = PutNumber(Put(out, ",\"token\":"), *e.token);
  if (e.max_token) out = PutNumber(Put(out, ",\"max_token\":"), *e.max_token);
  if (e.upstream_status) out = PutNumber(Put(out, ",\"upstream_status\":"), e.upstream_status);
  out = PutNumber(Put(out, ",\"upstream_attempts\":"), e.upstream_attempts);
  out = PutNumber(Put(out, ",\"bytes_in\":"), e.bytes_in);
  out = PutNumber(Put(out, ",\"bytes_out\":"), e.bytes_out);
  out = PutMicroseconds(Put(out, ",\"duration_s\":"), e.duration_us);
  return Put(out, "}\n");
}

void AppendAccessLine(std::string& out, const AccessEntry& e, std::chrono::system_clock::time_point now) {
  const size_t old = out.size();
  out.resize(old + AccessLineBound(e));
  char* end = FormatAccessLine(out.data() + old, e, now);
  out.resize(static_cast<size_t>(end - out.data()));
}

uint64_t AccessLogBuffer::Append(const AccessEntry& entry) {
  const size_t bound = AccessLineBound(entry);
  uint64_t dropped = 0;
  if (size_ + bound > capacity_) {
    // A fresh batch (the last one was handed over), or a line too long for what is left: that
    // batch goes first.
    dropped = Flush();
    capacity_ = std::max(kFlushBytes + kFixedBound, bound);
    data_.reset(new char[capacity_]);  // not zeroed: only what is formatted is handed over
  }
  char* end = FormatAccessLine(data_.get() + size_, entry, std::chrono::system_clock::now());
  size_ = static_cast<size_t>(end - data_.get());
  ++lines_;
  if (size_ >= kFlushBytes) dropped += Flush();
  return dropped;
}

uint64_t AccessLogBuffer::Flush() {
  if (size_ == 0) return 0;
  const uint64_t lines = lines_;
  AccessBatch batch{std::move(data_), size_};
  lines_ = 0;
  size_ = capacity_ = 0;
  return HandAccessBatch(std::move(batch)) ? 0 : lines;
}

bool HandAccessBatch(AccessBatch&& batch) { return Writer().Hand(std::move(batch)); }

void FlushAccessLog() { Writer().Flush(); }

}  // namespace fencing
