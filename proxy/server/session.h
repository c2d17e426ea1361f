#pragma once
// One client connection: read a request head, decide on the head alone (path, route, token,
// fence), answer with a problem or read the body (whole when it fits
// limits.buffered_body_bytes), take the fence's admission, and hand the request to an Exchange
// (server/exchange.h). Between requests it idles without a coroutine or a buffer. A connection
// lives on one worker thread from accept to close. On a TLS listener it begins with the
// handshake (bounded by timeouts.header_read, as a head is) and learns the client's identity;
// everything after reads and writes through the same stream (tls/server_stream.h).

#include "metrics/metrics.h"
#include "common/intrusive_list.h"
#include "common/io.h"
#include "common/page_allocator.h"
#include "http/problem.h"
#include "http/request_head.h"
#include "server/exchange.h"
#include "server/request_body.h"
#include "server/request_plan.h"
#include "server/runtime.h"
#include "server/worker.h"
#include "tls/server_stream.h"

#include <boost/asio/awaitable.hpp>
#include <boost/asio/ip/tcp.hpp>
#include <boost/smart_ptr/intrusive_ptr.hpp>

#include <chrono>
#include <cstdint>
#include <memory>
#include <optional>
#include <string>

namespace fencing {

// Linked into its worker's list of connections (Worker::Register) for as long as it exists.
// Held by SessionPtr: owned by what runs for it (its coroutine, or its idle wait's handler), all
// on the worker's thread, so a plain count in the session serves: a shared_ptr would cost a
// control block and a weak pointer (32 bytes per connection) and a locked add per copy.
class Session : public IntrusiveListNode<Session> {
 public:
  // tls: the listener's TLS context for this connection; null on a plain listener.
  Session(Worker& worker, io::Socket socket, const tls::ServerContext* tls);
  ~Session();

  // Serves requests until the connection closes. Call it on a session held by a SessionPtr.
  void Start();

  // Shutdown and eviction: closes the connection if it is waiting for a next request.
  void CloseIfIdle();
  bool idle() const { return idle_; }
  bool closing() const { return closing_; }
  std::chrono::steady_clock::time_point idle_since() const { return idle_since_; }
  // Called by the worker's periodic sweep: closes the connection if it has waited longer than
  // idle_timeout for a next request; once it has waited cool_after, makes it give back its read
  // buffer (returns true when it asked).
  // Also enforces the deadline of a busy connection (header_read, request, ...): past it, the
  // connection's sockets are cancelled and the operation under way fails as timed out.
  bool Sweep(std::chrono::steady_clock::time_point now, std::chrono::milliseconds idle_timeout,
             std::chrono::milliseconds cool_after);

 private:
  // The TLS handshake (TLS listener only), then Run.
  io::Awaitable<void> Handshake();
  // Serves requests while they keep coming; when the connection idles, hands over to WaitCold.
  io::Awaitable<void> Run();
  // Waits for the next request without a buffer or a coroutine; starts Run when it comes.
  void WaitCold();
  // The connection speaks HTTP/2 (ALPN h2, or h2c's preface first): an H2Session serves it to
  // its end (server/h2_session.h), whatever the backend speaks. already_read: the bytes read before that was known.
  io::Awaitable<void> RunH2(std::string already_read);
  void Close();
  // The time by which the current step must end (enforced by Sweep); resets the timed-out flag.
  void SetDeadline(std::chrono::steady_clock::time_point deadline);
  void ClearDeadline() { SetDeadline(std::chrono::steady_clock::time_point::max()); }
  io::Awaitable<bool> ServeOne();  // true: keep the connection for another request
  // Reads and checks the request head into `head` (the body is decoded by BodyDecoder). Returns a
  // problem to answer with when the head is refused; nullopt, and *parsed false, when the client
  // went away or stalled.
  io::Awaitable<std::optional<Problem>> ReadHead(const ProxyConfig& config, RequestHead& head, bool* parsed);
  // Reads the body of an admitted-to-be request: all of it when it fits `keep`. Returns a problem
  // (400, 408, 413) or nullopt; *gone when the client went away (nothing to answer).
  io::Awaitable<std::optional<Problem>> ReadBody(RequestBody& body, size_t keep, bool* gone);
  io::Awaitable<bool> Forward(const Runtime& runtime, const RequestHead& head, const RequestPlan& plan,
                              RequestBody& body, RelayBuffers::Lease& relay);
  // Answers with a problem; reads and drops a small unread body to keep the connection, else
  // closes it. Every 400 closes: after a malformed message the next request's boundary is
  // unknown. Returns whether the connection may serve another request.
  io::Awaitable<bool> Reject(const RequestHead& head, BodyDecoder& body, const Problem& problem, bool force_close);
  io::Awaitable<bool> WriteProblem(const Problem& problem, unsigned version, bool keep_alive);
  io::Awaitable<bool> DiscardBody(BodyDecoder& body);
  io::Awaitable<void> LingeringClose();
  // TLS: says close_notify, without waiting for the client's.
  io::Awaitable<void> SendCloseNotify();

  // What the access log says about the request being served. ServeOne holds it.
  struct AccessRecord {
    std::chrono::steady_clock::time_point start;
    unsigned status = 0;           // sent to the client
    unsigned upstream_status = 0;  // 0: the backend was not asked, or did not answer
    unsigned upstream_attempts = 0;  // requests written to a backend connection (a resend is 2)
    uint64_t bytes_in = 0;         // request body bytes forwarded
    uint64_t bytes_out = 0;        // response body bytes relayed
  };
  void LogAccess(const RequestHead* head, const RequestPlan* plan) const;

  friend void intrusive_ptr_add_ref(Session* session) { ++session->refs_; }
  friend void intrusive_ptr_release(Session* session) {
    if (--session->refs_ == 0) delete session;
  }

  Worker& worker_;
  // The connection, plain or TLS. Timeouts come from the worker's sweep (deadline_), not a timer
  // per operation.
  tls::ServerStream stream_;
  std::chrono::steady_clock::time_point deadline_ = std::chrono::steady_clock::time_point::max();
  // The deadline passed (Sweep cancels what the session awaits), and the backend connection an
  // exchange is using, cancelled with the client socket then.
  ExchangeCancel cancel_;
  // Bytes read from the client and not yet parsed: Run's (in its frame), null while no Run is.
  // Kept between requests while the connection is busy (the next request is read straight into
  // it); given back once it idles (Sweep).
  ClientBuffer* buffer_ = nullptr;
  std::string client_ip_;
  std::chrono::steady_clock::time_point idle_since_;
  bool idle_ = false;      // waiting for the first byte of a request
  bool closing_ = false;   // CloseIfIdle ran: the slot is on its way back
  bool cooling_ = false;   // Sweep cancelled the idle read so that the buffer can be given back
  bool linger_ = false;    // closing with request bytes possibly still arriving
  bool head_request_ = false;  // the request being served is a HEAD: the proxy's answers have no body
  bool first_read_ = true;     // no request bytes read yet: an h2c preface is still possible
  uint32_t refs_ = 0;      // SessionPtrs held
  AccessRecord* record_ = nullptr;  // the request being served (ServeOne's), for the access log
};

using SessionPtr = boost::intrusive_ptr<Session>;

}  // namespace fencing
