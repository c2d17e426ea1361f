#pragma once
// Who a client is (contract "Transport security"): what its verified certificate says, and only
// that. Each URI SAN as written (a SPIFFE ID such as spiffe://cluster.local/ns/shop/sa/writer)
// and each DNS SAN as "dns:NAME", the name in lower case; never the subject's CN, which any CA
// may fill with anything and which no client-authentication scheme of today relies on. A SAN
// that is no valid identity (http/rules.h IsValidIdentity: a comma, a space, a control byte) is
// left out: the identity header lists identities comma-separated, and fewer identities only ever
// mean fewer rights.
//
// A route's writers and identity_header read it (server/request_plan.h); the access log writes
// `joined`.

#include <openssl/ssl.h>
#include <openssl/x509.h>

#include <string>
#include <vector>

namespace fencing {

struct ClientIdentity {
  std::vector<std::string> names;  // in the certificate's order, each once
  std::string joined;              // names, ", "-separated: the identity header's value

  bool empty() const { return names.empty(); }
  // From names already checked (tests build identities this way).
  static ClientIdentity Of(std::vector<std::string> names);
};

// A client without an identity: no certificate, or a plain listener.
inline const ClientIdentity kNoIdentity{};

// The identity of a certificate the handshake verified (null: none).
ClientIdentity IdentityOfCertificate(X509* verified);
// The identity of a connection's client after its handshake: none unless it sent a certificate
// and the certificate verified.
ClientIdentity VerifiedIdentity(SSL* ssl);

}  // namespace fencing
