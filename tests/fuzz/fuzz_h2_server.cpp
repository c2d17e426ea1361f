// The HTTP/2 codec as a server (h2/connection.h): the input is what a client sends, fed in
// pieces; every request head is answered with a response, data and (sometimes) trailers, so the
// output path (data queues, deferral, flow control, resets) runs too.
//
// The first byte steers the run:
//   bits 0-2  the piece size: 1, 7, 64, 512, 4096 bytes, or all at once (6, 7)
//   bit 3     data is passed on (Consume) as it comes; else never, so the client's windows fill
//   bit 4     the output is taken only at the end (a client that does not read)
//   bits 5-6  the response body: 0, 100, 20000 or 70000 bytes
//   bit 7     responses end with trailers
//
// Streams 7 mod 8 are refused (reset); 5 mod 8 answered whole at once; the others get their
// response's head and body at once and its end when the request has ended.
//
// Oracles: each stream's events come in order (a head, or head_too_large, first; data only
// after a head and before the end; one end; a reset last; nothing after our own reset); a head
// has its pseudo-headers first, one :method, and fits max_header_list_bytes; data is never
// empty; a connection error stays one, ends the output with a GOAWAY that carries an error
// (unless the connection was dropped for not reading), and leaves the connection Done; the
// output is whole frames, none over the client's frame size; Queued never exceeds what was
// submitted.

#include "fuzz_check.h"
#include "fuzz_h2_settings.h"
#include "h2/connection.h"

#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <map>
#include <string>
#include <string_view>

namespace {

using namespace fencing;
using h2::Event;
using Kind = h2::Event::Kind;

constexpr size_t kPieces[] = {1, 7, 64, 512, 4096, SIZE_MAX, SIZE_MAX, SIZE_MAX};
constexpr size_t kBodies[] = {0, 100, 20000, 70000};

struct StreamState {
  bool head = false;       // kHead taken
  bool too_large = false;  // kHeadTooLarge taken
  bool ended = false;      // kEnd taken
  bool reset = false;      // kReset taken, or we reset it
  bool ours_reset = false; // we reset it
  size_t submitted = 0;    // bytes of data we queued
  bool answering = false;  // our response is open, to end when the request has
};

void CheckHead(const h2::Headers& fields, const h2::Settings& settings) {
  size_t bytes = 0, methods = 0;
  bool regular = false;
  for (const h2::Header& f : fields) {
    FUZZ_CHECK(!f.name.empty(), "a field without a name");
    bytes += f.name.size() + f.value.size() + 32;
    if (f.name[0] == ':') {
      FUZZ_CHECK(!regular, "a pseudo-header after a regular field");
      methods += f.name == ":method";
    } else {
      regular = true;
    }
  }
  FUZZ_CHECK(methods == 1, "a request head without exactly one :method");
  FUZZ_CHECK(bytes <= settings.max_header_list_bytes, "a head over max_header_list_bytes delivered");
}

// A request head: some streams are refused, some answered whole at once (before the request
// body is in, which ends the upload with RST_STREAM NO_ERROR), the rest get the head and the
// body now and their end (data end_stream or trailers) when the request has ended (Finish).
void Answer(h2::Connection& conn, int32_t id, unsigned control, std::map<int32_t, StreamState>& streams) {
  StreamState& st = streams[id];
  if (id % 8 == 7) {
    conn.ResetStream(id, h2::kRefusedStream);
    st.reset = st.ours_reset = true;
    return;
  }
  const size_t body = kBodies[(control >> 5) & 3];
  const bool at_once = id % 8 == 5;
  h2::Headers head = {{":status", "200"}, {"content-type", "application/octet-stream"}};
  FUZZ_CHECK(conn.SubmitResponse(id, head, at_once && body == 0), "a response to a taken head is refused");
  if (body > 0) {
    FUZZ_CHECK(conn.SubmitData(id, std::string(body, 'r'), at_once), "data after our head is refused");
    st.submitted += body;
  }
  st.answering = !at_once;
  FUZZ_CHECK(conn.Queued(id) <= st.submitted, "more queued than submitted");
}

void Finish(h2::Connection& conn, int32_t id, unsigned control, StreamState& st) {
  if (!st.answering) return;
  st.answering = false;
  bool ok = (control & 0x80) ? conn.SubmitTrailers(id, h2::Headers{{"x-checksum", "0"}})
                             : conn.SubmitData(id, "", /*end_stream=*/true);
  FUZZ_CHECK(ok, "the end of a response under way is refused");
}

// answer: false once the connection has failed (a caller would only close it).
void Drain(h2::Connection& conn, unsigned control, const h2::Settings& settings,
           std::map<int32_t, StreamState>& streams, bool answer) {
  Event e;
  while (conn.NextEvent(&e)) {
    if (e.kind == Kind::kGoAway) {
      FUZZ_CHECK(e.stream == 0, "a GOAWAY event on a stream");
      continue;
    }
    FUZZ_CHECK(e.stream > 0 && e.stream % 2 == 1, "an event on a stream a client cannot open");
    StreamState& st = streams[e.stream];
    FUZZ_CHECK(!st.ours_reset, "an event on a stream we reset");
    FUZZ_CHECK(!st.reset, "an event after the stream's reset");
    switch (e.kind) {
      case Kind::kHead:
        FUZZ_CHECK(!st.head && !st.too_large && !st.ended, "a second request head");
        CheckHead(e.fields, settings);
        st.head = true;
        if (answer) Answer(conn, e.stream, control, streams);
        break;
      case Kind::kHeadTooLarge:
        FUZZ_CHECK(!st.ended && !st.too_large, "head_too_large after the end");
        FUZZ_CHECK(e.fields.empty(), "head_too_large with fields");
        if (!st.head && answer) {
          FUZZ_CHECK(conn.SubmitResponse(e.stream, h2::Headers{{":status", "431"}}, true),
                     "a 431 to a head too large is refused");
        }
        st.too_large = true;
        break;
      case Kind::kData:
        FUZZ_CHECK(st.head && !st.too_large && !st.ended, "data outside a request body");
        FUZZ_CHECK(!e.data.empty(), "an empty data event");
        if (control & 0x08) conn.Consume(e.stream, e.data.size());
        break;
      case Kind::kTrailers:
        FUZZ_CHECK(st.head && !st.too_large && !st.ended, "trailers outside a request");
        break;
      case Kind::kEnd:
        FUZZ_CHECK((st.head || st.too_large) && !st.ended, "an end without a head, or twice");
        st.ended = true;
        if (answer) Finish(conn, e.stream, control, st);
        break;
      case Kind::kReset:
        FUZZ_CHECK(st.head || st.too_large, "a reset of a stream the caller never saw");
        st.reset = true;
        break;
      case Kind::kGoAway:
        break;
    }
  }
}

// The output is whole frames; none larger than the client allows (its SETTINGS may raise the
// 16384 default, but the codec never sends DATA larger than that, nor heads this small).
void CheckFrames(std::string_view out) {
  size_t pos = 0;
  auto byte = [&](size_t i) { return static_cast<uint32_t>(static_cast<unsigned char>(out[i])); };
  while (out.size() - pos >= 9) {
    uint32_t len = byte(pos) << 16 | byte(pos + 1) << 8 | byte(pos + 2);
    FUZZ_CHECK(len <= 16384, "a frame over 16384 bytes");
    if (out.size() - pos - 9 < len) break;
    pos += 9 + len;
  }
  FUZZ_CHECK(pos == out.size(), "the output ends inside a frame");
}

// The error code of the last frame if it is a GOAWAY, else -1.
int64_t LastGoAway(std::string_view out) {
  size_t pos = 0;
  int64_t code = -1;
  auto byte = [&](size_t i) { return static_cast<uint32_t>(static_cast<unsigned char>(out[i])); };
  while (out.size() - pos >= 9) {
    uint32_t len = byte(pos) << 16 | byte(pos + 1) << 8 | byte(pos + 2);
    if (out.size() - pos - 9 < len) break;
    code = -1;
    if (out[pos + 3] == 0x7 && len >= 8) {  // GOAWAY: last stream id, then the error code
      code = byte(pos + 13) << 24 | byte(pos + 14) << 16 | byte(pos + 15) << 8 | byte(pos + 16);
    }
    pos += 9 + len;
  }
  return code;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size == 0) return 0;
  const unsigned control = data[0];
  std::string_view input = fuzz::AsView(data + 1, size - 1);
  const size_t piece = kPieces[control & 7];
  const bool read_output = !(control & 0x10);

  const h2::Settings settings = fuzz::H2FuzzSettings();
  h2::Connection conn(h2::Role::kServer, settings);
  std::map<int32_t, StreamState> streams;
  std::string out;
  bool failed = false;
  while (!input.empty()) {
    std::string_view chunk = input.substr(0, piece);
    input.remove_prefix(chunk.size());
    Status s = conn.Receive(chunk);
    FUZZ_CHECK(!failed || !s.ok(), "a connection error that went away");
    FUZZ_CHECK(s.ok() || !s.message().empty(), "a connection error without a reason");
    failed = !s.ok();
    Drain(conn, control, settings, streams, !failed);
    if (read_output) {
      conn.TakeOutput(&out);
      Drain(conn, control, settings, streams, !failed);  // sending can close streams
    }
    if (failed) break;
  }
  for (int round = 0; round < 1000 && conn.WantWrite(); ++round) {
    size_t before = out.size();
    conn.TakeOutput(&out);
    Drain(conn, control, settings, streams, !failed);
    if (out.size() == before) break;
  }
  CheckFrames(out);
  if (std::getenv("FUZZ_H2_VERBOSE")) {  // what each input did, to check the seeds
    size_t heads = 0, ended = 0, resets = 0;
    for (const auto& [id, st] : streams) {
      heads += st.head || st.too_large;
      ended += st.ended;
      resets += st.reset;
    }
    std::fprintf(stderr,
                 "fuzz_h2_server: %zu streams, %zu heads, %zu ended, %zu reset; %zu bytes out, last GOAWAY %lld; %s\n",
                 streams.size(), heads, ended, resets, out.size(), static_cast<long long>(LastGoAway(out)),
                 failed ? conn.Receive(std::string_view()).message().c_str() : "no connection error");
  }
  if (failed) {
    Status again = conn.Receive(std::string_view("x"));
    FUZZ_CHECK(!again.ok(), "a failed connection that reads again");
    FUZZ_CHECK(conn.Done(), "a connection error that is not Done once its output is taken");
    FUZZ_CHECK(!conn.WantWrite(), "more output after the connection error's");
    // Dropped for not reading: nothing more was written. Otherwise the last frame says why.
    if (again.message().find("does not read") == std::string::npos) {
      FUZZ_CHECK(LastGoAway(out) > 0, "a connection error whose output does not end with an error GOAWAY");
    }
  }
  return 0;
}
