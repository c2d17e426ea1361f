#pragma once
// Request framing checks made on the parsed header before anything is forwarded. Boost.Beast 1.81
// accepts some ambiguous framings that a backend may read differently (request smuggling), so
// the proxy refuses them itself: 400 and the connection closed.

#include <boost/beast/http/message.hpp>

namespace fencing {

struct FramingCheck {
  bool ok = true;
  const char* reason = "";
};

// Counts of other fields the request plan checks, gathered on the same pass over the fields
// (asking Beast's fields for each one is a case-insensitive tree search).
struct OtherFieldCounts {
  size_t hosts = 0;
  size_t upgrades = 0;
};

FramingCheck CheckRequestFraming(const boost::beast::http::request_header<>& header, OtherFieldCounts* counts = nullptr);

}  // namespace fencing
