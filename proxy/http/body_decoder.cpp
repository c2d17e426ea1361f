#include "http/body_decoder.h"

#include "http/rules.h"

#include <algorithm>
#include <cstring>

namespace fencing {

namespace {

int HexValue(char c) {
  if (c >= '0' && c <= '9') return c - '0';
  if (c >= 'a' && c <= 'f') return c - 'a' + 10;
  if (c >= 'A' && c <= 'F') return c - 'A' + 10;
  return -1;
}

}  // namespace

BodyDecoder BodyDecoder::Length(uint64_t length) {
  BodyDecoder d;
  d.remaining_ = length;
  d.status_ = length == 0 ? Status::kDone : Status::kNeedMore;
  return d;
}

BodyDecoder BodyDecoder::Chunked(uint64_t max_body_bytes) {
  BodyDecoder d;
  d.chunked_ = true;
  d.max_body_bytes_ = max_body_bytes;
  d.status_ = Status::kNeedMore;
  return d;
}

BodyDecoder BodyDecoder::UntilEnd(uint64_t max_body_bytes) {
  BodyDecoder d;
  d.until_end_ = true;
  d.max_body_bytes_ = max_body_bytes;
  d.status_ = Status::kNeedMore;
  return d;
}

void BodyDecoder::EndOfStream() {
  if (status_ != Status::kNeedMore) return;
  if (until_end_) {
    status_ = Status::kDone;
  } else {
    Fail(chunked_ ? "a chunked body without its last chunk" : "fewer bytes than its content-length");
  }
}

void BodyDecoder::Overrun() {
  if (!failed()) Fail("more bytes than its content-length");
}

bool BodyDecoder::Framing(char c) {
  // Trailer lines (up to their LF) have their own bound, kMaxTrailerBytes.
  const bool trailer_line = state_ == State::kTrailerLine || state_ == State::kTrailerLf;
  if (++line_bytes_ > kMaxFramingLine && !trailer_line) {
    Fail("a chunk-size line longer than 4096 bytes");
    return false;
  }
  switch (state_) {
    case State::kSize: {
      int v = HexValue(c);
      if (v >= 0) {
        if (++size_digits_ > 16) {  // 16 hex digits fill 64 bits
          Fail("a chunk size of more than 16 hex digits");
          return false;
        }
        remaining_ = remaining_ * 16 + static_cast<uint64_t>(v);
        return true;
      }
      if (size_digits_ == 0) {
        Fail(c == '\r' || c == '\n' ? "an empty chunk size" : "a chunk size that is not hexadecimal");
        return false;
      }
      state_ = State::kSizeTail;
      [[fallthrough]];  // this byte is the first after the digits
    }
    case State::kSizeTail:
      if (c == ' ' || c == '\t') return true;  // BWS before an extension
      if (c == ';') {
        state_ = State::kExtension;
        return true;
      }
      if (c == '\r') {
        state_ = State::kSizeLf;
        return true;
      }
      Fail(c == '\n' ? "a bare LF in the chunk framing" : "a chunk size that is not hexadecimal");
      return false;
    case State::kExtension:
      if (c == '\r') {
        state_ = State::kSizeLf;
        return true;
      }
      if (c == '\n') {
        Fail("a bare LF in the chunk framing");
        return false;
      }
      if (!IsFieldValueChar(c)) {
        Fail("a control byte in a chunk extension");
        return false;
      }
      return true;
    case State::kSizeLf:
      if (c != '\n') {
        Fail("a bare CR in the chunk framing");
        return false;
      }
      line_bytes_ = 0;
      if (remaining_ == 0) {
        state_ = State::kTrailerStart;
      } else {
        if (remaining_ > max_body_bytes_ - std::min(max_body_bytes_, body_bytes_)) {
          status_ = Status::kTooLarge;
          reason_ = "the body is longer than limits.max_body_bytes";
          return false;
        }
        state_ = State::kData;
      }
      size_digits_ = 0;
      return true;
    case State::kDataCr:
      if (c != '\r') {
        Fail(c == '\n' ? "a bare LF after chunk data" : "chunk data longer than its chunk size");
        return false;
      }
      state_ = State::kDataLf;
      return true;
    case State::kDataLf:
      if (c != '\n') {
        Fail("a bare CR after chunk data");
        return false;
      }
      state_ = State::kSize;
      line_bytes_ = 0;
      return true;
    case State::kTrailerStart:
      if (c == '\r') {
        state_ = State::kEndLf;
        return true;
      }
      if (c == '\n') {
        Fail("a bare LF at the end of the chunked body");
        return false;
      }
      if (!IsTokenChar(c)) {
        Fail(c == ' ' || c == '\t' ? "a folded trailer line (obs-fold)" : "a malformed trailer field");
        return false;
      }
      trailer_colon_ = false;
      state_ = State::kTrailerLine;
      [[fallthrough]];
    case State::kTrailerLine:
      if (++trailer_bytes_ > kMaxTrailerBytes) {
        Fail("trailer fields longer than 16 KiB");
        return false;
      }
      if (c == '\r') {
        if (!trailer_colon_) {
          Fail("a trailer line without ':'");
          return false;
        }
        state_ = State::kTrailerLf;
        return true;
      }
      if (c == '\n') {
        Fail("a bare LF in a trailer field");
        return false;
      }
      if (!trailer_colon_) {
        if (c == ':') {
          trailer_colon_ = true;
        } else if (!IsTokenChar(c)) {
          Fail("a malformed trailer field name");
          return false;
        }
      } else if (!IsFieldValueChar(c)) {
        Fail("a control byte in a trailer field");
        return false;
      }
      return true;
    case State::kTrailerLf:
      if (c != '\n') {
        Fail("a bare CR in a trailer field");
        return false;
      }
      state_ = State::kTrailerStart;
      line_bytes_ = 0;
      return true;
    case State::kEndLf:
      if (c != '\n') {
        Fail("a bare CR at the end of the chunked body");
        return false;
      }
      status_ = Status::kDone;
      return false;
    case State::kData:
      break;  // not a framing byte
  }
  Fail("internal: chunk data taken as framing");
  return false;
}

BodyDecoder::Step BodyDecoder::Decode(std::string_view in, char* out, size_t room) {
  Step step;
  if (status_ != Status::kNeedMore) return step;
  if (until_end_) {
    const size_t n = std::min(in.size(), room);
    if (body_bytes_ + n > max_body_bytes_) {
      status_ = Status::kTooLarge;
      return step;
    }
    if (n) std::memcpy(out, in.data(), n);
    body_bytes_ += n;
    step.consumed = step.produced = n;
    return step;
  }
  if (!chunked_) {
    size_t n = static_cast<size_t>(std::min<uint64_t>(remaining_, std::min(in.size(), room)));
    if (n) std::memcpy(out, in.data(), n);
    remaining_ -= n;
    body_bytes_ += n;
    step.consumed = step.produced = n;
    if (remaining_ == 0) status_ = Status::kDone;
    return step;
  }
  size_t i = 0;
  while (i < in.size() && status_ == Status::kNeedMore) {
    if (state_ == State::kData) {
      size_t n = static_cast<size_t>(std::min<uint64_t>(remaining_, std::min(in.size() - i, room - step.produced)));
      if (n == 0) break;  // out is full
      std::memcpy(out + step.produced, in.data() + i, n);
      i += n;
      step.produced += n;
      remaining_ -= n;
      body_bytes_ += n;
      if (remaining_ == 0) state_ = State::kDataCr;
      continue;
    }
    char c = in[i++];
    if (!Framing(c)) break;
  }
  step.consumed = i;
  return step;
}

}  // namespace fencing
