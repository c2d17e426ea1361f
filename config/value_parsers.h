#pragma once
// Checks for single route-file values, kept apart from the YAML walk so each rule reads on its
// own. Every function returns an empty string on success, or what is wrong (without the key
// name: the loader adds the key and the position).

#include <chrono>
#include <cstdint>
#include <string>
#include <string_view>

#include "config/config.h"

namespace fencing::config_internal {

// Longest timeout the loader accepts; longer ones are almost certainly typos, and it keeps
// "now + timeout" far from overflowing any clock.
inline constexpr std::chrono::milliseconds kMaxTimeout = std::chrono::hours(24);
inline constexpr uint64_t kMinHeaderBytes = 1024;
inline constexpr uint64_t kMaxHeaderBytes = 1024 * 1024;  // Beast's header limit is 32-bit
inline constexpr unsigned kMaxThreads = 256;

std::string CheckDuration(std::string_view text, std::chrono::milliseconds* out);
std::string CheckSize(std::string_view text, uint64_t* out);
// A non-negative decimal integer, no sign, no units.
std::string CheckUnsigned(std::string_view text, uint64_t* out);

// "host:port" or "[v6]:port" for a listener.
std::string CheckListenAddress(std::string_view text, HostPort* out);
// "http://host[:port][/]": nothing after the authority but an optional "/".
std::string CheckBackendUrl(std::string_view text, HostPort* out);

std::string CheckName(std::string_view text);  // route and fence names
std::string CheckPrefix(std::string_view text);
std::string CheckHeaderName(std::string_view text);
std::string CheckMethod(std::string_view text);

bool IsWildcardHost(std::string_view host);
bool IsLoopbackHost(std::string_view host);

size_t EditDistance(std::string_view a, std::string_view b);

}  // namespace fencing::config_internal
