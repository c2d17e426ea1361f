// The HTTP/2 codec (h2/connection.h): a server Connection and a client Connection wired to each
// other in memory, and hand-made frames for what a well-behaved client never sends (floods,
// garbage, broken frames).

#include <gtest/gtest.h>

#include <cstdint>
#include <map>
#include <string>
#include <string_view>
#include <vector>

#include "h2/connection.h"

namespace fencing::h2 {
namespace {

using Kind = Event::Kind;

// ---------------------------------------------------------------- harness

// An event with its data copied (a kData view lives only until the next Receive).
struct Got {
  Kind kind;
  int32_t stream;
  Headers fields;
  bool end_stream;
  std::string data;
  uint32_t error_code;
  int32_t last_stream;
};

struct Side {
  Side(Role role, const Settings& settings = {}) : conn(role, settings) {}

  // Takes every event; passes data on (Consume) at once unless `consume` is off, when it is
  // counted in `unconsumed` for the test to Consume later.
  void Drain() {
    Event e;
    while (conn.NextEvent(&e)) {
      if (e.kind == Kind::kData) {
        if (consume) {
          conn.Consume(e.stream, e.data.size());
        } else {
          unconsumed[e.stream] += e.data.size();
        }
      }
      got.push_back({e.kind, e.stream, std::move(e.fields), e.end_stream, std::string(e.data), e.error_code,
                     e.last_stream});
    }
  }

  // Everything received on a stream, in order.
  std::string Body(int32_t stream) const {
    std::string body;
    for (const Got& g : got) {
      if (g.stream == stream && g.kind == Kind::kData) body += g.data;
    }
    return body;
  }
  // The stream's events as "head data end", consecutive kData counted once.
  std::string Kinds(int32_t stream) const {
    std::string out;
    Kind last = Kind::kGoAway;
    for (const Got& g : got) {
      if (g.stream != stream || (g.kind == Kind::kData && last == Kind::kData)) continue;
      if (!out.empty()) out += ' ';
      out += EventKindName(g.kind);
      last = g.kind;
    }
    return out;
  }
  const Got* Find(Kind kind, int32_t stream = -1) const {
    for (const Got& g : got) {
      if (g.kind == kind && (stream < 0 || g.stream == stream)) return &g;
    }
    return nullptr;
  }
  // The first such event; a test failure (and an empty event) if there is none.
  const Got& First(Kind kind, int32_t stream = -1) const {
    static const Got kMissing{Kind::kGoAway, -1, {}, false, {}, 0xffffffff, -1};
    const Got* g = Find(kind, stream);
    if (!g) ADD_FAILURE() << "no " << EventKindName(kind) << " event on stream " << stream;
    return g ? *g : kMissing;
  }
  size_t Count(Kind kind) const {
    size_t n = 0;
    for (const Got& g : got) n += g.kind == kind;
    return n;
  }

  Connection conn;
  std::vector<Got> got;
  bool consume = true;
  std::map<int32_t, size_t> unconsumed;
  Status last = Status::Ok();  // the last Receive's
};

// One direction: whatever `from` has to write goes into `to`. True if anything moved.
bool Move(Side& from, Side& to) {
  std::string bytes;
  from.conn.TakeOutput(&bytes);
  from.Drain();
  if (bytes.empty()) return false;
  to.last = to.conn.Receive(bytes);
  to.Drain();
  return true;
}

// Both directions until neither side has anything to write.
void Pump(Side& a, Side& b) {
  for (int round = 0; round < 100000; ++round) {
    bool moved = Move(a, b);
    moved |= Move(b, a);
    if (!moved) return;
  }
  ADD_FAILURE() << "the two sides never went quiet";
}

struct Pair {
  explicit Pair(const Settings& server_settings = {}, const Settings& client_settings = {})
      : server(Role::kServer, server_settings), client(Role::kClient, client_settings) {
    Pump(client, server);  // preface and SETTINGS both ways, acknowledged
  }
  Side server;
  Side client;
};

Headers Get(std::string path = "/orders/1") {
  return {{":method", "GET"}, {":scheme", "http"}, {":authority", "backend"}, {":path", std::move(path)}};
}
Headers Post(std::string path = "/orders/1") {
  return {{":method", "POST"},
          {":scheme", "http"},
          {":authority", "backend"},
          {":path", std::move(path)},
          {"x-fencing-token", "7"}};
}
Headers Status200() { return {{":status", "200"}, {"content-type", "text/plain"}}; }

std::string FieldValue(const Headers& fields, std::string_view name) {
  for (const Header& h : fields) {
    if (h.name == name) return h.value;
  }
  return "<none>";
}

// ---------------------------------------------------------------- raw frames

constexpr std::string_view kPreface = "PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n";
enum : uint8_t { kData = 0, kHeaders = 1, kRstStream = 3, kSettings = 4, kPing = 6, kGoAway = 7,
                 kWindowUpdate = 8, kContinuation = 9 };
enum : uint8_t { kEndStream = 0x1, kAck = 0x1, kEndHeaders = 0x4 };

std::string Frame(uint8_t type, uint8_t flags, uint32_t stream, std::string_view payload) {
  std::string f;
  uint32_t len = static_cast<uint32_t>(payload.size());
  for (int shift : {16, 8, 0}) f += static_cast<char>((len >> shift) & 0xff);
  f += static_cast<char>(type);
  f += static_cast<char>(flags);
  for (int shift : {24, 16, 8, 0}) f += static_cast<char>((stream >> shift) & (shift == 24 ? 0x7f : 0xff));
  f += payload;
  return f;
}

std::string U32(uint32_t v) {
  std::string s;
  for (int shift : {24, 16, 8, 0}) s += static_cast<char>((v >> shift) & 0xff);
  return s;
}

// An HPACK block for GET http://a/ : three static-table entries and :authority without indexing.
std::string GetBlock() { return std::string("\x82\x86\x84\x01\x01", 5) + "a"; }
// A literal field without indexing, new name (short name and value).
std::string Literal(std::string_view name, std::string_view value) {
  std::string s(1, '\0');
  s += static_cast<char>(name.size());
  s += name;
  s += static_cast<char>(value.size());
  s += value;
  return s;
}

// A raw client: the preface, an empty SETTINGS and the acknowledgement of the server's.
std::string RawStart() {
  return std::string(kPreface) + Frame(kSettings, 0, 0, "") + Frame(kSettings, kAck, 0, "");
}

struct ParsedFrame {
  uint8_t type;
  uint8_t flags;
  uint32_t stream;
  std::string payload;
};

std::vector<ParsedFrame> Parse(std::string_view bytes) {
  std::vector<ParsedFrame> frames;
  auto byte = [&](size_t i) { return static_cast<uint32_t>(static_cast<unsigned char>(bytes[i])); };
  size_t pos = 0;
  while (bytes.size() - pos >= 9) {
    uint32_t len = byte(pos) << 16 | byte(pos + 1) << 8 | byte(pos + 2);
    if (bytes.size() - pos - 9 < len) break;
    ParsedFrame f{static_cast<uint8_t>(byte(pos + 3)), static_cast<uint8_t>(byte(pos + 4)),
                  (byte(pos + 5) & 0x7f) << 24 | byte(pos + 6) << 16 | byte(pos + 7) << 8 | byte(pos + 8),
                  std::string(bytes.substr(pos + 9, len))};
    frames.push_back(std::move(f));
    pos += 9 + len;
  }
  EXPECT_EQ(pos, bytes.size()) << "output ends inside a frame";
  return frames;
}

// The error code of the last GOAWAY in `bytes`, or -1 if there is none.
int64_t GoAwayCode(std::string_view bytes) {
  int64_t code = -1;
  for (const ParsedFrame& f : Parse(bytes)) {
    if (f.type != kGoAway || f.payload.size() < 8) continue;
    code = 0;
    for (int i = 4; i < 8; ++i) code = code << 8 | static_cast<unsigned char>(f.payload[i]);
  }
  return code;
}

std::string TakeAll(Connection& conn) {
  std::string out;
  while (conn.WantWrite()) {
    if (conn.TakeOutput(&out) == 0) break;
  }
  return out;
}

// ---------------------------------------------------------------- exchanges

TEST(H2ConnectionTest, RequestWithBodyAndTrailersThenResponse) {
  Pair p;
  int32_t id = p.client.conn.SubmitRequest(Post(), /*end_stream=*/false);
  ASSERT_EQ(id, 1);
  ASSERT_TRUE(p.client.conn.SubmitData(id, "hello ", false));
  ASSERT_TRUE(p.client.conn.SubmitData(id, "world", false));
  ASSERT_TRUE(p.client.conn.SubmitTrailers(id, Headers{{"x-checksum", "abc"}}));
  EXPECT_FALSE(p.client.conn.SubmitData(id, "late", false)) << "nothing after the trailers";
  Pump(p.client, p.server);

  EXPECT_EQ(p.server.Kinds(id), "head data trailers end");
  const Got& head = p.server.First(Kind::kHead, id);
  EXPECT_FALSE(head.end_stream);
  ASSERT_GE(head.fields.size(), 5u);
  EXPECT_EQ(head.fields[0].name, ":method") << "pseudo-headers first, as sent";
  EXPECT_EQ(FieldValue(head.fields, ":method"), "POST");
  EXPECT_EQ(FieldValue(head.fields, ":path"), "/orders/1");
  EXPECT_EQ(FieldValue(head.fields, "x-fencing-token"), "7");
  EXPECT_EQ(p.server.Body(id), "hello world");
  EXPECT_EQ(FieldValue(p.server.First(Kind::kTrailers, id).fields, "x-checksum"), "abc");

  ASSERT_TRUE(p.server.conn.SubmitResponse(id, Status200(), false));
  ASSERT_TRUE(p.server.conn.SubmitData(id, "ok", true));
  Pump(p.server, p.client);
  EXPECT_EQ(p.client.Kinds(id), "head data end");
  EXPECT_EQ(FieldValue(p.client.First(Kind::kHead, id).fields, ":status"), "200");
  EXPECT_EQ(p.client.Body(id), "ok");
  EXPECT_EQ(p.server.Count(Kind::kReset) + p.client.Count(Kind::kReset), 0u) << "a clean exchange";
  EXPECT_EQ(p.client.conn.StreamsAvailable(), 100u) << "the stream is closed on both sides";
  EXPECT_TRUE(p.server.last.ok());
  EXPECT_FALSE(p.server.conn.Done()) << "the connection stays open for more streams";
}

TEST(H2ConnectionTest, ResponseWithTrailersAndHeadOnlyRequest) {
  Pair p;
  int32_t id = p.client.conn.SubmitRequest(Get(), /*end_stream=*/true);
  Pump(p.client, p.server);
  EXPECT_EQ(p.server.Kinds(id), "head end");
  EXPECT_TRUE(p.server.First(Kind::kHead, id).end_stream);
  EXPECT_FALSE(p.server.conn.SubmitResponse(id + 2, Status200(), true)) << "no such stream";
  ASSERT_TRUE(p.server.conn.SubmitResponse(id, Headers{{":status", "103"}, {"link", "</a>"}}, false));
  ASSERT_TRUE(p.server.conn.SubmitResponse(id, Status200(), false));
  ASSERT_TRUE(p.server.conn.SubmitData(id, "body", false));
  ASSERT_TRUE(p.server.conn.SubmitTrailers(id, Headers{{"grpc-status", "0"}}));
  Pump(p.server, p.client);
  EXPECT_EQ(p.client.Kinds(id), "head head data trailers end") << "the 1xx head, then the final one";
  EXPECT_EQ(FieldValue(p.client.First(Kind::kHead, id).fields, ":status"), "103");
  EXPECT_EQ(p.client.Body(id), "body");
  EXPECT_EQ(FieldValue(p.client.First(Kind::kTrailers, id).fields, "grpc-status"), "0");
}

TEST(H2ConnectionTest, FieldsAPeerMustRefuseAreRefusedOnSubmit) {
  Pair p;
  EXPECT_EQ(p.client.conn.SubmitRequest(Headers{{":path", "/"}}, true), Connection::kNoStream) << "no :method";
  Headers upper = Get();
  upper.push_back({"X-Upper", "1"});
  EXPECT_EQ(p.client.conn.SubmitRequest(upper, true), Connection::kNoStream);
  Headers connection = Get();
  connection.push_back({"connection", "keep-alive"});
  EXPECT_EQ(p.client.conn.SubmitRequest(connection, true), Connection::kNoStream);
  Headers late_pseudo = {{":method", "GET"}, {"accept", "*/*"}, {":path", "/"}};
  EXPECT_EQ(p.client.conn.SubmitRequest(late_pseudo, true), Connection::kNoStream);
  Headers crlf = Get();
  crlf.push_back({"x-a", "1\r\nx-b: 2"});
  EXPECT_EQ(p.client.conn.SubmitRequest(crlf, true), Connection::kNoStream);
  Headers te = Get();
  te.push_back({"te", "trailers"});
  int32_t id = p.client.conn.SubmitRequest(te, true);
  EXPECT_EQ(id, 1) << "te: trailers is the one te allowed";
  Pump(p.client, p.server);
  EXPECT_FALSE(p.server.conn.SubmitResponse(id, Headers{{":status", "200"}, {"transfer-encoding", "chunked"}}, true));
  EXPECT_FALSE(p.server.conn.SubmitResponse(id, Headers{{":status", "101"}}, true));
  EXPECT_FALSE(p.server.conn.SubmitResponse(id, Headers{{"content-type", "x"}}, true)) << "no :status";
  EXPECT_TRUE(p.server.conn.SubmitResponse(id, Headers{{":status", "204"}}, true));
  EXPECT_FALSE(p.server.conn.SubmitResponse(id, Headers{{":status", "204"}}, true)) << "one final head";
}

// ---------------------------------------------------------------- concurrency

TEST(H2ConnectionTest, StreamsUpToThePeersLimitThenRefused) {
  Settings server;
  server.max_concurrent_streams = 10;
  Pair p(server);
  std::vector<int32_t> ids;
  for (int i = 0; i < 10; ++i) {
    EXPECT_EQ(p.client.conn.StreamsAvailable(), static_cast<size_t>(10 - i));
    int32_t id = p.client.conn.SubmitRequest(Get("/orders/" + std::to_string(i)), true);
    ASSERT_GT(id, 0) << i;
    ids.push_back(id);
  }
  EXPECT_EQ(p.client.conn.StreamsAvailable(), 0u);
  EXPECT_EQ(p.client.conn.SubmitRequest(Get(), true), Connection::kNoStream) << "the eleventh";
  Pump(p.client, p.server);
  EXPECT_EQ(p.server.Count(Kind::kHead), 10u);

  ASSERT_TRUE(p.server.conn.SubmitResponse(ids[3], Status200(), true));
  Pump(p.server, p.client);
  EXPECT_EQ(p.client.Kinds(ids[3]), "head end");
  EXPECT_EQ(p.client.conn.StreamsAvailable(), 1u) << "a finished stream frees its place";
  EXPECT_GT(p.client.conn.SubmitRequest(Get(), true), 0);
}

TEST(H2ConnectionTest, ServerRefusesAStreamBeyondItsLimit) {
  Settings settings;
  settings.max_concurrent_streams = 3;
  Side server(Role::kServer, settings);
  std::string in = RawStart();
  for (uint32_t id = 1; id <= 7; id += 2) in += Frame(kHeaders, kEndHeaders, id, GetBlock());  // 4 streams
  Status s = server.conn.Receive(in);
  server.Drain();
  std::string out = TakeAll(server.conn);
  EXPECT_EQ(server.Count(Kind::kHead), 3u) << "the fourth is never a request";
  // Once our SETTINGS are acknowledged, one stream too many is a connection error (nghttp2's
  // choice; RFC 9113 5.1.2 allows that or a stream error).
  EXPECT_FALSE(s.ok());
  EXPECT_EQ(GoAwayCode(out), kProtocolError);
}

// ---------------------------------------------------------------- flow control

TEST(H2ConnectionTest, AReceiverThatDoesNotConsumeStopsTheSender) {
  Settings server;
  server.initial_window_size = 16384;
  Pair p(server);
  p.server.consume = false;
  const std::string body(100000, 'b');
  int32_t id = p.client.conn.SubmitRequest(Post(), false);
  ASSERT_TRUE(p.client.conn.SubmitData(id, body, true));
  EXPECT_EQ(p.client.conn.Queued(id), body.size());
  Pump(p.client, p.server);
  EXPECT_EQ(p.server.Body(id).size(), 16384u) << "exactly the stream's window";
  EXPECT_EQ(p.client.conn.Queued(id), body.size() - 16384) << "the rest waits at the sender";
  Pump(p.client, p.server);
  EXPECT_EQ(p.server.Body(id).size(), 16384u) << "and keeps waiting";

  // Passing the bytes on gives the window back, a piece at a time, until the body is through.
  for (int round = 0; round < 100 && p.server.unconsumed[id] > 0; ++round) {
    size_t n = p.server.unconsumed[id];
    p.server.unconsumed[id] = 0;
    p.server.conn.Consume(id, n);
    Pump(p.client, p.server);
  }
  EXPECT_EQ(p.server.Body(id), body);
  EXPECT_EQ(p.client.conn.Queued(id), 0u);
  EXPECT_EQ(p.server.Kinds(id), "head data end");
}

TEST(H2ConnectionTest, TheConnectionWindowHoldsAcrossStreams) {
  Settings server;
  server.initial_window_size = 65535;
  server.connection_window_size = 65535;  // the RFC's initial one: no increase sent
  Pair p(server);
  p.server.consume = false;
  const std::string body(50000, 'c');
  int32_t a = p.client.conn.SubmitRequest(Post("/a"), false);
  int32_t b = p.client.conn.SubmitRequest(Post("/b"), false);
  ASSERT_TRUE(p.client.conn.SubmitData(a, body, true));
  ASSERT_TRUE(p.client.conn.SubmitData(b, body, true));
  Pump(p.client, p.server);
  EXPECT_EQ(p.server.Body(a).size() + p.server.Body(b).size(), 65535u) << "the connection's window, shared";
  EXPECT_EQ(p.client.conn.Queued(a) + p.client.conn.Queued(b), 2 * body.size() - 65535);
  // Consuming one stream's bytes frees the connection for both.
  p.server.conn.Consume(a, p.server.unconsumed[a]);
  p.server.conn.Consume(b, p.server.unconsumed[b]);
  p.server.unconsumed.clear();
  p.server.consume = true;
  Pump(p.client, p.server);
  EXPECT_EQ(p.server.Body(a), body);
  EXPECT_EQ(p.server.Body(b), body);
}

TEST(H2ConnectionTest, BytesConsumedAfterTheirStreamClosedStillFreeTheConnection) {
  Settings server;
  server.connection_window_size = 65535;
  Pair p(server);
  p.server.consume = false;
  int32_t a = p.client.conn.SubmitRequest(Post("/a"), false);
  ASSERT_TRUE(p.client.conn.SubmitData(a, std::string(60000, 'a'), true));
  Pump(p.client, p.server);
  ASSERT_EQ(p.server.Kinds(a), "head data end");
  ASSERT_TRUE(p.server.conn.SubmitResponse(a, Status200(), true));
  Pump(p.server, p.client);
  ASSERT_EQ(p.client.Kinds(a), "head end") << "stream a is closed, its 60000 bytes still with the caller";

  int32_t b = p.client.conn.SubmitRequest(Post("/b"), false);
  ASSERT_TRUE(p.client.conn.SubmitData(b, std::string(60000, 'b'), true));
  Pump(p.client, p.server);
  EXPECT_EQ(p.server.Body(b).size(), 65535u - 60000) << "what is left of the connection's window";
  p.server.conn.Consume(a, p.server.unconsumed[a]);  // the backend took a's bytes at last
  p.server.conn.Consume(b, p.server.unconsumed[b]);
  p.server.unconsumed.clear();
  p.server.consume = true;
  Pump(p.client, p.server);
  EXPECT_EQ(p.server.Body(b).size(), 60000u);
}

TEST(H2ConnectionTest, ASlowClientHoldsTheResponseAtTheServer) {
  Settings client;
  client.initial_window_size = 8192;
  Pair p({}, client);
  p.client.consume = false;
  int32_t id = p.client.conn.SubmitRequest(Get(), true);
  Pump(p.client, p.server);
  ASSERT_TRUE(p.server.conn.SubmitResponse(id, Status200(), false));
  ASSERT_TRUE(p.server.conn.SubmitData(id, std::string(30000, 'r'), true));
  Pump(p.server, p.client);
  EXPECT_EQ(p.client.Body(id).size(), 8192u);
  EXPECT_EQ(p.server.conn.Queued(id), 30000u - 8192) << "what the proxy reads from the backend waits here";
  p.client.conn.Consume(id, 8192);
  p.client.consume = true;
  Pump(p.server, p.client);
  EXPECT_EQ(p.client.Body(id).size(), 30000u);
  EXPECT_EQ(p.client.Kinds(id), "head data end");
}

// ---------------------------------------------------------------- resets and GOAWAY

TEST(H2ConnectionTest, AStreamResetByThePeer) {
  Pair p;
  int32_t id = p.client.conn.SubmitRequest(Post(), false);
  ASSERT_TRUE(p.client.conn.SubmitData(id, "part", false));
  Pump(p.client, p.server);
  EXPECT_EQ(p.server.Kinds(id), "head data");
  p.client.conn.ResetStream(id, kCancel);
  EXPECT_FALSE(p.client.conn.SubmitData(id, "more", false)) << "a reset stream takes nothing more";
  Pump(p.client, p.server);
  EXPECT_EQ(p.server.Kinds(id), "head data reset");
  EXPECT_EQ(p.server.First(Kind::kReset, id).error_code, kCancel);
  EXPECT_EQ(p.client.Count(Kind::kReset), 0u) << "the side that reset hears nothing more of it";
  EXPECT_FALSE(p.server.conn.SubmitResponse(id, Status200(), true)) << "the stream is gone";

  // And the other way: the server resets a stream, the client is told.
  int32_t second = p.client.conn.SubmitRequest(Get(), true);
  Pump(p.client, p.server);
  p.server.conn.ResetStream(second, kRefusedStream);
  Pump(p.server, p.client);
  EXPECT_EQ(p.client.Kinds(second), "reset");
  EXPECT_EQ(p.client.First(Kind::kReset, second).error_code, kRefusedStream);
}

TEST(H2ConnectionTest, ACompleteResponseEndsTheUploadWithNoError) {
  Settings server;
  server.initial_window_size = 16384;
  Pair p(server);
  int32_t id = p.client.conn.SubmitRequest(Post(), false);
  ASSERT_TRUE(p.client.conn.SubmitData(id, std::string(100000, 'u'), false));
  Pump(p.client, p.server);
  // The proxy refuses on the head (a stale token, say): the rest of the upload is no use.
  ASSERT_TRUE(p.server.conn.SubmitResponse(id, Headers{{":status", "409"}}, true));
  Pump(p.server, p.client);
  EXPECT_EQ(p.client.Kinds(id), "head end reset") << "the whole response, then the stop";
  EXPECT_EQ(p.client.First(Kind::kReset, id).error_code, kNoError);
  EXPECT_EQ(p.client.conn.Queued(id), 0u) << "the client's queue for it is gone";
  EXPECT_EQ(p.server.First(Kind::kReset, id).error_code, kNoError) << "the server's caller stops reading";
}

TEST(H2ConnectionTest, GoAwayFinishesOpenStreamsAndRefusesLaterOnes) {
  Pair p;
  int32_t first = p.client.conn.SubmitRequest(Get("/first"), true);
  Pump(p.client, p.server);
  int32_t second = p.client.conn.SubmitRequest(Get("/second"), true);
  std::string in_flight;
  p.client.conn.TakeOutput(&in_flight);  // the second request is on its way when ...
  p.server.conn.GoAway(kNoError);        // ... the server says it takes no more
  Move(p.server, p.client);
  EXPECT_TRUE(p.server.conn.Receive(in_flight).ok());
  p.server.Drain();
  EXPECT_EQ(p.server.Find(Kind::kHead, second), nullptr) << "a stream above the GOAWAY's last stream is not processed";

  const Got& goaway = p.client.First(Kind::kGoAway);
  EXPECT_EQ(goaway.error_code, kNoError);
  EXPECT_EQ(goaway.last_stream, first);
  EXPECT_EQ(p.client.Kinds(second), "reset");
  EXPECT_EQ(p.client.First(Kind::kReset, second).error_code, kRefusedStream) << "safe to send elsewhere";
  EXPECT_EQ(p.client.conn.SubmitRequest(Get(), true), Connection::kNoStream) << "no new streams after GOAWAY";
  EXPECT_EQ(p.client.conn.StreamsAvailable(), 0u);

  ASSERT_TRUE(p.server.conn.SubmitResponse(first, Status200(), true));
  Pump(p.server, p.client);
  EXPECT_EQ(p.client.Kinds(first), "head end") << "the first still finishes";
  EXPECT_TRUE(p.server.conn.Done());
  EXPECT_TRUE(p.client.conn.Done());
}

// ---------------------------------------------------------------- connection errors

TEST(H2ConnectionTest, AGarbagePrefaceIsAConnectionError) {
  Side server(Role::kServer);
  Status s = server.conn.Receive(std::string_view("GET / HTTP/1.1\r\nHost: a\r\n\r\n"));
  ASSERT_FALSE(s.ok());
  EXPECT_NE(s.message().find("preface"), std::string::npos) << s.message();
  std::string out = TakeAll(server.conn);
  EXPECT_EQ(GoAwayCode(out), kProtocolError);
  EXPECT_TRUE(server.conn.Done());
  EXPECT_FALSE(server.conn.Receive(std::string_view("more")).ok()) << "over stays over";
  server.Drain();
  EXPECT_TRUE(server.got.empty());
}

TEST(H2ConnectionTest, ABadFrameIsAConnectionError) {
  struct Case {
    const char* what;
    std::string frame;
    uint32_t code;
  };
  const Case cases[] = {
      {"DATA on stream 0", Frame(kData, 0, 0, "x"), kProtocolError},
      {"SETTINGS of 5 bytes", Frame(kSettings, 0, 0, std::string(5, '\0')), kFrameSizeError},
      {"WINDOW_UPDATE of 0 on the connection", Frame(kWindowUpdate, 0, 0, U32(0)), kProtocolError},
      {"HEADERS on an even stream", Frame(kHeaders, kEndHeaders | kEndStream, 2, GetBlock()), kProtocolError},
      {"a broken HPACK block", Frame(kHeaders, kEndHeaders | kEndStream, 1, "\xff\xff\xff\xff"),
       kCompressionError},
  };
  for (const Case& c : cases) {
    Side server(Role::kServer);
    Status s = server.conn.Receive(RawStart() + c.frame);
    EXPECT_FALSE(s.ok()) << c.what;
    EXPECT_EQ(GoAwayCode(TakeAll(server.conn)), c.code) << c.what << ": " << s.message();
    EXPECT_TRUE(server.conn.Done()) << c.what;
  }
}

TEST(H2ConnectionTest, AFieldWithABadNameMakesTheRequestMalformed) {
  // nghttp2 alone would drop such a field and pass the rest of the request on; RFC 9113 8.2.1
  // says the request is malformed, so its stream is reset and the caller never sees it.
  for (std::string_view name : {"x y", "x@y", "x\x7f"}) {
    Side server(Role::kServer);
    Status s = server.conn.Receive(RawStart() + Frame(kHeaders, kEndHeaders | kEndStream, 1,
                                                      GetBlock() + Literal(name, "1")));
    EXPECT_TRUE(s.ok()) << "a stream error, not a connection error";
    server.Drain();
    EXPECT_EQ(server.Count(Kind::kHead), 0u) << name;
    bool reset = false;
    for (const ParsedFrame& f : Parse(TakeAll(server.conn))) {
      reset |= f.type == kRstStream && f.stream == 1 && f.payload == U32(kProtocolError);
    }
    EXPECT_TRUE(reset) << name;
  }
}

TEST(H2ConnectionTest, AHeadOverTheLimitIsReportedAndTheConnectionGoesOn) {
  Pair p;  // max_header_list_bytes 16 KiB
  Headers big = Post();
  big.push_back({"x-big", std::string(20000, 'v')});
  int32_t id = p.client.conn.SubmitRequest(big, false);
  ASSERT_GT(id, 0);
  ASSERT_TRUE(p.client.conn.SubmitData(id, "body bytes", true));
  Pump(p.client, p.server);
  EXPECT_EQ(p.server.Kinds(id), "head_too_large end") << "its data is dropped";
  EXPECT_TRUE(p.server.First(Kind::kHeadTooLarge, id).fields.empty());
  ASSERT_TRUE(p.server.conn.SubmitResponse(id, Headers{{":status", "431"}}, true));
  Pump(p.server, p.client);
  EXPECT_EQ(FieldValue(p.client.First(Kind::kHead, id).fields, ":status"), "431");

  // An HPACK bomb: the same 40-byte field 500 times is a few bytes a field on the wire (indexed
  // after its first time), 36 KB decoded. It is the decoded size that counts.
  Headers bomb = Get();
  for (int i = 0; i < 500; ++i) bomb.push_back({"x-repeat", "0123456789012345678901234567890"});
  int32_t bombed = p.client.conn.SubmitRequest(bomb, true);
  Pump(p.client, p.server);
  EXPECT_EQ(p.server.Kinds(bombed), "head_too_large end");

  // The connection is fine, and the window the dropped body used is back.
  int32_t next = p.client.conn.SubmitRequest(Post("/next"), false);
  ASSERT_TRUE(p.client.conn.SubmitData(next, std::string(70000, 'n'), true));
  Pump(p.client, p.server);
  EXPECT_EQ(p.server.Kinds(next), "head data end");
  EXPECT_TRUE(p.server.last.ok());
}

TEST(H2ConnectionTest, AResponseHeadOverTheLimitAtTheClient) {
  Settings client;
  client.max_header_list_bytes = 4096;
  Pair p({}, client);
  int32_t id = p.client.conn.SubmitRequest(Get(), true);
  Pump(p.client, p.server);
  Headers big = Status200();
  big.push_back({"set-cookie", std::string(5000, 'c')});
  ASSERT_TRUE(p.server.conn.SubmitResponse(id, big, false));
  ASSERT_TRUE(p.server.conn.SubmitData(id, "x", true));
  Pump(p.server, p.client);
  EXPECT_EQ(p.client.Kinds(id), "head_too_large end");
}

// ---------------------------------------------------------------- attacks

TEST(H2ConnectionTest, RapidResetEndsTheConnection) {
  Pair p;
  std::string flight;
  size_t streams = 0;
  Status s = Status::Ok();
  // Each stream opened (its HEADERS framed) and reset at once, as CVE-2023-44487's clients do.
  for (int i = 0; i < 3000 && s.ok(); ++i) {
    int32_t id = p.client.conn.SubmitRequest(Get(), true);
    ASSERT_GT(id, 0) << i;
    p.client.conn.TakeOutput(&flight);
    p.client.conn.ResetStream(id, kCancel);
    p.client.conn.TakeOutput(&flight);
    p.client.Drain();
    ++streams;
    if (streams % 50 == 0) {
      s = p.server.conn.Receive(flight);
      flight.clear();
      p.server.Drain();
      TakeAll(p.server.conn);
    }
  }
  ASSERT_FALSE(s.ok()) << "3000 resets in a burst are let through";
  EXPECT_NE(s.message().find("INTERNAL_ERROR"), std::string::npos) << s.message();
  EXPECT_LT(streams, 1200u) << "nghttp2's bucket holds 1000";
  EXPECT_EQ(p.server.Count(Kind::kHead), 0u) << "a stream reset before its head was taken costs the caller nothing";
  EXPECT_EQ(p.server.Count(Kind::kReset), 0u);
  EXPECT_TRUE(p.server.conn.Done());
}

TEST(H2ConnectionTest, ContinuationFloodEndsTheConnection) {
  // Within the limit: a HEADERS and 8 CONTINUATIONs make one request.
  {
    Side server(Role::kServer);
    std::string in = RawStart() + Frame(kHeaders, kEndStream, 1, GetBlock());
    for (int i = 0; i < 8; ++i) {
      in += Frame(kContinuation, i == 7 ? kEndHeaders : 0, 1, Literal("x-part", std::to_string(i)));
    }
    EXPECT_TRUE(server.conn.Receive(in).ok());
    server.Drain();
    EXPECT_EQ(server.Kinds(1), "head end");
    EXPECT_EQ(FieldValue(server.First(Kind::kHead, 1).fields, "x-part"), "0");
  }
  // One more is a flood, however small each frame.
  Side server(Role::kServer);
  std::string in = RawStart() + Frame(kHeaders, kEndStream, 1, GetBlock());
  for (int i = 0; i < 1000; ++i) in += Frame(kContinuation, 0, 1, Literal("x-part", "p"));
  Status s = server.conn.Receive(in);
  ASSERT_FALSE(s.ok());
  EXPECT_NE(s.message().find("CONTINUATION"), std::string::npos) << s.message();
  EXPECT_EQ(GoAwayCode(TakeAll(server.conn)), kEnhanceYourCalm);
  server.Drain();
  EXPECT_TRUE(server.got.empty());
  EXPECT_TRUE(server.conn.Done());
}

TEST(H2ConnectionTest, StreamsTheServerMustResetForTheClientsErrorsEndTheConnection) {
  // A field name in uppercase makes the request malformed: its stream is reset (PROTOCOL_ERROR).
  // A client doing it on purpose makes the server reset stream after stream (the "MadeYouReset"
  // pattern); the misbehaviour budget ends that.
  Side server(Role::kServer);
  Status s = server.conn.Receive(RawStart());
  std::string block = GetBlock() + Literal("X-Upper", "1");
  uint32_t id = 1;
  size_t resets = 0;
  while (s.ok() && id < 2 * 3000) {
    std::string in;
    for (int i = 0; i < 50; ++i, id += 2) in += Frame(kHeaders, kEndHeaders | kEndStream, id, block);
    s = server.conn.Receive(in);
    for (const ParsedFrame& f : Parse(TakeAll(server.conn))) resets += f.type == kRstStream;
  }
  ASSERT_FALSE(s.ok());
  EXPECT_NE(s.message().find("ENHANCE_YOUR_CALM"), std::string::npos) << s.message();
  EXPECT_GE(resets, 900u) << "every malformed request was reset";
  EXPECT_LT(resets, 1100u);
  server.Drain();
  EXPECT_EQ(server.Count(Kind::kHead), 0u);
}

TEST(H2ConnectionTest, EmptyDataFramesFloodEndsTheConnection) {
  Side server(Role::kServer);
  std::string in = RawStart() + Frame(kHeaders, kEndHeaders, 1, std::string("\x83\x86\x84\x01\x01", 5) + "a");
  for (int i = 0; i < 1500; ++i) in += Frame(kData, 0, 1, "");
  Status s = server.conn.Receive(in);
  ASSERT_FALSE(s.ok());
  EXPECT_NE(s.message().find("empty DATA"), std::string::npos) << s.message();
  EXPECT_EQ(GoAwayCode(TakeAll(server.conn)), kEnhanceYourCalm);
}

TEST(H2ConnectionTest, APingFloodFromAPeerThatDoesNotReadIsDropped) {
  Side server(Role::kServer);
  std::string in = RawStart();
  for (int i = 0; i < 10000; ++i) in += Frame(kPing, 0, 0, "12345678");
  Status s = server.conn.Receive(in);  // and the server's output is never taken: nobody reads it
  ASSERT_FALSE(s.ok());
  EXPECT_NE(s.message().find("flood"), std::string::npos) << s.message();
  EXPECT_TRUE(server.conn.Done());
  EXPECT_FALSE(server.conn.WantWrite()) << "nothing more is written to a peer that does not read";
  std::string out;
  EXPECT_EQ(server.conn.TakeOutput(&out), 0u);
}

// ---------------------------------------------------------------- gRPC

TEST(H2GrpcTest, PercentEncodingAsGrpcSays) {
  EXPECT_EQ(GrpcPercentEncode("plain text, ok!"), "plain text, ok!");
  EXPECT_EQ(GrpcPercentEncode("100%"), "100%25");
  EXPECT_EQ(GrpcPercentEncode("a\nb\tc"), "a%0Ab%09c");
  EXPECT_EQ(GrpcPercentEncode("stale \xe2\x80\x94 token"), "stale %E2%80%94 token") << "UTF-8 bytes, uppercase hex";
  EXPECT_EQ(GrpcPercentEncode(std::string_view("\x00\x7f", 2)), "%00%7F");
  EXPECT_EQ(GrpcPercentEncode(" ~"), " ~") << "0x20 and 0x7E are the range's ends";
}

TEST(H2GrpcTest, TrailersOnlyRefusalReachesTheClient) {
  Headers fields = GrpcTrailersOnly(9, "stale token 5 < 7: 100% sure\n", Headers{{"x-fencing-token-max", "7"}});
  ASSERT_EQ(fields.size(), 5u);
  EXPECT_EQ(fields[0].name, ":status");
  EXPECT_EQ(fields[0].value, "200");
  EXPECT_EQ(FieldValue(fields, "content-type"), "application/grpc");
  EXPECT_EQ(FieldValue(fields, "grpc-status"), "9");
  EXPECT_EQ(FieldValue(fields, "grpc-message"), "stale token 5 < 7: 100%25 sure%0A");
  EXPECT_EQ(fields[4].name, "x-fencing-token-max");
  EXPECT_EQ(FieldValue(GrpcTrailersOnly(14, ""), "grpc-message"), "<none>") << "no message, no field";

  Pair p;
  Headers call = {{":method", "POST"},         {":scheme", "http"},
                  {":authority", "backend"},   {":path", "/orders.Orders/Put"},
                  {"content-type", "application/grpc"}, {"te", "trailers"}};
  int32_t id = p.client.conn.SubmitRequest(call, false);
  ASSERT_TRUE(p.client.conn.SubmitData(id, std::string("\0\0\0\0\x02\x08\x01", 7), true));
  Pump(p.client, p.server);
  ASSERT_TRUE(p.server.conn.SubmitResponse(id, fields, /*end_stream=*/true));
  Pump(p.server, p.client);
  EXPECT_EQ(p.client.Kinds(id), "head end");
  const Got& head = p.client.First(Kind::kHead, id);
  EXPECT_TRUE(head.end_stream) << "trailers-only: one HEADERS with END_STREAM";
  EXPECT_EQ(FieldValue(head.fields, "grpc-status"), "9");
  EXPECT_EQ(FieldValue(head.fields, "grpc-message"), "stale token 5 < 7: 100%25 sure%0A");
}

TEST(H2NamesTest, ErrorCodesAndEventKindsHaveNames) {
  EXPECT_EQ(ErrorCodeName(kNoError), "NO_ERROR");
  EXPECT_EQ(ErrorCodeName(kEnhanceYourCalm), "ENHANCE_YOUR_CALM");
  EXPECT_EQ(ErrorCodeName(kHttp11Required), "HTTP_1_1_REQUIRED");
  EXPECT_EQ(ErrorCodeName(0x2a), "0x2a");
  EXPECT_EQ(EventKindName(Kind::kHeadTooLarge), "head_too_large");
  EXPECT_EQ(EventKindName(Kind::kGoAway), "goaway");
}

}  // namespace
}  // namespace fencing::h2
