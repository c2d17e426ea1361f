#include "http/header_rewrite.h"

#include "http/ascii.h"
#include "http/fields.h"

#include <boost/beast/http/rfc7230.hpp>
#include <boost/container/small_vector.hpp>

#include <algorithm>
#include <array>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <vector>
#include <optional>

namespace fencing {

namespace http = boost::beast::http;

namespace {

// Hop-by-hop fields, and those the proxy sets afresh for the next hop: framing (Content-Length)
// and Expect (the proxy answers 100-continue itself). A table by field id, built from the list
// in fields.h: asked for every field of every head, and one load is cheaper than the list's walk.
constexpr http::field kSetAfresh[] = {http::field::content_length, http::field::expect};
constexpr size_t kNotCopiedTableSize = [] {
  size_t size = 0;
  for (http::field f : kHopByHopFields) size = std::max(size, static_cast<size_t>(f) + 1);
  for (http::field f : kSetAfresh) size = std::max(size, static_cast<size_t>(f) + 1);
  return size;
}();
constexpr std::array<bool, kNotCopiedTableSize> kNotCopiedTable = [] {
  std::array<bool, kNotCopiedTableSize> table{};
  for (http::field f : kHopByHopFields) table[static_cast<size_t>(f)] = true;
  for (http::field f : kSetAfresh) table[static_cast<size_t>(f)] = true;
  return table;
}();
bool NotCopied(http::field f) {
  const auto id = static_cast<size_t>(f);
  return id < kNotCopiedTable.size() && kNotCopiedTable[id];
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

// Writes a head into a buffer sized beforehand for the most it can hold: a cursor and a copy per
// piece, without std::string's capacity check and growth path on each append (those were most of
// a head's cost). Inlined: it runs for every field of every head, both directions.
class HeadWriter {
 public:
  // Sizes `out` for at most `bound` bytes; Finish cuts it to what was written.
  HeadWriter(std::string& out, size_t bound) : out_(out) {
    out_.resize(bound);
    at_ = out_.data();
  }
  [[gnu::always_inline]] void Put(std::string_view text) {
    std::char_traits<char>::copy(at_, text.data(), text.size());  // copes with an empty view's null data
    at_ += text.size();
  }
  // A literal: its length is known here, so the copy is a few moves.
  template <size_t N>
  [[gnu::always_inline]] void Put(const char (&literal)[N]) {
    std::memcpy(at_, literal, N - 1);
    at_ += N - 1;
  }
  void Put(char c) { *at_++ = c; }
  [[gnu::always_inline]] void Field(std::string_view name, std::string_view value) {
    Put(name);
    Put(": ");
    Put(value);
    Put("\r\n");
  }
  // Decimal, as std::to_string writes it.
  void Decimal(uint64_t n) {
    char digits[20];  // 2^64-1
    char* first = digits + sizeof digits;
    do {
      *--first = static_cast<char>('0' + n % 10);
      n /= 10;
    } while (n != 0);
    Put(std::string_view(first, static_cast<size_t>(digits + sizeof digits - first)));
  }
  void Finish() {
    const size_t written = static_cast<size_t>(at_ - out_.data());
    // A bound too small would have written past the string's end: stop rather than go on with a
    // corrupted heap (one compare per head; the fuzz targets would find such a head).
    if (written > out_.size()) std::abort();
    out_.resize(written);
  }

 private:
  std::string& out_;
  char* at_;
};

// The bytes of a field line: name, ": ", value, CRLF.
constexpr size_t FieldLineSize(std::string_view name, std::string_view value) { return name.size() + value.size() + 4; }

// What the rewrite needs to know of a field list, gathered in one pass by enum (cheap), instead of
// one case-insensitive tree search in Beast's fields per question.
struct FieldFacts {
  bool connection = false;  // a Connection field names more hop-by-hop fields
  bool host = false;
  size_t lines = 0;         // the bytes of all field lines: what copying them all would take
};

template <typename FieldList>
FieldFacts ScanFields(const FieldList& from) {
  FieldFacts facts;
  for (const auto& field : from) {
    facts.lines += FieldLineSize(field.name_string(), field.value());
    switch (field.name()) {
      case http::field::connection: facts.connection = true; break;
      case http::field::host: facts.host = true; break;
      default: break;
    }
  }
  return facts;
}

// Which end-to-end fields WriteEndToEndFields leaves out, besides the hop-by-hop ones.
struct Omit {
  std::string_view name;         // this one (case-insensitive); empty: none
  bool host = false;             // Host (another is set)
  bool underscored = false;      // names containing '_'
  std::string_view also;         // and this one (case-insensitive); empty: none
};

// The values of the client's X-Forwarded-For fields, in order (most requests have none or one).
using ForwardedFor = boost::container::small_vector<std::string_view, 2>;

// Writes every end-to-end field of `from` except those `omit` names. X-Forwarded-For fields are
// not written: when `forwarded_for` is given, their values are collected there. Sink: a
// HeadWriter, or anything else with Field(name, value).
template <typename FieldList, typename Sink>
void WriteEndToEndFields(const FieldList& from, const FieldFacts& facts, const Omit& omit,
                         ForwardedFor* forwarded_for, Sink& out) {
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
    if (!omit.also.empty() && EqualsIgnoreCase(name, omit.also)) continue;
    if (forwarded_for && field.name() == http::field::unknown && EqualsIgnoreCase(name, "X-Forwarded-For")) {
      forwarded_for->push_back(field.value());
      continue;
    }
    if (connection_tokens && connection_tokens->Names(name)) continue;
    out.Field(name, field.value());
  }
}

// The longest framing line either writer adds: a Content-Length of 20 digits, or chunked.
constexpr std::string_view kChunkedLine = "Transfer-Encoding: chunked\r\n";
constexpr size_t kFramingLineBound = std::max(FieldLineSize("Content-Length", "18446744073709551615"), kChunkedLine.size());

void WriteFraming(NextHopFraming framing, HeadWriter& out) {
  if (framing.kind == BodyFraming::kLength) {
    out.Put("Content-Length: ");
    out.Decimal(framing.length);
    out.Put("\r\n");
  } else if (framing.kind == BodyFraming::kChunked) {
    out.Put(kChunkedLine);
  }
}

}  // namespace

NextHopFraming UpstreamRequestFraming(const RequestHead& client, std::optional<uint64_t> whole) {
  if (client.chunked()) return whole ? NextHopFraming::Length(*whole) : NextHopFraming::Chunked();
  if (auto length = client.content_length()) return NextHopFraming::Length(*length);
  return NextHopFraming::None();
}

// Each head is sized before it is written: the request line or status line, every field line
// of the message being relayed (those left out only make it shorter; each X-Forwarded-For value
// with its ", " is shorter than its line), then what is added. One allocation, no growth.
std::string UpstreamRequestHead(const RequestHead& client, NextHopFraming framing, std::string_view origin_target,
                                std::string_view host, std::string_view client_ip, std::string_view backend_host,
                                std::string_view drop, bool drop_underscored, std::optional<uint64_t> token,
                                std::string_view identity_header, std::string_view identity) {
  const FieldFacts facts = ScanFields(client);
  const std::string_view method = client.method_string();
  const size_t bound = method.size() + 1 + origin_target.size() + sizeof(" HTTP/1.1\r\n") - 1 + facts.lines +
                       FieldLineSize("X-Forwarded-For", client_ip) +
                       FieldLineSize("Host", host.size() > backend_host.size() ? host : backend_host) +
                       FieldLineSize(drop, "18446744073709551615") + FieldLineSize(identity_header, identity) +
                       kFramingLineBound + 2;
  std::string head;
  HeadWriter out(head, bound);
  out.Put(method);
  out.Put(' ');
  out.Put(origin_target);
  out.Put(" HTTP/1.1\r\n");
  ForwardedFor forwarded_for;
  WriteEndToEndFields(client, facts, Omit{drop, !host.empty(), drop_underscored, identity_header}, &forwarded_for,
                      out);

  // One X-Forwarded-For: the client's list (all of its fields, in order) plus this hop.
  out.Put("X-Forwarded-For: ");
  for (std::string_view hop : forwarded_for) {
    out.Put(hop);
    out.Put(", ");
  }
  out.Put(client_ip);
  out.Put("\r\n");

  if (!host.empty()) {
    out.Field("Host", host);
  } else if (!facts.host) {
    out.Field("Host", backend_host);
  }
  if (token) {
    out.Put(drop);
    out.Put(": ");
    out.Decimal(*token);
    out.Put("\r\n");
  }
  if (!identity_header.empty() && !identity.empty()) out.Field(identity_header, identity);
  WriteFraming(framing, out);
  // Keep-alive to the backend is the default in HTTP/1.1: no Connection field needed.
  out.Put("\r\n");
  out.Finish();
  return head;
}

void ForEachUpstreamRequestField(const RequestHead& client, bool omit_host, std::string_view drop,
                                 bool drop_underscored, std::string_view identity_header,
                                 const std::function<void(std::string_view, std::string_view)>& copy,
                                 std::vector<std::string_view>* forwarded_for) {
  struct Callback {
    const std::function<void(std::string_view, std::string_view)>& copy;
    void Field(std::string_view name, std::string_view value) { copy(name, value); }
  } sink{copy};
  ForwardedFor collected;
  WriteEndToEndFields(client, ScanFields(client), Omit{drop, omit_host, drop_underscored, identity_header},
                      &collected, sink);
  forwarded_for->assign(collected.begin(), collected.end());
}

std::string ClientResponseHead(unsigned status, std::string_view reason, const HeadFields& fields,
                               unsigned client_version, NextHopFraming framing, bool keep_alive) {
  const FieldFacts facts = ScanFields(fields);
  const size_t bound = sizeof("HTTP/1.1 4294967295 \r\n") - 1 + reason.size() + facts.lines +
                       kFramingLineBound + sizeof("Connection: keep-alive\r\n") - 1 + 2;
  std::string head;
  HeadWriter out(head, bound);
  out.Put(client_version >= 11 ? std::string_view("HTTP/1.1 ") : std::string_view("HTTP/1.0 "));
  out.Decimal(status);
  out.Put(' ');
  out.Put(reason);
  out.Put("\r\n");
  WriteEndToEndFields(fields, facts, Omit{}, nullptr, out);
  WriteFraming(framing, out);
  if (client_version >= 11 && !keep_alive) out.Put("Connection: close\r\n");
  if (client_version < 11 && keep_alive) out.Put("Connection: keep-alive\r\n");
  out.Put("\r\n");
  out.Finish();
  return head;
}

std::vector<std::pair<std::string_view, std::string_view>> ResponseEndToEndFields(const HeadFields& fields) {
  struct Collect {
    std::vector<std::pair<std::string_view, std::string_view>> out;
    void Field(std::string_view name, std::string_view value) { out.emplace_back(name, value); }
  } collect;
  WriteEndToEndFields(fields, ScanFields(fields), Omit{}, nullptr, collect);
  return std::move(collect.out);
}

}  // namespace fencing
