#pragma once
// What the listener's TLS tells the metrics (metrics/metrics.h implements it; the TLS module
// does not link them): certificate reloads, and each loaded certificate's notAfter. The
// handshakes are counted by the session that makes them.

#include <cstdint>
#include <string_view>

namespace fencing {

class ServerTlsObserver {
 public:
  virtual ~ServerTlsObserver() = default;
  // A reload of the files after start-up: ok (the new context serves new handshakes), or not (the
  // running one keeps serving).
  virtual void TlsReloaded(bool ok) const = 0;
  // The notAfter (Unix seconds) of the certificate in `file` (a CA bundle: its first to expire).
  virtual void TlsCertificateExpiry(std::string_view file, int64_t not_after) const = 0;
};

}  // namespace fencing
