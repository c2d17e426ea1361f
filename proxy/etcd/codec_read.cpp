// codec.h's readers: the gateway's response bodies -> kv.h's types.
#include "etcd/codec.h"

#include <boost/json/array.hpp>
#include <boost/json/serialize.hpp>

namespace fencing::etcd {

namespace json = boost::json;

namespace {

bool Fail(std::string* error, std::string text) {
  *error = std::move(text);
  return false;
}

// A value for an error message: its JSON, cut short.
std::string Shown(const json::value& v) { return json::serialize(v).substr(0, 200); }

}  // namespace

int64_t HeaderRevision(const json::object& response) {
  const json::value* header = response.if_contains("header");
  if (header == nullptr || !header->is_object()) return 0;
  int64_t revision = 0;
  std::string ignored;
  if (!ReadInt64(header->get_object(), "revision", &revision, &ignored)) return 0;
  return revision;
}

namespace {

bool RequireRevision(const json::object& response, const char* what, int64_t* revision, std::string* error) {
  *revision = HeaderRevision(response);
  if (*revision > 0) return true;
  return Fail(error, std::string("a ") + what + " answer without a header.revision: " + Shown(response));
}

// A RangeResponse's kvs and more; revision is the caller's.
bool ReadRangeBody(const json::object& range, RangeResponse* out, std::string* error) {
  RangeResponse r;
  if (const json::value* v = range.if_contains("kvs")) {
    if (!v->is_array()) return Fail(error, "a range's \"kvs\" is not an array: " + Shown(*v));
    for (const json::value& kv : v->get_array()) {
      if (!kv.is_object()) return Fail(error, "a range's kv is not an object: " + Shown(kv));
      if (!ReadKeyValue(kv.get_object(), &r.kvs.emplace_back(), error)) return false;
    }
  }
  if (const json::value* v = range.if_contains("more")) {
    if (!v->is_bool()) return Fail(error, "a range's \"more\" is not a boolean: " + Shown(*v));
    r.more = v->get_bool();
  }
  *out = std::move(r);
  return true;
}

const char* ResponseField(Op::Type type) {
  switch (type) {
    case Op::Type::kPut:
      return "response_put";
    case Op::Type::kDelete:
      return "response_delete_range";
    case Op::Type::kRange:
      break;
  }
  return "response_range";
}

}  // namespace

bool ReadKeyValue(const json::object& kv, KeyValue* out, std::string* error) {
  KeyValue r;
  const json::value* key = kv.if_contains("key");
  if (key == nullptr || !key->is_string()) return Fail(error, "a kv without a key: " + Shown(kv));
  if (!Base64Decode(key->get_string(), &r.key)) return Fail(error, "a kv's key is not base64: " + Shown(*key));
  if (const json::value* value = kv.if_contains("value")) {
    if (!value->is_string() || !Base64Decode(value->get_string(), &r.value)) {
      return Fail(error, "the value of key \"" + r.key + "\" is not base64: " + Shown(*value));
    }
  }
  std::string why;
  if (!ReadInt64(kv, "create_revision", &r.create_revision, &why) || !ReadInt64(kv, "mod_revision", &r.mod_revision, &why) ||
      !ReadInt64(kv, "version", &r.version, &why) || !ReadInt64(kv, "lease", &r.lease, &why)) {
    return Fail(error, "key \"" + r.key + "\": " + why);
  }
  *out = std::move(r);
  return true;
}

bool ReadRangeResponse(const json::object& response, RangeResponse* out, std::string* error) {
  int64_t revision = 0;
  if (!RequireRevision(response, "range", &revision, error) || !ReadRangeBody(response, out, error)) return false;
  out->revision = revision;
  return true;
}

bool ReadTxnResponse(const json::object& response, const TxnRequest& request, TxnResponse* out, std::string* error) {
  TxnResponse r;
  if (!RequireRevision(response, "txn", &r.revision, error)) return false;
  if (const json::value* v = response.if_contains("succeeded")) {
    if (!v->is_bool()) return Fail(error, "a txn's \"succeeded\" is not a boolean: " + Shown(*v));
    r.succeeded = v->get_bool();
  }
  const std::vector<Op>& ops = r.succeeded ? request.success : request.failure;
  const json::array none;
  const json::array* responses = &none;
  if (const json::value* v = response.if_contains("responses")) {
    if (!v->is_array()) return Fail(error, "a txn's \"responses\" is not an array: " + Shown(*v));
    responses = &v->get_array();
  }
  if (responses->size() != ops.size()) {
    return Fail(error, "a txn answered " + std::to_string(responses->size()) + " responses to " +
                           std::to_string(ops.size()) + " ops");
  }
  for (size_t i = 0; i < ops.size(); ++i) {
    // A ResponseOp is a oneof: one member, named for the op's kind, whose value is its response.
    const json::value& op = (*responses)[i];
    const char* field = ResponseField(ops[i].type);
    const json::value* inner = op.is_object() && op.get_object().size() == 1 ? op.get_object().if_contains(field) : nullptr;
    if (inner == nullptr || !inner->is_object()) {
      return Fail(error, "a txn's response " + std::to_string(i) + " is not one " + field + ": " + Shown(op));
    }
    RangeResponse& range = r.responses.emplace_back();
    if (ops[i].type != Op::Type::kRange) continue;
    if (!ReadRangeBody(inner->get_object(), &range, error)) return false;
    range.revision = HeaderRevision(inner->get_object());
    if (range.revision == 0) range.revision = r.revision;
  }
  *out = std::move(r);
  return true;
}

bool ReadPutResponse(const json::object& response, int64_t* revision, std::string* error) {
  return RequireRevision(response, "put", revision, error);
}

bool ReadLeaseGrantResponse(const json::object& response, int64_t* id, int64_t* ttl_seconds, std::string* error) {
  if (const json::value* e = response.if_contains("error"); e && e->is_string() && !e->get_string().empty()) {
    return Fail(error, std::string(e->get_string()));
  }
  if (!ReadInt64(response, "ID", id, error) || !ReadInt64(response, "TTL", ttl_seconds, error)) return false;
  if (*id == 0) return Fail(error, "a lease grant answer without an ID: " + Shown(response));
  return true;
}

bool ReadLeaseKeepAliveResponse(const json::object& response, int64_t* ttl_seconds, int64_t* revision,
                                std::string* error) {
  if (!ReadInt64(response, "TTL", ttl_seconds, error)) return false;
  *revision = HeaderRevision(response);
  return true;
}

bool ReadAuthenticateResponse(const json::object& response, std::string* token, std::string* error) {
  const json::value* t = response.if_contains("token");
  if (t == nullptr || !t->is_string() || t->get_string().empty()) return Fail(error, "the answer has no token");
  *token = t->get_string();
  return true;
}

bool ReadWatchResponse(const json::object& result, WatchResponse* out, std::string* error) {
  WatchResponse r;
  r.revision = HeaderRevision(result);
  for (auto [field, flag] : {std::pair{"created", &r.created}, std::pair{"canceled", &r.canceled}}) {
    if (const json::value* v = result.if_contains(field)) {
      if (!v->is_bool()) return Fail(error, "a watch response's \"" + std::string(field) + "\" is not a boolean: " + Shown(*v));
      *flag = v->get_bool();
    }
  }
  if (const json::value* v = result.if_contains("cancel_reason"); v && v->is_string()) r.cancel_reason = v->get_string();
  if (!ReadInt64(result, "compact_revision", &r.compact_revision, error)) return false;
  if (const json::value* v = result.if_contains("events")) {
    if (!v->is_array()) return Fail(error, "a watch response's \"events\" is not an array: " + Shown(*v));
    for (const json::value& e : v->get_array()) {
      if (!e.is_object()) return Fail(error, "a watch event is not an object: " + Shown(e));
      const json::object& event = e.get_object();
      WatchEvent& w = r.events.emplace_back();
      if (const json::value* type = event.if_contains("type")) {
        // The gateway writes enum names; a number is the same enum written the other way.
        if (*type == json::value("DELETE") || *type == json::value(1)) {
          w.type = WatchEvent::Type::kDelete;
        } else if (*type != json::value("PUT") && *type != json::value(0)) {
          return Fail(error, "a watch event of unknown type: " + Shown(*type));
        }
      }
      const json::value* kv = event.if_contains("kv");
      if (kv == nullptr || !kv->is_object()) return Fail(error, "a watch event without a kv: " + Shown(e));
      if (!ReadKeyValue(kv->get_object(), &w.kv, error)) return false;
    }
  }
  *out = std::move(r);
  return true;
}

}  // namespace fencing::etcd
