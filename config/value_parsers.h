#pragma once
// Checks for single route-file values, kept apart from the YAML walk so each rule reads on its
// own. Every function returns an empty string on success, or what is wrong (without the key
// name: the loader adds the key and the position).

#include <chrono>
#include <cstdint>
#include <string>
#include <string_view>

#include "config/config.h"

namespace fencing::config_internal {

// Longest timeout the loader accepts; longer ones are almost certainly typos, and it keeps
// "now + timeout" far from overflowing any clock.
inline constexpr std::chrono::milliseconds kMaxTimeout = std::chrono::hours(24);
inline constexpr uint64_t kMinHeaderBytes = 1024;
inline constexpr uint64_t kMaxHeaderBytes = 1024 * 1024;  // Beast's header limit is 32-bit
inline constexpr unsigned kMaxThreads = 256;
// Longest wait for a lock service's answer: a raise waits for it, so anything longer than a
// client would wait for a write is a typo.
inline constexpr std::chrono::milliseconds kMaxLockServiceTimeout = std::chrono::minutes(1);
// A ZooKeeper session shorter than this is below any server's minimum (two ticks of the
// smallest sensible tickTime); servers clamp it to 2..20 tickTimes anyway.
inline constexpr std::chrono::milliseconds kMinZooKeeperSession = std::chrono::seconds(2);
inline constexpr std::chrono::milliseconds kMaxZooKeeperSession = std::chrono::minutes(10);
// A fence store's membership lease. Below 2s a renewal every ttl/3 leaves no room for one slow
// etcd answer; above 5m a dead proxy holds every raise of its prefix back for that long.
inline constexpr std::chrono::seconds kMinMemberTtl{2};
inline constexpr std::chrono::seconds kMaxMemberTtl{300};
// A fence store's key prefix: every key the store writes starts with it, and etcd's request size
// limit is shared with the fence name and key after it.
inline constexpr size_t kMaxFenceStorePrefixBytes = 256;

std::string CheckDuration(std::string_view text, std::chrono::milliseconds* out);
std::string CheckSize(std::string_view text, uint64_t* out);
// A non-negative decimal integer, no sign, no units.
std::string CheckUnsigned(std::string_view text, uint64_t* out);

// "host:port" or "[v6]:port" for a listener.
std::string CheckListenAddress(std::string_view text, HostPort* out);
// "http://host[:port][/]" (port 80) or "https://host[:port][/]" (443; *https set): nothing after
// the authority but an optional "/".
std::string CheckBackendUrl(std::string_view text, HostPort* out, bool* https);

// A lock service's etcd endpoint: "http://host:port" or "https://host:port", the port required
// (the clients take the endpoint as written), nothing after the authority. *https tells which.
std::string CheckEtcdEndpoint(std::string_view text, bool* https);
// A ZooKeeper connect string: "host:port[,host:port...][/chroot]", each port required and each
// host a name or IPv4 address (the C client splits host and port at the last ':').
std::string CheckZooKeeperHosts(std::string_view text);
// A route's verify lock, for any service: non-empty, no control characters, no trailing '/'
// (the etcd holder's key is under LOCK/), and no placeholder but "{key}".
std::string CheckLockTemplate(std::string_view text);
// A fence store's etcd key prefix: "/name[/name...]", printable ASCII without spaces, no empty
// segment and no trailing '/' (the store appends "/members/...", "/max/..."), at most 256 bytes.
std::string CheckFenceStorePrefix(std::string_view text);
// A host name or IP address without brackets or port (a TLS server_name).
std::string CheckHostName(std::string_view text);

std::string CheckName(std::string_view text);  // route, fence and lock service names
std::string CheckPrefix(std::string_view text);
std::string CheckHeaderName(std::string_view text);
// A field the proxy itself reads or writes for the backend (token_header, identity_header): a
// header name as above, without '_' (CGI-style backends read '_' and '-' alike).
std::string CheckProxyFieldName(std::string_view text);
// One `writers` entry: an identity as a client certificate gives it (a URI SAN as written, such
// as "spiffe://cluster.local/ns/shop/sa/writer", or "dns:NAME" for a DNS SAN, lower-case), or
// such a prefix ending in '*'; "*" alone admits any client with an identity.
std::string CheckWriter(std::string_view text);
std::string CheckMethod(std::string_view text);

bool IsWildcardHost(std::string_view host);
bool IsLoopbackHost(std::string_view host);

size_t EditDistance(std::string_view a, std::string_view b);

}  // namespace fencing::config_internal
