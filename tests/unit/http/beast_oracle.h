#pragma once
// The differential oracle for RequestHead::Parse (http/request_head.h): Beast's own request
// parser, fed the same head as Session::ReadHead fed it before RequestHead replaced it. Used by
// request_head_test and by the fuzz targets fuzz_head_parser and fuzz_request_head.

#include "http/request_head.h"

#include <boost/asio/buffer.hpp>
#include <boost/beast/http/empty_body.hpp>
#include <boost/beast/http/error.hpp>
#include <boost/beast/http/parser.hpp>

#include <algorithm>
#include <cstdint>
#include <stdexcept>
#include <string>
#include <string_view>
#include <vector>

namespace fencing {

// Empty when RequestHead::Parse and Beast's parser read `head` alike: the same error (or none),
// and then the same method, target, version, fields (id, name, value), Content-Length, chunked
// and keep-alive. Otherwise what differs. `head` is one that CheckRawHead passed.
//
// Two differences are by design:
//  - Beast's fields put a repeated field next to the earlier ones of its name; RequestHead keeps
//    the order of the head (as it forwards them). So the fields are compared grouped by name,
//    each name's values in order.
//  - Beast says need_more for a request line too short for a version ("GET / \r\n\r\n": it
//    reads the next line as the rest of the version); RequestHead says bad_version. Both refuse.
inline std::string CompareWithBeast(std::string_view head, uint64_t max_body) {
  namespace http = boost::beast::http;
  RequestHead ours;
  const boost::system::error_code our_ec = ours.Parse(head, max_body);

  http::request_parser<http::empty_body> beast;
  beast.header_limit(static_cast<uint32_t>(head.size() + 1));
  beast.body_limit(max_body);
  boost::system::error_code beast_ec;
  size_t used = 0;
  try {
    used = beast.put(boost::asio::buffer(head.data(), head.size()), beast_ec);
  } catch (const std::length_error&) {
    return "";  // Beast's fields hold names and values below 64 KiB; RequestHead has no such limit
  }
  if (!beast_ec && !beast.is_header_done()) beast_ec = http::error::partial_message;
  if (beast_ec == http::error::need_more && our_ec) return "";
  if (our_ec != beast_ec) {
    return "error: ours '" + our_ec.message() + "', Beast's '" + beast_ec.message() + "'";
  }
  if (our_ec) return "";
  if (used != head.size()) return "Beast's parser took " + std::to_string(used) + " of the head's bytes";

  const auto& req = beast.get();
  if (ours.method() != req.method()) return "method verb";
  if (ours.method_string() != std::string_view(req.method_string())) return "method string";
  if (ours.target() != std::string_view(req.target())) return "target";
  if (ours.version() != req.version()) return "version";
  if (ours.content_length().has_value() != beast.content_length().has_value() ||
      (ours.content_length() && *ours.content_length() != *beast.content_length())) {
    return "Content-Length";
  }
  if (ours.chunked() != beast.chunked()) return "chunked";
  if (ours.keep_alive() != beast.keep_alive()) return "keep-alive";
  struct Seen {
    std::string key;  // the name in lower case
    http::field id;
    std::string name;
    std::string value;
    bool operator<(const Seen& other) const { return key < other.key; }
    bool operator==(const Seen& other) const {
      return key == other.key && id == other.id && name == other.name && value == other.value;
    }
  };
  auto seen = [](http::field id, std::string_view name, std::string_view value) {
    std::string key(name);
    for (char& c : key) c = static_cast<char>(c >= 'A' && c <= 'Z' ? c - 'A' + 'a' : c);
    return Seen{key, id, std::string(name), std::string(value)};
  };
  std::vector<Seen> mine, theirs;
  for (const auto& field : ours) mine.push_back(seen(field.name(), field.name_string(), field.value()));
  for (const auto& field : req) theirs.push_back(seen(field.name(), field.name_string(), field.value()));
  std::stable_sort(mine.begin(), mine.end());
  std::stable_sort(theirs.begin(), theirs.end());
  if (mine.size() != theirs.size()) return "field count";
  for (size_t i = 0; i < mine.size(); ++i) {
    if (!(mine[i] == theirs[i])) {
      return "field '" + mine[i].name + ": " + mine[i].value + "' against '" + theirs[i].name + ": " + theirs[i].value + "'";
    }
  }
  return "";
}

}  // namespace fencing
