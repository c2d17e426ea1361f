#pragma once
// A request body on its way from the client to the backend: decoded by BodyDecoder from the
// client's read buffer, and held in memory while it is to be sent whole.
//
// Whole or nothing: a body of up to limits.buffered_body_bytes is read completely before any byte
// of the request goes to the backend, so a body that turns out malformed, too large or abandoned
// never reaches it, and a request still held whole can be resent. A larger body streams through
// the relay buffer: what is held is then only the part not yet written.

#include "common/io.h"
#include "common/page_allocator.h"
#include "http/problem.h"
#include "http/body_decoder.h"
#include "tls/server_stream.h"

#include <boost/beast/core/flat_buffer.hpp>

#include <cstddef>
#include <memory>
#include <string_view>

namespace fencing {

// Bytes read from a client and not yet parsed (the head, then body bytes, then the next request).
using ClientBuffer = boost::beast::basic_flat_buffer<PageAllocator<char>>;

class RequestBody {
 public:
  // relay: where a body of up to relay_size bytes is held (the worker's relay buffer, reused);
  // a longer one that is to be held whole gets a buffer of its own.
  RequestBody(BodyDecoder decoder, char* relay, size_t relay_size)
      : decoder_(decoder), data_(relay), capacity_(relay_size), relay_size_(relay_size) {}
  RequestBody(const RequestBody&) = delete;
  RequestBody& operator=(const RequestBody&) = delete;

  // Decodes what `in` holds into the held bytes (consuming what it uses), holding at most `keep`
  // bytes in all (at least the relay buffer's size: streaming goes through it).
  void Feed(ClientBuffer& in, size_t keep);
  // The same from bytes that came otherwise (an HTTP/2 stream's DATA): returns how many it used.
  size_t Feed(std::string_view in, size_t keep);
  // Feeds, reading from the client while the body is neither complete, failed, nor holding
  // `keep` bytes. The error is the socket's (the client went away, or the deadline cancelled it).
  io::Awaitable<boost::system::error_code> Read(tls::ServerStream& client, ClientBuffer& in, size_t keep);

  const BodyDecoder& decoder() const { return decoder_; }
  BodyDecoder& decoder() { return decoder_; }
  // What to answer a failed() body with: 413 over limits.max_body_bytes, else 400.
  Problem problem() const;
  bool complete() const { return decoder_.done(); }
  bool failed() const { return decoder_.failed(); }
  // The whole body is held (complete, nothing written and dropped yet): the request can be sent,
  // and resent, from memory.
  bool whole() const { return decoder_.done() && !dropped_; }
  // Nothing written has been dropped: what went to the backend is still in hand.
  bool resendable() const { return !dropped_; }
  bool full(size_t keep) const { return size_ >= capacity_limit(keep); }

  const char* data() const { return data_; }
  size_t size() const { return size_; }
  // The held bytes went to the backend and are no longer needed (streaming).
  void DropHeld() {
    if (size_ != 0) dropped_ = true;
    size_ = 0;
  }

 private:
  size_t capacity_limit(size_t keep) const { return std::max(keep, relay_size_); }
  // Room for more held bytes, growing into a buffer of its own up to `keep`; false if none.
  bool MakeRoom(size_t keep);

  BodyDecoder decoder_;
  char* data_;
  size_t size_ = 0;
  size_t capacity_;
  size_t relay_size_;
  std::unique_ptr<char[]> own_;  // a held body longer than the relay buffer
  bool dropped_ = false;
};

}  // namespace fencing
