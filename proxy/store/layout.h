#pragma once
// The shared fence store's keys in etcd, and the one classifier of a key that the full read and
// the watch both use. Under the prefix P (the route file's fence_store.prefix):
//
//   P/members/<member>          {"host","pid","started_unix"}   with the member's lease
//   P/roster/<member>           the same                        no lease: taken off only after
//                                                               the member key has gone and
//                                                               timeouts.request has passed
//   P/max/<target>              <token>                         the committed max
//   P/pending/<target>          <token> <member>                a raise under way (no lease:
//                                                               it outlives its raiser until
//                                                               committed or withdrawn)
//                               <token> withdrawn               a raise given up: <token> is
//                                                               the target's floor
//   P/ack/<member>/<target>     <token> <pending's revision>    with the acker's lease
//   P/probe/<member>            <counter>                       with the member's lease: a
//                                                               write its own watch must show
//
// <target> is a fence ("orders") or a key of a keyed fence ("objects/k17"); <token> is 20
// decimal digits (bytewise order is numeric order); <member> is the member's lease ID in 16
// lower-case hex digits.

#include <cstdint>
#include <string>
#include <string_view>

namespace fencing::store {

std::string TokenText(uint64_t token);
// Exactly 20 decimal digits. False for anything else.
bool ParseToken(std::string_view text, uint64_t* token);
std::string MemberId(int64_t lease);
// "<20-digit token> <word>" (a pending's raiser, an ack's revision). False when malformed.
bool ParseTokenAnd(std::string_view text, uint64_t* token, std::string* word);
// "fence" or "fence/key". False when malformed.
bool SplitTarget(std::string_view target, std::string* fence, std::string* key);

// A pending key's value.
struct PendingValue {
  uint64_t token = 0;
  std::string member;      // the raiser; empty when withdrawn
  bool withdrawn = false;  // given up: token is the floor
  bool operator==(const PendingValue&) const = default;
};
std::string PendingText(const PendingValue& value);
bool ParsePending(std::string_view text, PendingValue* out);

// An ack key's value: the token and the revision of the pending it acknowledges.
std::string AckText(uint64_t token, int64_t pending_revision);
bool ParseAck(std::string_view text, uint64_t* token, int64_t* pending_revision);

class Layout {
 public:
  explicit Layout(std::string prefix);  // as configured, without the trailing slash

  const std::string& prefix() const { return prefix_; }
  const std::string& root() const { return root_; }  // prefix + "/": every key is under it
  std::string Member(std::string_view member) const { return members_ + std::string(member); }
  std::string Roster(std::string_view member) const { return roster_ + std::string(member); }
  const std::string& roster_dir() const { return roster_; }
  std::string Max(std::string_view target) const { return max_ + std::string(target); }
  std::string Pending(std::string_view target) const { return pending_ + std::string(target); }
  std::string Ack(std::string_view member, std::string_view target) const {
    return ack_ + std::string(member) + "/" + std::string(target);
  }
  std::string Probe(std::string_view member) const { return probe_ + std::string(member); }

  struct Key {
    enum class Kind { kMember, kRoster, kMax, kPending, kAck, kProbe, kOther } kind = Kind::kOther;
    std::string member;  // kMember, kRoster, kAck, kProbe
    std::string target;  // kMax, kPending, kAck
    std::string fence, key;  // of target
  };
  // kOther: not a key of the layout, or malformed (a target that is not fence or fence/key).
  Key Classify(std::string_view key) const;

 private:
  std::string prefix_, root_, members_, roster_, max_, pending_, ack_, probe_;
};

}  // namespace fencing::store
