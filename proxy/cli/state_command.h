#pragma once
// `fencing-proxy state show|set`: offline inspection and repair of a state file.

#include <cstdint>
#include <string>

namespace fencing {

// Prints {"fences": {"NAME": MAX, ...}} on stdout. Returns the process exit code.
int RunStateShow(const std::string& state_file);

// Sets FENCE's max_token to TOKEN (up or down: this is the repair path), refusing while another
// process holds the file's lock. Prints the old and new value. Returns the process exit code.
int RunStateSet(const std::string& state_file, const std::string& fence, const std::string& token);

}  // namespace fencing
