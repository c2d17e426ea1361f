// The proxy's own head parsers against the Beast parsers they replaced
// (tests/unit/http/beast_oracle.h says what "the same" allows):
//  - requests: RequestHead::Parse (http/request_head.h) against Beast's request parser. On every
//    head that FindHeadEnd measures and CheckRawHead lets through, both give the same error or
//    none, and then the same method, target, version, fields, Content-Length, chunked and
//    keep-alive. The first input byte picks the body limit, so that body_limit is reached both
//    ways.
//  - responses (the rest of the input starts with "HTTP/"): ResponseParser
//    (http/response_parser.h) against response_parser<buffer_body>, the whole message, fed in
//    pieces through a small body buffer (sizes from the first byte) and then the close. Both
//    refuse it, or both read the same head, framing and body bytes; where ResponseParser is
//    stricter by design it may refuse what Beast reads on.
//
// Oracles:
//  - the differential one above;
//  - a head read into a RequestHead that held another reads the same (nothing of the first is
//    left);
//  - a copy of a head reads the same after the original has been overwritten (it owns its bytes).

#include "../unit/http/beast_oracle.h"
#include "fuzz_check.h"
#include "http/raw_head.h"
#include "http/request_head.h"

#include <cstddef>
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>

namespace {

using namespace fencing;

std::string Describe(const RequestHead& head) {
  std::string out(head.method_string());
  out += ' ';
  out += head.target();
  out += head.version() == 11 ? " 1.1" : " 1.0";
  for (const auto& field : head) {
    out += '|';
    out += field.name_string();
    out += ':';
    out += field.value();
  }
  out += head.chunked() ? "|chunked" : "";
  out += head.keep_alive() ? "|keep-alive" : "";
  if (head.content_length()) out += "|length " + std::to_string(*head.content_length());
  return out;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size == 0) return 0;
  static constexpr uint64_t kLimits[] = {0, 10, 1000, UINT64_MAX};
  const uint64_t max_body = kLimits[data[0] % 4];
  const std::string_view input = fuzz::AsView(data + 1, size - 1);

  if (input.substr(0, 5) == "HTTP/") {
    const size_t step = 1 + data[0] % 16;
    const size_t room = 1 + (data[0] >> 4) * 64;
    const std::string differs = CompareResponseWithBeast(input, step, room, /*same_error=*/false);
    FUZZ_CHECK(differs.empty(), differs.c_str());
    // Cut otherwise, it reads the same (the pieces path against the whole-head path), except
    // that a head in pieces is only read once it is whole: a bad line in a head that never ends
    // is refused at once when it came whole, and waited out (to header_limit) in pieces.
    const ResponseRead whole = ReadResponseOurs(input, input.size(), 4096);
    const ResponseRead pieces = ReadResponseOurs(input, step, room);
    const bool waited = !pieces.ec && !pieces.header_done;
    // (Both refuse a bad head, not always naming the same fault first.)
    FUZZ_CHECK(waited || (!whole.ec == !pieces.ec && whole.done == pieces.done && whole.body == pieces.body &&
                          whole.fields == pieces.fields),
               "a response read otherwise when its bytes come in pieces");
    return 0;
  }

  size_t scanned = 0;
  const size_t head_length = FindHeadEnd(input, &scanned);
  if (head_length == 0) return 0;
  const std::string_view head = input.substr(0, head_length);
  if (!CheckRawHead(head).ok) return 0;

  const std::string differs = CompareWithBeast(head, max_body);
  FUZZ_CHECK(differs.empty(), differs.c_str());

  RequestHead once;
  const bool ok = !once.Parse(head, max_body);
  if (!ok) return 0;
  const std::string first = Describe(once);
  std::optional<RequestHead> copy(once);
  RequestHead again;
  FUZZ_CHECK(!again.Parse("GET /other HTTP/1.1\r\nX-Left: over\r\nContent-Length: 0\r\n\r\n", UINT64_MAX),
             "a plain head refused");
  FUZZ_CHECK(!again.Parse(head, max_body) && Describe(again) == first, "a head read again reads otherwise");
  once.Parse("GET /x HTTP/1.0\r\n\r\n", 0);  // the original is overwritten
  FUZZ_CHECK(Describe(*copy) == first, "a copied head changed with its original");
  return 0;
}
