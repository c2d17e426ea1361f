// Writes the fuzz_h2_server seed corpus: what a client sends, recorded from the codec's own
// client Connection talking to a server Connection (so the seeds are real HTTP/2: the preface,
// SETTINGS and their acknowledgements, HPACK with a dynamic table, WINDOW_UPDATEs), and a few
// hand-made frames a client should never send. Each file starts with fuzz_h2_server's control
// byte. Usage: h2_seeds OUTPUT_DIR
// Regenerate with: build-fuzz/tests/fuzz/h2_seeds tests/fuzz/corpus/fuzz_h2_server
// (the recorded server has fuzz_h2_server's settings, fuzz_h2_settings.h)

#include "fuzz_h2_settings.h"
#include "h2/connection.h"

#include <cstdio>
#include <filesystem>
#include <fstream>
#include <functional>
#include <string>
#include <string_view>

namespace {

using namespace fencing;
namespace fs = std::filesystem;

// Control bytes (fuzz_h2_server.cpp): piece size, consume, read output, body size, trailers.
constexpr unsigned char kWholeConsume = 0x06 | 0x08 | 0x20;           // all at once, consumed, 100-byte bodies
constexpr unsigned char kPiecesConsume = 0x02 | 0x08 | 0x40 | 0x80;  // 64-byte pieces, 20000-byte bodies, trailers
constexpr unsigned char kNoConsume = 0x03 | 0x60;                    // 512-byte pieces, never consumed, 70000 bytes
constexpr unsigned char kNoRead = 0x06 | 0x10;                        // output never read

h2::Headers Request(std::string method, std::string path) {
  return {{":method", std::move(method)}, {":scheme", "https"}, {":authority", "orders.internal"},
          {":path", std::move(path)}, {"x-fencing-token", "7"}, {"user-agent", "h2-seeds"}};
}

// A client and a server wired together; every byte the client sends is recorded.
struct Recorder {
  h2::Connection client{h2::Role::kClient};
  h2::Connection server{h2::Role::kServer, fuzz::H2FuzzSettings()};
  std::string sent;

  void Pump() {
    for (int round = 0; round < 1000; ++round) {
      std::string c, s;
      client.TakeOutput(&c);
      sent += c;
      if (!c.empty()) server.Receive(c);
      Serve();
      server.TakeOutput(&s);
      if (!s.empty()) client.Receive(s);
      h2::Event e;
      while (client.NextEvent(&e)) {
        if (e.kind == h2::Event::Kind::kData) client.Consume(e.stream, e.data.size());
      }
      if (c.empty() && s.empty()) return;
    }
  }
  // Answers every request once it has ended (so a body is recorded whole), passes every byte on.
  void Serve() {
    h2::Event e;
    while (server.NextEvent(&e)) {
      if (e.kind == h2::Event::Kind::kData) server.Consume(e.stream, e.data.size());
      if (e.kind == h2::Event::Kind::kEnd) {
        server.SubmitResponse(e.stream, h2::Headers{{":status", "200"}}, false);
        server.SubmitData(e.stream, "fine", true);
      }
    }
  }
};

std::string Record(const std::function<void(Recorder&)>& script) {
  Recorder r;
  r.Pump();
  script(r);
  r.Pump();
  return r.sent;
}

std::string Frame(uint8_t type, uint8_t flags, uint32_t stream, std::string_view payload) {
  std::string f;
  uint32_t len = static_cast<uint32_t>(payload.size());
  for (int shift : {16, 8, 0}) f += static_cast<char>((len >> shift) & 0xff);
  f += static_cast<char>(type);
  f += static_cast<char>(flags);
  for (int shift : {24, 16, 8, 0}) f += static_cast<char>((stream >> shift) & 0xff);
  f += payload;
  return f;
}

const std::string kStart = std::string("PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n") + Frame(4, 0, 0, "") + Frame(4, 1, 0, "");
const std::string kGetBlock = std::string("\x82\x87\x84\x01\x01", 5) + "a";  // GET https://a/

}  // namespace

int main(int argc, char** argv) {
  if (argc != 2) {
    std::fprintf(stderr, "usage: h2_seeds OUTPUT_DIR\n");
    return 2;
  }
  fs::path dir = argv[1];
  fs::create_directories(dir);
  auto write = [&](const char* name, unsigned char control, const std::string& bytes) {
    std::ofstream(dir / name, std::ios::binary | std::ios::trunc) << static_cast<char>(control) << bytes;
  };

  write("get", kWholeConsume, Record([](Recorder& r) { r.client.SubmitRequest(Request("GET", "/orders/1"), true); }));
  write("get-in-pieces", kPiecesConsume,
        Record([](Recorder& r) { r.client.SubmitRequest(Request("GET", "/orders/1"), true); }));
  write("put-body-trailers", kPiecesConsume, Record([](Recorder& r) {
          int32_t id = r.client.SubmitRequest(Request("PUT", "/orders/2"), false);
          r.client.SubmitData(id, std::string(30000, 'b'), false);
          r.client.SubmitTrailers(id, h2::Headers{{"x-checksum", "abc"}});
        }));
  write("put-unconsumed", kNoConsume, Record([](Recorder& r) {
          int32_t id = r.client.SubmitRequest(Request("PUT", "/orders/3"), false);
          r.client.SubmitData(id, std::string(40000, 'u'), true);
        }));
  write("grpc-call", kWholeConsume | 0x80, Record([](Recorder& r) {
          h2::Headers call = {{":method", "POST"}, {":scheme", "http"}, {":authority", "orders"},
                              {":path", "/orders.Orders/Put"}, {"content-type", "application/grpc"},
                              {"te", "trailers"}, {"grpc-timeout", "1S"}};
          int32_t id = r.client.SubmitRequest(call, false);
          r.client.SubmitData(id, std::string("\0\0\0\0\x03\x08\x96\x01", 8), true);
        }));
  write("many-streams", kWholeConsume, Record([](Recorder& r) {
          // As many as the server allows; the raw "too-many-streams" below opens one more.
          for (int i = 0; i < 16; ++i) r.client.SubmitRequest(Request("GET", "/orders/" + std::to_string(i)), true);
        }));
  write("reset", kWholeConsume, Record([](Recorder& r) {
          int32_t id = r.client.SubmitRequest(Request("POST", "/orders/4"), false);
          r.client.SubmitData(id, "part", false);
          r.Pump();
          r.client.ResetStream(id, h2::kCancel);
        }));
  write("head-too-large", kWholeConsume, Record([](Recorder& r) {
          h2::Headers big = Request("GET", "/orders/5");
          big.push_back({"cookie", std::string(20000, 'c')});  // HEADERS and CONTINUATIONs
          r.client.SubmitRequest(big, true);
        }));
  write("goaway", kWholeConsume, Record([](Recorder& r) {
          r.client.SubmitRequest(Request("GET", "/orders/6"), true);
          r.Pump();
          r.client.GoAway(h2::kNoError);
        }));
  std::string streams = kStart;
  for (uint32_t id = 1; id <= 2 * 17; id += 2) streams += Frame(1, 0x4, id, kGetBlock);
  write("too-many-streams", kWholeConsume, streams);
  write("not-http2", kWholeConsume, "GET / HTTP/1.1\r\nHost: a\r\n\r\n");
  std::string pings = kStart;
  for (int i = 0; i < 50; ++i) pings += Frame(6, 0, 0, "pingping");
  write("pings-unread", kNoRead, pings);
  std::string continuations = kStart + Frame(1, 0x1, 1, kGetBlock);
  for (int i = 0; i < 12; ++i) continuations += Frame(9, 0, 1, std::string("\x40\x01x\x01y", 5));
  write("continuation-flood", kWholeConsume, continuations);
  std::string resets = kStart;
  for (uint32_t id = 1; id < 80; id += 2) {  // HEADERS, then RST_STREAM(CANCEL)
    resets += Frame(1, 0x5, id, kGetBlock) + Frame(3, 0, id, std::string("\0\0\0\x08", 4));
  }
  write("rapid-reset", kWholeConsume, resets);
  write("window-updates", kWholeConsume,
        kStart + Frame(1, 0x5, 1, kGetBlock) + Frame(8, 0, 0, std::string("\0\x01\0\0", 4)) +
            Frame(8, 0, 1, std::string("\0\x01\0\0", 4)) + Frame(4, 0, 0, std::string("\0\x04\0\x01\0\0", 6)));
  return 0;
}
