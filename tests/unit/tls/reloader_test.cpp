// Keeping the listener's TLS context current (tls/reloader.h), driven through its seam: Reload()
// called directly, with the files rewritten in between, as a Kubernetes Secret rewrites them (a
// "..data" symlink swap). Unchanged files change nothing; new ones make a new context; files
// that do not load keep the running one and are reported once; SIGHUP (force) reloads
// regardless. Errors at start are the route file's, at the key that names the file.

#include <gtest/gtest.h>

#include "config/config.h"
#include "tls/memory_handshake.h"
#include "tls/reloader.h"
#include "tls/test_certs.h"

#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <map>
#include <string>
#include <vector>

namespace fencing {
namespace {

namespace fs = std::filesystem;
using namespace test_certs;  // NOLINT(google-build-using-namespace)
using tls::ServerTlsReloader;

// Counts what the reloader reports.
class RecordingObserver : public ServerTlsObserver {
 public:
  void TlsReloaded(bool ok) const override { ++(ok ? ok_ : failed_); }
  void TlsCertificateExpiry(std::string_view file, int64_t not_after) const override {
    expiry_[std::string(file)] = not_after;
  }
  mutable int ok_ = 0, failed_ = 0;
  mutable std::map<std::string, int64_t> expiry_;
};

// A directory laid out as a Kubernetes Secret volume: tls.crt, tls.key and ca.crt are symlinks
// through ..data, which an update swaps with one rename.
class SecretDir {
 public:
  SecretDir() : dir_(testing::TempDir() + "reloader_test_" + std::to_string(::getpid()) + "_" + std::to_string(next_++)) {
    fs::remove_all(dir_);
    fs::create_directories(dir_);
  }
  ~SecretDir() { fs::remove_all(dir_); }

  void Write(const std::map<std::string, std::string>& files) {
    const std::string stamp = "..v" + std::to_string(++version_);
    fs::create_directories(dir_ + "/" + stamp);
    for (const auto& [name, bytes] : files) std::ofstream(dir_ + "/" + stamp + "/" + name) << bytes;
    fs::create_directory_symlink(stamp, dir_ + "/..data_tmp");
    fs::rename(dir_ + "/..data_tmp", dir_ + "/..data");
    for (const auto& [name, bytes] : files) {
      if (!fs::is_symlink(dir_ + "/" + name)) fs::create_symlink("..data/" + name, dir_ + "/" + name);
    }
  }
  std::string path(const std::string& name) const { return dir_ + "/" + name; }
  const std::string& dir() const { return dir_; }

 private:
  static inline int next_ = 0;
  std::string dir_;
  int version_ = 0;
};

class ReloaderTest : public testing::Test {
 protected:
  void SetUp() override {
    ca_ = Ca();
    first_ = Server(0x1A01);
    second_ = Server(0x1B02);
    secret_.Write(FilesOf(first_));
  }
  Issued Server(long serial) {
    LeafSpec spec;
    spec.serial = serial;
    spec.sans = {"DNS:localhost"};
    return Leaf(ca_, spec);
  }
  std::map<std::string, std::string> FilesOf(const Issued& server) const {
    return {{"tls.crt", server.cert_pem()}, {"tls.key", server.key_pem()}, {"ca.crt", ca_.cert_pem()}};
  }
  // The route file naming the secret's files: tls on line 3, cert_file on line 4, key_file on line 5.
  std::shared_ptr<const ProxyConfig> Config(const std::string& key = "tls.key") const {
    const std::string text = "backend: http://127.0.0.1:8081\nstate_file: f\ntls:\n  cert_file: " +
                             secret_.path("tls.crt") + "\n  key_file: " + secret_.path(key) +
                             "\n  client_ca_file: " + secret_.path("ca.crt") + "\n";
    ConfigResult r = ParseConfig(text, "routes.yaml");
    EXPECT_TRUE(r.ok());
    return r.config;
  }
  std::unique_ptr<ServerTlsReloader> Create() {
    config_ = Config();
    ConfigError error;
    auto reloader = ServerTlsReloader::Create(*config_, &observer_, &error);
    EXPECT_NE(reloader, nullptr) << error.ToString();
    return reloader;
  }

  Issued ca_, first_, second_;
  SecretDir secret_;
  RecordingObserver observer_;
  std::shared_ptr<const ProxyConfig> config_;
};

TEST_F(ReloaderTest, StartsWithTheFilesAndReportsTheirExpiry) {
  auto reloader = Create();
  EXPECT_EQ(reloader->Current()->serial(), "1A01");
  EXPECT_EQ(observer_.expiry_.at(secret_.path("tls.crt")), reloader->Current()->not_after());
  EXPECT_EQ(observer_.expiry_.at(secret_.path("ca.crt")), *reloader->Current()->client_ca_not_after());
  EXPECT_EQ(observer_.ok_ + observer_.failed_, 0) << "the start is no reload";
  EXPECT_EQ(reloader->Directories(), std::vector<std::string>{secret_.dir()}) << "each directory once";
}

TEST_F(ReloaderTest, AFileThatDoesNotLoadAtStartIsTheRouteFilesError) {
  auto config = Config("no-such.key");
  ConfigError error;
  EXPECT_EQ(ServerTlsReloader::Create(*config, &observer_, &error), nullptr);
  EXPECT_EQ(error.file, "routes.yaml");
  EXPECT_EQ(error.line, 5);
  EXPECT_EQ(error.column, 13);
  EXPECT_EQ(error.message, "tls.key_file " + secret_.path("no-such.key") + ": cannot read: No such file or directory");

  secret_.Write({{"tls.crt", first_.cert_pem()}, {"tls.key", second_.key_pem()}, {"ca.crt", ca_.cert_pem()}});
  EXPECT_EQ(ServerTlsReloader::Create(*Config(), &observer_, &error), nullptr);
  EXPECT_EQ(error.ToString(), "routes.yaml:5:13: tls.key_file " + secret_.path("tls.key") +
                                  ": does not belong to the certificate in tls.cert_file " + secret_.path("tls.crt"));
}

TEST_F(ReloaderTest, UnchangedFilesChangeNothing) {
  auto reloader = Create();
  auto before = reloader->Current();
  EXPECT_FALSE(reloader->Reload("periodic check", false));
  secret_.Write(FilesOf(first_));  // the same bytes, swapped in again
  EXPECT_FALSE(reloader->Reload("file change", false));
  EXPECT_EQ(reloader->Current(), before);
  EXPECT_EQ(observer_.ok_ + observer_.failed_, 0);
}

TEST_F(ReloaderTest, ASwapMakesANewContextAndOpenConnectionsKeepTheirs) {
  auto reloader = Create();
  // A connection made on the first context, still open.
  SSL* open = reloader->Current()->NewConnection();
  secret_.Write(FilesOf(second_));
  EXPECT_TRUE(reloader->Reload("file change", false));
  EXPECT_EQ(reloader->Current()->serial(), "1B02");
  EXPECT_EQ(observer_.ok_, 1);
  EXPECT_EQ(observer_.expiry_.at(secret_.path("tls.crt")), reloader->Current()->not_after());
  // The open connection still has the first certificate.
  ASSERT_NE(SSL_get_certificate(open), nullptr);
  EXPECT_EQ(ASN1_INTEGER_get(X509_get0_serialNumber(SSL_get_certificate(open))), 0x1A01);
  SSL_free(open);
  // And a new handshake gets the second one.
  test_handshake::Client client;
  const Issued writer = [&] {
    LeafSpec spec;
    spec.purpose = "clientAuth";
    spec.sans = {"URI:spiffe://td/w"};
    return Leaf(ca_, spec);
  }();
  client.cert_pem = writer.cert_pem();
  client.key_pem = writer.key_pem();
  test_handshake::Outcome out;
  test_handshake::Handshake(*reloader->Current(), client, &out);
  ASSERT_TRUE(out.server_ok);
  EXPECT_EQ(ASN1_INTEGER_get(X509_get0_serialNumber(SSL_get_certificate(out.server))), 0x1B02);
}

TEST_F(ReloaderTest, FilesThatDoNotLoadKeepTheRunningContextAndAreReportedOnce) {
  auto reloader = Create();
  auto running = reloader->Current();
  const std::string cert = second_.cert_pem();
  secret_.Write({{"tls.crt", cert.substr(0, cert.size() / 2)}, {"tls.key", second_.key_pem()}, {"ca.crt", ca_.cert_pem()}});
  EXPECT_FALSE(reloader->Reload("file change", false));
  EXPECT_EQ(reloader->Current(), running);
  EXPECT_EQ(observer_.failed_, 1);
  EXPECT_FALSE(reloader->Reload("periodic check", false));
  EXPECT_EQ(observer_.failed_, 1) << "the same failure is not counted at every check";
  EXPECT_FALSE(reloader->Reload("SIGHUP", true));
  EXPECT_EQ(observer_.failed_, 2) << "SIGHUP reports it again";

  // A key of another certificate: the same.
  secret_.Write({{"tls.crt", second_.cert_pem()}, {"tls.key", first_.key_pem()}, {"ca.crt", ca_.cert_pem()}});
  EXPECT_FALSE(reloader->Reload("file change", false));
  EXPECT_EQ(observer_.failed_, 3);
  EXPECT_EQ(reloader->Current(), running);

  // A file gone: the same, once.
  fs::remove(secret_.path("tls.key"));
  EXPECT_FALSE(reloader->Reload("file change", false));
  EXPECT_FALSE(reloader->Reload("periodic check", false));
  EXPECT_EQ(observer_.failed_, 4);
  EXPECT_EQ(reloader->Current(), running);

  // Fixed: taken.
  fs::create_symlink("..data/tls.key", secret_.path("tls.key"));
  secret_.Write(FilesOf(second_));
  EXPECT_TRUE(reloader->Reload("file change", false));
  EXPECT_EQ(reloader->Current()->serial(), "1B02");
  EXPECT_EQ(observer_.ok_, 1);
}

TEST_F(ReloaderTest, SighupReloadsUnchangedFilesToo) {
  auto reloader = Create();
  auto before = reloader->Current();
  EXPECT_TRUE(reloader->Reload("SIGHUP", true));
  EXPECT_NE(reloader->Current(), before);
  EXPECT_EQ(reloader->Current()->serial(), "1A01");
  EXPECT_EQ(observer_.ok_, 1);
}

}  // namespace
}  // namespace fencing
