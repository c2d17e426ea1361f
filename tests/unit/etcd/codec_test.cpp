// The etcd gateway's JSON (codec.h) and the watch's message splitter (watch_stream.h), pure: every
// conversion both ways, malformed input, and Classify's table. No etcd needed.

#include "etcd/codec.h"
#include "etcd/watch_stream.h"

#include "test_files.h"

#include <boost/json.hpp>
#include <gtest/gtest.h>

#include <string>
#include <utility>
#include <vector>

namespace fencing::etcd {
namespace {

namespace json = boost::json;

json::value B(const std::string& bytes) { return json::value(Base64Encode(bytes)); }
json::object Header(int64_t revision) { return {{"revision", std::to_string(revision)}}; }

// ------------------------------------------------------------------------------ bytes, numbers, endpoints

TEST(Codec, Base64RoundTripsAndRejectsBadText) {
  const std::vector<std::pair<std::string, std::string>> cases = {
      {"", ""}, {"f", "Zg=="}, {"fo", "Zm8="}, {"foo", "Zm9v"}, {"foob", "Zm9vYg=="},
      {"/locks/a/", "L2xvY2tzL2Ev"}, {std::string("\xff\x00\xfe", 3), "/wD+"}};
  for (const auto& [bytes, text] : cases) {
    EXPECT_EQ(Base64Encode(bytes), text);
    std::string decoded;
    ASSERT_TRUE(Base64Decode(text, &decoded)) << text;
    EXPECT_EQ(decoded, bytes);
  }
  for (const char* bad : {"Zg=", "Z===", "Zg==Zg==", "Zm9v!", "Zg=a", "====", "Zm 9", "Zm9v-_"}) {
    std::string out = "untouched";
    EXPECT_FALSE(Base64Decode(bad, &out)) << bad;
    EXPECT_EQ(out, "untouched");
  }
}

TEST(Codec, PrefixRangeEndIsClientv3s) {
  EXPECT_EQ(PrefixRangeEnd("/locks/a/"), "/locks/a0");
  EXPECT_EQ(PrefixRangeEnd("a\xff"), "b");
  EXPECT_EQ(PrefixRangeEnd("a\xfe"), "a\xff");
  EXPECT_EQ(PrefixRangeEnd("\xff\xff"), std::string(1, '\0'));
  EXPECT_EQ(PrefixRangeEnd(""), std::string(1, '\0'));
}

TEST(Codec, ReadInt64TakesStringsAndNumbersAndAbsence) {
  json::object o = {{"s", "12345678901234"}, {"n", 7},         {"neg", "-3"},   {"bad", "12x"},  {"b", true},
                    {"empty", ""},           {"huge", "99999999999999999999"}, {"u", 18446744073709551615u},
                    {"f", 1.5},              {"null", nullptr}};
  int64_t v = -1;
  std::string error;
  ASSERT_TRUE(ReadInt64(o, "s", &v, &error));
  EXPECT_EQ(v, 12345678901234);
  ASSERT_TRUE(ReadInt64(o, "n", &v, &error));
  EXPECT_EQ(v, 7);
  ASSERT_TRUE(ReadInt64(o, "neg", &v, &error));
  EXPECT_EQ(v, -3);
  ASSERT_TRUE(ReadInt64(o, "absent", &v, &error));
  EXPECT_EQ(v, 0);
  for (const char* bad : {"bad", "b", "empty", "huge", "u", "f", "null"}) {
    error.clear();
    EXPECT_FALSE(ReadInt64(o, bad, &v, &error)) << bad;
    EXPECT_TRUE(Contains(error, bad));
  }
}

TEST(Codec, ParseEndpoint) {
  Endpoint ep;
  std::string error;
  ASSERT_TRUE(ParseEndpoint("http://127.0.0.1:2379", &ep, &error)) << error;
  EXPECT_FALSE(ep.tls);
  EXPECT_EQ(ep.host, "127.0.0.1");
  EXPECT_EQ(ep.port, 2379);
  EXPECT_EQ(ep.text, "http://127.0.0.1:2379");
  ASSERT_TRUE(ParseEndpoint("https://etcd.example:2379/", &ep, &error)) << error;
  EXPECT_TRUE(ep.tls);
  EXPECT_EQ(ep.host, "etcd.example");
  ASSERT_TRUE(ParseEndpoint("http://[::1]:2379", &ep, &error)) << error;
  EXPECT_EQ(ep.host, "::1");
  for (const char* bad : {"127.0.0.1:2379", "grpc://h:1", "http://h", "http://h:0", "http://h:65536", "http://:2379",
                          "http://h:2379/v3", "http://u@h:2379", "http://[::1]2379", "http://h:x", "http://[::1", ""}) {
    error.clear();
    EXPECT_FALSE(ParseEndpoint(bad, &ep, &error)) << bad;
    EXPECT_TRUE(Contains(error, "\"" + std::string(bad) + "\"")) << error;
  }
}

// ------------------------------------------------------------------------------ kv.h -> JSON

TEST(Codec, RequestsAreTheGatewaysJson) {
  RangeRequest range;
  range.key = "/k";
  RangeRequest page;
  page.key = "/p/";
  page.range_end = "/p0";
  page.revision = 12;
  page.limit = 100;
  RangeRequest holder;
  holder.key = "/l/";
  holder.range_end = "/l0";
  holder.limit = 1;
  holder.sort_by = RangeRequest::SortBy::kCreateRevision;
  holder.keys_only = true;
  TxnRequest txn;
  txn.compare = {Compare{"/k", 1}};
  txn.success = {Op::Delete("/k"), Op::Put("/a", "1", 7)};
  WatchOptions watch;
  watch.key = "/w/";
  WatchOptions full = watch;
  full.range_end = "/w0";
  full.start_revision = 42;
  full.progress_notify = false;

  const std::vector<std::pair<json::object, json::object>> cases = {
      {ToJson(range), {{"key", B("/k")}}},
      {ToJson(page), {{"key", B("/p/")}, {"range_end", B("/p0")}, {"revision", "12"}, {"limit", "100"}}},
      {ToJson(holder),
       {{"key", B("/l/")}, {"range_end", B("/l0")}, {"limit", "1"}, {"sort_order", "ASCEND"}, {"sort_target", "CREATE"},
        {"keys_only", true}}},
      {ToJson(Compare{"/k", 0}), {{"key", B("/k")}, {"result", "EQUAL"}, {"target", "MOD"}, {"mod_revision", "0"}}},
      {ToJson(Compare{"/k", 77}), {{"key", B("/k")}, {"result", "EQUAL"}, {"target", "MOD"}, {"mod_revision", "77"}}},
      {ToJson(Op::Put("/k", "v")), {{"request_put", json::object{{"key", B("/k")}, {"value", B("v")}}}}},
      {ToJson(Op::Put("/k", "", 5)), {{"request_put", json::object{{"key", B("/k")}, {"value", ""}, {"lease", "5"}}}}},
      {ToJson(Op::Delete("/k")), {{"request_delete_range", json::object{{"key", B("/k")}}}}},
      {ToJson(Op::Range("/k")), {{"request_range", json::object{{"key", B("/k")}}}}},
      {ToJson(Op::Range("/p/", "/p0")), {{"request_range", json::object{{"key", B("/p/")}, {"range_end", B("/p0")}}}}},
      {ToJson(txn),
       {{"compare", json::array{ToJson(Compare{"/k", 1})}},
        {"success", json::array{ToJson(Op::Delete("/k")), ToJson(Op::Put("/a", "1", 7))}},
        {"failure", json::array{}}}},
      {ToJson(TxnRequest{}), {{"compare", json::array{}}, {"success", json::array{}}, {"failure", json::array{}}}},
      {PutJson("/k", "v", 0), {{"key", B("/k")}, {"value", B("v")}}},
      {PutJson("/k", "v", -9), {{"key", B("/k")}, {"value", B("v")}, {"lease", "-9"}}},
      {WatchCreateJson(watch), {{"create_request", json::object{{"key", B("/w/")}, {"progress_notify", true}}}}},
      {WatchCreateJson(full),
       {{"create_request", json::object{{"key", B("/w/")}, {"range_end", B("/w0")}, {"start_revision", "42"}}}}},
      {LeaseGrantJson(30), {{"TTL", "30"}}},
      {LeaseIdJson(7587883), {{"ID", "7587883"}}},
      {AuthenticateJson("root", "p\"w"), {{"name", "root"}, {"password", "p\"w"}}},
  };
  for (const auto& [got, want] : cases) EXPECT_EQ(got, want) << json::serialize(got) << " != " << json::serialize(want);
}

// ------------------------------------------------------------------------------ JSON -> kv.h

TEST(Codec, HeaderRevision) {
  const std::vector<std::pair<json::object, int64_t>> cases = {
      {{{"header", Header(42)}}, 42},
      {{{"header", json::object{{"revision", 43}}}}, 43},
      {{{"header", json::object{}}}, 0},
      {{}, 0},
      {{{"header", "x"}}, 0},
      {{{"header", json::object{{"revision", "4x"}}}}, 0},
  };
  for (const auto& [response, revision] : cases) EXPECT_EQ(HeaderRevision(response), revision) << json::serialize(response);
}

TEST(Codec, ReadKeyValue) {
  KeyValue kv;
  std::string error;
  ASSERT_TRUE(ReadKeyValue({{"key", B("/k")}, {"value", B("v")}, {"create_revision", "3"}, {"mod_revision", "5"},
                            {"version", "2"}, {"lease", "7587883"}},
                           &kv, &error))
      << error;
  EXPECT_EQ(kv.key, "/k");
  EXPECT_EQ(kv.value, "v");
  EXPECT_EQ(kv.create_revision, 3);
  EXPECT_EQ(kv.mod_revision, 5);
  EXPECT_EQ(kv.version, 2);
  EXPECT_EQ(kv.lease, 7587883);
  // A deleted key's kv in a watch event: key and mod_revision only; proto3 leaves out the rest.
  ASSERT_TRUE(ReadKeyValue({{"key", B("/gone")}, {"mod_revision", "9"}}, &kv, &error)) << error;
  EXPECT_EQ(kv.key, "/gone");
  EXPECT_EQ(kv.value, "");
  EXPECT_EQ(kv.mod_revision, 9);
  EXPECT_EQ(kv.create_revision, 0);
  EXPECT_EQ(kv.lease, 0);

  const std::vector<std::pair<json::object, std::string>> bad = {
      {{{"value", B("v")}}, "without a key"},
      {{{"key", 5}}, "without a key"},
      {{{"key", "%%"}}, "not base64"},
      {{{"key", B("/k")}, {"value", "!"}}, "/k"},
      {{{"key", B("/k")}, {"value", 1}}, "/k"},
      {{{"key", B("/k")}, {"mod_revision", "x"}}, "mod_revision"},
      {{{"key", B("/k")}, {"lease", true}}, "lease"},
  };
  for (const auto& [object, words] : bad) {
    error.clear();
    EXPECT_FALSE(ReadKeyValue(object, &kv, &error)) << json::serialize(object);
    EXPECT_TRUE(Contains(error, words)) << error;
  }
}

TEST(Codec, ReadRangeResponse) {
  RangeResponse r;
  std::string error;
  ASSERT_TRUE(ReadRangeResponse({{"header", Header(4)}}, &r, &error)) << error;
  EXPECT_EQ(r.revision, 4);
  EXPECT_TRUE(r.kvs.empty());
  EXPECT_FALSE(r.more);
  ASSERT_TRUE(ReadRangeResponse({{"header", Header(9)},
                                 {"kvs", json::array{json::object{{"key", B("/a")}, {"value", B("1")}},
                                                     json::object{{"key", B("/b")}, {"create_revision", "8"}}}},
                                 {"more", true},
                                 {"count", "5"}},
                                &r, &error))
      << error;
  EXPECT_EQ(r.revision, 9);
  ASSERT_EQ(r.kvs.size(), 2u);
  EXPECT_EQ(r.kvs[0].key, "/a");
  EXPECT_EQ(r.kvs[0].value, "1");
  EXPECT_EQ(r.kvs[1].key, "/b");
  EXPECT_EQ(r.kvs[1].create_revision, 8);
  EXPECT_TRUE(r.more);
  const std::vector<std::pair<json::object, std::string>> bad = {
      {{}, "header.revision"},
      {{{"header", json::object{}}}, "header.revision"},
      {{{"header", Header(1)}, {"kvs", "x"}}, "kvs"},
      {{{"header", Header(1)}, {"kvs", json::array{1}}}, "not an object"},
      {{{"header", Header(1)}, {"kvs", json::array{json::object{{"key", "%%"}}}}}, "not base64"},
      {{{"header", Header(1)}, {"more", "yes"}}, "more"},
  };
  for (const auto& [object, words] : bad) {
    error.clear();
    EXPECT_FALSE(ReadRangeResponse(object, &r, &error)) << json::serialize(object);
    EXPECT_TRUE(Contains(error, words)) << error;
  }
}

TEST(Codec, ReadTxnResponseMatchesTheBranchTaken) {
  TxnRequest request;
  request.compare = {Compare{"/k", 3}};
  request.success = {Op::Put("/k", "2"), Op::Range("/k"), Op::Delete("/x")};
  request.failure = {Op::Range("/k"), Op::Range("/p/", "/p0")};
  const json::object range{{"header", Header(11)}, {"kvs", json::array{json::object{{"key", B("/k")}, {"mod_revision", "11"}}}}};

  TxnResponse t;
  std::string error;
  ASSERT_TRUE(ReadTxnResponse({{"header", Header(11)},
                               {"succeeded", true},
                               {"responses", json::array{json::object{{"response_put", json::object{{"header", json::object{}}}}},
                                                         json::object{{"response_range", range}},
                                                         json::object{{"response_delete_range", json::object{}}}}}},
                              request, &t, &error))
      << error;
  EXPECT_TRUE(t.succeeded);
  EXPECT_EQ(t.revision, 11);
  ASSERT_EQ(t.responses.size(), 3u);
  EXPECT_TRUE(t.responses[0].kvs.empty());
  ASSERT_EQ(t.responses[1].kvs.size(), 1u);
  EXPECT_EQ(t.responses[1].kvs[0].key, "/k");
  EXPECT_EQ(t.responses[1].kvs[0].mod_revision, 11);
  EXPECT_EQ(t.responses[1].revision, 11);
  EXPECT_TRUE(t.responses[2].kvs.empty());

  // The failure branch; an inner range without a header has the txn's revision; "succeeded" absent
  // is false (proto3).
  ASSERT_TRUE(ReadTxnResponse({{"header", Header(12)},
                               {"responses", json::array{json::object{{"response_range", json::object{}}},
                                                         json::object{{"response_range", json::object{{"more", true}}}}}}},
                              request, &t, &error))
      << error;
  EXPECT_FALSE(t.succeeded);
  ASSERT_EQ(t.responses.size(), 2u);
  EXPECT_EQ(t.responses[0].revision, 12);
  EXPECT_TRUE(t.responses[1].more);

  // No ops in the branch taken: "responses" left out.
  TxnRequest compare_only;
  compare_only.compare = {Compare{"/k", 0}};
  ASSERT_TRUE(ReadTxnResponse({{"header", Header(13)}}, compare_only, &t, &error)) << error;
  EXPECT_FALSE(t.succeeded);
  EXPECT_EQ(t.revision, 13);
  EXPECT_TRUE(t.responses.empty());

  const json::object put{{"response_put", json::object{}}};
  const std::vector<std::pair<json::object, std::string>> bad = {
      {{{"succeeded", true}, {"responses", json::array{put}}}, "header.revision"},
      {{{"header", Header(1)}, {"succeeded", "true"}}, "succeeded"},
      {{{"header", Header(1)}, {"responses", json::object{}}}, "responses"},
      // Two responses to the failure branch's two ops are fine; one is not.
      {{{"header", Header(1)}, {"responses", json::array{json::object{{"response_range", json::object{}}}}}}, "1 responses to 2 ops"},
      {{{"header", Header(1)}, {"succeeded", true}, {"responses", json::array{put, put, put}}}, "response 1 is not one response_range"},
      {{{"header", Header(1)}, {"responses", json::array{json::object{}, json::object{}}}}, "response 0"},
      {{{"header", Header(1)}, {"responses", json::array{1, 2}}}, "response 0"},
      {{{"header", Header(1)}, {"responses", json::array{json::object{{"response_range", 1}}, put}}}, "response 0"},
      {{{"header", Header(1)},
        {"responses", json::array{json::object{{"response_range", json::object{}}, {"response_put", json::object{}}},
                                  json::object{{"response_range", json::object{}}}}}},
       "response 0"},
      {{{"header", Header(1)},
        {"responses", json::array{json::object{{"response_range", json::object{{"kvs", json::array{json::object{{"key", "%"}}}}}}},
                                  json::object{{"response_range", json::object{}}}}}},
       "not base64"},
  };
  for (const auto& [object, words] : bad) {
    error.clear();
    EXPECT_FALSE(ReadTxnResponse(object, request, &t, &error)) << json::serialize(object);
    EXPECT_TRUE(Contains(error, words)) << error;
  }
}

TEST(Codec, ReadPutLeaseAndAuthenticateResponses) {
  std::string error;
  int64_t revision = -1;
  ASSERT_TRUE(ReadPutResponse({{"header", Header(5)}}, &revision, &error)) << error;
  EXPECT_EQ(revision, 5);
  EXPECT_FALSE(ReadPutResponse({}, &revision, &error));
  EXPECT_TRUE(Contains(error, "header.revision"));

  int64_t id = -1, ttl = -1;
  ASSERT_TRUE(ReadLeaseGrantResponse({{"header", Header(2)}, {"ID", "7587883"}, {"TTL", "30"}}, &id, &ttl, &error)) << error;
  EXPECT_EQ(id, 7587883);
  EXPECT_EQ(ttl, 30);
  const std::vector<std::pair<json::object, std::string>> bad_grants = {
      {{{"ID", "1"}, {"TTL", "30"}, {"error", "lease already exists"}}, "lease already exists"},
      {{{"TTL", "30"}}, "without an ID"},
      {{{"ID", "x"}, {"TTL", "30"}}, "ID"},
      {{{"ID", "1"}, {"TTL", true}}, "TTL"},
  };
  for (const auto& [object, words] : bad_grants) {
    error.clear();
    EXPECT_FALSE(ReadLeaseGrantResponse(object, &id, &ttl, &error)) << json::serialize(object);
    EXPECT_TRUE(Contains(error, words)) << error;
  }
  // An empty "error" is no error.
  EXPECT_TRUE(ReadLeaseGrantResponse({{"ID", "1"}, {"TTL", "3"}, {"error", ""}}, &id, &ttl, &error)) << error;

  ASSERT_TRUE(ReadLeaseKeepAliveResponse({{"header", Header(8)}, {"ID", "1"}, {"TTL", "5"}}, &ttl, &revision, &error));
  EXPECT_EQ(ttl, 5);
  EXPECT_EQ(revision, 8);
  // Gone: TTL left out (0), and a header is not required.
  ASSERT_TRUE(ReadLeaseKeepAliveResponse({{"ID", "1"}}, &ttl, &revision, &error));
  EXPECT_EQ(ttl, 0);
  EXPECT_EQ(revision, 0);
  EXPECT_FALSE(ReadLeaseKeepAliveResponse({{"TTL", "five"}}, &ttl, &revision, &error));
  EXPECT_TRUE(Contains(error, "TTL"));

  std::string token;
  ASSERT_TRUE(ReadAuthenticateResponse({{"header", Header(1)}, {"token", "abc.def"}}, &token, &error));
  EXPECT_EQ(token, "abc.def");
  for (const json::object& bad : {json::object{}, json::object{{"token", ""}}, json::object{{"token", 5}}}) {
    EXPECT_FALSE(ReadAuthenticateResponse(bad, &token, &error)) << json::serialize(bad);
    EXPECT_TRUE(Contains(error, "no token"));
  }
}

TEST(Codec, ReadWatchResponse) {
  auto kv = [](const char* key) { return json::object{{"key", Base64Encode(key)}, {"mod_revision", "3"}}; };
  WatchResponse w;
  std::string error;
  ASSERT_TRUE(ReadWatchResponse({{"header", Header(7)}, {"created", true}}, &w, &error)) << error;
  EXPECT_TRUE(w.created);
  EXPECT_EQ(w.revision, 7);
  EXPECT_TRUE(w.events.empty());
  EXPECT_FALSE(w.canceled);
  EXPECT_EQ(w.compact_revision, 0);

  ASSERT_TRUE(ReadWatchResponse({{"header", Header(9)},
                                 {"events", json::array{json::object{{"kv", kv("/put")}},
                                                        json::object{{"type", "DELETE"}, {"kv", kv("/del")}},
                                                        json::object{{"type", 1}, {"kv", kv("/del2")}},
                                                        json::object{{"type", "PUT"}, {"kv", kv("/put2")}}}}},
                                &w, &error))
      << error;
  EXPECT_FALSE(w.created);
  ASSERT_EQ(w.events.size(), 4u);
  EXPECT_EQ(w.events[0].type, WatchEvent::Type::kPut);
  EXPECT_EQ(w.events[0].kv.key, "/put");
  EXPECT_EQ(w.events[1].type, WatchEvent::Type::kDelete);
  EXPECT_EQ(w.events[1].kv.key, "/del");
  EXPECT_EQ(w.events[1].kv.mod_revision, 3);
  EXPECT_EQ(w.events[2].type, WatchEvent::Type::kDelete);
  EXPECT_EQ(w.events[3].type, WatchEvent::Type::kPut);

  ASSERT_TRUE(ReadWatchResponse({{"header", Header(20)}, {"compact_revision", "15"}, {"canceled", true},
                                 {"cancel_reason", "mvcc: required revision has been compacted"}},
                                &w, &error))
      << error;
  EXPECT_EQ(w.compact_revision, 15);
  EXPECT_TRUE(w.canceled);
  EXPECT_EQ(w.cancel_reason, "mvcc: required revision has been compacted");

  const std::vector<std::pair<json::object, std::string>> bad = {
      {{{"events", 1}}, "events"},
      {{{"events", json::array{1}}}, "not an object"},
      {{{"events", json::array{json::object{{"type", "EXPIRE"}, {"kv", kv("/k")}}}}}, "unknown type"},
      {{{"events", json::array{json::object{{"type", 2}, {"kv", kv("/k")}}}}}, "unknown type"},
      {{{"events", json::array{json::object{{"type", "PUT"}}}}}, "without a kv"},
      {{{"events", json::array{json::object{{"kv", json::object{{"key", "%%"}}}}}}}, "not base64"},
      {{{"compact_revision", "x"}}, "compact_revision"},
      {{{"created", "yes"}}, "created"},
      {{{"canceled", 1}}, "canceled"},
  };
  for (const auto& [object, words] : bad) {
    error.clear();
    EXPECT_FALSE(ReadWatchResponse(object, &w, &error)) << json::serialize(object);
    EXPECT_TRUE(Contains(error, words)) << error;
  }
}

// ------------------------------------------------------------------------------ gRPC codes, Classify

TEST(Codec, GrpcCodesHaveTheirNames) {
  EXPECT_EQ(GrpcCodeName(int(GrpcCode::kOk)), "OK");
  EXPECT_EQ(GrpcCodeName(int(GrpcCode::kCancelled)), "CANCELLED");
  EXPECT_EQ(GrpcCodeName(int(GrpcCode::kInvalidArgument)), "INVALID_ARGUMENT");
  EXPECT_EQ(GrpcCodeName(int(GrpcCode::kNotFound)), "NOT_FOUND");
  EXPECT_EQ(GrpcCodeName(int(GrpcCode::kFailedPrecondition)), "FAILED_PRECONDITION");
  EXPECT_EQ(GrpcCodeName(int(GrpcCode::kUnavailable)), "UNAVAILABLE");
  EXPECT_EQ(GrpcCodeName(int(GrpcCode::kDataLoss)), "DATA_LOSS");
  EXPECT_EQ(GrpcCodeName(int(GrpcCode::kUnauthenticated)), "UNAUTHENTICATED");
  EXPECT_EQ(int(GrpcCode::kUnavailable), 14);
  EXPECT_EQ(int(GrpcCode::kUnauthenticated), 16);
  EXPECT_EQ(GrpcCodeName(-1), "");
  EXPECT_EQ(GrpcCodeName(17), "");
  for (int code = 0; code <= 16; ++code) EXPECT_FALSE(GrpcCodeName(code).empty()) << code;
}

TEST(Codec, ClassifyTable) {
  using Next = Verdict::Next;
  struct Case {
    Answer answer;
    Next next;
    bool ok;
    int code;
    std::string words;  // in the error (ok: empty)
  };
  auto unary = [](unsigned status, std::string body) { return Answer{"", status, std::move(body), false}; };
  auto stream = [](unsigned status, std::string body) { return Answer{"", status, std::move(body), true}; };
  const std::vector<Case> cases = {
      // No answer: another member may do better.
      {Answer{"connect: Connection refused", 0, "", false}, Next::kNextEndpoint, false, -1, "connect: Connection refused"},
      {Answer{"receive: timed out", 200, "{}", true}, Next::kNextEndpoint, false, -1, "receive: timed out"},
      // A 200 with a JSON object is the response; anything else is never ok.
      {unary(200, R"({"header":{"revision":"3"}})"), Next::kFinal, true, -1, ""},
      {unary(200, "<html>"), Next::kFinal, false, -1, "not a JSON object: <html>"},
      {unary(200, "[1]"), Next::kFinal, false, -1, "not a JSON object"},
      {unary(200, ""), Next::kFinal, false, -1, "not a JSON object"},
      // 5xx and UNAVAILABLE: the next endpoint.
      {unary(503, R"({"error":"etcdserver: no leader","code":14,"message":"etcdserver: no leader"})"), Next::kNextEndpoint,
       false, 14, "HTTP 503: etcdserver: no leader (gRPC 14 UNAVAILABLE)"},
      {unary(500, "proxy error"), Next::kNextEndpoint, false, -1, "HTTP 500: proxy error"},
      {unary(502, ""), Next::kNextEndpoint, false, -1, "HTTP 502: no error message"},
      {unary(400, R"({"code":14,"message":"etcdserver: request timed out"})"), Next::kNextEndpoint, false, 14,
       "request timed out"},
      // The token: authenticate again.
      {unary(401, R"({"code":16,"message":"etcdserver: invalid auth token"})"), Next::kRenewAuth, false, 16,
       "HTTP 401: etcdserver: invalid auth token (gRPC 16 UNAUTHENTICATED)"},
      {unary(400, R"({"code":3,"message":"etcdserver: revision of auth store is old"})"), Next::kRenewAuth, false, 3,
       "auth store is old"},
      {unary(400, R"({"code":3,"message":"etcdserver: user name is empty"})"), Next::kRenewAuth, false, 3, "user name is empty"},
      {unary(401, R"({"code":16})"), Next::kRenewAuth, false, 16, "no error message (gRPC 16 UNAUTHENTICATED)"},
      // Final errors, with etcd's code.
      {unary(404, R"({"error":"etcdserver: requested lease not found","code":5,"message":"etcdserver: requested lease not found"})"),
       Next::kFinal, false, 5, "HTTP 404: etcdserver: requested lease not found (gRPC 5 NOT_FOUND)"},
      {unary(400, R"({"code":3,"message":"etcdserver: authentication failed, invalid user ID or password"})"), Next::kFinal,
       false, 3, "authentication failed"},
      {unary(403, R"({"error":"etcdserver: permission denied","code":7})"), Next::kFinal, false, 7, "permission denied (gRPC 7"},
      {unary(400, "not json"), Next::kFinal, false, -1, "HTTP 400: not json"},
      {unary(404, ""), Next::kFinal, false, -1, "HTTP 404: no error message"},
      {unary(400, R"({"code":"5","message":"m"})"), Next::kFinal, false, -1, "HTTP 400: m"},
      {unary(400, R"({"code":99,"message":"m"})"), Next::kFinal, false, 99, "m (gRPC 99)"},
      // Streams: {"result"} is the response, {"error"} a status.
      {stream(200, R"({"result":{"header":{"revision":"4"},"TTL":"5"}})"), Next::kFinal, true, -1, ""},
      {stream(200, R"({"error":{"grpc_code":14,"http_code":503,"message":"etcdserver: no leader"}})"), Next::kNextEndpoint,
       false, 14, "etcdserver: no leader (gRPC 14 UNAVAILABLE)"},
      {stream(200, R"({"error":{"grpc_code":16,"message":"etcdserver: invalid auth token"}})"), Next::kRenewAuth, false, 16,
       "invalid auth token"},
      {stream(200, R"({"error":{"code":9,"message":"etcdserver: mvcc: required revision is a future revision"}})"),
       Next::kFinal, false, 9, "future revision (gRPC 9 FAILED_PRECONDITION)"},
      {stream(200, R"({"error":{}})"), Next::kFinal, false, -1, "no error message"},
      {stream(200, R"({"result":5})"), Next::kFinal, false, -1, "neither a result nor an error"},
      {stream(200, R"({"error":"text"})"), Next::kFinal, false, -1, "neither a result nor an error"},
      {stream(200, R"({"header":{}})"), Next::kFinal, false, -1, "neither a result nor an error"},
      {stream(200, "{"), Next::kFinal, false, -1, "not a JSON object"},
      // A stream answered with another status has the gateway's error body.
      {stream(503, R"({"code":14,"message":"etcdserver: no leader"})"), Next::kNextEndpoint, false, 14, "HTTP 503"},
      {stream(400, R"({"code":3,"message":"bad"})"), Next::kFinal, false, 3, "HTTP 400: bad (gRPC 3 INVALID_ARGUMENT)"},
  };
  for (const Case& c : cases) {
    Verdict v = Classify(c.answer);
    const std::string what = c.answer.transport_error + " " + std::to_string(c.answer.http_status) + " " + c.answer.body;
    EXPECT_EQ(v.next, c.next) << what;
    EXPECT_EQ(v.status.ok(), c.ok) << what << ": " << v.status.error;
    EXPECT_EQ(v.status.grpc_code, c.code) << what;
    if (c.ok) {
      EXPECT_FALSE(v.response.empty()) << what;
    } else {
      EXPECT_TRUE(Contains(v.status.error, c.words)) << what;
    }
    // A stream message's error in a 200 is not named "HTTP 200".
    EXPECT_FALSE(Contains(v.status.error, "HTTP 200")) << what;
  }
  // The response is the body, or the stream message's result.
  EXPECT_EQ(Classify(Answer{"", 200, R"({"a":1})", false}).response, (json::object{{"a", 1}}));
  EXPECT_EQ(Classify(Answer{"", 200, R"({"result":{"b":2}})", true}).response, (json::object{{"b", 2}}));
  EXPECT_EQ(Classify(Answer{"", 200, R"({"result":{"b":2}})", false}).response, (json::object{{"result", json::object{{"b", 2}}}}));
}

// ------------------------------------------------------------------------------ MessageSplitter

std::vector<std::string> Drain(MessageSplitter& s) {
  std::vector<std::string> out;
  std::string m;
  while (s.Next(&m)) out.push_back(m);
  return out;
}

TEST(MessageSplitter, SplitsWhereverTheChunksCut) {
  // Braces and quotes inside strings, escaped quotes (one alone), an escaped backslash before a
  // closing quote, nested arrays, and whitespace between messages.
  const std::vector<std::string> want = {
      R"({"result":{"created":true}})",
      R"({"result":{"events":[{"kv":{"key":"L2E="}}]}})",
      R"({"error":{"message":"a } in \"quotes\" and a {"}})",
      R"({"result":{"cancel_reason":"say \"}\" once, c:\\"}})",
  };
  const std::string body = want[0] + "\n" + want[1] + "\r\n " + want[2] + want[3] + "\n";
  for (size_t chunk = 1; chunk <= body.size(); ++chunk) {
    MessageSplitter s;
    std::vector<std::string> got;
    for (size_t i = 0; i < body.size(); i += chunk) {
      s.Feed(std::string_view(body).substr(i, chunk));
      for (auto& m : Drain(s)) got.push_back(std::move(m));
    }
    EXPECT_EQ(got, want) << "chunks of " << chunk;
    EXPECT_TRUE(s.error().empty()) << s.error();
  }
  // Each message is valid JSON for Classify.
  for (const auto& m : want) EXPECT_TRUE(Classify(Answer{"", 200, m, true}).next == Verdict::Next::kFinal) << m;
}

TEST(MessageSplitter, AnythingButAnObjectIsAnError) {
  for (const std::string bad : {"[1]", "5", "\"s\"", "}", "x{}", "null"}) {
    MessageSplitter s;
    s.Feed(bad);
    EXPECT_FALSE(s.error().empty()) << bad;
    EXPECT_TRUE(Contains(s.error(), "not a JSON object")) << s.error();
    EXPECT_TRUE(Drain(s).empty()) << bad;
  }
  // The messages before the garbage are still there; nothing after it is read.
  MessageSplitter s;
  s.Feed("{\"a\":1}\n<html>{\"b\":2}");
  EXPECT_TRUE(Contains(s.error(), "0x3c"));
  EXPECT_EQ(Drain(s), std::vector<std::string>{"{\"a\":1}"});
  // An unfinished message is no error yet.
  MessageSplitter open;
  open.Feed("{\"result\":{\"a\":\"}");
  EXPECT_TRUE(open.error().empty());
  EXPECT_TRUE(Drain(open).empty());
}

TEST(MessageSplitter, AMessageOverTheLimitIsAnError) {
  MessageSplitter s(16);
  s.Feed("{\"a\":\"0123456\"}");  // 15 bytes: fits
  EXPECT_EQ(Drain(s).size(), 1u);
  s.Feed("{\"a\":\"01234567\"}");  // 16 bytes: fits exactly
  EXPECT_EQ(Drain(s).size(), 1u);
  EXPECT_TRUE(s.error().empty());
  s.Feed("{\"a\":\"012345678\"}");
  EXPECT_TRUE(Contains(s.error(), "over 16 bytes")) << s.error();
  EXPECT_TRUE(Drain(s).empty());
}

}  // namespace
}  // namespace fencing::etcd
