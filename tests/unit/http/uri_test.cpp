// RFC 3986 host[:port] (http/uri.h): what a Host header or an absolute-form authority may be.

#include <gtest/gtest.h>

#include <string_view>

#include "http/uri.h"

namespace fencing {
namespace {

TEST(HostPortTest, AcceptsRegNamesIpv4AndIpLiteralsWithAnOptionalPort) {
  const std::string_view good[] = {
      "a", "example.com", "EXAMPLE.com", "a-b.c_d~e", "proxy.test:8080", "h:1", "h:65535", "h:00080",
      "127.0.0.1", "127.0.0.1:80", "999.1.1.1",  // a reg-name as far as the characters go
      "[::1]", "[::1]:8080", "[2001:db8::7]", "[::ffff:127.0.0.1]:1", "[v1.x:y]", "[VF.a!b]:9",
      "ex%41mple.com", "a!$&'()*+,;=b",  // pct-encoded and sub-delims are reg-name characters
  };
  for (std::string_view host : good) EXPECT_TRUE(IsValidHostPort(host)) << "'" << host << "'";
}

TEST(HostPortTest, RefusesAnythingElse) {
  const std::string_view bad[] = {
      "", "a b", "a/b", "a@b", "user@h", "user:pw@h:80", "a\\b", "a?b", "a#b", "a\"b", "a<b>", "a{b}", "a|b",
      "a^b", "a`b", "caf\xc3\xa9", "a\tb", ":80", "h:", "h:80:81", "h:123456", "h:65536", "h:-1", "h:+1", "h: 80",
      "h:8o", "[::1", "::1", "[::1]x", "[::1]:", "[::1]:80:1", "[]", "[::g]", "[127.0.0.1]", "[fe80::1%25eth0]",
      "[v.x]", "[v1.]", "[vx.y]", "%4", "%zz.com", "a%", std::string_view("a\0b", 3),
  };
  for (std::string_view host : bad) EXPECT_FALSE(IsValidHostPort(host)) << "'" << host << "'";
}

TEST(UriCharactersTest, UnreservedSubDelimsAndHex) {
  for (char c : std::string_view("azAZ09-._~")) EXPECT_TRUE(IsUnreserved(c)) << c;
  for (char c : std::string_view("%/?#[]@!$ ")) EXPECT_FALSE(IsUnreserved(c)) << c;
  for (char c : std::string_view("!$&'()*+,;=")) EXPECT_TRUE(IsSubDelim(c)) << c;
  for (char c : std::string_view(":/?#[]@%a")) EXPECT_FALSE(IsSubDelim(c)) << c;
  EXPECT_EQ(HexValue('0'), 0);
  EXPECT_EQ(HexValue('9'), 9);
  EXPECT_EQ(HexValue('a'), 10);
  EXPECT_EQ(HexValue('F'), 15);
  EXPECT_EQ(HexValue('g'), -1);
  EXPECT_EQ(HexValue('/'), -1);
}

}  // namespace
}  // namespace fencing
