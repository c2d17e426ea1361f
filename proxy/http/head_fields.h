#pragma once
// The fields of a message head, in the order they came, duplicates apart, each a (offset, length)
// into one string the fields own: a flat copy instead of Beast's http::fields (one allocation
// and one case-insensitive tree insert per field). Offsets, not pointers, so that a head can be
// copied and moved. Read through the names Beast's fields use (name(), name_string(), value()),
// so that code over the fields reads the same for both.
//
// RequestHead (request_head.h) keeps its whole head in the text and points into it; the response
// parser (response_parser.h) copies each field in as Beast's parser hands it over.

#include <boost/beast/http/field.hpp>
#include <boost/container/small_vector.hpp>

#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>

namespace fencing {

class HeadFields {
 public:
  // One field: name as it was spelled, value without surrounding OWS.
  class Field {
   public:
    Field(boost::beast::http::field id, std::string_view name, std::string_view value)
        : id_(id), name_(name), value_(value) {}
    boost::beast::http::field name() const { return id_; }
    std::string_view name_string() const { return name_; }
    std::string_view value() const { return value_; }

   private:
    boost::beast::http::field id_;
    std::string_view name_;
    std::string_view value_;
  };
  class Iterator;

  // A piece of the text.
  struct Span {
    uint32_t at = 0;
    uint32_t size = 0;
  };

  // Forgets the fields and the text, keeping the capacity.
  void Clear() {
    text_.clear();
    fields_.clear();
  }
  void Reserve(size_t bytes) { text_.reserve(bytes); }
  // Appends bytes to the text; what the span returned says stays valid across copies and moves.
  Span Keep(std::string_view bytes);
  // Unchecked: every span was made by Keep or SpanOf over this text, which only Clear shortens
  // (and it forgets the spans too). Read for every field of every head, several times a request.
  std::string_view Text(Span span) const { return std::string_view(text_.data() + span.at, span.size); }
  // The span of a view into the text (one Text() or Keep() gave).
  Span SpanOf(std::string_view kept) const {
    return Span{static_cast<uint32_t>(kept.data() - text_.data()), static_cast<uint32_t>(kept.size())};
  }

  // Adds a field whose name and value are in the text already.
  void AddKept(boost::beast::http::field id, Span name, Span value) { fields_.push_back(Spans{id, name, value}); }
  // Points field i's value at another span of the text.
  void SetValue(size_t i, Span value) { fields_[i].value = value; }
  // Adds a field, copying its name and value into the text.
  void Add(boost::beast::http::field id, std::string_view name, std::string_view value);
  // Removes every field with this id.
  void Erase(boost::beast::http::field id);

  Iterator begin() const;
  Iterator end() const;
  size_t size() const { return fields_.size(); }
  // The first value of a field; empty if there is none.
  std::string_view operator[](boost::beast::http::field id) const;
  size_t count(boost::beast::http::field id) const;

 private:
  struct Spans {
    boost::beast::http::field id;
    Span name;
    Span value;
  };
  Field At(size_t i) const { return Field(fields_[i].id, Text(fields_[i].name), Text(fields_[i].value)); }

  std::string text_;
  boost::container::small_vector<Spans, 12> fields_;
};

class HeadFields::Iterator {
 public:
  using value_type = Field;
  using difference_type = std::ptrdiff_t;
  Iterator(const HeadFields* fields, size_t i) : fields_(fields), i_(i) {}
  Field operator*() const { return fields_->At(i_); }
  Iterator& operator++() {
    ++i_;
    return *this;
  }
  bool operator==(const Iterator& other) const { return i_ == other.i_; }

 private:
  const HeadFields* fields_;
  size_t i_;
};

inline HeadFields::Iterator HeadFields::begin() const { return Iterator(this, 0); }
inline HeadFields::Iterator HeadFields::end() const { return Iterator(this, fields_.size()); }

}  // namespace fencing
