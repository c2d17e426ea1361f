#pragma once
// The settings of fuzz_h2_server's server Connection, shared with h2_seeds: the seeds are
// recorded against a server with the same windows and limits, so a recorded client never sends
// more than the fuzzed server allows.

#include "h2/connection.h"

namespace fencing::fuzz {

inline h2::Settings H2FuzzSettings() {
  h2::Settings s;
  s.initial_window_size = 16384;  // small, so a client's data fills it
  s.connection_window_size = 65535;
  s.max_concurrent_streams = 16;
  s.max_header_list_bytes = 4096;
  return s;
}

}  // namespace fencing::fuzz
