#pragma once
// For the H2Upstream unit tests: what a stream from the backend came to, read to its end.

#include "h2/connection.h"
#include "upstream/h2_upstream.h"

#include <boost/system/error_code.hpp>

#include <cstdint>
#include <optional>
#include <string>
#include <utility>

namespace fencing {

struct Answer {
  std::string status;
  std::string body;
  std::string grpc_status;
  bool ended = false;
  std::optional<uint32_t> reset;
  boost::system::error_code lost;  // with reset: the error of the connection that failed under it
};

// Reads a stream's events until it closes (the test's own bound ends a hang), giving back the
// window of the data it reads.
inline io::Awaitable<Answer> Collect(H2Upstream& upstream, H2Upstream::Stream& stream) {
  Answer answer;
  for (;;) {
    while (!stream.events.empty()) {
      H2StreamEvent event = std::move(stream.events.front());
      stream.events.pop_front();
      switch (event.kind) {
        case h2::Event::Kind::kHead:
          for (const h2::Header& field : event.fields) {
            if (field.name == ":status") answer.status = field.value;
          }
          break;
        case h2::Event::Kind::kData:
          answer.body += event.data;
          upstream.Consume(stream, event.data.size());
          break;
        case h2::Event::Kind::kTrailers:
          for (const h2::Header& field : event.fields) {
            if (field.name == "grpc-status") answer.grpc_status = field.value;
          }
          break;
        case h2::Event::Kind::kEnd:
          answer.ended = true;
          break;
        case h2::Event::Kind::kReset:
          answer.reset = event.error_code;
          answer.lost = event.connection_error;
          break;
        default:
          break;
      }
    }
    if (stream.closed) co_return answer;
    stream.changed().expires_at(io::Timer::time_point::max());
    co_await stream.changed().async_wait(io::kTuple);
  }
}

}  // namespace fencing
