#pragma once
// Decodes a request body from the bytes the client sent: a Content-Length body is counted, a
// chunked one has its framing checked strictly and removed. Pure (bytes in, body bytes out), so
// the session, tests and fuzzers drive it the same way.
//
// Strict where two readers could disagree (request smuggling): every line of the chunk framing
// ends in CRLF (a bare CR or LF is refused as soon as it is seen, never waited out), a chunk size
// is 1-16 hex digits, chunk data is followed by CRLF, trailer fields are well-formed lines (they
// are dropped, never forwarded). Boost.Beast 1.81 waits for more bytes on some of these.

#include <cstddef>
#include <cstdint>
#include <string_view>

namespace fencing {

class BodyDecoder {
 public:
  enum class Status {
    kNeedMore,   // feed more bytes
    kDone,       // the body is complete; bytes after it belong to the next request
    kMalformed,  // the framing breaks the rules: reason() says how
    kTooLarge,   // the body is longer than max_body_bytes
  };

  // No body (no Content-Length, no Transfer-Encoding): done at once.
  BodyDecoder() = default;
  static BodyDecoder Length(uint64_t length);
  static BodyDecoder Chunked(uint64_t max_body_bytes);
  // A body whose end the transport marks (HTTP/2's END_STREAM): every byte is body, up to
  // max_body_bytes (more is kTooLarge); EndOfStream completes it.
  static BodyDecoder UntilEnd(uint64_t max_body_bytes);

  // The transport says the message has ended (HTTP/2's END_STREAM): an UntilEnd body is done; a
  // Length body still short of its length is malformed.
  void EndOfStream();
  // Bytes came after the end of a Length body within the same message (HTTP/2 DATA beyond its
  // content-length): malformed.
  void Overrun();

  struct Step {
    size_t consumed = 0;  // bytes of `in` used
    size_t produced = 0;  // body bytes written to out
  };
  // Decodes from `in` into out[0, room). Stops when the body is done, `in` is used up, `out` is
  // full, or the framing is refused. Calling it after the end changes nothing.
  Step Decode(std::string_view in, char* out, size_t room);

  Status status() const { return status_; }
  bool done() const { return status_ == Status::kDone; }
  bool failed() const { return status_ == Status::kMalformed || status_ == Status::kTooLarge; }
  const char* reason() const { return reason_; }
  bool chunked() const { return chunked_; }
  uint64_t body_bytes() const { return body_bytes_; }  // produced so far
  // Body bytes still expected, when that is known (Content-Length), else 0.
  uint64_t remaining_known() const { return chunked_ ? 0 : remaining_; }

  static constexpr size_t kMaxFramingLine = 4096;     // a chunk-size line with its extensions
  static constexpr size_t kMaxTrailerBytes = 16 * 1024;

 private:
  enum class State {
    kSize, kSizeTail, kExtension, kSizeLf,  // chunk-size [BWS] [; ext] CRLF
    kData, kDataCr, kDataLf,                // chunk-data CRLF
    kTrailerStart, kTrailerLine, kTrailerLf, kEndLf,  // *( field-line CRLF ) CRLF
  };
  void Fail(const char* reason) {
    status_ = Status::kMalformed;
    reason_ = reason;
  }
  // One framing byte (not chunk data); false once decoding has stopped.
  bool Framing(char c);

  Status status_ = Status::kDone;
  const char* reason_ = "";
  bool chunked_ = false;
  bool until_end_ = false;
  State state_ = State::kSize;
  uint64_t remaining_ = 0;  // Content-Length left, or the current chunk's data left
  uint64_t max_body_bytes_ = 0;
  uint64_t body_bytes_ = 0;
  size_t size_digits_ = 0;
  size_t line_bytes_ = 0;     // of the current framing line
  size_t trailer_bytes_ = 0;
  bool trailer_colon_ = false;
};

}  // namespace fencing
