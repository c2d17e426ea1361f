#pragma once
// One HTTP/2 connection's protocol state, for either end: the codec the server session (clients,
// gRPC among them) and the upstream pool (h2c and h2 backends) both drive. Bytes in, events out,
// frames out; nothing here owns a socket, a timer or a thread. The framing, HPACK, stream states
// and flow-control arithmetic are libnghttp2's (linked privately: only connection.cpp sees
// nghttp2.h); what this class adds is the shape the proxy needs around it:
//
//   Receive(bytes)      feeds the peer's bytes; a connection error queues GOAWAY and says so
//   NextEvent(&event)   heads, data, trailers, ends and resets, in the order they came
//   Submit*             our heads, data, trailers; data waits in a per-stream queue and goes as
//                       the peer's windows allow
//   Consume(stream, n)  the caller has passed n received bytes on: only now is window given back
//   TakeOutput(&buf)    the frames to write
//
// Flow control is end to end. No window is given back for bytes the caller has not passed on
// (Consume), and Queued(stream) says how much of our data the peer has not taken yet, so the
// caller stops reading its source while it is high: a slow reader on either side slows the
// writer on the other, and nothing in between buffers without bound.
//
// The defences (h2 denial-of-service attacks and the limit that answers each):
//
//   attack                       limit                                           on breach
//   ---------------------------  ----------------------------------------------  -------------------
//   rapid reset: open a stream,  nghttp2's stream reset rate limit: a token      GOAWAY
//     reset it, repeat           bucket of 1000 peer RST_STREAMs refilled at     (INTERNAL_ERROR)
//     (CVE-2023-44487)           33 per second (server)
//   make the codec reset         ours: the same bucket size and rate for the     GOAWAY
//     streams for it (bad        RST_STREAMs we send because the peer broke a    (ENHANCE_YOUR_CALM)
//     fields, bad flow) and      rule on a stream, and for empty DATA frames
//     empty frames               without END_STREAM (either role)
//   CONTINUATION flood           at most 8 CONTINUATION frames after a HEADERS   GOAWAY
//     (CVE-2024-28182)           (9 frames of max_frame_size: far more than a    (ENHANCE_YOUR_CALM)
//                                head within max_header_list_bytes needs)
//   SETTINGS, PING floods, or    at most 32 entries in a SETTINGS frame; at      GOAWAY; the
//     a peer that never reads    most 1000 SETTINGS/PING acknowledgements        connection dropped
//     our acknowledgements       waiting to be sent                              unwritten (flood)
//   HPACK bombs                  decoded head or trailers over                   kHeadTooLarge (the
//                                max_header_list_bytes (name + value + 32 per    fields are dropped
//                                field, as RFC 9113 counts): dropped as they     as they come)
//                                are decoded; the decoder's dynamic table is
//                                4 KiB (the default we advertise), our
//                                encoder's at most 4 KiB whatever the peer
//                                allows
//   too many streams             max_concurrent_streams (ours, advertised);      REFUSED_STREAM, or
//                                the peer's, for the streams we open             PROTOCOL_ERROR once
//                                                                                acknowledged
//   unbounded buffering          windows: per stream initial_window_size, the    FLOW_CONTROL_ERROR
//                                connection connection_window_size, given back
//                                only by Consume
//   priority tree work           SETTINGS_NO_RFC7540_PRIORITIES = 1, closed      (nothing to breach)
//     (CVE-2019-9513)            streams not retained
//   malformed messages,          nghttp2's HTTP messaging checks, kept on:       the stream reset
//     smuggling                  pseudo-headers, connection-specific fields,     (PROTOCOL_ERROR)
//                                content-length against the DATA, field
//                                characters; an invalid field resets its
//                                stream (RFC 9113 8.2.1), never silently dropped
//
// A Connection is used from one thread at a time (its session's), like the sockets it serves.
//
// A stream, for the caller: its events come in order (kHead, then kData..., kTrailers, kEnd; or
// kHeadTooLarge), and a stream that closes before both sides ended gives one kReset last. A
// request reset (by the peer, or by the codec for the peer's fault) before the caller took its
// head is forgotten without a word (rapid reset costs the caller nothing), and after ResetStream
// the caller hears nothing more of a stream.

#include "common/status.h"

#include <cstddef>
#include <cstdint>
#include <deque>
#include <memory>
#include <span>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

struct nghttp2_session;

namespace fencing::h2 {

// RFC 9113 7's error codes, declared once as (constant, value, name). The wire carries any
// 32-bit value, so the API passes uint32_t; these name the ones defined.
#define FENCING_H2_ERROR_CODES(X)                   \
  X(kNoError, 0x0, "NO_ERROR")                      \
  X(kProtocolError, 0x1, "PROTOCOL_ERROR")          \
  X(kInternalError, 0x2, "INTERNAL_ERROR")          \
  X(kFlowControlError, 0x3, "FLOW_CONTROL_ERROR")   \
  X(kSettingsTimeout, 0x4, "SETTINGS_TIMEOUT")      \
  X(kStreamClosed, 0x5, "STREAM_CLOSED")            \
  X(kFrameSizeError, 0x6, "FRAME_SIZE_ERROR")       \
  X(kRefusedStream, 0x7, "REFUSED_STREAM")          \
  X(kCancel, 0x8, "CANCEL")                         \
  X(kCompressionError, 0x9, "COMPRESSION_ERROR")    \
  X(kConnectError, 0xa, "CONNECT_ERROR")            \
  X(kEnhanceYourCalm, 0xb, "ENHANCE_YOUR_CALM")     \
  X(kInadequateSecurity, 0xc, "INADEQUATE_SECURITY") \
  X(kHttp11Required, 0xd, "HTTP_1_1_REQUIRED")

#define FENCING_H2_ERROR_CONSTANT(constant, value, name) inline constexpr uint32_t constant = value;
FENCING_H2_ERROR_CODES(FENCING_H2_ERROR_CONSTANT)
#undef FENCING_H2_ERROR_CONSTANT

// "PROTOCOL_ERROR"; a code not in the list: "0x2a".
std::string ErrorCodeName(uint32_t code);

// How many of one side's bytes a relay lets the other side's codec (or queue) hold before it
// stops reading that side: one default HTTP/2 window (65,535, rounded up). Every relay between
// an HTTP/2 stream and another hop holds a side back at this mark, so back-pressure is end to end
// and what the proxy buffers per stream is bounded.
inline constexpr size_t kRelayHighWater = 64 * 1024;

enum class Role {
  kServer,  // accepts streams; reads the client's connection preface
  kClient,  // opens streams; sends the preface
};

// What we advertise, and the windows we keep. The defaults suit a proxy's client listener;
// the upstream pool may choose others.
struct Settings {
  uint32_t max_concurrent_streams = 100;       // streams the peer may have open at once
  uint32_t initial_window_size = 65535;        // per stream: bytes the peer may send ahead of Consume
  uint32_t connection_window_size = 1 << 20;   // all streams together
  uint32_t max_header_list_bytes = 16 * 1024;  // a decoded head or trailers (as limits.max_header_bytes)
  uint32_t max_frame_size = 16384;             // the largest frame payload the peer may send
};

struct Header {
  std::string name;  // lowercase; pseudo-headers (":method", ":status", ...) first
  std::string value;
};
using Headers = std::vector<Header>;

// The events, declared once as (kind, name): the name is for logs and test messages.
#define FENCING_H2_EVENTS(X)                                                                        \
  X(kHead, "head")                   /* a request (server) or response (client) head: fields,  \
                                        end_stream. A client may get 1xx heads before the final */ \
  X(kData, "data")                   /* body bytes: data. Consume them once passed on */          \
  X(kTrailers, "trailers")           /* trailer fields; kEnd follows */                          \
  X(kEnd, "end")                     /* the peer's side of the stream ended */                   \
  X(kReset, "reset")                 /* the stream closed before both sides ended: error_code    \
                                        (the peer's RST_STREAM, ours for its fault, REFUSED_STREAM \
                                        for a request never sent; NO_ERROR: the peer or we ended \
                                        early after a complete response). Its last event */       \
  X(kHeadTooLarge, "head_too_large") /* a head or trailers over max_header_list_bytes: fields    \
                                        dropped; the peer's further data is dropped (consumed)  \
                                        too. Answer (431) or ResetStream */                      \
  X(kGoAway, "goaway")               /* the peer's GOAWAY: error_code, last_stream. Its streams  \
                                        above last_stream were not processed: each gets kReset   \
                                        REFUSED_STREAM, safe to retry */

struct Event {
  enum class Kind : uint8_t {
#define FENCING_H2_EVENT_ENUM(kind, name) kind,
    FENCING_H2_EVENTS(FENCING_H2_EVENT_ENUM)
#undef FENCING_H2_EVENT_ENUM
  };

  Kind kind = Kind::kHead;
  int32_t stream = 0;       // 0 for kGoAway
  Headers fields;           // kHead, kTrailers: as received, pseudo-headers first
  bool end_stream = false;  // kHead: no body follows (kEnd comes next all the same)
  // kData: the bytes, copied into the connection's receive buffer (one copy, no allocation per
  // event). Valid until the next Receive; a kData may join several DATA frames of its stream.
  std::string_view data;
  uint32_t error_code = 0;   // kReset, kGoAway
  int32_t last_stream = 0;   // kGoAway: the highest stream id the peer processed (or may)
};

std::string_view EventKindName(Event::Kind kind);

class Connection {
 public:
  // The frames serialized ahead into the output buffer: past this much untaken output, frames
  // wait in nghttp2's queues (where its flood limits count them) and data in the streams' queues.
  static constexpr size_t kOutputChunk = 64 * 1024;
  static constexpr int32_t kNoStream = -1;

  // Queues our SETTINGS (and, as client, the connection preface) and the connection window.
  Connection(Role role, const Settings& settings = {});
  ~Connection();
  Connection(const Connection&) = delete;
  Connection& operator=(const Connection&) = delete;

  Role role() const { return role_; }

  // ---- input

  // Feeds the peer's bytes (any split). Not ok: the connection is over (a connection error: the
  // output ends with our GOAWAY; take it, write it, close). Once over, every call says so again.
  Status Receive(const uint8_t* data, size_t size);
  Status Receive(std::string_view bytes) {
    return Receive(reinterpret_cast<const uint8_t*>(bytes.data()), bytes.size());
  }
  // The next event, if any. Drain after Receive, and after TakeOutput (sending can close
  // streams). kData views are valid until the next Receive.
  bool NextEvent(Event* event);

  // ---- output: heads, data, trailers. False: not allowed now (unknown or closed stream, the
  // wrong role or order, fields a peer must refuse: uppercase names, connection-specific fields
  // (connection, keep-alive, proxy-connection, transfer-encoding, upgrade, te but "trailers"),
  // misplaced or unknown pseudo-headers, values with CR, LF, NUL or edge whitespace).

  // Server: the response head on a stream whose request head was taken. A 1xx head may come
  // first (it does not end our side). end_stream: no body; else SubmitData / SubmitTrailers.
  bool SubmitResponse(int32_t stream, std::span<const Header> headers, bool end_stream);
  // Client: opens a stream. Returns its id, or kNoStream: the peer's max_concurrent_streams is
  // reached (StreamsAvailable() == 0), the peer sent GOAWAY, or the fields are refused.
  int32_t SubmitRequest(std::span<const Header> headers, bool end_stream);
  // Queues body bytes (copied) after a head without end_stream; sent as the peer's windows allow.
  bool SubmitData(int32_t stream, std::string_view bytes, bool end_stream);
  // Ends our side with trailers, after whatever data is queued. No pseudo-headers.
  bool SubmitTrailers(int32_t stream, std::span<const Header> trailers);
  // RST_STREAM. Its queued data and undrained events are dropped (received bytes in them
  // consumed); the caller hears nothing more of the stream.
  void ResetStream(int32_t stream, uint32_t error_code);
  // GOAWAY. kNoError: graceful (open streams finish; new ones are refused); otherwise the
  // connection ends once it is written.
  void GoAway(uint32_t error_code);

  // Our bytes on `stream` not yet framed for the peer (0 for an unknown stream): a caller
  // stops reading the source of this stream's data while this is high.
  size_t Queued(int32_t stream) const;
  // Client: streams we may still open before the peer's max_concurrent_streams (nghttp2 assumes
  // 100 until the peer's SETTINGS come; none there means no limit: the pool keeps its own).
  size_t StreamsAvailable() const;

  // The caller has passed n bytes of `stream`'s kData on (or dropped them): gives the window
  // back (WINDOW_UPDATE, batched as nghttp2 does, at half a window). Every byte of every kData
  // taken is consumed exactly once, also after the stream has closed (the connection window).
  void Consume(int32_t stream, size_t n);

  // ---- output bytes

  bool WantWrite() const;
  // Appends the frames ready now (about kOutputChunk at most) to *out; returns how many bytes.
  // When *out is empty the buffer is handed over without a copy (swapped), so a caller that
  // gives back its emptied write buffer keeps one allocation.
  size_t TakeOutput(std::string* out);

  // Nothing more to read or write: close the socket (after writing what TakeOutput gave).
  bool Done() const;

 private:
  struct Stream;     // in connection.cpp
  struct Callbacks;  // nghttp2's callbacks, in connection.cpp
  struct Pending {   // an event not yet taken; kData's bytes by offset into received_
    Event event;
    size_t offset = 0;
    size_t size = 0;
  };

  Stream* Find(int32_t id);
  const Stream* Find(int32_t id) const;
  void Push(Event event);
  void PushData(Stream& stream, const uint8_t* data, size_t size);
  void Purge(Stream& stream);  // drops its undrained events, consuming their data
  void Close(int32_t id, uint32_t error_code);
  bool Spend();  // one unit of the misbehaviour budget; false: exhausted
  void Fail(uint32_t error_code, std::string reason);
  void HandleFatal(long rv);
  void Flush();
  void Attach(Stream& stream, bool end_stream);  // our head is submitted: data may follow unless it ended

  const Role role_;
  const Settings settings_;
  nghttp2_session* session_ = nullptr;

  std::unordered_map<int32_t, std::unique_ptr<Stream>> streams_;
  size_t local_open_ = 0;         // client: streams we opened, not yet closed
  uint64_t unconsumed_ = 0;       // received data not yet Consumed, all streams
  std::deque<Pending> events_;
  std::string received_;          // kData bytes since the last Receive with nothing undrained
  std::string out_;               // serialized frames not yet taken
  std::vector<int32_t> to_reset_; // (server) streams to reset with NO_ERROR after our response

  double budget_ = 0;             // misbehaviour tokens left
  double budget_time_ = 0;        // when budget_ was last refilled (seconds, steady clock)
  bool budget_spent_ = false;     // exhausted while sending: GOAWAY after this flush

  uint32_t stop_code_ = 0;        // a callback's reason to stop the connection (with stop_reason_)
  std::string stop_reason_;
  bool failed_ = false;           // over: Receive refuses; failure_ says why
  Status failure_ = Status::Ok();
  bool final_goaway_sent_ = false;  // an error GOAWAY is in out_: nothing is framed after it
  bool dead_ = false;             // nothing more may be written (the peer floods us, unread)
};

// ---- gRPC: the trailers-only answer the proxy gives when it refuses a call itself (gRPC's
// PROTOCOL-HTTP2.md, "Responses": a HEADERS frame with END_STREAM and no body).

// grpc-message's Percent-Encoded form: bytes outside 0x20-0x7E, and '%', as %XX (uppercase hex).
std::string GrpcPercentEncode(std::string_view message);

// :status 200, content-type application/grpc, grpc-status, grpc-message (omitted when empty),
// then `extra`. Answer with SubmitResponse(stream, fields, /*end_stream=*/true).
Headers GrpcTrailersOnly(int grpc_status, std::string_view message, std::span<const Header> extra = {});

}  // namespace fencing::h2
