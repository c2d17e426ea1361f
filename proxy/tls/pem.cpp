#include "tls/pem.h"

#include <fcntl.h>
#include <unistd.h>

#include <openssl/asn1.h>
#include <openssl/bio.h>
#include <openssl/bn.h>
#include <openssl/err.h>
#include <openssl/pem.h>

#include <cerrno>
#include <ctime>
#include <system_error>

namespace fencing::tls {
namespace {

struct BioFree {
  void operator()(BIO* bio) const { BIO_free(bio); }
};
using BioPtr = std::unique_ptr<BIO, BioFree>;

BioPtr MemoryBio(std::string_view pem) {
  return BioPtr(BIO_new_mem_buf(pem.data(), static_cast<int>(pem.size())));
}

// Refuses to decrypt: OpenSSL's default would prompt for a passphrase on the terminal.
int NoPassphrase(char*, int, int, void*) { return 0; }

// Whether the error queue's newest entry is "no more PEM blocks", which ends a clean read.
bool AtEndOfPem() {
  const unsigned long error = ERR_peek_last_error();
  return ERR_GET_LIB(error) == ERR_LIB_PEM && ERR_GET_REASON(error) == PEM_R_NO_START_LINE;
}

}  // namespace

std::string TakeOpenSslErrors() {
  std::string out;
  while (unsigned long error = ERR_get_error()) {
    char text[256];
    ERR_error_string_n(error, text, sizeof text);
    if (!out.empty()) out += "; ";
    out += text;
  }
  return out;
}

std::optional<std::string> ReadPemFile(const std::string& path, std::string* error) {
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) {
    *error = "cannot read: " + std::error_code(errno, std::generic_category()).message();
    return std::nullopt;
  }
  std::string text;
  char buffer[16 * 1024];
  for (;;) {
    const ssize_t n = ::read(fd, buffer, sizeof buffer);
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) {
      *error = "cannot read: " + std::error_code(errno, std::generic_category()).message();
      ::close(fd);
      return std::nullopt;
    }
    if (n == 0) break;
    text.append(buffer, static_cast<size_t>(n));
    if (text.size() > kMaxPemFileBytes) {
      *error = "larger than 1 MiB; is this the right file?";
      ::close(fd);
      return std::nullopt;
    }
  }
  ::close(fd);
  return text;
}

std::vector<X509Ptr> ParseCertificates(std::string_view pem, std::string* error) {
  ERR_clear_error();
  std::vector<X509Ptr> certs;
  BioPtr bio = MemoryBio(pem);
  for (;;) {
    X509Ptr cert(PEM_read_bio_X509(bio.get(), nullptr, NoPassphrase, nullptr));
    if (!cert) break;
    certs.push_back(std::move(cert));
  }
  // The loop ends at the first block that is no certificate: the end of the text, or damage.
  if (!AtEndOfPem()) {
    *error = (certs.empty() ? std::string("not a PEM certificate")
                            : "block " + std::to_string(certs.size() + 1) + " is not a PEM certificate") +
             ": " + TakeOpenSslErrors();
    return {};
  }
  ERR_clear_error();
  if (certs.empty()) *error = "holds no PEM certificate (-----BEGIN CERTIFICATE-----)";
  return certs;
}

PrivateKeyPtr ParsePrivateKey(std::string_view pem, std::string* error) {
  // Told apart before OpenSSL is asked: its decoders say "unsupported" for all three.
  if (pem.find("PRIVATE KEY-----") == std::string_view::npos) {
    *error = "holds no PEM private key (-----BEGIN PRIVATE KEY-----)";
    return nullptr;
  }
  if (pem.find("ENCRYPTED PRIVATE KEY-----") != std::string_view::npos ||
      pem.find("Proc-Type: 4,ENCRYPTED") != std::string_view::npos) {
    *error = "the private key is encrypted; give it unencrypted (there is no one to type its passphrase)";
    return nullptr;
  }
  ERR_clear_error();
  BioPtr bio = MemoryBio(pem);
  PrivateKeyPtr key(PEM_read_bio_PrivateKey(bio.get(), nullptr, NoPassphrase, nullptr));
  if (!key) *error = "not a usable PEM private key: " + TakeOpenSslErrors();
  return key;
}

std::optional<int64_t> NotAfterUnixSeconds(const X509* cert) {
  std::tm tm{};
  if (ASN1_TIME_to_tm(X509_get0_notAfter(cert), &tm) != 1) return std::nullopt;
  return static_cast<int64_t>(timegm(&tm));
}

std::string SerialHex(const X509* cert) {
  BIGNUM* number = ASN1_INTEGER_to_BN(X509_get0_serialNumber(cert), nullptr);
  if (!number) return "";
  char* hex = BN_bn2hex(number);
  std::string out = hex ? hex : "";
  OPENSSL_free(hex);
  BN_free(number);
  return out;
}

}  // namespace fencing::tls
