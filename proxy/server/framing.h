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

FramingCheck CheckRequestFraming(const boost::beast::http::request_header<>& header);

}  // namespace fencing
