// Who a client is (tls/server_identity.h): its certificate's URI SANs as written and DNS SANs as
// dns:NAME in lower case, in order and each once; never the CN; no SAN that would break the
// identity header (a comma, a space, a control byte); nothing from a connection whose
// certificate did not verify.

#include <gtest/gtest.h>

#include "tls/server_identity.h"
#include "tls/test_certs.h"

#include <string>
#include <vector>

namespace fencing {
namespace {

using namespace test_certs;  // NOLINT(google-build-using-namespace)

using Names = std::vector<std::string>;

Names NamesOf(const std::vector<std::string>& sans, const std::string& cn = "leaf") {
  static const Issued ca = Ca();
  LeafSpec spec;
  spec.cn = cn;
  spec.sans = sans;
  spec.purpose = "clientAuth";
  const Issued leaf = Leaf(ca, spec);
  return IdentityOfCertificate(leaf.cert.get()).names;
}

TEST(ServerIdentityTest, UriSansAsWrittenAndDnsSansInLowerCase) {
  EXPECT_EQ(NamesOf({"URI:spiffe://cluster.local/ns/shop/sa/order-writer"}),
            Names{"spiffe://cluster.local/ns/shop/sa/order-writer"});
  EXPECT_EQ(NamesOf({"URI:spiffe://Cluster.Local/NS/x"}), Names{"spiffe://Cluster.Local/NS/x"}) << "as written";
  EXPECT_EQ(NamesOf({"DNS:Batch.Shop.SVC"}), Names{"dns:batch.shop.svc"});
  EXPECT_EQ(NamesOf({"DNS:b.svc", "URI:spiffe://td/a", "DNS:a.svc"}),
            (Names{"dns:b.svc", "spiffe://td/a", "dns:a.svc"})) << "in the certificate's order";
  EXPECT_EQ(NamesOf({"DNS:a.svc", "DNS:A.svc", "URI:urn:x"}), (Names{"dns:a.svc", "urn:x"})) << "each once";
}

TEST(ServerIdentityTest, NeverTheCnAndNoOtherKindOfSan) {
  EXPECT_EQ(NamesOf({}, "spiffe://cluster.local/ns/shop/sa/order-writer"), Names{});
  EXPECT_EQ(NamesOf({"email:writer@shop.example", "IP:10.0.0.1"}, "writer"), Names{});
}

TEST(ServerIdentityTest, LeavesOutWhatWouldBreakTheIdentityHeader) {
  EXPECT_EQ(NamesOf({"URI:spiffe://td/a,b", "URI:spiffe://td/a b", "URI:spiffe://td/a\r\nX-Evil: 1",
                     "DNS:caf\xc3\xa9.svc", "URI:spiffe://td/ok"}),
            Names{"spiffe://td/ok"});
}

TEST(ServerIdentityTest, JoinedIsTheHeadersValue) {
  const ClientIdentity identity = ClientIdentity::Of({"spiffe://td/a", "dns:b.svc", "spiffe://td/a"});
  EXPECT_EQ(identity.names, (Names{"spiffe://td/a", "dns:b.svc"}));
  EXPECT_EQ(identity.joined, "spiffe://td/a, dns:b.svc");
  EXPECT_TRUE(kNoIdentity.empty());
  EXPECT_EQ(kNoIdentity.joined, "");
  EXPECT_TRUE(IdentityOfCertificate(nullptr).empty());
}

}  // namespace
}  // namespace fencing
