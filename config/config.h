#pragma once
// The route file, validated once into an immutable ProxyConfig.
// Nothing here is checked again on the request path: a ProxyConfig that exists is valid.

#include <chrono>
#include <cstdint>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace fencing {

struct HostPort {
  std::string host;  // as written, without IPv6 brackets ("0.0.0.0", "::1", "localhost")
  uint16_t port = 0;
  std::string ToString() const;  // "host:port", "[v6]:port"
};

enum class MissingToken { kReject, kAllow };
enum class FenceMode { kEnforce, kObserve };
enum class Unmatched { kPass, kReject };
// How the proxy speaks to the backend: HTTP/1.1, HTTP/2 in the clear with prior knowledge (h2c),
// or HTTP/2 over TLS (h2, an https:// backend). gRPC needs one of the two HTTP/2 forms.
enum class BackendProtocol { kHttp1, kH2c, kH2 };
// Request header fields whose names contain '_': WSGI, CGI and PHP backends read X_Fencing_Token
// and X-Fencing-Token as the same variable (HTTP_X_FENCING_TOKEN), so such a field can stand in
// for one the proxy checked.
enum class HeadersWithUnderscores { kDrop, kReject, kAllow };

// Where a keyed route takes the fence key from (contract "Fence keys"). kNone: the route's fence
// is one fence, as before.
struct FenceKeySpec {
  enum class Source { kNone, kPathSegment, kHeader };
  Source source = Source::kNone;
  unsigned path_segment = 0;  // kPathSegment: 1 = the first segment after the route's prefix
  std::string header;         // kHeader: the field name, as written
  bool keyed() const { return source != Source::kNone; }
};
// Whether every lock of a keyed fence draws its tokens from one cluster-wide counter (etcd
// revisions, ZooKeeper zxids): only then may idle keys be forgotten into a floor.
enum class TokenOrder { kPerLock, kGlobal };
// A key is 1-128 bytes of A-Z a-z 0-9 - . _ ~ (http/rules.h IsValidFenceKey).

// Verified raises (contract "Verified raises"): a raise passes only if the route's lock service
// says the token is the number of the lock's current holder.
struct VerifySpec {
  std::string service;  // a name in ProxyConfig::lock_services
  // The lock's name in the service: an etcd key prefix (the holder's key is under LOCK/) or a
  // ZooKeeper znode path (the holder is its lowest sequential child). Each "{key}" is replaced
  // by the request's fence key (keyed routes only).
  std::string lock;
  bool enabled() const { return !service.empty(); }
  // The lock of one request: lock with every "{key}" replaced by key.
  std::string LockFor(std::string_view key) const;
  bool operator==(const VerifySpec&) const = default;
};

struct RouteConfig {
  std::string name;    // unique, [a-z0-9_-]{1,64} (IsValidName, http/rules.h)
  std::string prefix;  // starts with '/', no trailing '/' (except "/" itself), unique
  std::string fence;   // defaults to name; same charset and length bound as name
  std::vector<std::string> methods{"POST", "PUT", "PATCH", "DELETE"};  // upper-case, unique
  MissingToken missing_token = MissingToken::kReject;
  FenceMode mode = FenceMode::kEnforce;
  bool forward_token = true;
  // For backends that fold case (/Orders is /orders to them): match the prefix ignoring ASCII
  // case too, or "/ORDERS/1" would reach the backend unfenced.
  bool path_case_insensitive = false;
  // Refuse a raise more than this far above the fence's max (0 = no limit). A forged or buggy
  // huge token would otherwise fence out every real holder for good. Not applied to a fence's
  // first raise (max 0): there is nothing to measure the jump from.
  uint64_t max_token_jump = 0;
  // Fence keys: every route naming a keyed fence agrees on these (a config error otherwise).
  FenceKeySpec fence_key;
  uint64_t max_keys = 1000000;                  // per fence; a new key beyond it gets 503
  TokenOrder token_order = TokenOrder::kPerLock;
  std::chrono::milliseconds forget_idle_keys_after{0};  // 0: never; only with kGlobal
  // Every route naming the fence agrees on it (a config error otherwise).
  VerifySpec verify;
  // Who may send the route's fenced methods (contract "Transport security"): client identities
  // from verified certificates, each exact or a prefix ending in '*'. Empty: anyone. Needs
  // tls.client_ca_file (a config error otherwise).
  std::vector<std::string> writers;
  // The field the client's identities reach the backend in; empty: none. Any field of that name
  // the client sent is dropped.
  std::string identity_header;
};

// The TLS of a client the proxy is: of an etcd lock service or fence store (tls:), and of the
// backend (backend_tls:). Files are named, never inlined: secrets stay out of the route file.
struct TlsSettings {
  std::string ca_file;    // empty: the system's trust store
  std::string cert_file;  // client certificate (mutual TLS); with key_file
  std::string key_file;
  std::string server_name;  // SNI and the name checked in the server's certificate; empty: the endpoint's host
  bool operator==(const TlsSettings&) const = default;
};

// A client of a lock service (contract "Verified raises"; the etcd client also carries shared
// fences). Endpoints and hosts are as written; secrets are read from files, never the route file.
struct EtcdClientConfig {
  // "http://host:port" or "https://host:port" (https needs TLS; tls: settings apply to it).
  std::vector<std::string> endpoints;
  std::chrono::milliseconds timeout{1000};  // per request, connect included
  std::string username;                     // etcd auth (v3 Authenticate); empty: none
  std::string password_file;                // the user's password, one line (a Kubernetes Secret)
  bool tls = false;                         // set by any https endpoint or a tls: block
  TlsSettings tls_settings;
  bool operator==(const EtcdClientConfig&) const = default;
};

struct ZooKeeperClientConfig {
  std::string hosts;  // the C client's connect string: "h1:2181,h2:2181[/chroot]"
  std::chrono::milliseconds timeout{1000};            // per verification
  std::chrono::milliseconds session_timeout{10000};  // asked of the server at connect
  bool operator==(const ZooKeeperClientConfig&) const = default;
};

struct LockServiceConfig {
  enum class Kind { kEtcd, kZooKeeper };
  std::string name;  // [a-z0-9_-]{1,64}, unique
  Kind kind = Kind::kEtcd;
  EtcdClientConfig etcd;            // kEtcd
  ZooKeeperClientConfig zookeeper;  // kZooKeeper
  std::chrono::milliseconds timeout() const {
    return kind == Kind::kEtcd ? etcd.timeout : zookeeper.timeout;
  }
  bool operator==(const LockServiceConfig&) const = default;
};

// Where raises become durable when several proxies share their fences (contract "Shared
// fences"): etcd, under one key prefix. Without it, the state file.
struct FenceStoreConfig {
  EtcdClientConfig etcd;  // endpoints, timeout (per etcd call), auth, TLS: as lock_services
  std::string prefix;     // "/name[/name...]": every proxy with the same prefix shares every fence
  // The membership lease's TTL: a proxy that cannot renew it stops forwarding fenced writes before
  // it can expire, and a raise elsewhere waits at most this plus timeouts.request for a dead one.
  std::chrono::seconds member_ttl{10};
  bool operator==(const FenceStoreConfig&) const = default;
};

// A position in the route file, kept for values whose problems show only once the proxy acts on
// them (a TLS file that does not load), so those are reported as FILE:LINE:COL too.
struct ConfigPosition {
  int line = 0;
  int column = 0;
};

// TLS on `listen` (contract "Transport security"). The files are read by the TLS module (proxy/
// tls/) at start-up, by --check, and again whenever they change; the loader checks only the
// values.
struct ListenTlsConfig {
  enum class ClientCertificate { kRequire, kOptional };
  enum class Version { k1_2, k1_3 };
  std::string cert_file;       // PEM: the leaf first, then its intermediates
  std::string key_file;        // PEM private key of the leaf, unencrypted
  std::string client_ca_file;  // PEM CAs of client certificates; empty: none is asked for
  ClientCertificate client_certificate = ClientCertificate::kRequire;  // with client_ca_file
  Version min_version = Version::k1_2;
  // Where each file is named in the route file, for the errors of loading it.
  ConfigPosition cert_file_at, key_file_at, client_ca_file_at;
  // Offer h2 by ALPN before http/1.1: set by the loader (always: an HTTP/2 client is served
  // whatever the backend speaks), not a key of its own.
  bool offer_h2 = false;

  bool asks_client_certificate() const { return !client_ca_file.empty(); }
};

struct Timeouts {
  std::chrono::milliseconds connect{2000};
  std::chrono::milliseconds request{30000};
  std::chrono::milliseconds idle{60000};
  std::chrono::milliseconds header_read{10000};
  std::chrono::milliseconds shutdown{25000};
};

struct Limits {
  uint64_t max_header_bytes = 16 * 1024;
  uint64_t max_body_bytes = 64ull * 1024 * 1024;
  uint64_t max_connections = 10000;
  // Request bodies up to this size are read whole before the request is forwarded; larger ones
  // stream. At most max_body_bytes (unset, it is lowered to a smaller max_body_bytes).
  uint64_t buffered_body_bytes = 1024 * 1024;
};

struct ProxyConfig {
  std::string source_path;  // the file it was loaded from
  HostPort listen{"0.0.0.0", 8080};
  HostPort admin_listen{"127.0.0.1", 9901};
  std::optional<ListenTlsConfig> tls;    // TLS on listen; absent: plain HTTP
  std::optional<HostPort> plain_listen;  // a second listener, plain HTTP, beside a TLS listen
  HostPort backend;          // from backend: "http://host[:port]" (80) or "https://host[:port]" (443)
  std::string backend_url;   // as written
  // https://: every backend connection is TLS, verified with backend_tls (tls/client_context.h).
  bool backend_https = false;
  // backend_protocol: http1 (default), h2c (an http:// backend) or h2 (an https:// one). With an
  // HTTP/2 backend the listeners also speak HTTP/2 to clients (h2 by ALPN, h2c by prior knowledge).
  BackendProtocol backend_protocol = BackendProtocol::kHttp1;
  // backend_tls: CA file (empty: the system's trust store), client certificate and key,
  // server_name (empty: the backend's host). Only with an https backend (a config error
  // otherwise); empty with one means every default.
  TlsSettings backend_tls;
  std::string state_file;    // empty when fence_store is set (they exclude each other)
  std::optional<FenceStoreConfig> fence_store;
  std::string token_header = "X-Fencing-Token";
  unsigned threads = 0;      // 0 = one per core (resolved by the server, not here)
  Unmatched unmatched = Unmatched::kPass;
  bool access_log = true;    // one JSON line per request on stderr
  HeadersWithUnderscores headers_with_underscores = HeadersWithUnderscores::kDrop;
  Timeouts timeouts;
  Limits limits;
  std::vector<LockServiceConfig> lock_services;  // in file order
  std::vector<RouteConfig> routes;
  // Where each key was written, by its path as messages name it ("backend_tls.ca_file",
  // "routes[1].prefix"): for problems found after loading, such as a file a key names that does
  // not load, to be reported at the key like every other error (ErrorAt).
  std::map<std::string, std::pair<int, int>, std::less<>> written_at;  // path -> (line, column)
  const LockServiceConfig* FindLockService(std::string_view name) const;
  // How long a request waits for its raise. The older writes it waits for were admitted before
  // it and are cut off at their own timeouts.request, which the sweep enforces up to 1 s late and
  // which then takes a moment to unwind: so timeouts.request + 2 s, and a raise behind a hung
  // older write goes once that write is cut off instead of failing a moment before. With the
  // shared store: timeouts.request + member_ttl + 1 s, the longest a raise there waits for a
  // proxy that died (its lease to end, then timeouts.request for the writes it had admitted).
  std::chrono::milliseconds RaiseWait() const {
    return fence_store ? timeouts.request + fence_store->member_ttl + std::chrono::seconds(1)
                       : timeouts.request + std::chrono::seconds(2);
  }
  // (Shared store) How much longer a request whose raise committed as this proxy's membership
  // lapsed waits for the membership to be renewed (it may then go): member_ttl.
  std::chrono::milliseconds HeldWait() const {
    return fence_store ? std::chrono::milliseconds(fence_store->member_ttl) : std::chrono::milliseconds(0);
  }
};

// One problem in the route file, positioned like a compiler error (1-based line and column).
struct ConfigError {
  std::string file;
  int line = 0;
  int column = 0;
  std::string message;
  std::string ToString() const;  // "FILE:LINE:COL: message"
};

struct ConfigResult {
  std::shared_ptr<const ProxyConfig> config;  // set only when errors is empty
  std::vector<ConfigError> errors;            // every problem found, in file order
  bool ok() const { return config != nullptr; }
};

// An error at the key `path` of config's file (line and column 0 when it was not written).
ConfigError ErrorAt(const ProxyConfig& config, std::string_view path, std::string message);

// Reads and validates a route file. An unreadable file is one error at line 0, column 0.
ConfigResult LoadConfigFile(const std::string& path);

// Validates route-file text; file_name is used only in error positions.
ConfigResult ParseConfig(std::string_view yaml_text, const std::string& file_name);

// "250ms", "2s", "1m", "1h" -> duration. False on anything else.
bool ParseDuration(std::string_view text, std::chrono::milliseconds* out);
// "1024", "16KiB", "64MiB", "1GiB" -> bytes. False on anything else or overflow.
bool ParseSize(std::string_view text, uint64_t* out);

}  // namespace fencing
