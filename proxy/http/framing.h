#pragma once
// Request framing checks made on the parsed header before anything is forwarded. Boost.Beast 1.81
// accepts some ambiguous framings that a backend may read differently (request smuggling), so
// the proxy refuses them itself: 400 and the connection closed.

#include "http/request_head.h"

#include <span>
#include <string>
#include <string_view>

namespace fencing {

struct FramingCheck {
  bool ok = true;
  const char* reason = "";
};

// Counts of other fields the request plan checks, gathered on the same pass over the fields
// (asking Beast's fields for each one is a case-insensitive tree search).
struct OtherFieldCounts {
  size_t hosts = 0;
  std::string_view host;  // the last Host field's value
  size_t upgrades = 0;
  size_t connections = 0;
  std::string_view underscored;  // the first field name containing '_'; empty: none
};

FramingCheck CheckRequestFraming(const RequestHead& header,
                                 OtherFieldCounts* counts = nullptr);

// The first field name a Connection header lists that the proxy's decision or the backend's
// framing rests on: Host, token_header, a fence key header (key_headers: those the routes take
// keys from), Content-Length or Transfer-Encoding (as the client wrote it); empty if none. The
// fields Connection names are dropped before forwarding (hop-by-hop), so a client must not be
// able to strip these that way.
std::string_view ProtectedFieldNamedByConnection(const RequestHead& header,
                                                 std::string_view token_header,
                                                 std::span<const std::string> key_headers = {});

}  // namespace fencing
