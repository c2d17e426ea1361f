#pragma once
// The backend's response as the exchange reads it: the status line and the fields into
// HeadFields (one copy of the head, each field an offset into it), then the body, framed by its
// Content-Length, chunked (BodyDecoder, the request path's strict decoder) or by the backend's
// close, copied into the caller's buffer (the relay buffer). It replaces Beast's
// response_parser<buffer_body>, whose generic tokenizer and field callbacks cost three times as
// many instructions per response.
//
// It reads what that parser reads, with the same result: status, reason, fields (obs-fold joined
// with one SP, as Beast joins it and as RFC 9112 5.2 lets a proxy do), framing, keep-alive, body
// bytes and, for most faults, the same error (tests/unit/http/response_parser_test.cpp and
// tests/fuzz/fuzz_head_parser.cpp compare the two). It is stricter where Beast lets through a
// response that two readers could frame differently, or that says nothing an HTTP client can
// use:
//  - a bare LF (an LF not after a CR) anywhere in the head: bad_line_ending (Beast reads it as
//    a control byte in the line: bad_field, bad_value or bad_reason);
//  - a Content-Length after a Transfer-Encoding that is not chunked: bad_content_length (Beast
//    frames such a response by the length; RFC 9112 6.3 says the Transfer-Encoding wins, and that
//    such a message ought to be handled as an error);
//  - a status below 100: bad_status (Beast takes any three digits; RFC 9110 15 calls values
//    outside 100-599 invalid, and 0xx has no class);
//  - the chunked framing: BodyDecoder's rules (every framing line ends with CRLF, a chunk size is
//    1-16 hex digits, chunk data is followed by CRLF): bad_chunk. Chunk extensions and trailer
//    fields are dropped (the client's head has gone by the time trailers come), as on the
//    request path;
//  - a bad line is refused as soon as it is in when the head came whole (Beast waits for the
//    whole head); a head that comes in pieces is read once it is whole.
//
// Protocol of use, as Beast's basic_parser: put() what has arrived; nothing is used until the
// whole head is there; then the head alone (the body waits for SetBodyBuffer); then body bytes.

#include "http/body_decoder.h"
#include "http/framing_fields.h"
#include "http/head_fields.h"

#include <boost/asio/buffer.hpp>
#include <boost/container/small_vector.hpp>
#include <boost/system/error_code.hpp>

#include <cstddef>
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <utility>

namespace fencing {

class ResponseParser {
 public:
  // The most bytes the head may take, its empty line included: a longer one is header_limit.
  void header_limit(size_t bytes) { header_limit_ = bytes; }
  // The response answers a HEAD request: it has no body, whatever its fields say.
  void skip(bool head_request) { head_request_ = head_request; }

  // Reads from `in` and returns how many of its bytes were used. ec says what next:
  //  - need_more: more bytes are needed before anything can be handed on;
  //  - need_buffer: the body buffer is full (body bytes are waiting);
  //  - none: the head was read, or body bytes went into the body buffer, or the message is done;
  //  - any other: the response is refused (the errors above, and Beast's for the rest).
  size_t put(boost::asio::const_buffer in, boost::system::error_code& ec);
  // The backend closed the connection: the end of a body delimited by the close; any other
  // message not done is partial_message. Call it after got_some().
  void put_eof(boost::system::error_code& ec);

  bool got_some() const { return got_some_; }
  bool is_header_done() const { return header_done_; }
  bool is_done() const { return state_ == State::kDone; }

  // After the head: what it says.
  unsigned status() const { return status_; }
  std::string_view reason() const { return fields_.Text(reason_); }
  unsigned version() const { return version_; }  // 10 or 11
  const HeadFields& fields() const { return fields_; }
  std::optional<uint64_t> content_length() const { return framing_.content_length; }
  bool chunked() const { return framing_.chunked; }
  // The connection may carry another response: the head allows it and the body is not delimited
  // by the close.
  bool keep_alive() const { return framing_.KeepAlive(version_) && !until_close_; }

  // Where the next body bytes go. Once it is full, put stops with need_buffer.
  void SetBodyBuffer(char* data, size_t size) {
    body_ = data;
    room_ = size;
  }
  size_t room() const { return room_; }  // what the body buffer has left

 private:
  enum class State { kHead, kLength, kChunked, kUntilClose, kDone, kFailed };

  // Reads the head at the start of `data` into fields_ and framing_ (*length: its bytes, the
  // empty line included). need_more when its empty line has not come.
  boost::system::error_code ParseHead(std::string_view data, size_t* length);
  // A head still incomplete in `data`: need_more, or header_limit once it cannot fit.
  boost::system::error_code ParseIncomplete(std::string_view data);
  // Takes a field: name and value are spans of the head; a folded value is the end of fold_.
  boost::system::error_code AddField(std::string_view head, HeadFields::Span name, HeadFields::Span value,
                                     bool folded);
  void StartBody();
  // Body bytes: copies what fits from `in`; returns the bytes used.
  size_t CopyBody(std::string_view in, uint64_t limit);
  // ec for a body step that used `used` of `available` bytes and wrote `produced`.
  boost::system::error_code BodyStep(size_t used, size_t available, size_t produced) const;

  State state_ = State::kHead;
  size_t header_limit_ = 8 * 1024;  // Beast's default for a response
  bool head_request_ = false;
  bool got_some_ = false;
  bool header_done_ = false;  // stays true when the body fails
  bool pieces_ = false;  // the head did not come whole: FindHeadEnd measures it
  size_t scanned_ = 0;   // FindHeadEnd's progress through it

  HeadFields fields_;
  HeadFields::Span reason_;
  FramingFields framing_;
  std::string fold_;  // the folded values, joined, one after the other
  size_t fold_start_ = 0;  // where the one being joined starts
  boost::container::small_vector<std::pair<size_t, HeadFields::Span>, 2> folded_fields_;  // (field, span in fold_)
  unsigned status_ = 0;
  unsigned version_ = 11;

  bool until_close_ = false;
  uint64_t remaining_ = 0;  // Content-Length bytes still to come
  BodyDecoder chunks_;
  char* body_ = nullptr;
  size_t room_ = 0;
};

}  // namespace fencing
