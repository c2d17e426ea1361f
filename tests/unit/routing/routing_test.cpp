// Request-target checks and longest-segment-prefix routing. A target the backend could normalise
// into another route's path must be refused: one such request bypasses a fenced prefix.

#include <gtest/gtest.h>

#include <memory>
#include <ostream>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "config/config.h"
#include "routing/path_check.h"
#include "routing/route_table.h"

namespace fencing {
namespace {

// ---------------------------------------------------------------- CheckRequestTarget: accepted

struct AcceptCase {
  std::string target;
  std::string_view path;  // what routing sees
};

void PrintTo(const AcceptCase& c, std::ostream* os) { *os << '"' << c.target << '"'; }

class AcceptedTargetTest : public testing::TestWithParam<AcceptCase> {};

TEST_P(AcceptedTargetTest, IsAcceptedWithItsPath) {
  const AcceptCase& c = GetParam();
  TargetCheck check = CheckRequestTarget(c.target);
  EXPECT_TRUE(check.ok) << "refused: " << check.reason;
  EXPECT_EQ(check.path, c.path);
}

INSTANTIATE_TEST_SUITE_P(
    Table, AcceptedTargetTest,
    testing::Values(AcceptCase{"/", "/"}, AcceptCase{"/orders", "/orders"},
                    AcceptCase{"/orders/1?x=1", "/orders/1"},
                    AcceptCase{"/orders/", "/orders/"},  // a trailing slash is not an empty segment
                    AcceptCase{"/a%20b", "/a%20b"},      // encoded reserved/unsafe bytes pass as sent
                    AcceptCase{"/a%3Fb", "/a%3Fb"}, AcceptCase{"/a%3fb", "/a%3fb"},
                    AcceptCase{"/a%25b", "/a%25b"},      // an encoded '%' is not an escape to decode twice
                    AcceptCase{"/a...b/...", "/a...b/..."},  // dots inside a segment are fine
                    AcceptCase{"/.well-known/x", "/.well-known/x"},
                    AcceptCase{"/a%20", "/a%20"},        // a complete escape at the very end
                    AcceptCase{"/?", "/"}, AcceptCase{"/orders?", "/orders"},
                    // Absolute-form is routed by its path alone.
                    AcceptCase{"http://host/orders/1?q", "/orders/1"}, AcceptCase{"http://host", "/"},
                    AcceptCase{"HTTP://host:8080/orders", "/orders"},
                    AcceptCase{"https://host/", "/"},
                    // The query is forwarded as sent: path rules do not apply to it.
                    AcceptCase{"/a?x=/../", "/a"}, AcceptCase{"/a?x=%2e%2e&y=//z\\", "/a"},
                    AcceptCase{"/a?x=%zz", "/a"},
                    AcceptCase{"/a;v=1/..b", "/a;v=1/..b"},
                    AcceptCase{"/100%25off", "/100%25off"}));

// ---------------------------------------------------------------- CheckRequestTarget: refused

class RefusedTargetTest : public testing::TestWithParam<std::string> {};

TEST_P(RefusedTargetTest, IsRefusedWithAReason) {
  TargetCheck check = CheckRequestTarget(GetParam());
  EXPECT_FALSE(check.ok) << "accepted with path " << check.path;
  EXPECT_STRNE(check.reason, "");
}

INSTANTIATE_TEST_SUITE_P(
    Table, RefusedTargetTest,
    testing::Values(
        // Not origin-form or absolute-form.
        std::string(""), std::string("orders"), std::string("*"), std::string("host:443"),
        std::string("http://host?q"),  // absolute-form with a query but no path
        std::string("http://host#f"),
        // Dot segments, anywhere.
        std::string("/a/../b"), std::string("/a/./b"), std::string("/.."), std::string("/."),
        // Path parameters do not hide a dot segment from a servlet container.
        std::string("/x/..;/orders"), std::string("/x/..;jsessionid=1/orders"), std::string("/.;x"),
        // A backend that decodes twice reads "%252e" as ".".
        std::string("/x/%252e%252e/orders"), std::string("/a%2541"),
        std::string("/a/.."), std::string("/a/."), std::string("/../a"), std::string("/a/..?x"),
        std::string("http://host/a/../orders"),
        // Empty segments.
        std::string("//a"), std::string("/a//b"), std::string("//"), std::string("http://host//orders"),
        // Backslashes, raw or encoded; encoded slashes.
        std::string("/a\\b"), std::string("/a%5cb"), std::string("/a%5Cb"), std::string("/a%2fb"),
        std::string("/a%2Fb"),
        // An encoded ';': a Servlet-style backend decodes "/orders%3Bx/1" to "/orders;x/1", that is
        // "/orders/1".
        std::string("/orders%3Bx/1"), std::string("/orders%3bx/1"), std::string("/a/b%3B"),
        // Encoded dots, in either case.
        std::string("/%2e%2e/x"), std::string("/%2E"), std::string("/%2e"), std::string("/a/%2e%2E/b"),
        std::string("/.%2e/b"),
        // Encoded NUL and control bytes.
        std::string("/a%00"), std::string("/a%0a"), std::string("/a%0D"), std::string("/a%1f"),
        std::string("/a%7f"),
        // Malformed escapes.
        std::string("/a%"), std::string("/a%4"), std::string("/a%zz"), std::string("/a%4g"),
        std::string("/a%g4"), std::string("/a%%41"), std::string("/a%4?x"),
        // Any encoded unreserved character: "%6Frders" is "orders" to a backend that decodes.
        std::string("/%6Frders"), std::string("/%6frders"), std::string("/a%41"), std::string("/a%7A"),
        std::string("/a%30"), std::string("/a%2D"), std::string("/a%5F"), std::string("/a%7E"),
        // Spaces, tabs, fragments and raw control bytes in the path.
        std::string("/a b"), std::string("/a\tb"), std::string("/a#b"), std::string("/#"),
        std::string("/a\x01"), std::string("/a\x7f"), std::string("/a\r\nb"), std::string("/a\0b", 4),
        // Control bytes and spaces in the query break the request line too.
        std::string("/a?x=1 2"), std::string("/a?x=\t"), std::string("/a?\x01"), std::string("/a?\x7f"),
        std::string("/a?x\r\n"), std::string("/a?\0", 4)));

// The target is a view into a larger buffer (Beast's header); an escape cut short by the end of the
// view must be refused without reading the bytes after it ("/a%2" followed by a '0' in memory).
TEST(CheckRequestTargetTest, EscapeCutShortAtTheEndIsRefused) {
  const std::string buffer = "/a%20 HTTP/1.1";
  for (size_t length : {size_t{3}, size_t{4}}) {
    TargetCheck check = CheckRequestTarget(std::string_view(buffer).substr(0, length));
    EXPECT_FALSE(check.ok) << buffer.substr(0, length);
  }
  EXPECT_TRUE(CheckRequestTarget(std::string_view(buffer).substr(0, 5)).ok);
}

// The path a check returns is a view into the caller's target, not a copy.
TEST(CheckRequestTargetTest, PathViewsIntoTheTarget) {
  std::string target = "/orders/7?a=b";
  TargetCheck check = CheckRequestTarget(target);
  ASSERT_TRUE(check.ok);
  EXPECT_EQ(check.path.data(), target.data());
  EXPECT_EQ(check.path.size(), 9u);
}

// ---------------------------------------------------------------- RouteTable

std::shared_ptr<const ProxyConfig> ConfigWithPrefixes(const std::vector<std::string>& prefixes) {
  auto config = std::make_shared<ProxyConfig>();
  for (size_t i = 0; i < prefixes.size(); ++i) {
    RouteConfig route;
    route.name = "r" + std::to_string(i);
    route.fence = route.name;
    route.prefix = prefixes[i];
    config->routes.push_back(route);
  }
  return config;
}

// The prefix of the route a path matched, or "(none)".
std::string MatchedPrefix(const RouteTable& table, std::string_view path) {
  std::optional<size_t> index = table.Match(path);
  if (!index) return "(none)";
  return table.config().routes.at(*index).prefix;
}

struct MatchCase {
  std::string_view path;
  std::string_view prefix;
};

void PrintTo(const MatchCase& c, std::ostream* os) { *os << '"' << c.path << '"'; }

class RouteMatchTest : public testing::TestWithParam<MatchCase> {
 protected:
  RouteTable table_{ConfigWithPrefixes({"/orders", "/orders/archive", "/users/admin", "/a/b/c"})};
};

TEST_P(RouteMatchTest, LongestWholeSegmentPrefixWins) {
  EXPECT_EQ(MatchedPrefix(table_, GetParam().path), GetParam().prefix) << GetParam().path;
}

INSTANTIATE_TEST_SUITE_P(
    Table, RouteMatchTest,
    testing::Values(MatchCase{"/orders", "/orders"},  // exactly the prefix
                    MatchCase{"/orders/", "/orders"}, MatchCase{"/orders/1", "/orders"},
                    MatchCase{"/orders/archive", "/orders/archive"},
                    MatchCase{"/orders/archive/", "/orders/archive"},
                    MatchCase{"/orders/archive/2020/1", "/orders/archive"},
                    MatchCase{"/orders/archived", "/orders"},  // not a segment of "/orders/archive"
                    MatchCase{"/orders/1/archive", "/orders"},
                    MatchCase{"/ordersX", "(none)"},  // never a partial segment
                    MatchCase{"/orders-old", "(none)"}, MatchCase{"/order", "(none)"},
                    MatchCase{"/", "(none)"}, MatchCase{"/users", "(none)"},
                    MatchCase{"/users/admin/x", "/users/admin"}, MatchCase{"/users/adminx", "(none)"},
                    MatchCase{"/a/b", "(none)"}, MatchCase{"/a/b/c/d", "/a/b/c"},
                    MatchCase{"/x/orders", "(none)"}));  // prefixes anchor at the start

TEST(RouteTableTest, RootRouteCatchesEverythingElse) {
  RouteTable table(ConfigWithPrefixes({"/", "/orders"}));
  EXPECT_EQ(MatchedPrefix(table, "/"), "/");
  EXPECT_EQ(MatchedPrefix(table, "/ordersX"), "/");
  EXPECT_EQ(MatchedPrefix(table, "/other/path"), "/");
  EXPECT_EQ(MatchedPrefix(table, "/orders"), "/orders");
  EXPECT_EQ(MatchedPrefix(table, "/orders/1"), "/orders");
}

TEST(RouteTableTest, NoRoutesMatchesNothing) {
  RouteTable table(ConfigWithPrefixes({}));
  EXPECT_EQ(table.Match("/"), std::nullopt);
  EXPECT_EQ(table.Match("/orders"), std::nullopt);
}

TEST(RouteTableTest, MatchReturnsTheIndexInConfigOrder) {
  RouteTable table(ConfigWithPrefixes({"/b", "/a", "/"}));
  EXPECT_EQ(table.Match("/a/1"), std::optional<size_t>(1));
  EXPECT_EQ(table.Match("/b"), std::optional<size_t>(0));
  EXPECT_EQ(table.Match("/c"), std::optional<size_t>(2));
}

TEST(RouteTableTest, ManyRoutesEachFoundAndNoNeighbourConfused) {
  std::vector<std::string> prefixes;
  for (int i = 0; i < 500; ++i) prefixes.push_back("/svc" + std::to_string(i));
  for (int i = 0; i < 50; ++i) prefixes.push_back("/svc" + std::to_string(i) + "/deep/" + std::to_string(i));
  RouteTable table(ConfigWithPrefixes(prefixes));
  for (int i = 0; i < 500; ++i) {
    std::string p = "/svc" + std::to_string(i);
    ASSERT_EQ(MatchedPrefix(table, p + "/x"), p);
    // "/svc1" must not catch "/svc10": segment boundaries, not string prefixes.
    bool exists = i >= 1 && i < 50;  // "/svc10".."/svc490" exist; "/svc00" does not
    ASSERT_EQ(MatchedPrefix(table, p + "0/x"), exists ? p + "0" : "(none)") << p;
  }
  for (int i = 0; i < 50; ++i) {
    std::string deep = "/svc" + std::to_string(i) + "/deep/" + std::to_string(i);
    ASSERT_EQ(MatchedPrefix(table, deep + "/leaf"), deep);
    ASSERT_EQ(MatchedPrefix(table, deep + "x"), "/svc" + std::to_string(i));
  }
}

// The table keeps the config alive: views into its strings stay valid after the caller lets go.
TEST(RouteTableTest, OutlivesTheCallersConfigPointer) {
  auto config = ConfigWithPrefixes({"/orders"});
  RouteTable table(config);
  config.reset();
  EXPECT_EQ(MatchedPrefix(table, "/orders/1"), "/orders");
}

// A config loaded from YAML routes the same way as one built by hand.
TEST(RouteTableTest, RoutesAParsedConfig) {
  ConfigResult result = ParseConfig(
      "backend: http://127.0.0.1:8081\n"
      "state_file: /tmp/fp-routing-test.log\n"
      "routes:\n"
      "  - name: orders\n"
      "    prefix: /orders\n"
      "  - name: archive\n"
      "    prefix: /orders/archive\n"
      "    fence: orders\n",
      "routes.yaml");
  ASSERT_TRUE(result.ok()) << (result.errors.empty() ? "" : result.errors[0].ToString());
  RouteTable table(result.config);
  ASSERT_EQ(table.Match("/orders/archive/1"), std::optional<size_t>(1));
  EXPECT_EQ(table.config().routes[1].fence, "orders");
  EXPECT_EQ(table.Match("/orders/1"), std::optional<size_t>(0));
  EXPECT_EQ(table.Match("/"), std::nullopt);
}

// A backend that folds case reads "/ORDERS/1" as "/orders/1": the route must match it too.
TEST(RouteTableTest, CaseInsensitiveRouteMatchesAnyCaseAndKeepsLongestMatch) {
  ConfigResult result = ParseConfig(
      "backend: http://127.0.0.1:8081\n"
      "state_file: /tmp/fp-routing-test.log\n"
      "routes:\n"
      "  - name: orders\n"
      "    prefix: /Orders\n"
      "    path_case_insensitive: true\n"
      "  - name: archive\n"
      "    prefix: /orders/archive\n"
      "  - name: users\n"
      "    prefix: /users\n",
      "routes.yaml");
  ASSERT_TRUE(result.ok()) << (result.errors.empty() ? "" : result.errors[0].ToString());
  RouteTable table(result.config);
  EXPECT_EQ(table.Match("/orders/1"), std::optional<size_t>(0));
  EXPECT_EQ(table.Match("/ORDERS/1"), std::optional<size_t>(0));
  EXPECT_EQ(table.Match("/oRdErS"), std::optional<size_t>(0));
  EXPECT_EQ(table.Match("/orders/archive/2"), std::optional<size_t>(1));  // longer, exact case
  EXPECT_EQ(table.Match("/ORDERS/ARCHIVE/2"), std::optional<size_t>(0));  // archive is case-sensitive
  EXPECT_EQ(table.Match("/Users/1"), std::nullopt);                       // users is case-sensitive
  EXPECT_EQ(table.Match("/ordersX"), std::nullopt);
}

TEST(RouteTableTest, PrefixesEqualIgnoringCaseAreRefusedWhenOneFoldsCase) {
  ConfigResult result = ParseConfig(
      "backend: http://127.0.0.1:8081\n"
      "state_file: /tmp/fp-routing-test.log\n"
      "routes:\n"
      "  - name: a\n"
      "    prefix: /orders\n"
      "  - name: b\n"
      "    prefix: /ORDERS\n"
      "    path_case_insensitive: true\n",
      "routes.yaml");
  ASSERT_FALSE(result.ok());
  ASSERT_EQ(result.errors.size(), 1u);
  EXPECT_EQ(result.errors[0].line, 6);
  EXPECT_NE(result.errors[0].message.find("ignoring case"), std::string::npos) << result.errors[0].message;
}

// What the proxy does per request: check the target, then route its path.
TEST(RouteTableTest, AbsoluteFormIsRoutedByItsPath) {
  RouteTable table(ConfigWithPrefixes({"/", "/orders"}));
  TargetCheck check = CheckRequestTarget("http://orders/x?y");
  ASSERT_TRUE(check.ok);
  EXPECT_EQ(MatchedPrefix(table, check.path), "/");  // the host name is not a path
  check = CheckRequestTarget("http://h/orders/1?q=/");
  ASSERT_TRUE(check.ok);
  EXPECT_EQ(MatchedPrefix(table, check.path), "/orders");
}

}  // namespace
}  // namespace fencing
