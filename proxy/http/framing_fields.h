#pragma once
// What the fields that frame a message or its connection say (Content-Length, Transfer-Encoding,
// Connection, Proxy-Connection), read as Beast's basic_parser::do_field reads them, with the same
// error for the same fault. Request heads (request_head.h) and response heads
// (response_parser.h) take their fields through it, so the two directions cannot read a length
// or a keep-alive differently.

#include <boost/beast/http/field.hpp>
#include <boost/system/error_code.hpp>

#include <cstdint>
#include <optional>
#include <string_view>

namespace fencing {

struct FramingFields {
  std::optional<uint64_t> content_length;  // one length, or a list of equal ones ("5, 5")
  bool chunked = false;                    // Transfer-Encoding's first "chunked" is its last coding
  bool transfer_encoding = false;          // a Transfer-Encoding field came, chunked or not
  bool connection_close = false;           // "close" in Connection or Proxy-Connection
  bool connection_keep_alive = false;      // "keep-alive" there

  // Takes one field (others change nothing): a malformed Connection list is bad_value; a bad
  // Content-Length, or one after chunked, bad_content_length; two different lengths
  // multiple_content_length; a Transfer-Encoding after a chunked one or after a Content-Length,
  // bad_transfer_encoding.
  boost::system::error_code Take(boost::beast::http::field id, std::string_view value);

  // HTTP/1.1 and later without "close", HTTP/1.0 with "keep-alive" (version: 10, 11).
  bool KeepAlive(unsigned version) const { return version >= 11 ? !connection_close : connection_keep_alive; }
};

}  // namespace fencing
