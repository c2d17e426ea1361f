#include "http/framing.h"

#include "http/ascii.h"
#include "http/rules.h"

#include <boost/beast/http/rfc7230.hpp>

namespace fencing {

namespace http = boost::beast::http;

namespace {

FramingCheck Refuse(const char* reason) { return FramingCheck{false, reason}; }

}  // namespace

FramingCheck CheckRequestFraming(const RequestHead& header, OtherFieldCounts* counts) {
  size_t content_lengths = 0;
  size_t transfer_encodings = 0;
  std::string_view content_length;
  std::string_view transfer_encoding;
  for (const auto& field : header) {
    std::string_view value = field.value();
    for (char c : value) {
      if (c == '\r' || c == '\n' || c == '\0') return Refuse("a header value holds CR, LF or NUL");
    }
    if (field.name() == http::field::content_length) {
      ++content_lengths;
      content_length = value;
    } else if (field.name() == http::field::transfer_encoding) {
      ++transfer_encodings;
      transfer_encoding = value;
    } else if (counts && field.name() == http::field::host) {
      ++counts->hosts;
      counts->host = value;
    } else if (counts && field.name() == http::field::upgrade) {
      ++counts->upgrades;
    } else if (counts && field.name() == http::field::connection) {
      ++counts->connections;
    } else if (counts && field.name() == http::field::unknown && counts->underscored.empty() &&
               field.name_string().find('_') != std::string_view::npos) {
      counts->underscored = field.name_string();  // Beast knows no field name with '_'
    }
  }
  if (content_lengths > 1) return Refuse("more than one Content-Length header");
  if (transfer_encodings > 1) return Refuse("more than one Transfer-Encoding header");
  if (content_lengths && transfer_encodings) return Refuse("both Content-Length and Transfer-Encoding");
  if (content_lengths) {
    std::string_view digits = TrimOws(content_length);
    if (digits.empty()) return Refuse("an empty Content-Length");
    if (!IsDecimalDigits(digits)) return Refuse("a Content-Length that is not a single decimal number");
  }
  if (transfer_encodings) {
    if (header.version() < 11) return Refuse("Transfer-Encoding on an HTTP/1.0 request");
    if (!EqualsIgnoreCase(TrimOws(transfer_encoding), "chunked")) {
      return Refuse("a Transfer-Encoding other than exactly 'chunked'");
    }
  }
  return FramingCheck{};
}

std::string_view ProtectedFieldNamedByConnection(const RequestHead& header, std::string_view token_header,
                                                 std::span<const std::string> key_headers) {
  for (const auto& field : header) {
    if (field.name() != http::field::connection) continue;
    for (std::string_view token : http::token_list(field.value())) {
      if (EqualsIgnoreCase(token, token_header)) return token;
      for (const std::string& key_header : key_headers) {
        if (EqualsIgnoreCase(token, key_header)) return token;
      }
      switch (http::string_to_field(token)) {
        case http::field::host:
        case http::field::content_length:
        case http::field::transfer_encoding:
          return token;
        default:
          break;
      }
    }
  }
  return {};
}

}  // namespace fencing
