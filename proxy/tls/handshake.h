#pragma once
// What a client TLS handshake came to, and why one failed, as an error_code: it travels where a
// connect's errors travel (UpstreamPool::Connect's ec), so the exchange can tell a backend whose
// TLS failed (502 backend-tls) from one that is down or slow (upstream-unavailable).
//
// A verification failure keeps X509's reason ("certificate verify failed: Hostname mismatch");
// an alert or protocol error keeps OpenSSL's (the ssl category: "tlsv1 alert unknown ca",
// "wrong version number"); a handshake cut off by the peer, or past timeouts.connect, gets a
// code of its own.

#include <boost/system/error_code.hpp>

#include <openssl/ssl.h>

#include <cstddef>
#include <string_view>

namespace fencing {

enum class HandshakeResult { kSuccess, kCertificate, kTimeout, kError };
inline constexpr size_t kHandshakeResults = 4;
// The label of fencing_proxy_upstream_tls_handshakes_total{result}.
std::string_view HandshakeResultName(HandshakeResult result);

// Counts handshakes (the metrics implement it; the pool reports to it).
class HandshakeObserver {
 public:
  virtual void Handshake(HandshakeResult result) const = 0;

 protected:
  ~HandshakeObserver() = default;
};

// The error for a handshake on ssl that failed with ec; timed_out: the connect's timer cut it
// off. ssl null: the connection could not be prepared for it (PrepareClientConnection failed).
boost::system::error_code HandshakeFailure(const boost::system::error_code& ec, const SSL* ssl, bool timed_out);

// The error for a connection whose handshake had completed on our side and that the peer closed
// or reset before the first request could be written (ec: the write's error). In TLS 1.3 the
// server checks a client certificate after the client's side of the handshake is done, and this
// is how a refusal shows when its alert is not read first.
boost::system::error_code RefusedAfterHandshake(const boost::system::error_code& ec);

// The error for a handshake that verified but in which the server did not select the protocol
// the connection offered by ALPN, alone (h2 for backend_protocol h2): it would not understand
// what we would send, so nothing is.
boost::system::error_code AlpnRefused();

// The error for an h2 connection over TLS that the backend ended (closed, or sent close_notify)
// before a byte of HTTP/2 came from it: a server sends its SETTINGS before anything else (RFC
// 9113 3.4), so it answered nothing; in TLS 1.3 this is how a refused client certificate shows
// when its alert is not read first.
boost::system::error_code ClosedBeforeHttp2();

// Whether ec is a TLS failure: a failed handshake (HandshakeFailure), or an error of the TLS
// layer itself later on (a fatal alert such as TLS 1.3's "certificate required", a bad record).
// A peer that merely closes (eof, a stream cut short) is not one.
bool IsTlsFailure(const boost::system::error_code& ec);

// kSuccess for no error, else what kind of failure ec is.
HandshakeResult ResultOf(const boost::system::error_code& ec);

}  // namespace fencing
