#pragma once
// Request heads built field by field for the unit tests of the head checks and rewrites, and a
// field lookup that keeps repeated fields apart.

#include <boost/beast/http.hpp>

#include "http/request_head.h"

#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "http/ascii.h"

namespace fencing {

using Fields = std::vector<std::pair<std::string, std::string>>;

// A POST /orders/1 head (or `method`) with the fields in order; insert keeps duplicates separate.
inline RequestHead Request(unsigned version, const Fields& fields,
                           boost::beast::http::verb method = boost::beast::http::verb::post) {
  RequestHead h;
  h.method(method);
  h.target("/orders/1");
  h.version(version);
  for (const auto& [name, value] : fields) h.insert(name, value);
  return h;
}

// Every value of the fields named `name` (any case), in order.
// FieldList: boost::beast::http::fields or RequestHead.
template <typename FieldList>
std::vector<std::string> Values(const FieldList& f, std::string_view name) {
  std::vector<std::string> out;
  for (const auto& field : f) {
    if (EqualsIgnoreCase(field.name_string(), name)) out.emplace_back(field.value());
  }
  return out;
}

}  // namespace fencing
