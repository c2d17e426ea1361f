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

#include <boost/beast/http/field.hpp>
#include <boost/beast/http/verb.hpp>
#include <boost/container/small_vector.hpp>
#include <boost/system/error_code.hpp>

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>

namespace fencing {

class RequestHead {
 public:
  // One field as it came: name (as the client spelled it), value without surrounding OWS.
  class Field {
   public:
    Field(boost::beast::http::field id, std::string_view name, std::string_view value)
        : id_(id), name_(name), value_(value) {}
    // The names of boost::beast::http::fields' elements, so that code reads the same over both.
    boost::beast::http::field name() const { return id_; }
    std::string_view name_string() const { return name_; }
    std::string_view value() const { return value_; }

   private:
    boost::beast::http::field id_;
    std::string_view name_;
    std::string_view value_;
  };

  // An empty HTTP/1.1 head (method unknown, target empty, no fields) to be filled in by the
  // setters below, as tests and tools build one; Parse fills one from bytes.
  RequestHead() = default;

  // Reads `head`, exactly one request head that CheckRawHead passed (request line, fields, the
  // empty line). max_body: a Content-Length above it is http::error::body_limit. Returns the
  // error Beast's parser would give for the head, or none; on an error *this is unspecified.
  boost::system::error_code Parse(std::string_view head, uint64_t max_body);

  boost::beast::http::verb method() const { return method_; }
  std::string_view method_string() const { return Text(method_at_); }
  std::string_view target() const { return Text(target_at_); }
  unsigned version() const { return version_; }  // 10 or 11

  // The framing the fields announce, as Beast's parser reports it.
  std::optional<uint64_t> content_length() const { return content_length_; }
  bool chunked() const { return chunked_; }
  // HTTP/1.1 without "close" in Connection, or HTTP/1.0 with "keep-alive" there.
  bool keep_alive() const;

  // The fields, in order, duplicates apart.
  class Iterator;
  Iterator begin() const;
  Iterator end() const;
  size_t size() const { return fields_.size(); }
  // The first value of a field; empty if there is none.
  std::string_view operator[](boost::beast::http::field id) const;
  size_t count(boost::beast::http::field id) const;

  // Setters for a head built field by field (tests, tools). They do not re-derive the framing
  // facts: Parse is what a session uses.
  void method(boost::beast::http::verb verb);
  void method_string(std::string_view method);
  void target(std::string_view target);
  void version(unsigned version) { version_ = version; }
  void insert(std::string_view name, std::string_view value);
  void insert(boost::beast::http::field id, std::string_view value);
  // Replaces every field with this id by one.
  void set(boost::beast::http::field id, std::string_view value);

 private:
  // A piece of text_: offsets, not pointers, so that a head can be copied and moved.
  struct Span {
    uint32_t at = 0;
    uint32_t size = 0;
  };
  struct FieldSpans {
    boost::beast::http::field id;
    Span name;
    Span value;
  };
  std::string_view Text(Span span) const { return std::string_view(text_).substr(span.at, span.size); }
  Span Append(std::string_view text);
  Field At(size_t i) const { return Field(fields_[i].id, Text(fields_[i].name), Text(fields_[i].value)); }
  boost::system::error_code Take(boost::beast::http::field id, std::string_view value);

  std::string text_;
  Span method_at_;
  Span target_at_;
  boost::beast::http::verb method_ = boost::beast::http::verb::unknown;
  unsigned version_ = 11;
  boost::container::small_vector<FieldSpans, 12> fields_;
  std::optional<uint64_t> content_length_;
  bool chunked_ = false;
  bool connection_close_ = false;
  bool connection_keep_alive_ = false;
};

class RequestHead::Iterator {
 public:
  using value_type = Field;
  using difference_type = std::ptrdiff_t;
  Iterator(const RequestHead* head, size_t i) : head_(head), i_(i) {}
  Field operator*() const { return head_->At(i_); }
  Iterator& operator++() {
    ++i_;
    return *this;
  }
  bool operator==(const Iterator& other) const { return i_ == other.i_; }

 private:
  const RequestHead* head_;
  size_t i_;
};

inline RequestHead::Iterator RequestHead::begin() const { return Iterator(this, 0); }
inline RequestHead::Iterator RequestHead::end() const { return Iterator(this, fields_.size()); }

}  // namespace fencing
