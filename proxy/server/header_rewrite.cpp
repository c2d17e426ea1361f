#include "server/header_rewrite.h"

#include "common/ascii.h"

#include <boost/beast/http/rfc7230.hpp>

namespace fencing {

namespace http = boost::beast::http;

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
      if (EqualsIgnoreCase(token, name)) return true;
    }
  }
  return false;
}

void AppendField(std::string& out, std::string_view name, std::string_view value) {
  out.append(name);
  out.append(": ");
  out.append(value);
  out.append("\r\n");
}

// Appends every end-to-end field of `from` except `drop` and `skip` (case-insensitive names).
void AppendEndToEndFields(const http::fields& from, std::string_view drop, std::string_view skip, std::string& out) {
  const bool has_connection = from.count(http::field::connection) > 0;
  for (const auto& field : from) {
    if (IsHopByHop(field.name())) continue;
    std::string_view name = field.name_string();
    if (!drop.empty() && EqualsIgnoreCase(name, drop)) continue;
    if (!skip.empty() && EqualsIgnoreCase(name, skip)) continue;
    if (has_connection && NamedByConnection(name, from)) continue;
    AppendField(out, name, field.value());
  }
}

constexpr size_t kHeadReserve = 512;  // most heads fit: one allocation

}  // namespace

std::string UpstreamRequestHead(const http::request_header<>& client, std::string_view origin_target,
                                std::string_view client_ip, std::string_view backend_host, std::string_view drop) {
  std::string out;
  out.reserve(kHeadReserve);
  out.append(client.method_string());
  out.push_back(' ');
  out.append(origin_target);
  out.append(" HTTP/1.1\r\n");
  AppendEndToEndFields(client, drop, "X-Forwarded-For", out);

  // One X-Forwarded-For: the client's list (all of its fields, in order) plus this hop.
  out.append("X-Forwarded-For: ");
  for (const auto& field : client) {
    if (!EqualsIgnoreCase(field.name_string(), "X-Forwarded-For")) continue;
    out.append(field.value());
    out.append(", ");
  }
  out.append(client_ip);
  out.append("\r\n");

  if (client.count(http::field::host) == 0) AppendField(out, "Host", backend_host);
  if (client.count(http::field::content_length) != 0) {
    AppendField(out, "Content-Length", client[http::field::content_length]);
  } else if (client.count(http::field::transfer_encoding) != 0) {
    out.append("Transfer-Encoding: chunked\r\n");  // framing checks allow exactly "chunked" only
  }
  // Keep-alive to the backend is the default in HTTP/1.1: no Connection field needed.
  out.append("\r\n");
  return out;
}

std::string ClientResponseHead(const http::response_header<>& upstream, unsigned client_version,
                               BodyFraming framing, bool keep_alive) {
  std::string out;
  out.reserve(kHeadReserve);
  out.append(client_version >= 11 ? "HTTP/1.1 " : "HTTP/1.0 ");
  out.append(std::to_string(upstream.result_int()));
  out.push_back(' ');
  out.append(upstream.reason());
  out.append("\r\n");
  AppendEndToEndFields(upstream, "", "", out);
  if (framing == BodyFraming::kLength) {
    AppendField(out, "Content-Length", upstream[http::field::content_length]);
  } else if (framing == BodyFraming::kChunked) {
    out.append("Transfer-Encoding: chunked\r\n");
  }
  if (client_version >= 11 && !keep_alive) out.append("Connection: close\r\n");
  if (client_version < 11 && keep_alive) out.append("Connection: keep-alive\r\n");
  out.append("\r\n");
  return out;
}

}  // namespace fencing
