#pragma once
// A request head as the proxy reads it: the request line and the fields, each a (offset, length)
// into one copy of the head's bytes, and the framing facts the rest of the request needs. It
// replaces Beast's request parser for the head (which builds a node-based http::fields, one
// allocation and one tree insert per field, and walks each byte through its generic tokenizer):
// the bytes were already measured by FindHeadEnd and checked by CheckRawHead (raw_head.h), so
// what is left is to cut lines at CRLF and fields at their first ':'.
//
// The result is the one Beast's parser gives for the same head (tests/fuzz/fuzz_head_parser.cpp
// checks that, field by field, error by error): the same method, target, version, field names
// and values (OWS trimmed), the same Content-Length, chunked and keep-alive, and the same error
// code for the same refusal (a bad or conflicting Content-Length, a second Transfer-Encoding,
// a malformed Connection list, a body above the limit).
//
// A head is read once and kept whole for the request (targets, keys and the upstream head are
// views into it), so it owns a copy of its bytes: the client buffer moves as the body is read.

#include "http/framing_fields.h"
#include "http/head_fields.h"

#include <boost/beast/http/field.hpp>
#include <boost/beast/http/verb.hpp>
#include <boost/system/error_code.hpp>

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>

namespace fencing {

class RequestHead {
 public:
  using Iterator = HeadFields::Iterator;

  // An empty HTTP/1.1 head (method unknown, target empty, no fields) to be filled in by the
  // setters below, as tests and tools build one; Parse fills one from bytes.
  RequestHead() = default;

  // Reads `head`, exactly one request head that CheckRawHead passed (request line, fields, the
  // empty line). max_body: a Content-Length above it is http::error::body_limit. Returns the
  // error Beast's parser would give for the head, or none; on an error *this is unspecified.
  boost::system::error_code Parse(std::string_view head, uint64_t max_body);

  boost::beast::http::verb method() const { return method_; }
  std::string_view method_string() const { return fields_.Text(method_at_); }
  std::string_view target() const { return fields_.Text(target_at_); }
  unsigned version() const { return version_; }  // 10 or 11

  // The framing the fields announce, as Beast's parser reports it.
  std::optional<uint64_t> content_length() const { return framing_.content_length; }
  bool chunked() const { return framing_.chunked; }
  // HTTP/1.1 without "close" in Connection, or HTTP/1.0 with "keep-alive" there.
  bool keep_alive() const { return framing_.KeepAlive(version_); }

  // The fields, in order, duplicates apart.
  Iterator begin() const { return fields_.begin(); }
  Iterator end() const { return fields_.end(); }
  size_t size() const { return fields_.size(); }
  std::string_view operator[](boost::beast::http::field id) const { return fields_[id]; }
  size_t count(boost::beast::http::field id) const { return fields_.count(id); }

  // Setters for a head built field by field (tests, tools). They do not re-derive the framing
  // facts: Parse is what a session uses.
  void method(boost::beast::http::verb verb);
  void method_string(std::string_view method);
  void target(std::string_view target) { target_at_ = fields_.Keep(target); }
  void version(unsigned version) { version_ = version; }
  void insert(std::string_view name, std::string_view value) {
    fields_.Add(boost::beast::http::string_to_field(name), name, value);
  }
  void insert(boost::beast::http::field id, std::string_view value) {
    fields_.Add(id, boost::beast::http::to_string(id), value);
  }
  // Replaces every field with this id by one.
  void set(boost::beast::http::field id, std::string_view value) {
    fields_.Erase(id);
    insert(id, value);
  }

 private:
  HeadFields fields_;  // its text is the whole head (Parse) or the setters' pieces
  HeadFields::Span method_at_;
  HeadFields::Span target_at_;
  boost::beast::http::verb method_ = boost::beast::http::verb::unknown;
  unsigned version_ = 11;
  FramingFields framing_;
};

}  // namespace fencing
