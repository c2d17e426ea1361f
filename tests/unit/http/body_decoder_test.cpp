// BodyDecoder: Content-Length counting, strict chunked decoding, and the refusals that keep two
// readers of the same bytes from disagreeing about where a request ends.

#include <gtest/gtest.h>

#include <string>
#include <string_view>

#include "http/body_decoder.h"

namespace fencing {
namespace {

using Status = BodyDecoder::Status;

struct Decoded {
  std::string body;
  size_t consumed = 0;  // of the input, in all
};

// Feeds `in` in pieces of `piece` bytes (0: all at once), with `room` bytes of output per call.
Decoded DecodeAll(BodyDecoder& d, std::string_view in, size_t piece = 0, size_t room = 1 << 16) {
  Decoded out;
  std::string buf(room, '\0');
  size_t offset = 0;
  while (offset < in.size() && d.status() == Status::kNeedMore) {
    size_t end = piece == 0 ? in.size() : std::min(in.size(), offset + piece);
    // A piece is fed until it is used up or decoding stops (out may fill before it is used).
    while (offset < end && d.status() == Status::kNeedMore) {
      BodyDecoder::Step step = d.Decode(in.substr(offset, end - offset), buf.data(), room);
      out.body.append(buf.data(), step.produced);
      offset += step.consumed;
      out.consumed += step.consumed;
      if (step.consumed == 0 && step.produced == 0) break;
    }
    if (offset < end && d.status() == Status::kNeedMore) break;  // stuck: reported by the caller
  }
  return out;
}

// ---------------------------------------------------------------------------------------------
// No body, Content-Length

TEST(BodyDecoderTest, NoBodyIsDoneAtOnce) {
  BodyDecoder d;
  EXPECT_TRUE(d.done());
  char out[4];
  BodyDecoder::Step step = d.Decode("GET / HTTP/1.1\r\n", out, sizeof out);
  EXPECT_EQ(step.consumed, 0u);
  EXPECT_EQ(step.produced, 0u);
  EXPECT_TRUE(BodyDecoder::Length(0).done());
}

TEST(BodyDecoderTest, ContentLengthFedInPiecesStopsAtTheLength) {
  const std::string body = "hello, fenced world";
  const std::string in = body + "GET /next HTTP/1.1\r\n";  // the next pipelined request follows
  for (size_t piece = 1; piece <= in.size(); ++piece) {
    BodyDecoder d = BodyDecoder::Length(body.size());
    EXPECT_EQ(d.remaining_known(), body.size());
    Decoded r = DecodeAll(d, in, piece);
    EXPECT_TRUE(d.done()) << "piece " << piece;
    EXPECT_EQ(r.body, body) << "piece " << piece;
    EXPECT_EQ(r.consumed, body.size()) << "piece " << piece;
    EXPECT_EQ(d.body_bytes(), body.size());
    EXPECT_EQ(d.remaining_known(), 0u);
    EXPECT_FALSE(d.chunked());
  }
}

TEST(BodyDecoderTest, ContentLengthNeedsMoreUntilComplete) {
  BodyDecoder d = BodyDecoder::Length(10);
  Decoded r = DecodeAll(d, "12345");
  EXPECT_EQ(d.status(), Status::kNeedMore);
  EXPECT_EQ(r.body, "12345");
  EXPECT_EQ(d.remaining_known(), 5u);
  r = DecodeAll(d, "67890extra");
  EXPECT_TRUE(d.done());
  EXPECT_EQ(r.body, "67890");
  EXPECT_EQ(r.consumed, 5u);
}

TEST(BodyDecoderTest, ContentLengthHonoursOutputRoom) {
  BodyDecoder d = BodyDecoder::Length(10);
  char out[3];
  BodyDecoder::Step step = d.Decode("0123456789", out, sizeof out);
  EXPECT_EQ(step.consumed, 3u);
  EXPECT_EQ(step.produced, 3u);
  EXPECT_EQ(std::string_view(out, 3), "012");
  EXPECT_EQ(d.status(), Status::kNeedMore);
  Decoded r = DecodeAll(d, "3456789", 0, 3);
  EXPECT_TRUE(d.done());
  EXPECT_EQ(r.body, "3456789");
}

// ---------------------------------------------------------------------------------------------
// Chunked: valid bodies

struct Valid {
  const char* name;
  std::string in;
  std::string body;
};

std::vector<Valid> ValidBodies() {
  return {
      {"one chunk", "5\r\nhello\r\n0\r\n\r\n", "hello"},
      {"two chunks", "5\r\nhello\r\n1\r\n!\r\n0\r\n\r\n", "hello!"},
      {"empty body", "0\r\n\r\n", ""},
      {"upper-case hex", "A\r\n0123456789\r\n0\r\n\r\n", "0123456789"},
      {"lower-case hex", "a\r\n0123456789\r\n0\r\n\r\n", "0123456789"},
      {"mixed hex, leading zeros", "000aB\r\n" + std::string(0xab, 'x') + "\r\n0\r\n\r\n", std::string(0xab, 'x')},
      {"extension", "5;name=value\r\nhello\r\n0\r\n\r\n", "hello"},
      {"quoted extension, BWS", "5 \t;a=\"b c\";d\r\nhello\r\n0;last\r\n\r\n", "hello"},
      {"trailers dropped", "5\r\nhello\r\n0\r\nX-Checksum: abc\r\nX-Other:\tv w\r\n\r\n", "hello"},
      {"CRLF inside chunk data", "4\r\n\r\n\r\n\r\n0\r\n\r\n", "\r\n\r\n"},
  };
}

TEST(BodyDecoderTest, ValidChunkedBodiesDecodeTheSameInAnyPieces) {
  const std::string next = "GET /next HTTP/1.1\r\n";
  for (const Valid& v : ValidBodies()) {
    const std::string in = v.in + next;
    BodyDecoder whole = BodyDecoder::Chunked(1 << 20);
    Decoded all = DecodeAll(whole, in);
    ASSERT_TRUE(whole.done()) << v.name << ": " << whole.reason();
    EXPECT_EQ(all.body, v.body) << v.name;
    EXPECT_EQ(all.consumed, v.in.size()) << v.name << ": the next request is not the body's";
    EXPECT_EQ(whole.body_bytes(), v.body.size()) << v.name;
    EXPECT_TRUE(whole.chunked());

    BodyDecoder bytewise = BodyDecoder::Chunked(1 << 20);
    Decoded one = DecodeAll(bytewise, in, 1);
    ASSERT_TRUE(bytewise.done()) << v.name << " byte by byte: " << bytewise.reason();
    EXPECT_EQ(one.body, all.body) << v.name;
    EXPECT_EQ(one.consumed, all.consumed) << v.name;

    // Split in two at every boundary.
    for (size_t cut = 1; cut < v.in.size(); ++cut) {
      BodyDecoder d = BodyDecoder::Chunked(1 << 20);
      Decoded first = DecodeAll(d, std::string_view(in).substr(0, cut));
      ASSERT_EQ(d.status(), Status::kNeedMore) << v.name << " cut " << cut << ": " << d.reason();
      ASSERT_EQ(first.consumed, cut) << v.name << " cut " << cut << ": every byte so far is used";
      Decoded second = DecodeAll(d, std::string_view(in).substr(cut));
      ASSERT_TRUE(d.done()) << v.name << " cut " << cut << ": " << d.reason();
      EXPECT_EQ(first.body + second.body, v.body) << v.name << " cut " << cut;
      EXPECT_EQ(first.consumed + second.consumed, v.in.size()) << v.name << " cut " << cut;
    }
  }
}

TEST(BodyDecoderTest, DecodingAfterTheEndChangesNothing) {
  BodyDecoder d = BodyDecoder::Chunked(100);
  DecodeAll(d, "0\r\n\r\n");
  ASSERT_TRUE(d.done());
  char out[8];
  BodyDecoder::Step step = d.Decode("5\r\nhello\r\n", out, sizeof out);
  EXPECT_EQ(step.consumed, 0u);
  EXPECT_EQ(step.produced, 0u);
  EXPECT_TRUE(d.done());
}

TEST(BodyDecoderTest, OutputRoomSmallerThanAChunk) {
  const std::string in = "10\r\n0123456789abcdef\r\n3\r\nxyz\r\n0\r\n\r\n";
  for (size_t room = 1; room <= 5; ++room) {
    BodyDecoder d = BodyDecoder::Chunked(1 << 20);
    Decoded r = DecodeAll(d, in, 0, room);
    ASSERT_TRUE(d.done()) << "room " << room << ": " << d.reason();
    EXPECT_EQ(r.body, "0123456789abcdefxyz") << "room " << room;
    EXPECT_EQ(r.consumed, in.size());
  }
  // One call never writes past room, and stops there with the rest of the chunk unused.
  BodyDecoder d = BodyDecoder::Chunked(1 << 20);
  char out[4] = {'#', '#', '#', '#'};
  BodyDecoder::Step step = d.Decode(in, out, 3);
  EXPECT_EQ(step.produced, 3u);
  EXPECT_EQ(step.consumed, 4u + 3u);  // "10\r\n" and three data bytes
  EXPECT_EQ(std::string_view(out, 4), "012#");
  EXPECT_EQ(d.status(), Status::kNeedMore);
  // No room at all: only framing can be used.
  step = d.Decode(std::string_view(in).substr(7), out, 0);
  EXPECT_EQ(step.produced, 0u);
  EXPECT_EQ(step.consumed, 0u);
}

// ---------------------------------------------------------------------------------------------
// Chunked: refusals, each with its reason, whether fed at once or byte by byte

struct Refused {
  const char* name;
  std::string in;
  std::string reason;
};

std::vector<Refused> RefusedBodies() {
  return {
      {"bare LF after the size", "5\nhello\r\n0\r\n\r\n", "a bare LF in the chunk framing"},
      {"bare LF after an extension", "5;x\nhello\r\n0\r\n\r\n", "a bare LF in the chunk framing"},
      {"bare CR after the size", "5\rhello\r\n0\r\n\r\n", "a bare CR in the chunk framing"},
      {"bare LF after chunk data", "5\r\nhello\n0\r\n\r\n", "a bare LF after chunk data"},
      {"bare CR after chunk data", "5\r\nhello\r0\r\n\r\n", "a bare CR after chunk data"},
      {"bare LF at the end", "0\r\n\n", "a bare LF at the end of the chunked body"},
      {"bare LF for the last chunk and the end", "0\n\n", "a bare LF in the chunk framing"},
      {"bare CR at the end", "0\r\n\rX", "a bare CR at the end of the chunked body"},
      {"empty size", "\r\nhello\r\n0\r\n\r\n", "an empty chunk size"},
      {"empty size, bare LF", "\nhello\r\n", "an empty chunk size"},
      {"empty size before an extension", ";ext\r\n", "a chunk size that is not hexadecimal"},
      {"non-hex size", "g\r\nhello\r\n", "a chunk size that is not hexadecimal"},
      {"0x prefix", "0x5\r\nhello\r\n", "a chunk size that is not hexadecimal"},
      {"sign", "+5\r\nhello\r\n", "a chunk size that is not hexadecimal"},
      {"junk after the size", "5 x\r\nhello\r\n", "a chunk size that is not hexadecimal"},
      {"17 hex digits", "00000000000000005\r\nhello\r\n", "a chunk size of more than 16 hex digits"},
      {"chunk data longer than its size", "3\r\nhello\r\n0\r\n\r\n", "chunk data longer than its chunk size"},
      {"control byte in an extension", "5;a\x01\r\nhello\r\n", "a control byte in a chunk extension"},
      {"DEL in an extension", "5;a\x7f\r\nhello\r\n", "a control byte in a chunk extension"},
      {"obs-fold trailer", "0\r\nX-A: b\r\n c\r\n\r\n", "a folded trailer line (obs-fold)"},
      {"trailer without colon", "0\r\nX-Ab\r\n\r\n", "a trailer line without ':'"},
      {"trailer name with a space", "0\r\nX A: b\r\n\r\n", "a malformed trailer field name"},
      {"trailer starting with a colon", "0\r\n:b\r\n\r\n", "a malformed trailer field"},
      {"bare LF in a trailer", "0\r\nX-A: b\n\r\n", "a bare LF in a trailer field"},
      {"bare CR in a trailer", "0\r\nX-A: b\rc\r\n\r\n", "a bare CR in a trailer field"},
      {"control byte in a trailer value", "0\r\nX-A: \x02\r\n\r\n", "a control byte in a trailer field"},
      {"size line over 4096 bytes", "5;" + std::string(4096, 'e') + "\r\nhello\r\n0\r\n\r\n",
       "a chunk-size line longer than 4096 bytes"},
      {"trailers over 16 KiB", "0\r\n" + std::string("X-A: ") + std::string(16 * 1024, 'v') + "\r\n\r\n",
       "trailer fields longer than 16 KiB"},
  };
}

TEST(BodyDecoderTest, MalformedChunkedBodiesAreRefusedWithTheirReason) {
  for (const Refused& r : RefusedBodies()) {
    for (size_t piece : {size_t{0}, size_t{1}}) {
      BodyDecoder d = BodyDecoder::Chunked(1 << 20);
      // Whatever follows the offending byte is never looked at.
      Decoded out = DecodeAll(d, r.in + "0\r\n\r\n", piece);
      EXPECT_EQ(d.status(), Status::kMalformed) << r.name << (piece ? " byte by byte" : "");
      EXPECT_TRUE(d.failed()) << r.name;
      EXPECT_EQ(std::string(d.reason()), r.reason) << r.name << (piece ? " byte by byte" : "");
      EXPECT_LE(out.consumed, r.in.size()) << r.name;
      // And refusal is final.
      char buf[8];
      BodyDecoder::Step step = d.Decode("0\r\n\r\n", buf, sizeof buf);
      EXPECT_EQ(step.consumed, 0u) << r.name;
      EXPECT_EQ(d.status(), Status::kMalformed) << r.name;
    }
  }
}

TEST(BodyDecoderTest, ExactlySixteenHexDigitsAndA4096ByteLineAreAccepted) {
  // The limits are limits, not off by one.
  BodyDecoder d = BodyDecoder::Chunked(1 << 20);
  Decoded r = DecodeAll(d, "0000000000000005\r\nhello\r\n0\r\n\r\n");
  ASSERT_TRUE(d.done()) << d.reason();
  EXPECT_EQ(r.body, "hello");

  // "5;" + extension + CR LF: 4096 bytes with its CRLF.
  const std::string line = "5;" + std::string(4096 - 4, 'e') + "\r\n";
  ASSERT_EQ(line.size(), BodyDecoder::kMaxFramingLine);
  BodyDecoder e = BodyDecoder::Chunked(1 << 20);
  r = DecodeAll(e, line + "hello\r\n0\r\n\r\n");
  ASSERT_TRUE(e.done()) << e.reason();
  EXPECT_EQ(r.body, "hello");
}

TEST(BodyDecoderTest, TrailerLinesAreBoundedByTheTrailerLimitNotTheSizeLineLimit) {
  // A trailer line may be longer than a chunk-size line: trailers have their own 16 KiB bound.
  const std::string trailer = "X-Signature: " + std::string(8000, 's') + "\r\n";
  const std::string in = "5\r\nhello\r\n0\r\n" + trailer + "X-B: c\r\n\r\n";
  for (size_t piece : {size_t{0}, size_t{1}}) {
    BodyDecoder d = BodyDecoder::Chunked(1 << 20);
    Decoded r = DecodeAll(d, in, piece);
    ASSERT_TRUE(d.done()) << d.reason();
    EXPECT_EQ(r.body, "hello");
    EXPECT_EQ(r.consumed, in.size());
  }
}

TEST(BodyDecoderTest, BodyOverMaxBodyBytesIsTooLarge) {
  // Exactly the limit passes.
  BodyDecoder at = BodyDecoder::Chunked(8);
  DecodeAll(at, "5\r\nhello\r\n3\r\nabc\r\n0\r\n\r\n");
  EXPECT_TRUE(at.done()) << at.reason();

  // One byte more is refused on the size line, before its data is taken.
  BodyDecoder over = BodyDecoder::Chunked(8);
  Decoded r = DecodeAll(over, "5\r\nhello\r\n4\r\nabcd\r\n0\r\n\r\n");
  EXPECT_EQ(over.status(), Status::kTooLarge);
  EXPECT_TRUE(over.failed());
  EXPECT_EQ(r.body, "hello");
  EXPECT_EQ(std::string(over.reason()), "the body is longer than limits.max_body_bytes");

  // A size the 64-bit counter could not add to (no wrap-around).
  BodyDecoder huge = BodyDecoder::Chunked(8);
  DecodeAll(huge, "5\r\nhello\r\nffffffffffffffff\r\n");
  EXPECT_EQ(huge.status(), Status::kTooLarge);
}

}  // namespace
}  // namespace fencing
