#include "routing/fence_key.h"

#include "http/ascii.h"
#include "http/rules.h"

#include <array>

namespace fencing {
namespace {

FenceKeyResult Missing(const char* reason) { return FenceKeyResult{FenceKeyStatus::kMissing, {}, reason}; }
FenceKeyResult Malformed(const char* reason) { return FenceKeyResult{FenceKeyStatus::kMalformed, {}, reason}; }

// Which bytes may be in a key, by byte: kKeyChar for IsFenceKeyChar, kUpper besides for A-Z.
enum : unsigned char { kKeyChar = 1, kUpper = 2 };
constexpr std::array<unsigned char, 256> kKeyBytes = [] {
  std::array<unsigned char, 256> table{};
  for (int c = 0; c < 256; ++c) {
    if (IsFenceKeyChar(static_cast<char>(c))) table[c] |= kKeyChar;
    if (IsAsciiUpper(static_cast<char>(c))) table[c] |= kUpper;
  }
  return table;
}();

// Why the text is not a key, most specific first: the walk for a key KeyProblem did not pass.
[[gnu::noinline]] const char* KeyProblemReason(std::string_view key, bool case_insensitive) {
  for (char c : key) {
    if (c == '%') return "the fence key is percent-encoded; keys are taken as written, never decoded";
    if (c == ';') return "the fence key has a path parameter (';'), which a backend may drop";
    if (!IsFenceKeyChar(c)) return "the fence key has a character outside A-Z a-z 0-9 - . _ ~";
    // A backend that folds the path's case reads /objects/K1 and /objects/k1 as one object: two
    // spellings of one lock must not be two fences.
    if (case_insensitive && IsAsciiUpper(c)) {
      return "the fence key has an upper-case letter, and the route matches paths ignoring case "
             "(path_case_insensitive): a case-folding backend reads K and k as one object, so keys "
             "on this route are lower-case";
    }
  }
  return nullptr;
}

// The first reason the text is not a key, most specific first; nullptr when it is one.
// Every request on a keyed route asks, and nearly every key is one: a table look-up per byte
// answers that, inlined into the callers; the walk that says why runs only for a key that is not.
[[gnu::always_inline]] inline const char* KeyProblem(std::string_view key, bool case_insensitive) {
  if (key.empty()) return "the fence key is empty";
  if (key.size() > kMaxFenceKeyLength) return "the fence key is longer than 128 bytes";
  const unsigned char refused = case_insensitive ? kUpper : 0;
  bool clean = true;
  for (char c : key) {
    const unsigned char bits = kKeyBytes[static_cast<unsigned char>(c)];
    clean &= (bits & kKeyChar) != 0 && (bits & refused) == 0;
  }
  return clean ? nullptr : KeyProblemReason(key, case_insensitive);
}

// PathSegmentKey's body, inlined into ExtractFenceKey too: the request path makes one call, not two.
[[gnu::always_inline]] inline FenceKeyResult SegmentKey(unsigned segment, std::string_view prefix, bool case_insensitive,
                                                     std::string_view path) {
  if (segment == 0) return Missing("the route names no path segment");
  // The route matched, so path starts with prefix on a segment boundary; checked again because a
  // key taken from the wrong place would pick another lock's fence.
  const bool under = prefix == "/" ? path.starts_with('/')
                                   : (case_insensitive ? StartsWithIgnoreCase(path, prefix) : path.starts_with(prefix)) &&
                                         (path.size() == prefix.size() || path[prefix.size()] == '/');
  if (!under) return Missing("the path is not under the route's prefix");
  // What follows the prefix: "/k1/part" (or "k1/part" after the root prefix "/").
  std::string_view rest = path.substr(prefix == "/" ? 1 : prefix.size());
  if (prefix != "/") {
    if (rest.empty()) return Missing("the path ends at the route's prefix: the fence key segment is missing");
    rest.remove_prefix(1);  // the '/' after the prefix
  }
  for (unsigned n = 1; n < segment; ++n) {
    const size_t slash = rest.find('/');
    if (slash == std::string_view::npos) {
      return Missing("the path has too few segments after the route's prefix for the fence key");
    }
    rest.remove_prefix(slash + 1);
  }
  // The key's segment: a key is at most 128 bytes, and mostly a few, so a plain walk to its end
  // costs less than memchr's call.
  size_t end = 0;
  while (end < rest.size() && rest[end] != '/') ++end;
  const std::string_view current = rest.substr(0, end);
  // Only the last segment can be empty in a checked path ("/objects/"): nothing is there.
  if (current.empty()) return Missing("the path has too few segments after the route's prefix for the fence key");
  if (const char* problem = KeyProblem(current, case_insensitive)) return Malformed(problem);
  return FenceKeyResult{FenceKeyStatus::kOk, current, ""};
}

}  // namespace

FenceKeyResult PathSegmentKey(unsigned segment, std::string_view prefix, bool case_insensitive, std::string_view path) {
  return SegmentKey(segment, prefix, case_insensitive, path);
}

FenceKeyResult HeaderKey(size_t count, std::string_view first) {
  if (count == 0) return Missing("the fence key header is missing");
  // Two fields: which one a backend (or another proxy) reads is anyone's guess.
  if (count > 1) return Malformed("the fence key header appears more than once");
  const std::string_view key = TrimOws(first);
  if (const char* problem = KeyProblem(key, false)) return Malformed(problem);
  return FenceKeyResult{FenceKeyStatus::kOk, key, ""};
}

FenceKeyResult ExtractFenceKey(const FenceKeySource& source, std::string_view path,
                               const RequestHead& head) {
  switch (source.spec->source) {
    case FenceKeySpec::Source::kNone:
      return Missing("the route has no fence key");
    case FenceKeySpec::Source::kPathSegment:
      return SegmentKey(source.spec->path_segment, source.prefix, source.case_insensitive, path);
    case FenceKeySpec::Source::kHeader: {
      size_t count = 0;
      std::string_view first;
      for (const auto& field : head) {
        if (!EqualsIgnoreCase(field.name_string(), source.spec->header)) continue;
        if (count++ == 0) first = field.value();
      }
      return HeaderKey(count, first);
    }
  }
  return Missing("the route has no fence key");
}

}  // namespace fencing
