#include "tls/handshake.h"

#include <boost/asio/ssl/error.hpp>

#include <openssl/x509.h>

#include <string>

namespace fencing {

namespace {

// The category's codes: a verification failure is kVerifyBase + its X509_V_ERR_* code (all small
// and positive), so its reason survives in the error_code.
enum Code : int { kTimeout = 1, kClosed = 2, kNotPrepared = 3, kRefusedAfter = 4, kAlpnRefused = 5, kClosedBeforeHttp2 = 6, kVerifyBase = 1000 };

class HandshakeCategory final : public boost::system::error_category {
 public:
  const char* name() const noexcept override { return "tls-handshake"; }
  std::string message(int value) const override {
    switch (value) {
      case kTimeout:
        return "the TLS handshake did not finish within timeouts.connect";
      case kClosed:
        return "the connection was closed or reset during the TLS handshake";
      case kNotPrepared:
        return "OpenSSL could not take the server name to check";
      case kRefusedAfter:
        return "the backend closed the connection right after the TLS handshake, before the request could be "
               "written (a TLS 1.3 server refusing the client certificate does this)";
      case kClosedBeforeHttp2:
        return "the backend closed the TLS connection before it sent anything over HTTP/2 (a TLS 1.3 server "
               "refusing the client certificate does this)";
      case kAlpnRefused:
        return "the backend did not select h2 by ALPN (it does not speak HTTP/2 over TLS there)";
      default:
        if (value > kVerifyBase) {
          return std::string("certificate verify failed: ") + X509_verify_cert_error_string(value - kVerifyBase);
        }
        return "TLS handshake failed";
    }
  }
};

const HandshakeCategory& Category() {
  static const HandshakeCategory category;
  return category;
}

}  // namespace

std::string_view HandshakeResultName(HandshakeResult result) {
  switch (result) {
    case HandshakeResult::kSuccess: return "success";
    case HandshakeResult::kCertificate: return "certificate";
    case HandshakeResult::kTimeout: return "timeout";
    case HandshakeResult::kError: return "error";
  }
  return "error";
}

boost::system::error_code HandshakeFailure(const boost::system::error_code& ec, const SSL* ssl, bool timed_out) {
  if (timed_out) return {kTimeout, Category()};
  if (ssl == nullptr) return {kNotPrepared, Category()};
  // Before the peer's certificate was looked at, the result is X509_V_OK.
  if (const long verify = SSL_get_verify_result(ssl); verify != X509_V_OK) {
    return {kVerifyBase + static_cast<int>(verify), Category()};
  }
  if (ec.category() == boost::asio::error::get_ssl_category()) return ec;  // an alert, a protocol error
  return {kClosed, Category()};  // eof, a stream cut short, a reset: the peer went away
}

boost::system::error_code RefusedAfterHandshake(const boost::system::error_code& ec) {
  if (ec.category() == boost::asio::error::get_ssl_category()) return ec;  // the alert itself: more precise
  return {kRefusedAfter, Category()};
}

boost::system::error_code AlpnRefused() { return {kAlpnRefused, Category()}; }

boost::system::error_code ClosedBeforeHttp2() { return {kClosedBeforeHttp2, Category()}; }

bool IsTlsFailure(const boost::system::error_code& ec) {
  return ec.category() == Category() || ec.category() == boost::asio::error::get_ssl_category();
}

HandshakeResult ResultOf(const boost::system::error_code& ec) {
  if (!ec) return HandshakeResult::kSuccess;
  if (ec.category() == Category()) {
    if (ec.value() == kTimeout) return HandshakeResult::kTimeout;
    if (ec.value() > kVerifyBase) return HandshakeResult::kCertificate;
  }
  return HandshakeResult::kError;
}

}  // namespace fencing
