#pragma once
// The hop-by-hop fields (RFC 9110 section 7.6.1): they describe one connection, so a proxy never
// copies them to the next hop (nor the fields a Connection header names). Declared once for the
// header rewrite and for the route file's check of token_header.

#include <boost/beast/http/field.hpp>

#include <string_view>

namespace fencing {

inline constexpr boost::beast::http::field kHopByHopFields[] = {
    boost::beast::http::field::connection,        boost::beast::http::field::keep_alive,
    boost::beast::http::field::proxy_connection,  boost::beast::http::field::te,
    boost::beast::http::field::trailer,           boost::beast::http::field::transfer_encoding,
    boost::beast::http::field::upgrade,
};

constexpr bool IsHopByHop(boost::beast::http::field field) {
  for (boost::beast::http::field f : kHopByHopFields) {
    if (f == field) return true;
  }
  return false;
}

// The same, by name (any case).
inline bool IsHopByHopName(std::string_view name) { return IsHopByHop(boost::beast::http::string_to_field(name)); }

}  // namespace fencing
