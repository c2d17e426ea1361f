#include "store/layout.h"

#include "http/rules.h"

#include <cinttypes>
#include <cstdio>

namespace fencing::store {

namespace {
constexpr std::string_view kWithdrawn = "withdrawn";
}  // namespace

std::string TokenText(uint64_t token) {
  char buf[24];
  std::snprintf(buf, sizeof buf, "%020" PRIu64, token);
  return buf;
}

bool ParseToken(std::string_view text, uint64_t* token) {
  return text.size() == kMaxU64Digits && ParseDecimalU64(text, token);
}

std::string MemberId(int64_t lease) {
  char buf[24];
  std::snprintf(buf, sizeof buf, "%016" PRIx64, uint64_t(lease));
  return buf;
}

bool ParseTokenAnd(std::string_view text, uint64_t* token, std::string* word) {
  if (text.size() < kMaxU64Digits + 2 || text[kMaxU64Digits] != ' ') return false;
  if (!ParseToken(text.substr(0, kMaxU64Digits), token)) return false;
  std::string_view rest = text.substr(kMaxU64Digits + 1);
  if (rest.empty() || rest.find(' ') != std::string_view::npos) return false;
  *word = std::string(rest);
  return true;
}

bool SplitTarget(std::string_view target, std::string* fence, std::string* key) {
  size_t slash = target.find('/');
  std::string_view f = target.substr(0, slash);
  std::string_view k = slash == std::string_view::npos ? std::string_view() : target.substr(slash + 1);
  if (f.empty() || (slash != std::string_view::npos && (k.empty() || k.find('/') != std::string_view::npos))) {
    return false;
  }
  *fence = std::string(f);
  *key = std::string(k);
  return true;
}

std::string PendingText(const PendingValue& value) {
  return TokenText(value.token) + " " + (value.withdrawn ? std::string(kWithdrawn) : value.member);
}

bool ParsePending(std::string_view text, PendingValue* out) {
  std::string word;
  if (!ParseTokenAnd(text, &out->token, &word)) return false;
  out->withdrawn = word == kWithdrawn;
  out->member = out->withdrawn ? std::string() : std::move(word);
  return true;
}

std::string AckText(uint64_t token, int64_t pending_revision) {
  return TokenText(token) + " " + std::to_string(pending_revision);
}

bool ParseAck(std::string_view text, uint64_t* token, int64_t* pending_revision) {
  std::string word;
  uint64_t revision = 0;
  if (!ParseTokenAnd(text, token, &word) || !ParseDecimalU64(word, &revision) || revision > uint64_t(INT64_MAX)) {
    return false;
  }
  *pending_revision = int64_t(revision);
  return true;
}

Layout::Layout(std::string prefix)
    : prefix_(std::move(prefix)),
      root_(prefix_ + "/"),
      members_(root_ + "members/"),
      roster_(root_ + "roster/"),
      max_(root_ + "max/"),
      pending_(root_ + "pending/"),
      ack_(root_ + "ack/"),
      probe_(root_ + "probe/") {}

Layout::Key Layout::Classify(std::string_view key) const {
  Key k;
  auto target = [&k](std::string_view rest, Key::Kind kind) {
    if (SplitTarget(rest, &k.fence, &k.key)) {
      k.kind = kind;
      k.target = std::string(rest);
    }
  };
  auto member = [&k](std::string_view rest, Key::Kind kind) {
    if (!rest.empty() && rest.find('/') == std::string_view::npos) {
      k.kind = kind;
      k.member = std::string(rest);
    }
  };
  if (key.starts_with(members_)) {
    member(key.substr(members_.size()), Key::Kind::kMember);
  } else if (key.starts_with(roster_)) {
    member(key.substr(roster_.size()), Key::Kind::kRoster);
  } else if (key.starts_with(max_)) {
    target(key.substr(max_.size()), Key::Kind::kMax);
  } else if (key.starts_with(pending_)) {
    target(key.substr(pending_.size()), Key::Kind::kPending);
  } else if (key.starts_with(probe_)) {
    member(key.substr(probe_.size()), Key::Kind::kProbe);
  } else if (key.starts_with(ack_)) {
    std::string_view rest = key.substr(ack_.size());
    size_t slash = rest.find('/');
    if (slash != std::string_view::npos && slash > 0) {
      target(rest.substr(slash + 1), Key::Kind::kAck);
      if (k.kind == Key::Kind::kAck) k.member = std::string(rest.substr(0, slash));
    }
  }
  return k;
}

}  // namespace fencing::store
