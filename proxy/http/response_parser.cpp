#include "http/response_parser.h"

#include <boost/beast/http/error.hpp>

#include <algorithm>
#include <cstring>

namespace fencing {

namespace http = boost::beast::http;

namespace {

// Room for most response heads' field names and values at once: one allocation, not one per
// doubling.
constexpr size_t kTextReserve = 512;

}  // namespace

void ResponseParser::on_response_impl(int code, BeastView reason, int version, boost::system::error_code&) {
  fields_.Reserve(kTextReserve);  // (a parser reads one message)
  status_ = static_cast<unsigned>(code);
  version_ = static_cast<unsigned>(version);
  reason_ = fields_.Keep(reason);
}

void ResponseParser::on_field_impl(http::field id, BeastView name, BeastView value,
                                   boost::system::error_code&) {
  // Copied: the views are into the read buffer (or, for a folded value, Beast's scratch space).
  fields_.Add(id, name, value);
}

size_t ResponseParser::TakeBody(std::string_view body, boost::system::error_code& ec) {
  const size_t n = std::min(body.size(), room_);
  if (n != 0) std::memcpy(body_, body.data(), n);
  body_ += n;
  room_ -= n;
  if (n != body.size()) ec = http::error::need_buffer;
  return n;
}

}  // namespace fencing
