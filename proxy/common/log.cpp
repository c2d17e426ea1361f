#include "common/log.h"

#include <boost/json/serialize.hpp>

#include <atomic>
#include <chrono>
#include <cstdio>
#include <cerrno>
#include <ctime>
#include <mutex>
#include <string>
#include <unistd.h>

namespace fencing {
namespace {

std::atomic<int> g_level{static_cast<int>(LogLevel::kInfo)};
std::mutex g_stderr_mu;

constexpr std::string_view kLevelNames[] = {"debug", "info", "warn", "error"};

std::string Rfc3339Now() {
  auto now = std::chrono::system_clock::now();
  auto secs = std::chrono::system_clock::to_time_t(now);
  auto millis = std::chrono::duration_cast<std::chrono::milliseconds>(now.time_since_epoch()).count() % 1000;
  std::tm tm{};
  gmtime_r(&secs, &tm);
  char buf[64];
  std::snprintf(buf, sizeof buf, "%04d-%02d-%02dT%02d:%02d:%02d.%03dZ", tm.tm_year + 1900, tm.tm_mon + 1,
                tm.tm_mday, tm.tm_hour, tm.tm_min, tm.tm_sec, static_cast<int>(millis));
  return buf;
}

}  // namespace

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
  line["ts"] = Rfc3339Now();
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
