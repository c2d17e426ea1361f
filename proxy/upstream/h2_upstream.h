#pragma once
// A worker's HTTP/2 connections to the backend (backend_protocol: h2c in the clear, or h2 over
// TLS), streams multiplexed over them: the upstream half of the proxy's HTTP/2 path
// (docs/design-notes.md, "HTTP/2 and gRPC"). Each connection is a TCP socket (for h2, the TLS
// stream over it) and an h2::Connection (the codec, no I/O) driven by one read coroutine and,
// while it has frames to send, one write coroutine, all on the worker's thread: no lock.
//
//   Open(head)        a stream on a connection with room (the backend's max_concurrent_streams),
//                     or on a new one (connect, and for h2 the TLS handshake, bounded together
//                     by connect_timeout)
//   stream->events    what the backend sent, in order (owned copies of the codec's events);
//                     stream->changed() wakes the owner when events come or its data was sent
//   Send / Finish     our body and trailers; Queued says how much the backend has not taken yet
//   Consume           the owner has passed n bytes of the response on: the window goes back
//   Reset             RST_STREAM; the owner hears nothing more
//
// A connection that fails (the backend closes it, a protocol error, its GOAWAY) ends each of its
// streams with a kReset event (REFUSED_STREAM for a stream the backend says it never processed:
// safe to send again); the next Open makes a new one. At most once: nothing here sends a
// stream's bytes twice.
//
// h2 (SetTls): the backend's chain and name are verified as for an HTTP/1.1 https backend (the
// same TlsClientContext and PrepareClientConnection), and the connection offers ALPN h2 alone
// and is used only when the server selected it: a server that ignores ALPN or picks http/1.1
// would not understand HTTP/2 frames, so none are sent. A failed handshake or selection is an
// Open error that IsTlsFailure (tls/handshake.h) recognises, with nothing written; a refusal
// after our side of the handshake (TLS 1.3's client certificate check: an alert, or a close
// before the backend's first frame) ends the streams with a kReset whose connection_error is
// one. New settings (a reload) apply to new connections; those made with the old ones take no
// new stream and close once their last stream has ended.

#include "common/io.h"
#include "h2/connection.h"
#include "tls/client_context.h"
#include "tls/handshake.h"

#include <boost/asio/ip/tcp.hpp>
#include <boost/system/error_code.hpp>

#include <chrono>
#include <cstdint>
#include <deque>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

namespace fencing {

// One event of a stream from the backend, owned (the codec's views last only until its next
// Receive).
struct H2StreamEvent {
  h2::Event::Kind kind = h2::Event::Kind::kHead;
  h2::Headers fields;         // kHead, kTrailers
  std::string data;           // kData
  bool end_stream = false;    // kHead
  uint32_t error_code = 0;    // kReset
  // kReset because the connection failed: the read's or write's error that ended it. A TLS
  // failure (IsTlsFailure) is the backend refusing the TLS after our side of the handshake (TLS
  // 1.3 checks a client certificate then) or a broken TLS layer.
  boost::system::error_code connection_error;
};

class H2Upstream {
 public:
  class Connection;  // h2_upstream.cpp

  // One stream, held by its owner (an HTTP/2 session's stream). Its connection holds it weakly.
  class Stream {
   public:
    explicit Stream(io::Executor executor) : changed_(std::move(executor)) { changed_.expires_at(io::Timer::time_point::max()); }
    ~Stream();  // dropped while open: the backend is told (RST_STREAM CANCEL)
    Stream(const Stream&) = delete;
    Stream& operator=(const Stream&) = delete;
    std::deque<H2StreamEvent> events;  // taken by the owner
    bool closed = false;               // no more events will come (the last was kEnd or kReset)
    // Waits until events come, data is sent, or the stream closes (a timer that never fires on
    // its own: cancelled to wake).
    io::Timer& changed() { return changed_; }
    void Wake() { changed_.cancel(); }

   private:
    friend class H2Upstream;
    io::Timer changed_;
    std::shared_ptr<Connection> connection_;
    int32_t id_ = 0;
  };

  // handshakes: told of every TLS handshake (null: nobody counts them).
  H2Upstream(io::Executor executor, std::vector<boost::asio::ip::tcp::endpoint> backend,
             std::chrono::milliseconds connect_timeout, h2::Settings settings = {},
             const HandshakeObserver* handshakes = nullptr);
  ~H2Upstream();
  H2Upstream(const H2Upstream&) = delete;
  H2Upstream& operator=(const H2Upstream&) = delete;

  // The TLS of new connections (backend_protocol h2): null for h2c. Connections made with other
  // settings take no new stream, and close once their streams have ended (at once when idle).
  void SetTls(std::shared_ptr<TlsClientContext> tls);

  // Opens a stream with this head (pseudo-headers first); end_stream: no body follows. On a
  // connection with room, or a new one. Null with ec set when no connection could be had.
  io::Awaitable<std::shared_ptr<Stream>> Open(const h2::Headers& head, bool end_stream, boost::system::error_code& ec);

  // Body bytes (copied) and the end of our side; false when the stream is closed.
  bool Send(Stream& stream, std::string_view bytes, bool end_stream);
  bool Finish(Stream& stream, const h2::Headers& trailers);  // ends our side with trailers
  void Reset(Stream& stream, uint32_t error_code);
  // The owner passed n bytes of the stream's kData on.
  void Consume(Stream& stream, size_t n);
  // Our bytes the backend has not taken yet (0 once closed).
  size_t Queued(const Stream& stream) const;

  // Connections open now, and the streams they may still open (the backends' limits): for tests
  // and metrics.
  size_t connections() const;
  size_t room() const;

 private:
  io::Awaitable<std::shared_ptr<Connection>> Connect(boost::system::error_code& ec);

  io::Executor executor_;
  std::vector<boost::asio::ip::tcp::endpoint> backend_;
  std::chrono::milliseconds connect_timeout_;
  h2::Settings settings_;
  const HandshakeObserver* handshakes_;
  std::shared_ptr<TlsClientContext> tls_;  // null: h2c
  std::vector<std::shared_ptr<Connection>> connections_;
};

}  // namespace fencing
