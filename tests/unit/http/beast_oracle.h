#pragma once
// The differential oracles for the proxy's own message parsers, against the Beast parsers they
// replaced:
//  - CompareWithBeast: RequestHead::Parse (http/request_head.h) against Beast's request parser,
//    fed the same head as Session::ReadHead fed it before RequestHead replaced it. Used by
//    request_head_test and by the fuzz targets fuzz_head_parser and fuzz_request_head.
//  - CompareResponseWithBeast: ResponseParser (http/response_parser.h) against
//    response_parser<buffer_body>, both fed a response in pieces through a small body buffer as
//    the exchange's relay feeds them. Used by response_parser_test and fuzz_head_parser.

#include "http/request_head.h"
#include "http/response_parser.h"

#include <boost/asio/buffer.hpp>
#include <boost/beast/http/buffer_body.hpp>
#include <boost/beast/http/empty_body.hpp>
#include <boost/beast/http/error.hpp>
#include <boost/beast/http/parser.hpp>
#include <boost/beast/http/status.hpp>

#include <algorithm>
#include <optional>
#include <utility>
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

// ---- responses

// What a parser made of a response.
struct ResponseRead {
  boost::system::error_code ec;
  bool done = false;
  bool header_done = false;
  unsigned status = 0;
  std::string reason;
  std::vector<std::pair<std::string, std::string>> fields;  // the head's, in order
  std::string body;
  bool chunked = false;
  bool keep_alive = false;
  std::optional<uint64_t> content_length;
};

namespace detail {

// Feeds `wire` in pieces of `step` bytes, the body through a buffer of `room` bytes, as the
// exchange's relay does (one buffer filled by as many puts as the bytes allow, then handed on
// whole), then the backend's close.
template <typename Parser, typename SetBuffer, typename Left>
void FeedResponse(Parser& parser, std::string_view wire, size_t step, size_t room, SetBuffer set_buffer, Left left,
                  ResponseRead& out) {
  namespace http = boost::beast::http;
  std::string pending;
  std::vector<char> buffer(room);
  size_t at = 0;
  while (!parser.is_done()) {
    const size_t pending_before = pending.size();
    const bool all_in = at >= wire.size();
    if (at < wire.size()) {
      pending.append(wire.substr(at, step));
      at += step;
    } else {
      if (!pending.empty() && !parser.is_header_done()) break;  // a head that never ends
      if (pending.empty()) {
        if (parser.got_some()) parser.put_eof(out.ec);
        break;
      }
    }
    for (;;) {
      set_buffer(parser, buffer.data(), buffer.size());
      for (;;) {
        const size_t used = parser.put(boost::asio::buffer(pending), out.ec);
        pending.erase(0, used);
        if (out.ec == http::error::need_buffer) out.ec = {};
        if (out.ec || parser.is_done() || used == 0 || left(parser) == 0) break;
      }
      out.body.append(buffer.data(), buffer.size() - left(parser));
      if (out.ec == http::error::need_more) out.ec = {};
      if (out.ec || parser.is_done() || left(parser) != 0) break;  // full: hand it on, fill it again
    }
    if (out.ec) break;
    if (all_in && pending.size() == pending_before) {  // nothing more is taken: the close
      parser.put_eof(out.ec);
      break;
    }
  }
  out.done = parser.is_done();
  out.header_done = parser.is_header_done();
  if (out.header_done) {
    out.chunked = parser.chunked();
    out.keep_alive = parser.keep_alive();
    if (const auto length = parser.content_length()) out.content_length = *length;
  }
}

}  // namespace detail

inline ResponseRead ReadResponseOurs(std::string_view wire, size_t step, size_t room) {
  ResponseRead out;
  ResponseParser parser;
  detail::FeedResponse(
      parser, wire, step, room, [](ResponseParser& p, char* d, size_t n) { p.SetBodyBuffer(d, n); },
      [](const ResponseParser& p) { return p.room(); }, out);
  if (parser.is_header_done()) {
    out.status = parser.status();
    out.reason = std::string(parser.reason());
    for (const auto& f : parser.fields()) out.fields.emplace_back(f.name_string(), f.value());
  }
  return out;
}

inline ResponseRead ReadResponseBeasts(std::string_view wire, size_t step, size_t room) {
  namespace http = boost::beast::http;
  using Parser = http::response_parser<http::buffer_body>;
  ResponseRead out;
  Parser parser;
  parser.body_limit(boost::none);
  detail::FeedResponse(
      parser, wire, step, room,
      [](Parser& p, char* d, size_t n) {
        p.get().body().data = d;
        p.get().body().size = n;
      },
      [](const Parser& p) { return p.get().body().size; }, out);
  if (parser.is_header_done()) {
    out.status = parser.get().result_int();
    out.reason = std::string(parser.get().reason());
    // The head's fields: Beast adds a chunked body's trailer fields to them afterwards, which
    // ResponseParser drops (the client's head has been sent by the time they come).
    Parser head;
    boost::system::error_code ec;
    head.put(boost::asio::buffer(wire.data(), wire.size()), ec);
    for (const auto& f : head.get()) out.fields.emplace_back(f.name_string(), f.value());
  }
  return out;
}

// Empty when ResponseParser and Beast's response_parser<buffer_body> read `wire` alike (fed in
// pieces of `step` bytes through a `room`-byte body buffer, then the close); otherwise what
// differs. Alike: both refuse it (same_error: with the same error), or both take the same status,
// reason, fields, framing, keep-alive and body bytes, and end it the same way.
//
// By design (response_parser.h):
//  - Beast's fields put a repeated field next to the earlier ones of its name, so fields are
//    compared by name, each name's values in order;
//  - ResponseParser refuses where Beast reads on: a Content-Length after a Transfer-Encoding
//    (bad_content_length), a status below 100 (bad_status), and chunk framing outside
//    BodyDecoder's rules (bad_chunk);
//  - chunk extensions are dropped unread with their line, and trailer fields dropped
//    (BodyDecoder), where Beast refuses some extensions as bad_chunk_extension, and trailers as
//    it refuses head fields (a Content-Length or Transfer-Encoding among them);
//  - it refuses a bad line as soon as the line is in, where Beast waits for the whole head; and
//    it says bad_line_ending for a bare LF, where Beast names the part of the line it was in;
//  - it takes a status line with no SP after the code ("HTTP/1.1 200"), which Beast refuses.
inline std::string CompareResponseWithBeast(std::string_view wire, size_t step, size_t room, bool same_error) {
  namespace http = boost::beast::http;
  const ResponseRead ours = ReadResponseOurs(wire, step, room);
  const ResponseRead theirs = ReadResponseBeasts(wire, step, room);
  auto describe = [](const ResponseRead& r) { return r.ec ? r.ec.message() : std::string(r.done ? "done" : "not done"); };
  if (ours.ec && !theirs.ec) {
    // Beast waits for the whole head before it reads a line of it; ResponseParser refuses a bad
    // line (or a bare CR or LF) as soon as it is in. A head Beast never saw whole it did not
    // take either.
    const bool stricter = ours.ec == http::error::bad_content_length || ours.ec == http::error::bad_status ||
                          ours.ec == http::error::bad_chunk || !theirs.header_done;
    if (stricter) return "";
    return "ours refused (" + ours.ec.message() + "), Beast's did not (" + describe(theirs) + ")";
  }
  // A head that came in pieces is read once it is whole (to header_limit): waiting for the rest
  // of one Beast refused already takes it no more than Beast did.
  if (!ours.ec && theirs.ec && !ours.header_done) return "";
  // BodyDecoder drops a chunk's extensions with their line, unread (any field-value bytes up to
  // the CRLF): Beast's reading of their syntax frames nothing.
  if (!ours.ec && theirs.ec == http::error::bad_chunk_extension) return "";
  // ... and reads a quoted extension value on past the CRLF that ends the line for BodyDecoder.
  if (!ours.ec && ours.chunked && theirs.header_done && theirs.ec && wire.find(';') != std::string_view::npos) return "";
  // Beast reads trailer fields as head fields, so a Content-Length, Transfer-Encoding or
  // Connection among them can make it refuse the response; BodyDecoder drops trailers (RFC 9110
  // 6.5.1: they frame nothing).
  const bool trailer_framing = theirs.ec == http::error::bad_transfer_encoding ||
                               theirs.ec == http::error::bad_content_length ||
                               theirs.ec == http::error::multiple_content_length || theirs.ec == http::error::bad_value;
  if (!ours.ec && ours.chunked && theirs.header_done && trailer_framing) return "";
  // A status line without the SP before an empty reason ("HTTP/1.1 200"): ResponseParser takes
  // it (RFC 9112 4, as nginx does), Beast refuses it.
  if (!ours.ec && theirs.ec == http::error::bad_status && wire.find("\r\n") == 12) return "";
  if (!ours.ec && theirs.ec) return "Beast's refused (" + theirs.ec.message() + "), ours did not (" + describe(ours) + ")";
  if (ours.ec) {
    if (same_error && ours.ec != theirs.ec) {
      return "error: ours '" + ours.ec.message() + "', Beast's '" + theirs.ec.message() + "'";
    }
    return "";
  }
  if (ours.done != theirs.done) return "done: ours " + describe(ours) + ", Beast's " + describe(theirs);
  if (ours.header_done != theirs.header_done) return "head done";
  if (!ours.header_done) return "";
  if (ours.status != theirs.status) return "status";
  // Beast's message gives its standard reason for an empty one; the parser read it empty.
  const bool standard_for_empty =
      ours.reason.empty() && theirs.reason == std::string_view(http::obsolete_reason(http::int_to_status(ours.status)));
  if (ours.reason != theirs.reason && !standard_for_empty) return "reason";
  if (ours.chunked != theirs.chunked) return "chunked";
  if (ours.keep_alive != theirs.keep_alive) return "keep-alive";
  if (ours.content_length != theirs.content_length) return "Content-Length";
  if (ours.body != theirs.body) return "body: ours '" + ours.body + "', Beast's '" + theirs.body + "'";
  if (ours.fields.size() != theirs.fields.size()) return "field count";
  auto lower = [](std::string text) {
    for (char& c : text) c = static_cast<char>(c >= 'A' && c <= 'Z' ? c - 'A' + 'a' : c);
    return text;
  };
  for (const auto& [name, value] : ours.fields) {
    std::vector<std::string> mine, beasts;
    for (const auto& f : ours.fields) if (lower(f.first) == lower(name)) mine.push_back(f.first + ": " + f.second);
    for (const auto& f : theirs.fields) if (lower(f.first) == lower(name)) beasts.push_back(f.first + ": " + f.second);
    if (mine != beasts) return "fields named " + name;
  }
  return "";
}

}  // namespace fencing
