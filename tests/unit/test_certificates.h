#pragma once
// Certificates for the unit tests that speak TLS, made at test time with the openssl command line
// (no key material is kept in the tree): a test CA, a server certificate it signs for 127.0.0.1
// and "localhost", a client certificate it signs, and an unrelated second CA. EC P-256 keys, so
// making them takes milliseconds.

#include <gtest/gtest.h>

#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include <stdlib.h>

namespace fencing {

struct TestCertificates {
  std::string dir;
  std::string ca, ca_key;              // the test CA
  std::string server, server_key;      // 127.0.0.1 and localhost, signed by the CA
  std::string client, client_key;      // a client certificate signed by the CA
  std::string other_ca;                // a CA that signed none of them

  // Makes them in a new temporary directory. False with *error on any failed step.
  bool Make(std::string* error) {
    std::string tmpl = (std::filesystem::temp_directory_path() / "fp_test_certs_XXXXXX").string();
    if (::mkdtemp(tmpl.data()) == nullptr) {
      *error = "mkdtemp failed";
      return false;
    }
    dir = tmpl;
    ca = dir + "/ca.pem", ca_key = dir + "/ca.key";
    server = dir + "/server.pem", server_key = dir + "/server.key";
    client = dir + "/client.pem", client_key = dir + "/client.key";
    other_ca = dir + "/other.pem";
    const std::string key = "-newkey ec -pkeyopt ec_paramgen_curve:prime256v1 -nodes ";
    const std::string o = "openssl ";
    const std::vector<std::string> steps = {
        o + "req -x509 " + key + "-days 2 -subj /CN=fp-test-ca -keyout " + ca_key + " -out " + ca,
        o + "req -x509 " + key + "-days 2 -subj /CN=fp-other-ca -keyout " + dir + "/other.key -out " + other_ca,
        o + "req " + key + "-subj /CN=fp-test-server -keyout " + server_key + " -out " + dir + "/server.csr",
        o + "x509 -req -days 2 -in " + dir + "/server.csr -CA " + ca + " -CAkey " + ca_key +
            " -CAcreateserial -extfile " + dir + "/server.ext -out " + server,
        o + "req " + key + "-subj /CN=fp-test-client -keyout " + client_key + " -out " + dir + "/client.csr",
        o + "x509 -req -days 2 -in " + dir + "/client.csr -CA " + ca + " -CAkey " + ca_key +
            " -CAcreateserial -extfile " + dir + "/client.ext -out " + client,
    };
    std::ofstream(dir + "/server.ext") << "subjectAltName=IP:127.0.0.1,DNS:localhost\n";
    std::ofstream(dir + "/client.ext") << "subjectAltName=URI:spiffe://test/client\nextendedKeyUsage=clientAuth\n";
    for (const std::string& step : steps) {
      if (std::system((step + " >/dev/null 2>&1").c_str()) != 0) {
        *error = "failed: " + step;
        return false;
      }
    }
    return true;
  }

  ~TestCertificates() {
    if (!dir.empty()) std::filesystem::remove_all(dir);
  }
};

}  // namespace fencing
