#pragma once
// Reading PEM files with OpenSSL: certificates (a chain, or a bundle of CAs), a private key, and
// what the metrics and logs say about a certificate (its notAfter and serial). Every failure
// comes back as a sentence that names what was wrong, never as a half-loaded object, and OpenSSL's
// error queue is left empty.
//
// The bytes are read once (ReadPemFile) and parsed from memory: whoever loads several files (a
// certificate and its key) compares and keeps exactly the bytes it parsed.

#include <openssl/evp.h>
#include <openssl/x509.h>

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace fencing::tls {

struct X509Free {
  void operator()(X509* cert) const { X509_free(cert); }
};
struct EvpPkeyFree {
  void operator()(EVP_PKEY* key) const { EVP_PKEY_free(key); }
};
using X509Ptr = std::unique_ptr<X509, X509Free>;
using PrivateKeyPtr = std::unique_ptr<EVP_PKEY, EvpPkeyFree>;

// A PEM file is small: a chain of a few certificates, or a CA bundle. Larger is a wrong path.
inline constexpr size_t kMaxPemFileBytes = 1024 * 1024;

// The whole file, or nullopt and *error ("cannot read: No such file or directory").
std::optional<std::string> ReadPemFile(const std::string& path, std::string* error);

// Every certificate in the PEM text, in order (for a chain: the leaf first). Fails on text that
// holds none, or on a certificate block that does not parse.
std::vector<X509Ptr> ParseCertificates(std::string_view pem, std::string* error);

// The first private key in the PEM text (PKCS#8, PKCS#1 or SEC1). An encrypted key fails: there
// is no one to type its passphrase.
PrivateKeyPtr ParsePrivateKey(std::string_view pem, std::string* error);

// The certificate's notAfter as Unix seconds (nullopt if it cannot be read).
std::optional<int64_t> NotAfterUnixSeconds(const X509* cert);
// Its serial number in upper-case hex, as `openssl x509 -serial` prints it.
std::string SerialHex(const X509* cert);

// OpenSSL's error queue as one line (empty when it holds nothing), and the queue emptied.
std::string TakeOpenSslErrors();

}  // namespace fencing::tls
