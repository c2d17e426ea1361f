#include "http/framing_fields.h"

#include "http/ascii.h"
#include "http/rules.h"

#include <boost/beast/http/error.hpp>
#include <boost/beast/http/rfc7230.hpp>

#include <algorithm>
#include <iterator>

namespace fencing {

namespace http = boost::beast::http;
using boost::system::error_code;

error_code FramingFields::Take(http::field id, std::string_view value) {
  switch (id) {
    case http::field::connection:
    case http::field::proxy_connection: {
      if (IsToken(value)) {  // the usual one-token list, read without the list reader
        if (EqualsIgnoreCase(value, "close")) connection_close = true;
        if (EqualsIgnoreCase(value, "keep-alive")) connection_keep_alive = true;
        return {};
      }
      const http::opt_token_list list{value};
      if (!http::validate_list(list)) return http::error::bad_value;
      for (std::string_view token : list) {
        if (EqualsIgnoreCase(token, "close")) connection_close = true;
        if (EqualsIgnoreCase(token, "keep-alive")) connection_keep_alive = true;
      }
      return {};
    }
    case http::field::content_length: {
      if (chunked) return http::error::bad_content_length;
      if (uint64_t length = 0; ParseDecimalU64(value, &length)) {  // the usual single number
        if (content_length && *content_length != length) return http::error::multiple_content_length;
        content_length = length;
        return {};
      }
      // A list of equal numbers ("5, 5") is one length; every element must be a number.
      size_t unread = 1 + static_cast<size_t>(std::count(value.begin(), value.end(), ','));
      const http::opt_token_list list{value};
      if (list.begin() == list.end() || !http::validate_list(list)) return http::error::bad_content_length;
      for (std::string_view token : list) {
        uint64_t length = 0;
        if (!ParseDecimalU64(token, &length)) return http::error::bad_content_length;  // as Beast's parse_dec
        --unread;
        if (content_length && *content_length != length) return http::error::multiple_content_length;
        content_length = length;
      }
      if (unread != 0) return http::error::bad_content_length;
      return {};
    }
    case http::field::transfer_encoding: {
      if (chunked || content_length) return http::error::bad_transfer_encoding;
      transfer_encoding = true;
      // Chunked when the first "chunked" coding is the last one.
      const http::token_list codings{value};
      auto it = std::find_if(codings.begin(), codings.end(),
                             [](std::string_view coding) { return EqualsIgnoreCase(coding, "chunked"); });
      if (it != codings.end() && std::next(it) == codings.end()) chunked = true;
      return {};
    }
    default:
      return {};
  }
}

}  // namespace fencing
