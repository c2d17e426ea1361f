#include "tls/server_identity.h"

#include "http/ascii.h"
#include "http/rules.h"

#include <openssl/x509v3.h>

#include <algorithm>
#include <string_view>

namespace fencing {

ClientIdentity ClientIdentity::Of(std::vector<std::string> names) {
  ClientIdentity identity;
  for (std::string& name : names) {
    if (std::find(identity.names.begin(), identity.names.end(), name) != identity.names.end()) continue;
    if (!identity.joined.empty()) identity.joined += ", ";
    identity.joined += name;
    identity.names.push_back(std::move(name));
  }
  return identity;
}

ClientIdentity IdentityOfCertificate(X509* verified) {
  if (!verified) return {};
  auto* sans = static_cast<GENERAL_NAMES*>(X509_get_ext_d2i(verified, NID_subject_alt_name, nullptr, nullptr));
  if (!sans) return {};
  std::vector<std::string> names;
  for (int i = 0; i < sk_GENERAL_NAME_num(sans); ++i) {
    const GENERAL_NAME* san = sk_GENERAL_NAME_value(sans, i);
    if (san->type != GEN_URI && san->type != GEN_DNS) continue;  // e-mail, IP, directory names: not identities
    const ASN1_IA5STRING* text = san->type == GEN_URI ? san->d.uniformResourceIdentifier : san->d.dNSName;
    const std::string_view value(reinterpret_cast<const char*>(ASN1_STRING_get0_data(text)),
                                 static_cast<size_t>(ASN1_STRING_length(text)));
    std::string name =
        san->type == GEN_URI ? std::string(value) : std::string(kDnsIdentityPrefix) + ToAsciiLower(value);
    if (IsValidIdentity(name)) names.push_back(std::move(name));
  }
  GENERAL_NAMES_free(sans);
  return ClientIdentity::Of(std::move(names));
}

ClientIdentity VerifiedIdentity(SSL* ssl) {
  X509* peer = SSL_get0_peer_certificate(ssl);
  if (!peer || SSL_get_verify_result(ssl) != X509_V_OK) return {};
  return IdentityOfCertificate(peer);
}

}  // namespace fencing
