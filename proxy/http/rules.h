#pragma once
// Small rules that the route file, the state file, the command line, the fences and the request
// path all apply, each written once here so that they cannot drift apart.

#include <array>
#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>

namespace fencing {

// ---- decimal numbers (token header, Content-Length, config values, `state set` arguments)

// Digits in 2^64-1, the largest uint64_t.
inline constexpr size_t kMaxU64Digits = 20;

// Non-empty and nothing but ASCII digits: no sign, no whitespace, no other Unicode digits.
bool IsDecimalDigits(std::string_view text);

// All of text as a decimal number, at most 2^64-1. False (and *out untouched) on anything else;
// leading zeros are allowed.
bool ParseDecimalU64(std::string_view text, uint64_t* out);

// ---- RFC 9110 syntax

// tchar: the characters of a method or a field name.
constexpr bool IsTokenChar(char c) {
  if ((c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9')) return true;
  return std::string_view("!#$%&'*+-.^_`|~").find(c) != std::string_view::npos;
}
// What a field value (and a chunk extension) may hold: visible ASCII, obs-text (0x80-0xFF),
// space and tab; no other control byte.
constexpr bool IsFieldValueChar(char c) {
  const auto u = static_cast<unsigned char>(c);
  return u == '\t' || u == ' ' || (u > 0x20 && u != 0x7f);
}
// The two classes above as one table, for the loops over every byte of a message head.
inline constexpr unsigned char kTokenByte = 1, kValueByte = 2;
inline constexpr std::array<unsigned char, 256> kHeadByteClasses = [] {
  std::array<unsigned char, 256> classes{};
  for (int c = 0; c < 256; ++c) {
    if (IsFieldValueChar(static_cast<char>(c))) classes[c] |= kValueByte;
    if (IsTokenChar(static_cast<char>(c))) classes[c] |= kTokenByte;
  }
  return classes;
}();
constexpr bool IsTokenByte(unsigned char c) { return kHeadByteClasses[c] & kTokenByte; }
constexpr bool IsValueByte(unsigned char c) { return kHeadByteClasses[c] & kValueByte; }
// Where the first byte of `text` is that IsFieldValueChar refuses (a control byte, CR and LF
// among them), or text.size(). Eight bytes at a time: values are most of a head's bytes.
size_t FindNonFieldValueChar(std::string_view text);
// One or more tchar.
bool IsToken(std::string_view text);

// Optional whitespace (SP, HTAB) around a field value removed.
std::string_view TrimOws(std::string_view text);

// ---- route and fence names: [a-z0-9_-]{1,kMaxNameLength}. A fence name is written into the
// state file, whose record size bounds it.

inline constexpr size_t kMaxNameLength = 64;

constexpr bool IsNameChar(char c) { return (c >= 'a' && c <= 'z') || (c >= '0' && c <= '9') || c == '_' || c == '-'; }
bool IsValidName(std::string_view name);

// ---- fence keys: 1-kMaxFenceKeyLength bytes of RFC 3986 unreserved characters
// (A-Z a-z 0-9 - . _ ~). Never percent-decoded: '%' is not a key character, so one key has one
// spelling. Written into the state file beside its fence's name.

inline constexpr size_t kMaxFenceKeyLength = 128;

constexpr bool IsFenceKeyChar(char c) {
  return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '-' || c == '.' ||
         c == '_' || c == '~';
}
bool IsValidFenceKey(std::string_view key);
// The deepest fence_key path_segment a route file may name: deeper is a misconfiguration, and the
// bound keeps the segment walk short.
inline constexpr unsigned kMaxFenceKeySegment = 64;

// A '/'-separated path's segments after its leading '/': "" when none is empty, "." or "..",
// else why ("must not ..."). Route prefixes and znode paths share it: a backend or ZooKeeper
// would read such a path as another one, or refuse it.
std::string PathSegmentsProblem(std::string_view path);
// "" for an absolute znode path a lock may have (below the root, no trailing '/', no control
// characters, PathSegmentsProblem's segments, not under /zookeeper), else why. The route file
// checks a verify lock's template with it, the ZooKeeper client each lock it is asked about.
std::string ZnodePathProblem(std::string_view path);

// ---- client identities (contract "Transport security"): what a verified client certificate
// says about its holder, as a route's `writers` name it and as the identity header carries it.
// An identity is 1-kMaxIdentityLength bytes of visible ASCII other than ',' (the identity header
// lists them comma-separated, so a SAN with a comma, a space or a control byte is no identity).

inline constexpr size_t kMaxIdentityLength = 2048;
inline constexpr std::string_view kDnsIdentityPrefix = "dns:";  // a DNS SAN "NAME" is "dns:NAME"

bool IsValidIdentity(std::string_view identity);
// A `writers` entry admits an identity when it is the same bytes, or when it ends in '*' and the
// identity starts with what comes before the '*' ("*" alone admits every identity).
bool WriterAdmits(std::string_view writer, std::string_view identity);

}  // namespace fencing
