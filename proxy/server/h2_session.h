#pragma once
// One HTTP/2 client connection (h2 chosen by ALPN on the TLS listener, h2c with prior knowledge
// on a plain one), whatever the backend speaks. The connection's frames go through
// h2::Connection (the codec, no I/O); each stream is one request, which PlanRequest and the
// fence see as they see an HTTP/1.1 one (server/admission.h), and which is then relayed as it
// comes, both ways, over the worker's H2Upstream (backend_protocol: h2c or h2), or becomes one
// HTTP/1.1 exchange over its UpstreamPool (server/h2_http1_relay.h). See docs/design-notes.md,
// "HTTP/2 and gRPC".
//
//   a stream's head   -> RequestHead (pseudo-headers as the request line, :authority as Host)
//                     -> PlanRequest -> AcquireFence -> Admit
//   a gRPC call to an HTTP/1.1 backend -> refused (grpc-needs-http2-backend) before admission
//   refused           -> a gRPC call: trailers-only, grpc-status from the problem catalogue and
//                        grpc-message its detail; anything else: the problem+json HTTP/1.1 gets
//   admitted          -> the stream is in flight (AdmissionGuard) until both sides have ended
//                        or it is reset; its data is passed on as it comes, and a side's bytes
//                        are given back to its sender (Consume) only once the other side's codec
//                        holds less than a window of them: back-pressure end to end
//
// Everything runs on the connection's worker thread. The session's read loop feeds the codec and
// hands each stream its events; one write coroutine runs while the codec has frames to send; one
// coroutine per stream. Serve returns only once every stream coroutine and the writer are done.

#include "common/io.h"
#include "h2/connection.h"
#include "http/outcome.h"
#include "http/problem.h"
#include "server/h2_http1_relay.h"
#include "server/request_plan.h"
#include "server/worker.h"
#include "tls/server_identity.h"
#include "tls/server_stream.h"
#include "upstream/h2_upstream.h"

#include <chrono>
#include <deque>
#include <functional>
#include <memory>
#include <string>
#include <string_view>
#include <unordered_map>

namespace fencing {

class H2Session : public std::enable_shared_from_this<H2Session> {
 public:
  // idle(true): no stream is open (the worker's sweep may close the connection after
  // timeouts.idle); idle(false): a stream is. upstream: the HTTP/2 backend; null for an HTTP/1.1
  // one (the worker's pool).
  H2Session(Worker& worker, tls::ServerStream& stream, const ClientIdentity& identity, std::string client_ip,
            H2Upstream* upstream, std::function<void(bool idle)> idle);

  // Serves the connection until it ends. already_read: bytes read before it was known to be
  // HTTP/2 (h2c's preface).
  io::Awaitable<void> Serve(std::string already_read);

 private:
  struct Stream;  // h2_session.cpp

  void Dispatch();  // the codec's events to their streams
  void Flush();     // starts the writer when the codec has frames and none runs
  io::Awaitable<void> WriteLoop(std::shared_ptr<H2Session> self);
  // One stream from its head to its end; Handle is its request: plan, fence, relay.
  io::Awaitable<void> ServeStream(std::shared_ptr<H2Session> self, std::shared_ptr<Stream> stream);
  io::Awaitable<void> Handle(Stream& stream);
  // An admitted stream to an HTTP/1.1 backend: one exchange (server/h2_http1_relay.h).
  io::Awaitable<void> RelayHttp1(Stream& stream, RequestPlan& plan, const H2Request& request,
                                 std::chrono::steady_clock::time_point deadline,
                                 const std::function<void(Outcome)>& count,
                                 const std::function<void(const Problem&)>& refuse);
  void WakeAll();
  void LogAccess(const Stream& stream) const;  // its access line (access_log), as HTTP/1.1's
  void EndIfDraining();  // shutting down and no stream open: GOAWAY, then the connection ends

  Worker& worker_;
  tls::ServerStream& client_;
  const ClientIdentity& identity_;
  std::string client_ip_;
  H2Upstream* upstream_;
  std::function<void(bool)> idle_;
  h2::Connection codec_;
  std::unordered_map<int32_t, std::shared_ptr<Stream>> streams_;
  size_t running_ = 0;     // stream coroutines not yet ended
  bool writing_ = false;
  bool over_ = false;      // the connection ended: streams stop
  io::Timer done_;         // Serve waits on it for the streams and the writer to end
};

}  // namespace fencing
