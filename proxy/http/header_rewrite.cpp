#include "http/header_rewrite.h"

#include "http/ascii.h"
#include "http/fields.h"

#include <boost/beast/http/rfc7230.hpp>
#include <boost/container/small_vector.hpp>

#include <optional>

namespace fencing {

namespace http = boost::beast::http;

namespace {

// Hop-by-hop fields, and those the proxy sets afresh for the next hop: framing (Content-Length)
// and Expect (the proxy answers 100-continue itself).
bool NotCopied(http::field f) {
  return IsHopByHop(f) || f == http::field::content_length || f == http::field::expect;
}

// The field names listed by the Connection fields (hop-by-hop for this message only). Parsed once
// per message, then looked up per field.
class ConnectionTokens {
 public:
  // FieldList: RequestHead or HeadFields (a response head's).
  template <typename FieldList>
  explicit ConnectionTokens(const FieldList& from) {
    for (const auto& field : from) {
      if (field.name() != http::field::connection) continue;
      for (auto token : http::token_list(field.value())) tokens_.push_back(token);
    }
  }
  bool Names(std::string_view name) const {
    for (std::string_view token : tokens_) {
      if (EqualsIgnoreCase(token, name)) return true;
    }
    return false;
  }

 private:
  boost::container::small_vector<std::string_view, 4> tokens_;
};

// Inlined: it runs for every field of every head, both directions.
[[gnu::always_inline]] inline void AppendField(std::string& out, std::string_view name, std::string_view value) {
  out.append(name);
  out.append(": ");
  out.append(value);
  out.append("\r\n");
}

// What the rewrite needs to know of a field list, gathered in one pass by enum (cheap), instead of
// one case-insensitive tree search in Beast's fields per question.
struct FieldFacts {
  bool connection = false;  // a Connection field names more hop-by-hop fields
  bool host = false;
  bool transfer_encoding = false;
  std::string_view content_length;  // empty: none
};

template <typename FieldList>
FieldFacts ScanFields(const FieldList& from) {
  FieldFacts facts;
  for (const auto& field : from) {
    switch (field.name()) {
      case http::field::connection: facts.connection = true; break;
      case http::field::host: facts.host = true; break;
      case http::field::transfer_encoding: facts.transfer_encoding = true; break;
      case http::field::content_length: facts.content_length = field.value(); break;
      default: break;
    }
  }
  return facts;
}

// Which end-to-end fields AppendEndToEndFields leaves out, besides the hop-by-hop ones.
struct Omit {
  std::string_view name;         // this one (case-insensitive); empty: none
  bool host = false;             // Host (another is set)
  bool underscored = false;      // names containing '_'
};

// Appends every end-to-end field of `from` except those `omit` names. X-Forwarded-For fields are
// not appended: when `forwarded_for` is given, their values are collected there, each followed
// by ", ".
template <typename FieldList>
void AppendEndToEndFields(const FieldList& from, const FieldFacts& facts, const Omit& omit,
                          std::string* forwarded_for, std::string& out) {
  std::string_view drop = omit.name;
  std::optional<ConnectionTokens> connection_tokens;
  if (facts.connection) connection_tokens.emplace(from);
  for (const auto& field : from) {
    if (NotCopied(field.name())) continue;
    if (omit.host && field.name() == http::field::host) continue;
    std::string_view name = field.name_string();
    // Beast knows no field name with '_': only unknown ones need the search.
    if (omit.underscored && field.name() == http::field::unknown && name.find('_') != std::string_view::npos) {
      continue;
    }
    if (!drop.empty() && EqualsIgnoreCase(name, drop)) continue;
    if (forwarded_for && field.name() == http::field::unknown && EqualsIgnoreCase(name, "X-Forwarded-For")) {
      forwarded_for->append(field.value());
      forwarded_for->append(", ");
      continue;
    }
    if (connection_tokens && connection_tokens->Names(name)) continue;
    AppendField(out, name, field.value());
  }
}

constexpr size_t kHeadReserve = 512;  // most heads fit: one allocation

}  // namespace

std::string UpstreamRequestHead(const RequestHead& client, std::string_view origin_target,
                                std::string_view host, std::string_view client_ip, std::string_view backend_host,
                                std::string_view drop, bool drop_underscored) {
  std::string out;
  out.reserve(kHeadReserve);
  out.append(client.method_string());
  out.push_back(' ');
  out.append(origin_target);
  out.append(" HTTP/1.1\r\n");
  const FieldFacts facts = ScanFields(client);
  std::string forwarded_for;
  AppendEndToEndFields(client, facts, Omit{drop, !host.empty(), drop_underscored}, &forwarded_for, out);

  // One X-Forwarded-For: the client's list (all of its fields, in order) plus this hop.
  out.append("X-Forwarded-For: ");
  out.append(forwarded_for);
  out.append(client_ip);
  out.append("\r\n");

  if (!host.empty()) {
    AppendField(out, "Host", host);
  } else if (!facts.host) {
    AppendField(out, "Host", backend_host);
  }
  if (!facts.content_length.empty()) {
    AppendField(out, "Content-Length", facts.content_length);
  } else if (facts.transfer_encoding) {
    out.append("Transfer-Encoding: chunked\r\n");  // framing checks allow exactly "chunked" only
  }
  // Keep-alive to the backend is the default in HTTP/1.1: no Connection field needed.
  out.append("\r\n");
  return out;
}

std::string ClientResponseHead(unsigned status, std::string_view reason, const HeadFields& fields,
                               unsigned client_version, BodyFraming framing, bool keep_alive) {
  std::string out;
  out.reserve(kHeadReserve);
  out.append(client_version >= 11 ? "HTTP/1.1 " : "HTTP/1.0 ");
  out.append(std::to_string(status));
  out.push_back(' ');
  out.append(reason);
  out.append("\r\n");
  const FieldFacts facts = ScanFields(fields);
  AppendEndToEndFields(fields, facts, Omit{}, nullptr, out);
  if (framing == BodyFraming::kLength) {
    AppendField(out, "Content-Length", facts.content_length);
  } else if (framing == BodyFraming::kChunked) {
    out.append("Transfer-Encoding: chunked\r\n");
  }
  if (client_version >= 11 && !keep_alive) out.append("Connection: close\r\n");
  if (client_version < 11 && keep_alive) out.append("Connection: keep-alive\r\n");
  out.append("\r\n");
  return out;
}

}  // namespace fencing
