#pragma once
// Certificates for the TLS unit tests, made in memory with OpenSSL's API: a CA, and leaves it
// signs with the SANs, CN, serial, purpose and validity a test asks for, as PEM text. P-256
// keys: fast to make.

#include <openssl/ec.h>
#include <openssl/evp.h>
#include <openssl/pem.h>
#include <openssl/x509.h>
#include <openssl/x509v3.h>

#include <gtest/gtest.h>

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

namespace fencing::test_certs {

struct KeyFree {
  void operator()(EVP_PKEY* key) const { EVP_PKEY_free(key); }
};
struct CertFree {
  void operator()(X509* cert) const { X509_free(cert); }
};
using Key = std::unique_ptr<EVP_PKEY, KeyFree>;
using Cert = std::unique_ptr<X509, CertFree>;

inline Key NewKey() { return Key(EVP_EC_gen("P-256")); }

inline std::string KeyPem(EVP_PKEY* key) {
  BIO* bio = BIO_new(BIO_s_mem());
  PEM_write_bio_PrivateKey(bio, key, nullptr, nullptr, 0, nullptr, nullptr);
  char* data = nullptr;
  const long size = BIO_get_mem_data(bio, &data);
  std::string pem(data, static_cast<size_t>(size));
  BIO_free(bio);
  return pem;
}

inline std::string CertPem(X509* cert) {
  BIO* bio = BIO_new(BIO_s_mem());
  PEM_write_bio_X509(bio, cert);
  char* data = nullptr;
  const long size = BIO_get_mem_data(bio, &data);
  std::string pem(data, static_cast<size_t>(size));
  BIO_free(bio);
  return pem;
}

inline void AddExtension(X509* cert, X509* issuer, int nid, const std::string& value) {
  X509V3_CTX ctx;
  X509V3_set_ctx_nodb(&ctx);
  X509V3_set_ctx(&ctx, issuer, cert, nullptr, nullptr, 0);
  X509_EXTENSION* ext = X509V3_EXT_conf_nid(nullptr, &ctx, nid, value.c_str());
  ASSERT_NE(ext, nullptr) << value;
  X509_add_ext(cert, ext, -1);
  X509_EXTENSION_free(ext);
}

// One SAN, "KIND:value" with KIND URI, DNS, IP or email; the value taken as written (a comma
// too, which OpenSSL's config syntax would split on).
inline GENERAL_NAME* SanOf(const std::string& san) {
  const size_t colon = san.find(':');
  const std::string kind = san.substr(0, colon);
  const std::string value = san.substr(colon + 1);
  GENERAL_NAME* name = GENERAL_NAME_new();
  if (kind == "IP") {
    GENERAL_NAME_set0_value(name, GEN_IPADD, a2i_IPADDRESS(value.c_str()));
    return name;
  }
  ASN1_IA5STRING* text = ASN1_IA5STRING_new();
  ASN1_STRING_set(text, value.data(), static_cast<int>(value.size()));
  GENERAL_NAME_set0_value(name, kind == "URI" ? GEN_URI : kind == "DNS" ? GEN_DNS : GEN_EMAIL, text);
  return name;
}

struct Issued {
  Key key;
  Cert cert;
  std::string key_pem() const { return KeyPem(key.get()); }
  std::string cert_pem() const { return CertPem(cert.get()); }
};

struct LeafSpec {
  std::string cn = "leaf";
  std::vector<std::string> sans;  // "URI:spiffe://...", "DNS:a.b", "IP:127.0.0.1", "email:x@y" (SanOf)
  std::string purpose = "serverAuth";  // extendedKeyUsage
  long serial = 1;
  long not_before_offset = -3600;  // seconds from now
  long not_after_offset = 30 * 24 * 3600;
};

// Signs a new certificate with `issuer` (null: self-signed, a CA).
inline Issued Issue(const LeafSpec& spec, const Issued* issuer, bool ca) {
  Issued out{NewKey(), Cert(X509_new())};
  X509* cert = out.cert.get();
  X509_set_version(cert, 2);
  ASN1_INTEGER_set(X509_get_serialNumber(cert), spec.serial);
  X509_gmtime_adj(X509_getm_notBefore(cert), spec.not_before_offset);
  X509_gmtime_adj(X509_getm_notAfter(cert), spec.not_after_offset);
  X509_set_pubkey(cert, out.key.get());
  X509_NAME* name = X509_get_subject_name(cert);
  X509_NAME_add_entry_by_txt(name, "CN", MBSTRING_ASC, reinterpret_cast<const unsigned char*>(spec.cn.c_str()), -1,
                             -1, 0);
  X509* signer_cert = issuer ? issuer->cert.get() : cert;
  X509_set_issuer_name(cert, X509_get_subject_name(signer_cert));
  if (ca) {
    AddExtension(cert, signer_cert, NID_basic_constraints, "critical,CA:TRUE");
    AddExtension(cert, signer_cert, NID_key_usage, "critical,keyCertSign,cRLSign");
  } else {
    AddExtension(cert, signer_cert, NID_basic_constraints, "critical,CA:FALSE");
    AddExtension(cert, signer_cert, NID_key_usage, "critical,digitalSignature");
    AddExtension(cert, signer_cert, NID_ext_key_usage, spec.purpose);
  }
  if (!spec.sans.empty()) {
    GENERAL_NAMES* names = sk_GENERAL_NAME_new_null();
    for (const std::string& san : spec.sans) sk_GENERAL_NAME_push(names, SanOf(san));
    X509_add1_ext_i2d(cert, NID_subject_alt_name, names, 0, X509V3_ADD_DEFAULT);
    GENERAL_NAMES_free(names);
  }
  X509_sign(cert, issuer ? issuer->key.get() : out.key.get(), EVP_sha256());
  return out;
}

inline Issued Ca(const std::string& cn = "test CA", long serial = 100) {
  LeafSpec spec;
  spec.cn = cn;
  spec.serial = serial;
  return Issue(spec, nullptr, true);
}

inline Issued Leaf(const Issued& ca, LeafSpec spec) { return Issue(spec, &ca, false); }

}  // namespace fencing::test_certs
