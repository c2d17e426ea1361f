#include "http/head_fields.h"

#include <algorithm>

namespace fencing {

namespace http = boost::beast::http;

HeadFields::Span HeadFields::Keep(std::string_view bytes) {
  Span span{static_cast<uint32_t>(text_.size()), static_cast<uint32_t>(bytes.size())};
  text_.append(bytes);
  return span;
}

void HeadFields::Add(http::field id, std::string_view name, std::string_view value) {
  const Span name_at = Keep(name);
  fields_.push_back(Spans{id, name_at, Keep(value)});
}

void HeadFields::Erase(http::field id) {
  fields_.erase(std::remove_if(fields_.begin(), fields_.end(), [id](const Spans& f) { return f.id == id; }),
                fields_.end());
}

std::string_view HeadFields::operator[](http::field id) const {
  for (const Spans& field : fields_) {
    if (field.id == id) return Text(field.value);
  }
  return {};
}

size_t HeadFields::count(http::field id) const {
  return static_cast<size_t>(
      std::count_if(fields_.begin(), fields_.end(), [id](const Spans& field) { return field.id == id; }));
}

}  // namespace fencing
