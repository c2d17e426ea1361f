#include "common/log.h"

#include <boost/json/serialize.hpp>

#include <atomic>
#include <chrono>
#include <cstdio>
#include <algorithm>
#include <cerrno>
#include <cstring>
#include <ctime>
#include <mutex>
#include <string>
#include <unistd.h>

namespace fencing {
namespace {

std::atomic<int> g_level{static_cast<int>(LogLevel::kInfo)};
std::mutex g_stderr_mu;

constexpr std::string_view kLevelNames[] = {"debug", "info", "warn", "error"};

}  // namespace

char* FormatTimestamp(char* out, std::chrono::system_clock::time_point now) {
  thread_local std::time_t cached_second = -1;
  thread_local char cached[32];  // "YYYY-MM-DDTHH:MM:SS." (20 bytes for four-digit years)
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
  std::memcpy(out, cached, cached_length);
  out += cached_length;
  *out++ = static_cast<char>('0' + millis / 100);
  *out++ = static_cast<char>('0' + millis / 10 % 10);
  *out++ = static_cast<char>('0' + millis % 10);
  *out++ = 'Z';
  return out;
}

void SetLogLevel(LogLevel level) { g_level.store(static_cast<int>(level), std::memory_order_relaxed); }

bool ParseLogLevel(std::string_view text, LogLevel* level) {
  for (int i = 0; i < 4; ++i) {
    if (text == kLevelNames[i]) {
      *level = static_cast<LogLevel>(i);
      return true;
    }
  }
  return false;
}

bool LogEnabled(LogLevel level) {
  return static_cast<int>(level) >= g_level.load(std::memory_order_relaxed);
}

void Log(LogLevel level, std::string_view message, boost::json::object fields) {
  if (!LogEnabled(level)) return;
  boost::json::object line;
  char ts[kTimestampBound];
  line["ts"] = std::string_view(ts, static_cast<size_t>(FormatTimestamp(ts, std::chrono::system_clock::now()) - ts));
  line["level"] = kLevelNames[static_cast<int>(level)];
  line["msg"] = message;
  for (auto& field : fields) line[field.key()] = std::move(field.value());
  std::string text = boost::json::serialize(line);
  text.push_back('\n');
  WriteLogLines(text);
}

void WriteLogLines(std::string_view lines) {
  std::lock_guard lock(g_stderr_mu);
  const char* p = lines.data();
  size_t left = lines.size();
  while (left > 0) {
    ssize_t n = ::write(STDERR_FILENO, p, left);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) break;  // stderr is gone or refuses: the lines are lost, nothing else can be done
    p += n;
    left -= static_cast<size_t>(n);
  }
}

}  // namespace fencing
