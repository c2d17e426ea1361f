#include "http/response_parser.h"

#include "http/ascii.h"
#include "http/raw_head.h"
#include "http/rules.h"

#include <boost/beast/http/error.hpp>

#include <algorithm>
#include <cstring>

namespace fencing {

namespace http = boost::beast::http;
using boost::system::error_code;

namespace {

// Beast's bound on a folded value (basic_parser's max_obs_fold): longer is header_limit.
constexpr size_t kMaxFoldedValue = 4096;

HeadFields::Span SpanAt(const char* base, const char* first, const char* last) {
  return HeadFields::Span{static_cast<uint32_t>(first - base), static_cast<uint32_t>(last - first)};
}

// The error for a byte that may not be in a line: a CR (not before its LF) or another control.
error_code BadByte(char c, http::error otherwise) {
  return c == '\r' ? http::error::bad_line_ending : otherwise;
}

}  // namespace

error_code ResponseParser::ParseHead(std::string_view data, size_t* length) {
  // The parse walks the caller's bytes and records each field as spans (offsets) of them; once
  // the head is whole it is copied into fields_ at offset 0, where the spans then point, with
  // the folded values after it.
  fields_.Clear();
  framing_ = FramingFields{};
  fold_.clear();
  folded_fields_.clear();
  const char* const base = data.data();
  const char* const end = base + data.size();

  // One line: [at, the CR before the LF). nullptr when its LF has not come: need_more, or
  // bad_line_ending at once for a bare CR with a byte after it (no LF follows it).
  error_code ec;
  auto line_at = [&](const char* at) -> const char* {
    const char* lf = static_cast<const char*>(std::memchr(at, '\n', static_cast<size_t>(end - at)));
    if (lf == nullptr) {
      const char* cr = static_cast<const char*>(std::memchr(at, '\r', static_cast<size_t>(end - at)));
      ec = cr != nullptr && cr + 1 != end ? http::error::bad_line_ending : http::error::need_more;
      return nullptr;
    }
    if (lf == at || lf[-1] != '\r') {
      ec = http::error::bad_line_ending;  // a bare LF
      return nullptr;
    }
    return lf - 1;
  };

  // The status line: HTTP/1.0 or HTTP/1.1, SP, three digits, SP, the reason (may be empty). The
  // SP before an empty reason may be missing too ("HTTP/1.1 200"): RFC 9112 4 asks a client to
  // accept that, and nginx relays it (Beast refuses it).
  const char* line_end = line_at(base);
  if (line_end == nullptr) return ec;
  const std::string_view line(base, static_cast<size_t>(line_end - base));
  if (line.size() < 8 || line.substr(0, 7) != "HTTP/1." || (line[7] != '0' && line[7] != '1')) {
    return http::error::bad_version;
  }
  version_ = line[7] == '1' ? 11 : 10;
  if (line.size() < 9 || line[8] != ' ') return http::error::bad_version;
  if (line.size() < 12 || !IsAsciiDigit(line[9]) || !IsAsciiDigit(line[10]) || !IsAsciiDigit(line[11]) ||
      (line.size() > 12 && line[12] != ' ')) {
    return http::error::bad_status;
  }
  status_ = static_cast<unsigned>((line[9] - '0') * 100 + (line[10] - '0') * 10 + (line[11] - '0'));
  if (status_ < 100) return http::error::bad_status;
  const std::string_view reason = line.size() > 12 ? line.substr(13) : line.substr(12);
  if (size_t bad = FindNonFieldValueChar(reason); bad != reason.size()) return BadByte(reason[bad], http::error::bad_reason);
  reason_ = SpanAt(base, reason.data(), reason.data() + reason.size());

  // The fields, a line each, up to the empty line. A line that starts with SP or HTAB continues
  // the field before it (obs-fold): a field is taken once its last line is in.
  HeadFields::Span name{};
  HeadFields::Span value{};
  bool pending = false;  // name/value hold a field not yet taken
  bool folded = false;   // its value is in fold_
  const char* at = line_end + 2;
  for (;;) {
    line_end = line_at(at);
    if (line_end == nullptr) return ec;
    if (line_end == at) break;  // the empty line
    const std::string_view text(at, static_cast<size_t>(line_end - at));
    const char* const next = line_end + 2;
    if (text.front() == ' ' || text.front() == '\t') {
      if (!pending) return http::error::bad_field;  // whitespace before the first field's name
      if (size_t bad = FindNonFieldValueChar(text); bad != text.size()) return BadByte(text[bad], http::error::bad_value);
      // As Beast joins: the non-empty pieces, trimmed, one SP between them.
      if (!folded) {
        fold_start_ = fold_.size();
        fold_.append(data.substr(value.at, value.size));
      }
      folded = true;
      const std::string_view piece = TrimOws(text);
      if (!piece.empty()) {
        if (fold_.size() != fold_start_) fold_ += ' ';
        fold_.append(piece);
      }
      if (fold_.size() - fold_start_ > kMaxFoldedValue) return http::error::header_limit;
      at = next;
      continue;
    }
    if (pending) {
      if ((ec = AddField(data, name, value, folded))) return ec;
    }
    size_t colon = 0;
    while (colon != text.size() && IsTokenByte(static_cast<unsigned char>(text[colon]))) ++colon;
    if (colon == text.size() || text[colon] != ':' || colon == 0) {
      return colon != text.size() ? BadByte(text[colon], http::error::bad_field) : http::error::bad_field;
    }
    const std::string_view raw_value = text.substr(colon + 1);
    if (size_t bad = FindNonFieldValueChar(raw_value); bad != raw_value.size()) {
      return BadByte(raw_value[bad], http::error::bad_value);
    }
    const std::string_view trimmed = TrimOws(raw_value);
    name = SpanAt(base, at, at + colon);
    value = SpanAt(base, trimmed.data(), trimmed.data() + trimmed.size());
    pending = true;
    folded = false;
    at = next;
  }
  *length = static_cast<size_t>(line_end + 2 - base);
  if (pending) {
    if ((ec = AddField(data, name, value, folded))) return ec;
  }
  // The copy: the head at offset 0, where the spans point, then the folded values.
  fields_.Keep(data.substr(0, *length));
  if (!fold_.empty()) {
    const HeadFields::Span folds = fields_.Keep(fold_);
    for (const auto& [index, span] : folded_fields_) fields_.SetValue(index, HeadFields::Span{folds.at + span.at, span.size});
  }
  // Beast refuses a Transfer-Encoding after a Content-Length, and a Content-Length after a
  // chunked one (FramingFields::Take); a length after another coding would frame the body by the
  // length where the coding says the close does.
  if (framing_.transfer_encoding && framing_.content_length) return http::error::bad_content_length;
  return {};
}

error_code ResponseParser::AddField(std::string_view head, HeadFields::Span name, HeadFields::Span value,
                                    bool folded) {
  if (folded) value = HeadFields::Span{static_cast<uint32_t>(fold_start_), static_cast<uint32_t>(fold_.size() - fold_start_)};
  const std::string_view value_text = folded ? std::string_view(fold_).substr(value.at) : head.substr(value.at, value.size);
  const http::field id = http::string_to_field(head.substr(name.at, name.size));
  if (error_code ec = framing_.Take(id, value_text)) return ec;
  if (folded) folded_fields_.emplace_back(fields_.size(), value);  // its span is set once the text is in
  fields_.AddKept(id, name, value);
  return {};
}

void ResponseParser::StartBody() {
  // RFC 9112 6.3, in Beast's order: no body for HEAD, 1xx, 204 and 304 (a Content-Length there
  // describes another response); then the length; then chunked; else until the close.
  if (head_request_ || status_ / 100 == 1 || status_ == 204 || status_ == 304) {
    state_ = State::kDone;
  } else if (framing_.content_length) {
    remaining_ = *framing_.content_length;
    state_ = remaining_ == 0 ? State::kDone : State::kLength;
  } else if (framing_.chunked) {
    chunks_ = BodyDecoder::Chunked(UINT64_MAX);  // no bound: the relay streams it
    state_ = State::kChunked;
  } else {
    until_close_ = true;
    state_ = State::kUntilClose;
  }
}

size_t ResponseParser::CopyBody(std::string_view in, uint64_t limit) {
  const size_t n = static_cast<size_t>(std::min<uint64_t>({in.size(), limit, room_}));
  if (n != 0) std::memcpy(body_, in.data(), n);
  body_ += n;
  room_ -= n;
  return n;
}

error_code ResponseParser::ParseIncomplete(std::string_view data) {
  if (data.size() < header_limit_) return http::error::need_more;
  state_ = State::kFailed;
  return http::error::header_limit;
}

error_code ResponseParser::BodyStep(size_t used, size_t available, size_t produced) const {
  if (state_ == State::kDone || produced != 0) return {};
  if (used < available) return http::error::need_buffer;  // bytes wait, the buffer is full
  return http::error::need_more;
}

size_t ResponseParser::put(boost::asio::const_buffer in, error_code& ec) {
  ec = {};
  const std::string_view data(static_cast<const char*>(in.data()), in.size());
  if (!data.empty()) got_some_ = true;
  switch (state_) {
    case State::kHead: {
      const std::string_view window = data.substr(0, std::min(data.size(), header_limit_));
      // Most heads come whole in one read and are parsed at once. One that comes in pieces is
      // measured by FindHeadEnd as its bytes arrive (linear however it is cut) and parsed once
      // it is whole.
      if (pieces_ && (window.empty() || FindHeadEnd(window, &scanned_) == 0)) {
        ec = ParseIncomplete(data);
        return 0;
      }
      size_t length = 0;
      ec = window.empty() ? http::error::need_more : ParseHead(window, &length);
      if (ec == http::error::need_more) {
        pieces_ = true;
        if (FindHeadEnd(window, &scanned_) == 0) {
          ec = ParseIncomplete(data);
          return 0;
        }
        ec = ParseHead(window, &length);  // a bare CR or LF ended it: refused
      }
      if (ec) {
        state_ = State::kFailed;
        return 0;
      }
      header_done_ = true;
      StartBody();
      return length;
    }
    case State::kLength: {
      const size_t used = CopyBody(data, remaining_);
      remaining_ -= used;
      if (remaining_ == 0) state_ = State::kDone;
      ec = BodyStep(used, data.size(), used);
      return used;
    }
    case State::kUntilClose: {
      const size_t used = CopyBody(data, UINT64_MAX);
      ec = BodyStep(used, data.size(), used);
      return used;
    }
    case State::kChunked: {
      const BodyDecoder::Step step = chunks_.Decode(data, body_, room_);
      body_ += step.produced;
      room_ -= step.produced;
      if (chunks_.failed()) {
        state_ = State::kFailed;
        ec = http::error::bad_chunk;
        return step.consumed;
      }
      if (chunks_.done()) state_ = State::kDone;
      ec = BodyStep(step.consumed, data.size(), step.produced);
      return step.consumed;
    }
    case State::kDone:
      return 0;
    case State::kFailed:
      ec = http::error::stale_parser;
      return 0;
  }
  return 0;
}

void ResponseParser::put_eof(error_code& ec) {
  ec = {};
  if (state_ == State::kUntilClose) {
    state_ = State::kDone;
  } else if (state_ != State::kDone) {
    ec = http::error::partial_message;
  }
}

}  // namespace fencing
