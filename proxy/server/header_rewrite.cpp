#include "server/header_rewrite.h"

#include <boost/beast/core/string.hpp>
#include <boost/beast/http/rfc7230.hpp>

#include <string>

namespace fencing {

namespace http = boost::beast::http;
using boost::beast::iequals;

namespace {

bool IsHopByHop(http::field f) {
  switch (f) {
    case http::field::connection:
    case http::field::keep_alive:
    case http::field::proxy_connection:
    case http::field::te:
    case http::field::trailer:
    case http::field::transfer_encoding:
    case http::field::upgrade:
    case http::field::content_length:  // framing is set for the next hop, not copied
    case http::field::expect:
      return true;
    default:
      return false;
  }
}

bool NamedByConnection(std::string_view name, const http::fields& from) {
  for (const auto& field : from) {
    if (field.name() != http::field::connection) continue;
    http::token_list tokens(field.value());
    for (auto token : tokens) {
      if (iequals(token, name)) return true;
    }
  }
  return false;
}

}  // namespace

void CopyEndToEndFields(const http::fields& from, http::fields& to, std::string_view drop) {
  bool has_connection = from.count(http::field::connection) > 0;
  for (const auto& field : from) {
    if (IsHopByHop(field.name())) continue;
    std::string_view name = field.name_string();
    if (!drop.empty() && iequals(name, drop)) continue;
    if (has_connection && NamedByConnection(name, from)) continue;
    if (field.name() == http::field::unknown) {
      to.insert(name, field.value());
    } else {
      to.insert(field.name(), field.value());
    }
  }
}

void PrepareUpstreamRequest(const http::request_header<>& client, std::string_view origin_target,
                            std::string_view client_ip, std::string_view backend_host, std::string_view drop,
                            http::request_header<>& upstream) {
  upstream.method_string(client.method_string());
  upstream.target(origin_target);
  upstream.version(11);
  CopyEndToEndFields(client, upstream, drop);

  // One X-Forwarded-For: the client's list (all of its fields, in order) plus this hop.
  std::string forwarded;
  for (const auto& field : client) {
    if (!iequals(field.name_string(), "X-Forwarded-For")) continue;
    if (!forwarded.empty()) forwarded += ", ";
    forwarded.append(field.value());
  }
  if (!forwarded.empty()) forwarded += ", ";
  forwarded.append(client_ip);
  upstream.erase("X-Forwarded-For");
  upstream.set("X-Forwarded-For", forwarded);

  if (upstream.count(http::field::host) == 0) upstream.set(http::field::host, backend_host);
  // Keep-alive to the backend is the default in HTTP/1.1: no Connection field needed.
}

}  // namespace fencing
