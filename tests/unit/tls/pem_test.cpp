// Reading PEM files (tls/pem.h): what a file holds, and a sentence for each way it can be wrong,
// with OpenSSL's error queue left empty.

#include <gtest/gtest.h>

#include "tls/pem.h"
#include "tls/test_certs.h"

#include <openssl/err.h>

#include <unistd.h>

#include <cstdio>
#include <ctime>
#include <filesystem>
#include <fstream>
#include <string>

namespace fencing {
namespace {

using namespace test_certs;  // NOLINT(google-build-using-namespace)

TEST(PemTest, ReadsAFileOrSaysWhyNot) {
  const std::string dir = testing::TempDir() + "pem_test_" + std::to_string(::getpid());
  std::filesystem::create_directories(dir);
  std::ofstream(dir + "/a.pem") << "bytes\n";
  std::string error;
  EXPECT_EQ(tls::ReadPemFile(dir + "/a.pem", &error), "bytes\n");
  EXPECT_FALSE(tls::ReadPemFile(dir + "/missing.pem", &error));
  EXPECT_EQ(error, "cannot read: No such file or directory");
  EXPECT_FALSE(tls::ReadPemFile(dir, &error)) << "a directory";
  EXPECT_EQ(error, "cannot read: Is a directory");
  std::ofstream(dir + "/big.pem") << std::string(tls::kMaxPemFileBytes + 1, 'x');
  EXPECT_FALSE(tls::ReadPemFile(dir + "/big.pem", &error));
  EXPECT_NE(error.find("larger than 1 MiB"), std::string::npos);
  std::filesystem::remove_all(dir);
}

TEST(PemTest, CertificatesInOrder) {
  const Issued ca = Ca("ca", 5);
  LeafSpec spec;
  spec.serial = 0xBEEF;
  const Issued leaf = Leaf(ca, spec);
  std::string error;
  // A key block between them is skipped, as in a file holding both.
  const auto certs = tls::ParseCertificates(leaf.cert_pem() + leaf.key_pem() + ca.cert_pem(), &error);
  ASSERT_EQ(certs.size(), 2u) << error;
  EXPECT_EQ(tls::SerialHex(certs[0].get()), "BEEF");
  EXPECT_EQ(tls::SerialHex(certs[1].get()), "05");
  const auto not_after = tls::NotAfterUnixSeconds(certs[0].get());
  ASSERT_TRUE(not_after.has_value());
  EXPECT_NEAR(static_cast<double>(*not_after), static_cast<double>(std::time(nullptr) + spec.not_after_offset), 5);
  EXPECT_EQ(ERR_peek_error(), 0u);
}

TEST(PemTest, CertificateErrors) {
  const Issued ca = Ca();
  const std::string pem = ca.cert_pem();
  std::string error;
  EXPECT_TRUE(tls::ParseCertificates("", &error).empty());
  EXPECT_EQ(error, "holds no PEM certificate (-----BEGIN CERTIFICATE-----)");
  EXPECT_TRUE(tls::ParseCertificates(pem.substr(0, pem.size() / 2), &error).empty());
  EXPECT_EQ(error.rfind("not a PEM certificate: ", 0), 0u) << error;
  EXPECT_TRUE(tls::ParseCertificates(pem + pem.substr(0, 100), &error).empty()) << "half a second one";
  EXPECT_EQ(error.rfind("block 2 is not a PEM certificate: ", 0), 0u) << error;
  EXPECT_EQ(ERR_peek_error(), 0u);
}

TEST(PemTest, PrivateKeys) {
  const Issued ca = Ca();
  std::string error;
  EXPECT_NE(tls::ParsePrivateKey(ca.key_pem(), &error), nullptr) << error;
  EXPECT_EQ(tls::ParsePrivateKey(ca.cert_pem(), &error), nullptr);
  EXPECT_EQ(error, "holds no PEM private key (-----BEGIN PRIVATE KEY-----)");
  // Encrypted: refused, never a prompt for a passphrase.
  BIO* bio = BIO_new(BIO_s_mem());
  PEM_write_bio_PrivateKey(bio, ca.key.get(), EVP_aes_128_cbc(), reinterpret_cast<const unsigned char*>("secret"), 6,
                           nullptr, nullptr);
  char* data = nullptr;
  const long size = BIO_get_mem_data(bio, &data);
  const std::string encrypted(data, static_cast<size_t>(size));
  BIO_free(bio);
  EXPECT_EQ(tls::ParsePrivateKey(encrypted, &error), nullptr);
  EXPECT_EQ(error, "the private key is encrypted; give it unencrypted (there is no one to type its passphrase)");
  const std::string key = ca.key_pem();
  EXPECT_EQ(tls::ParsePrivateKey(key.substr(0, key.size() / 2), &error), nullptr) << "half a key";
  EXPECT_EQ(error.rfind("not a usable PEM private key: ", 0), 0u) << error;
  EXPECT_EQ(ERR_peek_error(), 0u);
}

}  // namespace
}  // namespace fencing
