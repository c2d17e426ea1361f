#include "etcd/codec.h"

#include <boost/json/array.hpp>
#include <boost/json/parse.hpp>
#include <boost/json/serialize.hpp>

#include <charconv>
#include <climits>

namespace fencing::etcd {

namespace json = boost::json;

namespace {

constexpr char kBase64Alphabet[] = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";

int Base64Value(char c) {
  if (c >= 'A' && c <= 'Z') return c - 'A';
  if (c >= 'a' && c <= 'z') return c - 'a' + 26;
  if (c >= '0' && c <= '9') return c - '0' + 52;
  if (c == '+') return 62;
  if (c == '/') return 63;
  return -1;
}

bool Fail(std::string* error, std::string text) {
  *error = std::move(text);
  return false;
}

// A value for an error message: its JSON, cut short.
std::string Shown(const json::value& v) { return json::serialize(v).substr(0, 200); }

}  // namespace

std::string Base64Encode(std::string_view bytes) {
  std::string out;
  out.reserve((bytes.size() + 2) / 3 * 4);
  size_t i = 0;
  for (; i + 3 <= bytes.size(); i += 3) {
    uint32_t v = (uint32_t(uint8_t(bytes[i])) << 16) | (uint32_t(uint8_t(bytes[i + 1])) << 8) | uint8_t(bytes[i + 2]);
    for (int shift = 18; shift >= 0; shift -= 6) out += kBase64Alphabet[(v >> shift) & 63];
  }
  size_t rest = bytes.size() - i;
  if (rest > 0) {
    uint32_t v = uint32_t(uint8_t(bytes[i])) << 16;
    if (rest == 2) v |= uint32_t(uint8_t(bytes[i + 1])) << 8;
    out += kBase64Alphabet[(v >> 18) & 63];
    out += kBase64Alphabet[(v >> 12) & 63];
    out += rest == 2 ? kBase64Alphabet[(v >> 6) & 63] : '=';
    out += '=';
  }
  return out;
}

bool Base64Decode(std::string_view text, std::string* bytes) {
  if (text.size() % 4 != 0) return false;
  std::string out;
  out.reserve(text.size() / 4 * 3);
  for (size_t i = 0; i < text.size(); i += 4) {
    const bool last = i + 4 == text.size();
    int pad = 0;
    uint32_t v = 0;
    for (size_t j = 0; j < 4; ++j) {
      char c = text[i + j];
      if (c == '=') {
        // Padding only at the end of the last quantum, and at most two.
        if (!last || j < 2) return false;
        ++pad;
        v <<= 6;
        continue;
      }
      if (pad > 0) return false;  // data after padding
      int d = Base64Value(c);
      if (d < 0) return false;
      v = (v << 6) | uint32_t(d);
    }
    out += char((v >> 16) & 0xff);
    if (pad < 2) out += char((v >> 8) & 0xff);
    if (pad < 1) out += char(v & 0xff);
  }
  *bytes = std::move(out);
  return true;
}

std::string PrefixRangeEnd(std::string_view prefix) {
  std::string end(prefix);
  while (!end.empty()) {
    auto& last = reinterpret_cast<unsigned char&>(end.back());
    if (last < 0xff) {
      ++last;
      return end;
    }
    end.pop_back();
  }
  return std::string(1, '\0');
}

bool ReadInt64(const json::object& object, std::string_view field, int64_t* out, std::string* error) {
  const json::value* v = object.if_contains(field);
  if (v == nullptr) {
    *out = 0;
    return true;
  }
  if (v->is_int64()) {
    *out = v->get_int64();
    return true;
  }
  if (v->is_uint64() && v->get_uint64() <= uint64_t(INT64_MAX)) {
    *out = int64_t(v->get_uint64());
    return true;
  }
  if (v->is_string()) {
    std::string_view s = v->get_string();
    int64_t value = 0;
    auto [end, ec] = std::from_chars(s.data(), s.data() + s.size(), value);
    if (!s.empty() && ec == std::errc() && end == s.data() + s.size()) {
      *out = value;
      return true;
    }
  }
  return Fail(error, "field \"" + std::string(field) + "\" is not an int64: " + Shown(*v));
}

bool ParseEndpoint(std::string_view text, Endpoint* out, std::string* error) {
  Endpoint ep;
  ep.text = std::string(text);
  const std::string quoted = "etcd endpoint \"" + ep.text + "\"";
  std::string_view rest = text;
  if (rest.starts_with("http://")) {
    rest.remove_prefix(7);
  } else if (rest.starts_with("https://")) {
    ep.tls = true;
    rest.remove_prefix(8);
  } else {
    return Fail(error, quoted + " must start with http:// or https://");
  }
  if (!rest.empty() && rest.back() == '/') rest.remove_suffix(1);  // "http://h:2379/" is common
  if (rest.find_first_of("/@?#") != std::string_view::npos) {
    return Fail(error, quoted + " must be scheme://host:port, without a path or user");
  }
  std::string_view host, port;
  if (rest.starts_with("[")) {  // [IPv6]:port
    size_t close = rest.find(']');
    if (close == std::string_view::npos || close + 1 >= rest.size() || rest[close + 1] != ':') {
      return Fail(error, quoted + ": an IPv6 host is written [addr]:port");
    }
    host = rest.substr(1, close - 1);
    port = rest.substr(close + 2);
  } else {
    size_t colon = rest.rfind(':');
    if (colon == std::string_view::npos) return Fail(error, quoted + " has no port (etcd's is usually 2379)");
    host = rest.substr(0, colon);
    port = rest.substr(colon + 1);
  }
  unsigned value = 0;
  auto [end, ec] = std::from_chars(port.data(), port.data() + port.size(), value);
  if (host.empty() || port.empty() || ec != std::errc() || end != port.data() + port.size() || value == 0 ||
      value > 65535) {
    return Fail(error, quoted + " needs a host and a port in 1..65535");
  }
  ep.host = std::string(host);
  ep.port = uint16_t(value);
  *out = std::move(ep);
  return true;
}

// ------------------------------------------------------------------------------ request bodies

json::object ToJson(const RangeRequest& request) {
  json::object r{{"key", Base64Encode(request.key)}};
  if (!request.range_end.empty()) r["range_end"] = Base64Encode(request.range_end);
  if (request.revision > 0) r["revision"] = std::to_string(request.revision);
  if (request.limit > 0) r["limit"] = std::to_string(request.limit);
  if (request.sort_by == RangeRequest::SortBy::kCreateRevision) {
    r["sort_order"] = "ASCEND";
    r["sort_target"] = "CREATE";
  }
  if (request.keys_only) r["keys_only"] = true;
  // serializable is left out (false): reads go through the leader's read index.
  return r;
}

json::object ToJson(const Compare& compare) {
  return {{"key", Base64Encode(compare.key)},
          {"result", "EQUAL"},
          {"target", "MOD"},
          {"mod_revision", std::to_string(compare.mod_revision)}};
}

json::object PutJson(std::string_view key, std::string_view value, int64_t lease) {
  json::object put{{"key", Base64Encode(key)}, {"value", Base64Encode(value)}};
  if (lease != 0) put["lease"] = std::to_string(lease);
  return put;
}

json::object ToJson(const Op& op) {
  switch (op.type) {
    case Op::Type::kPut:
      return {{"request_put", PutJson(op.key, op.value, op.lease)}};
    case Op::Type::kDelete:
      return {{"request_delete_range", json::object{{"key", Base64Encode(op.key)}}}};
    case Op::Type::kRange:
      break;
  }
  RangeRequest range;
  range.key = op.key;
  range.range_end = op.range_end;
  return {{"request_range", ToJson(range)}};
}

json::object ToJson(const TxnRequest& request) {
  auto array = [](const auto& items) {
    json::array a;
    a.reserve(items.size());
    for (const auto& item : items) a.emplace_back(ToJson(item));
    return a;
  };
  return {{"compare", array(request.compare)}, {"success", array(request.success)}, {"failure", array(request.failure)}};
}

json::object WatchCreateJson(const WatchOptions& options) {
  json::object create{{"key", Base64Encode(options.key)}};
  if (!options.range_end.empty()) create["range_end"] = Base64Encode(options.range_end);
  if (options.start_revision > 0) create["start_revision"] = std::to_string(options.start_revision);
  if (options.progress_notify) create["progress_notify"] = true;
  return {{"create_request", std::move(create)}};
}

json::object LeaseGrantJson(int64_t ttl_seconds) { return {{"TTL", std::to_string(ttl_seconds)}}; }
json::object LeaseIdJson(int64_t id) { return {{"ID", std::to_string(id)}}; }
json::object AuthenticateJson(std::string_view name, std::string_view password) {
  return {{"name", name}, {"password", password}};
}

// ------------------------------------------------------------------------------ gRPC codes, Classify

std::string_view GrpcCodeName(int code) {
  static constexpr std::string_view kNames[] = {
      "OK",      "CANCELLED",    "UNKNOWN",  "INVALID_ARGUMENT", "DEADLINE_EXCEEDED", "NOT_FOUND",
      "ALREADY_EXISTS", "PERMISSION_DENIED", "RESOURCE_EXHAUSTED", "FAILED_PRECONDITION", "ABORTED",
      "OUT_OF_RANGE", "UNIMPLEMENTED", "INTERNAL", "UNAVAILABLE", "DATA_LOSS", "UNAUTHENTICATED"};
  if (code < 0 || code >= int(std::size(kNames))) return "";
  return kNames[code];
}

namespace {

// The message and code of an error status: the gateway's error body ({"error": "...", "code": N,
// "message": "..."}) or a stream message's {"error": {"grpc_code": N, "message": "..."}}.
void ReadStatus(const json::object& o, std::string* message, int* code) {
  if (const auto* m = o.if_contains("message"); m && m->is_string()) *message = m->get_string();
  else if (const auto* e = o.if_contains("error"); e && e->is_string()) *message = e->get_string();
  for (const char* field : {"grpc_code", "code"}) {
    if (const auto* c = o.if_contains(field); c && c->is_int64()) {
      *code = int(c->get_int64());
      break;
    }
  }
}

bool IsAuthTokenError(int code, std::string_view message) {
  return code == int(GrpcCode::kUnauthenticated) || message.find("invalid auth token") != std::string_view::npos ||
         message.find("revision of auth store is old") != std::string_view::npos ||
         message.find("user name is empty") != std::string_view::npos;
}

Verdict Final(std::string error, int code = -1) { return Verdict{Verdict::Next::kFinal, Status{std::move(error), code}, {}}; }

}  // namespace

Verdict Classify(const Answer& answer) {
  using Next = Verdict::Next;
  if (!answer.transport_error.empty()) return Verdict{Next::kNextEndpoint, Status{answer.transport_error, -1}, {}};
  // A stream's message within a 200 speaks for itself; any other answer is named by its status.
  const std::string http = answer.http_status == 200 ? "" : "HTTP " + std::to_string(answer.http_status) + ": ";
  boost::system::error_code ec;
  json::value parsed = json::parse(answer.body, ec);
  json::object* body = !ec && parsed.is_object() ? &parsed.get_object() : nullptr;
  std::string message;
  int code = -1;
  if (answer.http_status == 200) {
    if (body == nullptr) return Final("an answer that is not a JSON object: " + answer.body.substr(0, 200));
    if (!answer.stream) return Verdict{Next::kFinal, Status{}, std::move(*body)};
    if (json::value* result = body->if_contains("result"); result && result->is_object()) {
      return Verdict{Next::kFinal, Status{}, std::move(result->get_object())};
    }
    const json::value* status = body->if_contains("error");
    if (status == nullptr || !status->is_object()) {
      return Final("a message with neither a result nor an error: " + answer.body.substr(0, 200));
    }
    ReadStatus(status->get_object(), &message, &code);
  } else if (body != nullptr) {
    ReadStatus(*body, &message, &code);
  } else {
    message = answer.body.substr(0, 200);
  }
  if (message.empty()) message = "no error message";
  std::string text = http + message;
  if (code >= 0) {
    const std::string_view name = GrpcCodeName(code);
    text += " (gRPC " + std::to_string(code) + (name.empty() ? "" : " " + std::string(name)) + ")";
  }
  Next next = Next::kFinal;
  if (answer.http_status >= 500 || code == int(GrpcCode::kUnavailable)) next = Next::kNextEndpoint;
  else if (IsAuthTokenError(code, message)) next = Next::kRenewAuth;
  return Verdict{next, Status{std::move(text), code}, {}};
}

}  // namespace fencing::etcd
