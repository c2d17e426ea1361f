#include "upstream/h2_upstream.h"

#include <boost/asio/co_spawn.hpp>
#include <boost/asio/connect.hpp>
#include <boost/asio/detached.hpp>
#include <boost/asio/ssl/error.hpp>
#include <boost/asio/ssl/stream.hpp>
#include <boost/asio/write.hpp>

#include <openssl/ssl.h>

#include <algorithm>
#include <cstring>
#include <tuple>
#include <unordered_map>
#include <utility>

namespace fencing {

namespace asio = boost::asio;
using asio::ip::tcp;
using boost::system::error_code;
using io::kTuple;

// The error code a stream's kReset carries when its connection ended under it (the backend
// closed or reset it, or broke the protocol): the request may have reached the backend.
constexpr uint32_t kConnectionLost = h2::kInternalError;

// ALPN protocol list, wire format: h2 alone. Offering http/1.1 beside it would let a server that
// prefers HTTP/1.1 pick it, and this connection speaks nothing but HTTP/2.
constexpr unsigned char kAlpnH2[] = {2, 'h', '2'};

// Whether the server selected h2 (a server that ignores ALPN selects nothing).
bool SelectedH2(const SSL* ssl) {
  const unsigned char* selected = nullptr;
  unsigned int length = 0;
  SSL_get0_alpn_selected(ssl, &selected, &length);
  return length == 2 && std::memcmp(selected, "h2", 2) == 0;
}

using TlsStream = asio::ssl::stream<io::Socket&>;

class H2Upstream::Connection : public std::enable_shared_from_this<Connection> {
 public:
  Connection(io::Executor executor, const h2::Settings& settings)
      : socket(std::move(executor)), codec(h2::Role::kClient, settings) {}

  bool usable() const { return !dead && !going_away && codec.StreamsAvailable() > 0; }

  // No new stream goes here (made with TLS settings a reload replaced): it closes once its last
  // stream has ended, at once if it has none.
  void Retire() {
    going_away = true;
    if (streams.empty() && !writing) Fail();
  }

  void Start() {
    asio::co_spawn(socket.get_executor(), ReadLoop(shared_from_this()), asio::detached);
    Flush();
  }

  // Writes what the codec has to send, unless a write is under way (it takes the rest).
  void Flush() {
    if (writing || dead || !codec.WantWrite()) return;
    writing = true;
    asio::co_spawn(socket.get_executor(), WriteLoop(shared_from_this()), asio::detached);
  }

  // Hands the codec's events to their streams.
  void Dispatch() {
    h2::Event event;
    while (codec.NextEvent(&event)) {
      if (event.kind == h2::Event::Kind::kGoAway) {
        going_away = true;  // no new streams here; the codec resets the unprocessed ones
        continue;
      }
      auto it = streams.find(event.stream);
      std::shared_ptr<Stream> stream = it == streams.end() ? nullptr : it->second.lock();
      if (!stream) {
        // Its owner is gone: what the backend still sends is dropped, and its window given back.
        if (event.kind == h2::Event::Kind::kData) codec.Consume(event.stream, event.data.size());
        continue;
      }
      H2StreamEvent owned;
      owned.kind = event.kind;
      owned.fields = std::move(event.fields);
      owned.data.assign(event.data);
      owned.end_stream = event.end_stream;
      owned.error_code = event.error_code;
      const bool last = event.kind == h2::Event::Kind::kEnd || event.kind == h2::Event::Kind::kReset;
      stream->events.push_back(std::move(owned));
      if (last) {
        stream->closed = true;
        streams.erase(it);
      }
      stream->Wake();
    }
  }

  // The connection is over: every stream still open ends with kReset, carrying why (the read's or
  // the write's error, when one ended it).
  void Fail(error_code why = {}) {
    if (dead) return;
    dead = true;
    error_code ignored;
    socket.shutdown(tcp::socket::shutdown_both, ignored);
    socket.close(ignored);
    for (auto& [id, weak] : streams) {
      if (std::shared_ptr<Stream> stream = weak.lock()) {
        H2StreamEvent reset;
        reset.kind = h2::Event::Kind::kReset;
        reset.error_code = kConnectionLost;
        reset.connection_error = why;
        stream->events.push_back(std::move(reset));
        stream->closed = true;
        stream->Wake();
      }
    }
    streams.clear();
  }

  void WakeAll() {
    for (auto& [id, weak] : streams) {
      if (std::shared_ptr<Stream> stream = weak.lock()) stream->Wake();
    }
  }

  io::Socket socket;
  // h2: the settings it was made with, and the TLS stream over socket (declared after it, so
  // destroyed first). Null for h2c, whose reads and writes go to the socket itself.
  std::shared_ptr<TlsClientContext> tls_context;
  std::unique_ptr<TlsStream> tls;
  h2::Connection codec;
  std::unordered_map<int32_t, std::weak_ptr<Stream>> streams;
  bool writing = false;
  bool dead = false;
  bool going_away = false;  // the backend sent GOAWAY, or the connection is retired
  bool heard = false;       // bytes of HTTP/2 have come from the backend

 private:
  static io::Awaitable<void> ReadLoop(std::shared_ptr<Connection> self) {
    std::vector<uint8_t> buffer(16 * 1024);
    while (!self->dead) {
      auto [ec, n] = self->tls ? co_await self->tls->async_read_some(asio::buffer(buffer), kTuple)
                               : co_await self->socket.async_read_some(asio::buffer(buffer), kTuple);
      if (ec) {
        // TLS that ended in order (a close, a close_notify) before the backend's SETTINGS: it
        // refused the connection after our side of the handshake, a TLS failure. A reset says
        // nothing of what the backend read, and stays what it is.
        const bool refused = self->tls && !self->heard &&
                             (ec == asio::error::eof || ec == asio::ssl::error::stream_truncated);
        self->Fail(refused ? ClosedBeforeHttp2() : ec);
        break;
      }
      self->heard = true;
      const Status status = self->codec.Receive(buffer.data(), n);
      self->Dispatch();
      self->Flush();
      if (!status.ok()) {
        // A protocol error: the codec's GOAWAY goes out with whatever else is queued, then the
        // connection ends (the writer closes it once the codec is done).
        self->going_away = true;
        if (!self->writing) self->Fail();
        break;
      }
      if (self->going_away && self->streams.empty() && !self->writing) {
        self->Fail();  // its last stream has ended, and no new one may come
        break;
      }
    }
  }

  static io::Awaitable<void> WriteLoop(std::shared_ptr<Connection> self) {
    std::string out;
    while (!self->dead && self->codec.WantWrite()) {
      out.clear();
      self->codec.TakeOutput(&out);
      auto [ec, n] = self->tls ? co_await asio::async_write(*self->tls, asio::buffer(out), kTuple)
                               : co_await asio::async_write(self->socket, asio::buffer(out), kTuple);
      if (ec) {
        self->Fail(ec);
        break;
      }
      self->Dispatch();  // sending can close streams
      self->WakeAll();   // their queued data moved on: owners waiting for room go on
    }
    self->writing = false;
    if (!self->dead && (self->codec.Done() || (self->going_away && self->streams.empty()))) self->Fail();
  }
};

H2Upstream::Stream::~Stream() {
  // Dropped before it closed: the backend is told the stream is cancelled.
  if (!closed && connection_ && !connection_->dead) {
    connection_->codec.ResetStream(id_, h2::kCancel);
    connection_->streams.erase(id_);
    connection_->Flush();
  }
}

H2Upstream::H2Upstream(io::Executor executor, std::vector<tcp::endpoint> backend,
                       std::chrono::milliseconds connect_timeout, h2::Settings settings,
                       const HandshakeObserver* handshakes)
    : executor_(std::move(executor)),
      backend_(std::move(backend)),
      connect_timeout_(connect_timeout),
      settings_(settings),
      handshakes_(handshakes) {}

H2Upstream::~H2Upstream() {
  for (const std::shared_ptr<Connection>& connection : connections_) connection->Fail();
}

void H2Upstream::SetTls(std::shared_ptr<TlsClientContext> tls) {
  if (tls == tls_) return;
  tls_ = std::move(tls);
  // A reload that changed the CA must not leave connections verified by the old one taking new
  // streams; the streams already on them finish there.
  for (const std::shared_ptr<Connection>& connection : connections_) {
    if (connection->tls_context != tls_) connection->Retire();
  }
}

size_t H2Upstream::connections() const {
  return static_cast<size_t>(std::count_if(connections_.begin(), connections_.end(),
                                           [](const auto& connection) { return !connection->dead; }));
}

size_t H2Upstream::room() const {
  size_t room = 0;
  for (const auto& connection : connections_) {
    if (connection->usable()) room += connection->codec.StreamsAvailable();
  }
  return room;
}

io::Awaitable<std::shared_ptr<H2Upstream::Connection>> H2Upstream::Connect(error_code& ec) {
  auto connection = std::make_shared<Connection>(executor_, settings_);
  // The connect and the TLS handshake, bounded together: the timer closes the socket when it
  // fires first.
  io::Timer deadline(executor_);
  deadline.expires_after(connect_timeout_);
  auto timed_out = std::make_shared<bool>(false);  // (the handler may run after this frame is gone)
  deadline.async_wait([timed_out, weak = std::weak_ptr<Connection>(connection)](error_code wec) {
    if (wec) return;
    *timed_out = true;
    if (auto c = weak.lock()) {
      error_code ignored;
      c->socket.close(ignored);
    }
  });
  auto [cec, endpoint] = co_await asio::async_connect(connection->socket, backend_, kTuple);
  if (cec || *timed_out) {
    deadline.cancel();
    ec = *timed_out ? asio::error::timed_out : cec;
    co_return nullptr;
  }
  error_code ignored;
  connection->socket.set_option(tcp::no_delay(true), ignored);
  if (tls_) {
    // The settings in force as it began (a reload during the handshake leaves it on them).
    connection->tls_context = tls_;
    connection->tls = std::make_unique<TlsStream>(connection->socket, tls_->context());
    SSL* ssl = connection->tls->native_handle();
    error_code hec;
    // Per connection, ALPN h2 alone replaces the context's http/1.1 (0 is success here).
    if (connection->tls_context->Prepare(ssl) && SSL_set_alpn_protos(ssl, kAlpnH2, sizeof kAlpnH2) == 0) {
      std::tie(hec) = co_await connection->tls->async_handshake(asio::ssl::stream_base::client, kTuple);
      if (hec || *timed_out) {
        hec = HandshakeFailure(hec, ssl, *timed_out);
      } else if (!SelectedH2(ssl)) {
        hec = AlpnRefused();  // verified, but it would not understand our frames: none are sent
      }
    } else {
      hec = HandshakeFailure({}, nullptr, false);
    }
    if (handshakes_) handshakes_->Handshake(ResultOf(hec));
    if (hec) {
      deadline.cancel();
      connection->Fail();
      ec = hec;
      co_return nullptr;
    }
  }
  deadline.cancel();
  if (*timed_out) {
    ec = asio::error::timed_out;
    co_return nullptr;
  }
  // Made with settings a reload replaced while it connected: the stream it was made for goes on
  // it, no other.
  if (connection->tls_context != tls_) connection->going_away = true;
  connection->Start();
  connections_.push_back(connection);
  co_return connection;
}

io::Awaitable<std::shared_ptr<H2Upstream::Stream>> H2Upstream::Open(const h2::Headers& head, bool end_stream,
                                                                     error_code& ec) {
  std::erase_if(connections_, [](const auto& connection) { return connection->dead; });
  std::shared_ptr<Connection> connection;
  for (const std::shared_ptr<Connection>& candidate : connections_) {
    if (candidate->usable() && candidate->tls_context == tls_) {
      connection = candidate;
      break;
    }
  }
  if (!connection) {
    connection = co_await Connect(ec);
    if (!connection) co_return nullptr;
  }
  const int32_t id = connection->codec.SubmitRequest(head, end_stream);
  if (id == h2::Connection::kNoStream) {
    ec = asio::error::invalid_argument;  // the head was refused by the codec
    co_return nullptr;
  }
  auto stream = std::make_shared<Stream>(executor_);
  stream->connection_ = connection;
  stream->id_ = id;
  connection->streams.emplace(id, stream);
  connection->Flush();
  co_return stream;
}

namespace {
// A stream whose frames can still go: open, on a connection that has not failed.
bool Live(const H2Upstream::Stream& stream, const H2Upstream::Connection* connection) {
  return !stream.closed && connection && !connection->dead;
}
}  // namespace

bool H2Upstream::Send(Stream& stream, std::string_view bytes, bool end_stream) {
  if (!Live(stream, stream.connection_.get())) return false;
  const bool ok = stream.connection_->codec.SubmitData(stream.id_, bytes, end_stream);
  stream.connection_->Flush();
  return ok;
}

bool H2Upstream::Finish(Stream& stream, const h2::Headers& trailers) {
  if (!Live(stream, stream.connection_.get())) return false;
  const bool ok = stream.connection_->codec.SubmitTrailers(stream.id_, trailers);
  stream.connection_->Flush();
  return ok;
}

void H2Upstream::Reset(Stream& stream, uint32_t error_code) {
  if (stream.closed || !stream.connection_) return;
  stream.closed = true;
  if (stream.connection_->dead) return;
  stream.connection_->codec.ResetStream(stream.id_, error_code);
  stream.connection_->streams.erase(stream.id_);
  stream.connection_->Flush();
}

void H2Upstream::Consume(Stream& stream, size_t n) {
  if (!stream.connection_ || stream.connection_->dead) return;
  stream.connection_->codec.Consume(stream.id_, n);
  stream.connection_->Flush();
}

size_t H2Upstream::Queued(const Stream& stream) const {
  if (!Live(stream, stream.connection_.get())) return 0;
  return stream.connection_->codec.Queued(stream.id_);
}

}  // namespace fencing
