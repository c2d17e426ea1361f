#pragma once
// `fencing-proxy state show|set`: offline inspection and repair of a state file.

#include <cstdint>
#include <string>

namespace fencing {

// What `state show` prints: every fence, or one fence (--fence), its keys (--keys), one key (--key).
struct StateShowOptions {
  std::string fence;   // empty: every fence
  std::string key;     // with fence: that key only
  bool keys = false;   // with fence: list every key
};

// Without a fence: {"fences": {"NAME": MAX, ...}} (a keyed fence's MAX is its floor), plus
// "keys": {"NAME": {"count": N, "floor": F}} for the fences that have keys.
// With --fence NAME: {"fence": NAME, "max"|"floor": M, "key_count": N} (a keyed fence says
// "floor"), and with --keys its keys as "keys": {"KEY": MAX, ...} (sorted, streamed).
// With --fence NAME --key KEY: {"fence", "key", "max"}; an unknown key prints "known": false and
// the floor, and exits 1. Returns the process exit code.
int RunStateShow(const std::string& state_file, const StateShowOptions& options = {});

// Sets FENCE's max_token to TOKEN (up or down: this is the repair path), or with a key that
// key's max; without a key on a keyed fence that is its floor. Refuses while another process
// holds the file's lock. Prints the old and new value. Returns the process exit code.
int RunStateSet(const std::string& state_file, const std::string& fence, const std::string& token,
                const std::string& key = {});

}  // namespace fencing
