#include "http/request_head.h"

#include "http/rules.h"

#include <boost/beast/http/error.hpp>


namespace fencing {

namespace http = boost::beast::http;
using boost::system::error_code;

void RequestHead::method(http::verb verb) {
  method_ = verb;
  method_at_ = fields_.Keep(http::to_string(verb));
}

void RequestHead::method_string(std::string_view method) {
  method_ = http::string_to_verb(method);
  method_at_ = fields_.Keep(method);
}

error_code RequestHead::Parse(std::string_view head, uint64_t max_body) {
  fields_.Clear();
  framing_ = FramingFields{};

  // The request line: CheckRawHead let through exactly two spaces and no control byte.
  const std::string_view text = fields_.Text(fields_.Keep(head));
  const size_t line_end = text.find("\r\n");
  if (line_end == std::string_view::npos) return http::error::partial_message;
  const size_t first_space = text.find(' ');
  const size_t second_space = first_space < line_end ? text.find(' ', first_space + 1) : std::string_view::npos;
  if (first_space == 0 || first_space >= line_end) return http::error::bad_method;
  if (second_space >= line_end || second_space == first_space + 1) return http::error::bad_target;
  method_at_ = fields_.SpanOf(text.substr(0, first_space));
  target_at_ = fields_.SpanOf(text.substr(first_space + 1, second_space - first_space - 1));
  const std::string_view version = text.substr(second_space + 1, line_end - second_space - 1);
  if (version == "HTTP/1.1") {
    version_ = 11;
  } else if (version == "HTTP/1.0") {
    version_ = 10;
  } else {
    return http::error::bad_version;
  }
  method_ = http::string_to_verb(method_string());

  // The fields, a line each (CheckRawHead: no obs-fold, a ':' after a token name, no control
  // byte in a value), up to the empty line.
  size_t at = line_end + 2;
  for (;;) {
    const size_t end = text.find("\r\n", at);
    if (end == std::string_view::npos) return http::error::partial_message;
    if (end == at) break;  // the empty line
    const size_t colon = text.find(':', at);
    if (colon == std::string_view::npos || colon >= end || colon == at) return http::error::bad_field;
    const std::string_view name = text.substr(at, colon - at);
    const std::string_view value = TrimOws(text.substr(colon + 1, end - colon - 1));
    const http::field id = http::string_to_field(name);
    if (error_code ec = framing_.Take(id, value)) return ec;
    fields_.AddKept(id, fields_.SpanOf(name), fields_.SpanOf(value));
    at = end + 2;
  }
  if (at + 2 != text.size()) return http::error::partial_message;  // bytes after the head's end
  if (framing_.content_length && *framing_.content_length > max_body) return http::error::body_limit;
  return {};
}

}  // namespace fencing
