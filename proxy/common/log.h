#pragma once
// JSON-lines logging on stderr: one object per line, "ts", "level", "msg", then fields.

#include <boost/json/object.hpp>

#include <chrono>
#include <cstddef>
#include <string_view>

namespace fencing {

enum class LogLevel { kDebug = 0, kInfo = 1, kWarn = 2, kError = 3 };

void SetLogLevel(LogLevel level);
bool ParseLogLevel(std::string_view text, LogLevel* level);
bool LogEnabled(LogLevel level);

// Writes one line atomically (a single write(2) of the whole line).
void Log(LogLevel level, std::string_view message, boost::json::object fields = {});

// Every log line's "ts": "2026-12-02T11:30:05.123Z" (UTC, milliseconds), written at out, which has
// room for kTimestampBound bytes; returns its end. The part up to the second is formatted once per
// second and thread.
inline constexpr size_t kTimestampBound = 40;
char* FormatTimestamp(char* out, std::chrono::system_clock::time_point now);

// Writes whole lines to stderr under the lock Log() writes under, so that lines from several
// threads never interleave (a write to a pipe or file larger than PIPE_BUF is not atomic).
void WriteLogLines(std::string_view lines);

inline void LogInfo(std::string_view m, boost::json::object f = {}) { Log(LogLevel::kInfo, m, std::move(f)); }
inline void LogWarn(std::string_view m, boost::json::object f = {}) { Log(LogLevel::kWarn, m, std::move(f)); }
inline void LogError(std::string_view m, boost::json::object f = {}) { Log(LogLevel::kError, m, std::move(f)); }

}  // namespace fencing
