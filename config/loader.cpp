// The route-file loader: walks the YAML tree once, checks every key and value, and collects
// every problem with its position instead of stopping at the first, so an operator fixes a file
// in one round.

#include <fcntl.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <map>
#include <optional>
#include <set>
#include <span>
#include <system_error>
#include <tuple>
#include <utility>

#include <yaml-cpp/yaml.h>

#include "config/config.h"
#include "config/keys.h"
#include "config/value_parsers.h"
#include "http/ascii.h"
#include "http/rules.h"

namespace fencing {
namespace {

using namespace config_internal;

constexpr size_t kMaxFileBytes = 16 * 1024 * 1024;  // a route file is kilobytes; stop on mistakes

// The keys of the mappings inside key values (NestedKeys()), in the order messages list them.
constexpr std::string_view kFenceKeyKeys[] = {"path_segment", "header"};
constexpr std::string_view kVerifyKeys[] = {"service", "lock"};
constexpr std::string_view kLockServiceKinds[] = {"etcd", "zookeeper"};
// "password" is known so that it gets its own message: the route file carries no secret.
constexpr std::string_view kEtcdKeys[] = {"endpoints", "timeout", "username", "password_file", "tls", "password"};
constexpr std::string_view kTlsKeys[] = {"ca_file", "cert_file", "key_file", "server_name"};
constexpr std::string_view kZooKeeperKeys[] = {"hosts", "timeout", "session_timeout"};
constexpr std::string_view kFenceStoreKinds[] = {"etcd"};
// A lock service's etcd keys, and the fence store's own: its key prefix and membership lease.
constexpr std::string_view kFenceStoreEtcdKeys[] = {"endpoints",     "prefix", "member_ttl", "timeout", "username",
                                                    "password_file", "tls",    "password"};

std::string Join(std::span<const std::string_view> words) {
  std::string out;
  for (std::string_view w : words) {
    if (!out.empty()) out += ", ";
    out += w;
  }
  return out;
}

// Quotes a user value for a message: shortened so one bad line cannot flood the output, and
// control bytes escaped so they cannot garble a terminal.
std::string Quote(std::string_view value) {
  constexpr size_t kMax = 60;
  std::string out = "'";
  for (size_t i = 0; i < value.size() && i < kMax; ++i) {
    const unsigned char c = static_cast<unsigned char>(value[i]);
    if (c == '\t') {
      out += "\\t";
    } else if (c == '\n') {
      out += "\\n";
    } else if (c < 0x20 || c == 0x7f) {
      static constexpr char kHex[] = "0123456789abcdef";
      out += "\\x";
      out += kHex[c >> 4];
      out += kHex[c & 0xf];
    } else {
      out += static_cast<char>(c);
    }
  }
  if (value.size() > kMax) out += "...";
  return out + "'";
}

// A field name the proxy reads or writes itself (CheckProxyFieldName), for Loader::Checked.
std::string ProxyFieldName(std::string_view text, std::string* out) {
  std::string problem = CheckProxyFieldName(text);
  if (problem.empty()) *out = std::string(text);
  return problem;
}

// Whether two files agree on one tls setting (a file without tls agrees with any: the "tls" key
// itself tells whether both have it).
template <typename Field>
bool TlsField(const ProxyConfig& a, const ProxyConfig& b, Field ListenTlsConfig::*field) {
  return !a.tls || !b.tls || (*a.tls).*field == (*b.tls).*field;
}

}  // namespace

namespace config_internal {

// A 1-based position in the file.
struct Position {
  int line = 1;
  int column = 1;
};

// One key of a mapping, first occurrence only.
struct Entry {
  std::string key;
  Position key_at;
  YAML::Node value;
};

class Loader {
 public:
  Loader(std::string_view text, std::string file_name) : text_(text), file_(std::move(file_name)) {}

  ConfigResult Run() {
    auto config = std::make_shared<ProxyConfig>();
    config->source_path = file_;
    config_ = config.get();
    try {
      // YAML::Load reads the first document only. Not LoadAll: yaml-cpp 0.7 (Debian's) loops
      // forever in LoadAll on some malformed input (a lone ','), found by fuzzing.
      std::vector<YAML::Node> documents{YAML::Load(std::string(text_))};
      if (std::optional<int> line = SecondDocumentLine(text_)) {
        Error(Position{*line, 1}, "the route file must hold one YAML document; found another here");
      }
      Validate(documents, config.get());
    } catch (const YAML::Exception& e) {
      // A syntax error ends the walk: the tree after it does not exist.
      errors_.clear();
      Error(e.mark.is_null() ? Position{} : ToPosition(e.mark), "YAML syntax error: " + e.msg);
    }
    ConfigResult result;
    std::stable_sort(errors_.begin(), errors_.end(), [](const ConfigError& a, const ConfigError& b) {
      return std::tie(a.line, a.column) < std::tie(b.line, b.column);
    });
    result.errors = std::move(errors_);
    if (result.errors.empty()) result.config = std::move(config);
    return result;
  }

  // The helpers below are public for the key table's loaders (ConfigKeys()), which is where
  // each key's parsing lives.
  static Position ToPosition(const YAML::Mark& mark) { return {mark.line + 1, mark.column + 1}; }

  Position PositionOfOffset(size_t offset) const {
    Position at;
    for (size_t i = 0; i < offset && i < text_.size(); ++i) {
      if (text_[i] == '\n') {
        ++at.line;
        at.column = 1;
      } else {
        ++at.column;
      }
    }
    return at;
  }

  // Where a value is. yaml-cpp marks an empty value (a key with nothing after it) at the next
  // token, often on another line, so such a value is reported at its key (or its list dash).
  Position At(const YAML::Node& node, std::optional<Position> owner = std::nullopt) const {
    const YAML::Mark mark = node.Mark();
    if (mark.is_null()) return owner.value_or(Position{});
    if (!node.IsNull()) return ToPosition(mark);
    const std::string_view rest = text_.substr(std::min<size_t>(mark.pos, text_.size()));
    for (std::string_view literal : {"~", "null", "Null", "NULL"}) {
      if (rest.starts_with(literal)) return ToPosition(mark);
    }
    if (owner) return *owner;
    // A list item: look back for its '-'.
    size_t i = std::min<size_t>(mark.pos, text_.size());
    while (i > 0 && (text_[i - 1] == ' ' || text_[i - 1] == '\n' || text_[i - 1] == '\r' ||
                     text_[i - 1] == '\t')) {
      --i;
    }
    if (i > 0 && text_[i - 1] == '-') return PositionOfOffset(i - 1);
    return ToPosition(mark);
  }

  void Error(Position at, std::string message) {
    errors_.push_back(ConfigError{file_, at.line, at.column, std::move(message)});
  }

  static std::string Describe(const YAML::Node& node) {
    switch (node.Type()) {
      case YAML::NodeType::Null:
        return "nothing";
      case YAML::NodeType::Scalar:
        return Quote(node.Scalar());
      case YAML::NodeType::Sequence:
        return "a list";
      case YAML::NodeType::Map:
        return "a mapping";
      default:
        return "nothing";
    }
  }

  // The keys of a mapping, each checked against the known ones; duplicates and unknown keys
  // are errors and left out.
  std::vector<Entry> Entries(const YAML::Node& map, std::span<const std::string_view> known,
                             const std::string& where) {
    return EntriesOf(map, &known, where);
  }
  // The keys of a mapping whose keys are names the file chooses (lock_services): duplicates are
  // errors and left out.
  std::vector<Entry> NamedEntries(const YAML::Node& map, const std::string& where) {
    return EntriesOf(map, nullptr, where);
  }
  std::vector<Entry> EntriesOf(const YAML::Node& map, const std::span<const std::string_view>* known,
                               const std::string& where) {
    std::vector<Entry> entries;
    std::map<std::string, int> first_line;
    for (auto it = map.begin(); it != map.end(); ++it) {
      const YAML::Node key_node = it->first;
      const Position key_at = At(key_node);
      if (!key_node.IsScalar()) {
        Error(key_at, Prefixed(where, "expected a key name, got " + Describe(key_node)));
        continue;
      }
      const std::string key = key_node.Scalar();
      if (auto first = first_line.find(key); first != first_line.end()) {
        Error(key_at, Prefixed(where, "duplicate key '" + key + "' (first at line " +
                                          std::to_string(first->second) + ")"));
        continue;
      }
      first_line.emplace(key, key_at.line);
      if (known && std::find(known->begin(), known->end(), key) == known->end()) {
        Error(key_at, Prefixed(where, UnknownKeyMessage(key, *known, where)));
        continue;
      }
      config_->written_at.emplace(where.empty() ? key : where + "." + key, std::pair{key_at.line, key_at.column});
      entries.push_back(Entry{key, key_at, it->second});
    }
    return entries;
  }

  static std::string Prefixed(const std::string& where, const std::string& message) {
    return where.empty() ? message : where + ": " + message;
  }

  static std::string UnknownKeyMessage(const std::string& key, std::span<const std::string_view> known,
                                       const std::string& where) {
    std::string message = "unknown key '" + key + "'";
    const std::string_view best = Nearest(key, known);
    if (!best.empty()) return message + "; did you mean '" + std::string(best) + "'?";
    if (key == "<<") return message + " (YAML merge keys are not supported)";
    // A nested key at the top level is usually an indentation slip.
    if (where.empty()) {
      for (const ConfigKey& nested : ConfigKeys()) {
        if (nested.section != KeySection::kTop && nested.name == key) {
          return message + "; it belongs in " + SectionOwner(nested.section) + " (check the indentation)";
        }
      }
    }
    return message + " (known keys: " + Join(known) + ")";
  }

  // The candidate within edit distance 2 of word, the nearest first; "" if none.
  template <typename Candidates>
  static std::string_view Nearest(std::string_view word, const Candidates& candidates) {
    std::string_view best;
    size_t best_distance = 3;
    for (std::string_view candidate : candidates) {
      const size_t d = EditDistance(word, candidate);
      if (d < best_distance) {
        best_distance = d;
        best = candidate;
      }
    }
    return best;
  }

  // The value as a string, or an error when it is not a scalar.
  std::optional<std::string> String(const Entry& e, const std::string& path) {
    if (e.value.IsScalar()) return e.value.Scalar();
    Error(At(e.value, e.key_at), path + ": expected a string, got " + Describe(e.value));
    return std::nullopt;
  }

  // A scalar checked by one of the value_parsers; reports "path: problem (got 'value')".
  template <typename T, typename Check>
  bool Checked(const Entry& e, const std::string& path, Check check, T* out) {
    std::optional<std::string> text = String(e, path);
    if (!text) return false;
    const std::string problem = check(*text, out);
    if (problem.empty()) return true;
    const bool names_value = problem.find(Quote(*text)) != std::string::npos;
    Error(At(e.value, e.key_at), path + ": " + problem + (names_value ? "" : " (got " + Quote(*text) + ")"));
    return false;
  }

  // Plain (unquoted) scalars only: "4" in quotes is a string in YAML, not a number.
  std::optional<uint64_t> Unsigned(const Entry& e, const std::string& path) {
    if (e.value.IsScalar() && e.value.Tag() == "!") {
      Error(At(e.value), path + ": expected an integer, got a quoted string");
      return std::nullopt;
    }
    uint64_t value = 0;
    if (!e.value.IsScalar()) {
      Error(At(e.value, e.key_at), path + ": expected an integer, got " + Describe(e.value));
      return std::nullopt;
    }
    if (!Checked(e, path, CheckUnsigned, &value)) return std::nullopt;
    return value;
  }

  std::optional<bool> Bool(const Entry& e, const std::string& path) {
    const bool plain = e.value.IsScalar() && e.value.Tag() != "!";
    if (plain && e.value.Scalar() == "true") return true;
    if (plain && e.value.Scalar() == "false") return false;
    Error(At(e.value, e.key_at), path + ": expected true or false, got " + Describe(e.value));
    return std::nullopt;
  }

  // One of a few fixed words.
  template <typename Enum>
  void Choice(const Entry& e, const std::string& path,
              std::initializer_list<std::pair<std::string_view, Enum>> choices, Enum* out) {
    std::optional<std::string> text = String(e, path);
    if (!text) return;
    std::string words;
    for (const auto& [word, value] : choices) {
      if (*text == word) {
        *out = value;
        return;
      }
      words += words.empty() ? "" : " or ";
      words += "'" + std::string(word) + "'";
    }
    Error(At(e.value), path + ": expected " + words + ", got " + Quote(*text));
  }

  // A nested mapping; an explicitly empty value ("timeouts:" with every line commented out)
  // means "all defaults".
  bool Mapping(const Entry& e, const std::string& path) {
    if (e.value.IsMap()) return true;
    if (!e.value.IsNull()) {
      Error(At(e.value), path + ": expected a mapping, got " + Describe(e.value));
    }
    return false;
  }

  // The 1-based line of the first content of a second document (after a "---" or "..." at
  // column 0 that follows the first document's content), if any.
  static std::optional<int> SecondDocumentLine(std::string_view text) {
    bool content = false;
    std::optional<int> marker;
    int line_number = 0;
    size_t start = 0;
    while (start <= text.size()) {
      size_t end = text.find('\n', start);
      std::string_view line = text.substr(start, end == std::string_view::npos ? std::string_view::npos : end - start);
      ++line_number;
      const bool is_marker = (line.substr(0, 3) == "---" || line.substr(0, 3) == "...") &&
                             (line.size() == 3 || line[3] == ' ' || line[3] == '\t' || line[3] == '\r');
      size_t first = line.find_first_not_of(" \t\r");
      const bool blank = first == std::string_view::npos || line[first] == '#';
      if (is_marker) {
        if (content && !marker) marker = line_number;
      } else if (!blank) {
        if (marker) return line_number;
        content = true;
      }
      if (end == std::string_view::npos) break;
      start = end + 1;
    }
    return std::nullopt;
  }

  void Validate(const std::vector<YAML::Node>& documents, ProxyConfig* config) {
    if (documents.empty() || documents.front().IsNull()) {
      Error(Position{}, "the route file is empty; it needs at least 'backend' and 'state_file' (or 'fence_store')");
      return;
    }
    for (size_t i = 1; i < documents.size(); ++i) {
      if (!documents[i].IsNull()) {
        Error(At(documents[i]), "the route file must hold one YAML document; found another here");
        break;
      }
    }
    const YAML::Node& root = documents.front();
    if (!root.IsMap()) {
      Error(At(root), "expected a mapping of settings (key: value) at the top level, got " +
                          Describe(root));
      return;
    }
    const Position root_at = At(root);
    Walk(root, KeySection::kTop, "", root_at);
    CheckFenceStoreUse(*config);
    CheckBackendTls(*config);
    CheckKeyHeaders(*config);
    CheckVerifyServices(*config);
    CheckListenTls(*config);
    // h2 is offered to every TLS client, whatever the backend speaks: an HTTP/1.1 backend is
    // reached by one HTTP/1.1 exchange per stream (server/h2_http1_relay.h).
    if (config->tls) config->tls->offer_h2 = true;
    CheckAddresses(*config, top_.listen_ok, top_.admin_ok, top_.backend_ok, top_.listen_at, top_.admin_at,
                   top_.backend_at.value_or(root_at));
  }

  // Reads one mapping of a section: unknown and duplicate keys are errors, every other key goes
  // to its table entry's loader, and a required key left out is reported at owner_at.
  void Walk(const YAML::Node& map, KeySection section, const std::string& where, Position owner_at) {
    std::vector<std::string_view> known;
    for (const ConfigKey& key : ConfigKeys()) {
      if (key.section == section) known.push_back(key.name);
    }
    std::set<std::string, std::less<>> written;
    for (const Entry& e : Entries(map, known, where)) {
      const ConfigKey* key = FindKey(section, e.key);
      written.insert(e.key);
      key->load(*this, e, where.empty() ? e.key : where + "." + e.key);
    }
    for (const ConfigKey& key : ConfigKeys()) {
      if (key.section != section || !key.required || written.contains(key.name)) continue;
      if (!key.required_unless.empty() && written.contains(key.required_unless)) continue;
      std::string message = "missing required key '" + std::string(key.name) + "'";
      if (!key.required_hint.empty()) message += " (" + std::string(key.required_hint) + ")";
      Error(owner_at, Prefixed(where, message));
    }
  }

  static const ConfigKey* FindKey(KeySection section, std::string_view name) {
    for (const ConfigKey& key : ConfigKeys()) {
      if (key.section == section && key.name == name) return &key;
    }
    return nullptr;
  }

  static std::string SectionOwner(KeySection section) {
    return section == KeySection::kRoute ? "a route under routes" : std::string(SectionName(section));
  }

  // Collisions between listeners, and a backend that is the proxy itself. Reported where the
  // operator wrote an address, not at a default.
  void CheckAddresses(const ProxyConfig& c, bool listen_ok, bool admin_ok, bool backend_ok,
                      std::optional<Position> listen_at, std::optional<Position> admin_at,
                      Position backend_at) {
    auto collide = [](const HostPort& a, const HostPort& b) {
      return a.port == b.port && (a.host == b.host || IsWildcardHost(a.host) || IsWildcardHost(b.host));
    };
    if (listen_ok && admin_ok && collide(c.listen, c.admin_listen)) {
      if (admin_at) {
        Error(*admin_at, "admin_listen " + c.admin_listen.ToString() + " collides with listen " +
                             c.listen.ToString() + "; they must be different addresses");
      } else {
        Error(listen_at.value_or(Position{}), "listen " + c.listen.ToString() +
                                                  " collides with the default admin_listen " +
                                                  c.admin_listen.ToString() + "; set admin_listen");
      }
    }
    auto loops = [](const HostPort& backend, const HostPort& listener) {
      return backend.port == listener.port &&
             (backend.host == listener.host ||
              (IsWildcardHost(listener.host) && (IsLoopbackHost(backend.host) || IsWildcardHost(backend.host))));
    };
    if (backend_ok && listen_ok && loops(c.backend, c.listen)) {
      Error(backend_at, "backend " + c.backend.ToString() + " is the proxy's own listen address");
    } else if (backend_ok && admin_ok && loops(c.backend, c.admin_listen)) {
      Error(backend_at, "backend " + c.backend.ToString() + " is the proxy's own admin_listen address");
    } else if (backend_ok && c.plain_listen && loops(c.backend, *c.plain_listen)) {
      Error(backend_at, "backend " + c.backend.ToString() + " is the proxy's own plain_listen address");
    }
    if (!c.plain_listen || !top_.plain_at) return;
    if (listen_ok && collide(c.listen, *c.plain_listen)) {
      Error(*top_.plain_at, "plain_listen " + c.plain_listen->ToString() + " collides with listen " +
                                c.listen.ToString() + "; they must be different addresses");
    } else if (admin_ok && collide(c.admin_listen, *c.plain_listen)) {
      Error(*top_.plain_at, "plain_listen " + c.plain_listen->ToString() + " collides with admin_listen " +
                                c.admin_listen.ToString() + "; they must be different addresses");
    }
  }

  // tls: {cert_file, key_file, client_ca_file, client_certificate, min_version}. The keys are the
  // table's (KeySection::kTls); what they need of each other is checked in CheckListenTls.
  void LoadListenTls(const Entry& e, const std::string& path) {
    top_.tls_at = e.key_at;
    if (!e.value.IsMap()) {
      Error(At(e.value, e.key_at), path + ": expected a mapping with cert_file and key_file (TLS on listen), got " +
                                       Describe(e.value));
      return;
    }
    config_->tls.emplace();
    Walk(e.value, KeySection::kTls, path, At(e.value));
  }

  // A file the TLS module reads: a non-empty path, and where it is written (for the errors of
  // loading it, which come later).
  void TlsFile(const Entry& e, const std::string& path, std::string* out, ConfigPosition* at) {
    const Position where = At(e.value, e.key_at);
    *at = ConfigPosition{where.line, where.column};
    NonEmpty(e, path, out);
  }

  // What the tls keys and the keys that rest on them need of each other: client_certificate says
  // how to ask for a certificate, so it needs the CAs that sign them; a route's writers are
  // identities from verified client certificates; plain_listen is the listener beside a TLS one.
  void CheckListenTls(const ProxyConfig& c) {
    // Written, if perhaps in error (an error of its own then, not one more here).
    const bool client_ca = c.tls && c.tls->client_ca_file_at.line != 0;
    const bool tls_in_error = top_.tls_at && !c.tls;
    if (top_.client_certificate_at && c.tls && !client_ca) {
      Error(*top_.client_certificate_at, "tls.client_certificate: needs tls.client_ca_file, the CAs that sign the "
                                         "client certificates to ask for");
    }
    if (top_.plain_at && top_.plain_ok && !top_.tls_at) {
      Error(*top_.plain_at, "plain_listen: is the plain-HTTP listener beside a TLS listen; without tls, listen is "
                            "plain HTTP already (add tls, or remove plain_listen)");
    }
    for (size_t i = 0; i < c.routes.size() && i < route_keys_.size(); ++i) {
      const RouteConfig& route = c.routes[i];
      const RouteKeys& at = route_keys_[i];
      if (!route.writers.empty() && !client_ca && !tls_in_error && at.writers_at) {
        Error(*at.writers_at, at.where + ".writers: needs tls.client_ca_file: writers are identities from verified "
                                         "client certificates, and without client_ca_file no client has one");
      }
      if (route.identity_header.empty() || !at.identity_header_at) continue;
      const std::string path = at.where + ".identity_header";
      if (EqualsIgnoreCase(route.identity_header, c.token_header)) {
        Error(*at.identity_header_at, path + ": '" + route.identity_header + "' is the token_header; the identity "
                                             "and the token must be different fields");
        continue;
      }
      for (const RouteConfig& other : c.routes) {
        if (other.fence_key.source == FenceKeySpec::Source::kHeader &&
            EqualsIgnoreCase(route.identity_header, other.fence_key.header)) {
          Error(*at.identity_header_at, path + ": '" + route.identity_header + "' is route '" + other.name +
                                            "' fence_key header; the identity and a fence key must be different "
                                            "fields");
          break;
        }
      }
    }
  }

  // timeouts.*: a duration of at most 24h.
  void Timeout(const Entry& e, const std::string& path, std::chrono::milliseconds* field) {
    std::chrono::milliseconds value{};
    if (!Checked(e, path, CheckDuration, &value)) return;
    if (value > kMaxTimeout) {
      Error(At(e.value), path + ": must be at most 24h");
      return;
    }
    *field = value;
  }

  std::optional<uint64_t> Size(const Entry& e, const std::string& path) {
    uint64_t bytes = 0;
    if (!Checked(e, path, CheckSize, &bytes)) return std::nullopt;
    return bytes;
  }

  void LoadLimits(const YAML::Node& map) {
    Limits* out = &config_->limits;
    Walk(map, KeySection::kLimits, "limits", At(map));
    // A buffered body is a whole body: it cannot be larger than a body may be. Left out, the
    // default follows a smaller max_body_bytes.
    if (!buffered_at_) {
      out->buffered_body_bytes = std::min(out->buffered_body_bytes, out->max_body_bytes);
    } else if (out->buffered_body_bytes > out->max_body_bytes) {
      Error(*buffered_at_, "limits.buffered_body_bytes: must be at most limits.max_body_bytes (" +
                               std::to_string(out->max_body_bytes) + " bytes), got " +
                               std::to_string(out->buffered_body_bytes) + " bytes");
    }
  }

  void LoadRoutes(const YAML::Node& list) {
    size_t index = 0;
    for (auto it = list.begin(); it != list.end(); ++it, ++index) {
      const YAML::Node item = *it;
      const std::string where = "routes[" + std::to_string(index) + "]";
      if (!item.IsMap()) {
        Error(At(item), where + ": expected a route (a mapping with name and prefix), got " +
                            Describe(item));
        continue;
      }
      route_ = RouteState{};
      const Position route_at = At(item);
      Walk(item, KeySection::kRoute, where, route_at);
      CheckKeySettings(where);
      CheckVerifyKey(where);
      RouteConfig& route = route_.route;
      // A route left without name or prefix is already an error (and makes the file invalid).
      if (!route_.have_fence) route.fence = route.name;
      // Errors already make the whole file invalid; only complete routes are kept.
      if (route_.ok && route_.have_name && route_.have_prefix) {
        // A prefix matched without case must not collide, folded, with any other prefix: the
        // longest-match rule could not choose between them.
        const std::string folded = ToAsciiLower(route.prefix);
        if (auto [first, added] = folded_prefix_.emplace(folded, FoldedPrefix{At(item).line, route.path_case_insensitive});
            !added && (route.path_case_insensitive || first->second.case_insensitive)) {
          Error(route_at, where + ": prefix '" + route.prefix +
                              "' is the same, ignoring case, as the prefix at line " +
                              std::to_string(first->second.line) + ", and one of them has path_case_insensitive");
          continue;
        }
        route_keys_.push_back(RouteKeys{where, route.name, route.fence, route_at, route_.fence_key_at, route_.header_at,
                                        route_.max_keys_at, route_.token_order_at, route_.forget_at, route_.verify_at,
                                        route_.verify_service_at, route_.verify_lock_at, route_.writers_at,
                                        route_.identity_header_at});
        config_->routes.push_back(std::move(route));
      }
    }
    CheckFenceAgreement();
  }

  // fence_key: {path_segment: N} or {header: NAME}, exactly one.
  void LoadFenceKey(const Entry& e, const std::string& path) {
    route_.fence_key_written = true;
    route_.fence_key_at = At(e.value, e.key_at);
    if (!e.value.IsMap()) {
      Error(At(e.value, e.key_at), path + ": expected a mapping, {path_segment: N} or {header: NAME}, got " +
                                       Describe(e.value));
      route_.ok = false;
      return;
    }
    const size_t errors_before = errors_.size();
    const std::vector<Entry> entries = Entries(e.value, kFenceKeyKeys, path);
    if (entries.size() != 1) {
      if (entries.empty() && errors_.size() == errors_before) {
        Error(At(e.value, e.key_at), path + ": give path_segment (the Nth path segment after the prefix) or header "
                                            "(a request header field) to take the key from");
      } else if (entries.size() > 1) {
        Error(entries[1].key_at, path + ": give exactly one of path_segment and header, not both");
      }
      route_.ok = false;
      return;
    }
    const Entry& source = entries.front();
    const std::string source_path = path + "." + source.key;
    FenceKeySpec spec;
    if (source.key == "path_segment") {
      std::optional<uint64_t> n = Unsigned(source, source_path);
      if (!n) {
        route_.ok = false;
        return;
      }
      if (*n < 1 || *n > kMaxFenceKeySegment) {
        Error(At(source.value), source_path + ": must be from 1 (the first segment after the prefix) to " +
                                    std::to_string(kMaxFenceKeySegment) + ", got " + std::to_string(*n));
        route_.ok = false;
        return;
      }
      spec.source = FenceKeySpec::Source::kPathSegment;
      spec.path_segment = static_cast<unsigned>(*n);
    } else {
      std::string header;
      auto check = [](std::string_view text, std::string* out) -> std::string {
        std::string problem = CheckHeaderName(text);
        if (problem.empty()) *out = std::string(text);
        return problem;
      };
      if (!Checked(source, source_path, check, &header)) {
        route_.ok = false;
        return;
      }
      spec.source = FenceKeySpec::Source::kHeader;
      spec.header = std::move(header);
      route_.header_at = At(source.value);  // checked against token_header once the whole file is read
    }
    route_.route.fence_key = std::move(spec);
  }

  // lock_services: NAME -> {etcd: {...}} or {zookeeper: {...}}. Only services without a problem
  // are kept; every name written is remembered so that a route naming a broken service is not
  // told, a second time, that it does not exist.
  void LoadLockServices(const Entry& e, const std::string& path) {
    if (e.value.IsNull()) return;  // every service commented out: none
    if (!e.value.IsMap()) {
      Error(At(e.value), path + ": expected a mapping of NAME: {etcd: {...}} or NAME: {zookeeper: {...}}, got " +
                             Describe(e.value));
      return;
    }
    for (const Entry& service : NamedEntries(e.value, path)) {
      lock_services_written_.insert(service.key);
      if (const std::string problem = CheckName(service.key); !problem.empty()) {
        Error(service.key_at, path + ": a lock service name " + problem + " (got " + Quote(service.key) + ")");
        continue;
      }
      const std::string where = path + "." + service.key;
      const size_t errors_before = errors_.size();
      LockServiceConfig config;
      config.name = service.key;
      LoadLockService(service, where, &config);
      if (errors_.size() == errors_before) config_->lock_services.push_back(std::move(config));
    }
  }

  // One service: exactly one of etcd and zookeeper.
  void LoadLockService(const Entry& service, const std::string& where, LockServiceConfig* out) {
    if (!service.value.IsMap()) {
      Error(At(service.value, service.key_at),
            where + ": expected a mapping, {etcd: {...}} or {zookeeper: {...}}, got " + Describe(service.value));
      return;
    }
    const size_t errors_before = errors_.size();
    const std::vector<Entry> kinds = Entries(service.value, kLockServiceKinds, where);
    if (kinds.size() != 1) {
      if (kinds.empty() && errors_.size() == errors_before) {
        Error(At(service.value, service.key_at), where + ": give etcd or zookeeper, the kind of lock service");
      } else if (kinds.size() > 1) {
        Error(kinds[1].key_at, where + ": give exactly one of etcd and zookeeper, not both");
      }
      return;
    }
    const Entry& kind = kinds.front();
    const std::string kind_path = where + "." + kind.key;
    if (!kind.value.IsMap()) {
      Error(At(kind.value, kind.key_at), kind_path + ": expected a mapping with " +
                                             (kind.key == "etcd" ? "endpoints" : "hosts") + ", got " +
                                             Describe(kind.value));
      return;
    }
    if (kind.key == "etcd") {
      out->kind = LockServiceConfig::Kind::kEtcd;
      LoadEtcd(kind.value, At(kind.value), kind_path, kEtcdKeys, "a raise waits this long for the lock service",
               &out->etcd, [](const Entry&, const std::string&) {});
    } else {
      out->kind = LockServiceConfig::Kind::kZooKeeper;
      LoadZooKeeper(kind.value, At(kind.value), kind_path, &out->zookeeper);
    }
  }

  // An etcd client block, a lock service's or the fence store's: endpoints, timeout, authentication
  // and TLS, checked alike for both. known is the block's key list; the keys only the caller has (a
  // fence store's prefix and member_ttl) go to other_key(entry, path). timeout_why says, in the
  // "at most 1m" message, what waits for an etcd answer.
  template <typename OtherKey>
  void LoadEtcd(const YAML::Node& map, Position at, const std::string& path, std::span<const std::string_view> known,
                std::string_view timeout_why, EtcdClientConfig* out, OtherKey other_key) {
    std::optional<Position> endpoints_at, username_at, password_file_at, tls_at;
    bool any_https = false, endpoints_ok = false;
    for (const Entry& e : Entries(map, known, path)) {
      const std::string key_path = path + "." + e.key;
      if (e.key == "endpoints") {
        endpoints_at = At(e.value, e.key_at);
        endpoints_ok = LoadEndpoints(e, key_path, &out->endpoints, &any_https);
      } else if (e.key == "timeout") {
        LockServiceTimeout(e, key_path, &out->timeout, timeout_why);
      } else if (e.key == "username") {
        username_at = At(e.value, e.key_at);
        NonEmpty(e, key_path, &out->username);
      } else if (e.key == "password_file") {
        password_file_at = At(e.value, e.key_at);
        NonEmpty(e, key_path, &out->password_file);
      } else if (e.key == "password") {
        Error(e.key_at, key_path + ": the route file carries no secret; write the password into a file (a "
                                   "Kubernetes Secret) and give its path as password_file");
      } else if (e.key == "tls") {
        tls_at = At(e.value, e.key_at);
        LoadTls(e, key_path, &out->tls_settings);
      } else {
        other_key(e, key_path);
      }
    }
    if (!endpoints_at) {
      Error(at, path + ": missing required key 'endpoints' (the etcd members, e.g. [\"http://127.0.0.1:2379\"])");
    }
    if (username_at && !password_file_at) {
      Error(*username_at, path + ".username: needs password_file, the file holding the user's password");
    } else if (password_file_at && !username_at) {
      Error(*password_file_at, path + ".password_file: needs username, the etcd user the password is for");
    }
    if (tls_at && endpoints_ok && !any_https) {
      Error(*tls_at, path + ".tls: the endpoints are http://; TLS settings need https:// endpoints (write "
                            "https://, or drop tls)");
    }
    out->tls = any_https || tls_at.has_value();
  }

  // A non-empty list of distinct endpoints, all http:// or all https://.
  bool LoadEndpoints(const Entry& e, const std::string& path, std::vector<std::string>* out, bool* any_https) {
    if (!e.value.IsSequence()) {
      Error(At(e.value, e.key_at), path + ": expected a list such as [\"http://127.0.0.1:2379\"], got " +
                                       Describe(e.value));
      return false;
    }
    if (e.value.size() == 0) {
      Error(At(e.value), path + ": must list at least one endpoint");
      return false;
    }
    std::vector<std::string> endpoints;
    std::optional<bool> first_https;
    bool ok = true;
    for (auto it = e.value.begin(); it != e.value.end(); ++it) {
      const YAML::Node item = *it;
      if (!item.IsScalar()) {
        Error(At(item), path + ": expected an endpoint such as \"http://127.0.0.1:2379\", got " + Describe(item));
        ok = false;
        continue;
      }
      const std::string endpoint = item.Scalar();
      bool https = false;
      if (const std::string problem = CheckEtcdEndpoint(endpoint, &https); !problem.empty()) {
        Error(At(item), path + ": " + problem + " (got " + Quote(endpoint) + ")");
        ok = false;
        continue;
      }
      if (std::find(endpoints.begin(), endpoints.end(), endpoint) != endpoints.end()) {
        Error(At(item), path + ": duplicate endpoint " + Quote(endpoint));
        ok = false;
        continue;
      }
      if (first_https && *first_https != https) {
        Error(At(item), path + ": mixes http:// and https:// endpoints; one client talks to every member the "
                               "same way (the first endpoint is " + (*first_https ? "https" : "http") + "://)");
        ok = false;
        continue;
      }
      first_https = https;
      endpoints.push_back(endpoint);
    }
    if (!ok) return false;
    *any_https = first_https.value_or(false);
    *out = std::move(endpoints);
    return true;
  }

  // tls: {ca_file, cert_file, key_file, server_name}, every one optional; an empty block means
  // TLS with the system's trust store.
  void LoadTls(const Entry& e, const std::string& path, TlsSettings* out) {
    if (!Mapping(e, path)) return;
    std::optional<Position> cert_at, key_at;
    for (const Entry& f : Entries(e.value, kTlsKeys, path)) {
      const std::string key_path = path + "." + f.key;
      if (f.key == "ca_file") {
        NonEmpty(f, key_path, &out->ca_file);
      } else if (f.key == "cert_file") {
        cert_at = At(f.value, f.key_at);
        NonEmpty(f, key_path, &out->cert_file);
      } else if (f.key == "key_file") {
        key_at = At(f.value, f.key_at);
        NonEmpty(f, key_path, &out->key_file);
      } else if (f.key == "server_name") {
        auto check = [](std::string_view text, std::string* name) -> std::string {
          std::string problem = CheckHostName(text);
          if (problem.empty()) *name = std::string(text);
          return problem;
        };
        Checked(f, key_path, check, &out->server_name);
      }
    }
    if (cert_at && !key_at) {
      Error(*cert_at, path + ".cert_file: needs key_file, the client certificate's private key");
    } else if (key_at && !cert_at) {
      Error(*key_at, path + ".key_file: needs cert_file, the client certificate the key belongs to");
    }
  }

  void LoadZooKeeper(const YAML::Node& map, Position at, const std::string& path, ZooKeeperClientConfig* out) {
    bool have_hosts = false;
    for (const Entry& e : Entries(map, kZooKeeperKeys, path)) {
      const std::string key_path = path + "." + e.key;
      if (e.key == "hosts") {
        have_hosts = true;
        auto check = [](std::string_view text, std::string* hosts) -> std::string {
          std::string problem = CheckZooKeeperHosts(text);
          if (problem.empty()) *hosts = std::string(text);
          return problem;
        };
        Checked(e, key_path, check, &out->hosts);
      } else if (e.key == "timeout") {
        LockServiceTimeout(e, key_path, &out->timeout);
      } else if (e.key == "session_timeout") {
        std::chrono::milliseconds value{};
        if (!Checked(e, key_path, CheckDuration, &value)) continue;
        if (value < kMinZooKeeperSession || value > kMaxZooKeeperSession) {
          Error(At(e.value), key_path + ": must be from 2s to 10m (servers clamp it to 2 to 20 tickTimes: 4s to "
                                        "40s with the default tickTime of 2s)");
          continue;
        }
        out->session_timeout = value;
      }
    }
    if (!have_hosts) {
      Error(at, path + ": missing required key 'hosts' (the connect string, e.g. \"127.0.0.1:2181\")");
    }
  }

  // fence_store: {etcd: {endpoints, prefix, member_ttl, timeout, username, password_file, tls}}.
  // Kept only without a problem; whether it may be used with the rest of the file (state_file,
  // forgetting routes) is checked once the whole file is read (CheckFenceStoreUse).
  void LoadFenceStore(const Entry& e, const std::string& path) {
    top_.fence_store_at = e.key_at;
    if (!e.value.IsMap()) {
      Error(At(e.value, e.key_at), path + ": expected a mapping, {etcd: {endpoints: [...], prefix: \"/...\"}}, got " +
                                       Describe(e.value));
      return;
    }
    const size_t errors_before = errors_.size();
    std::optional<Entry> etcd;
    for (const Entry& kind : NamedEntries(e.value, path)) {
      if (kind.key == "etcd") {
        etcd = kind;
        continue;
      }
      // Named as a kind, not as a key: lock_services know zookeeper, which is no fence store.
      std::string message = path + ": unknown kind " + Quote(kind.key);
      if (const std::string_view best = Nearest(kind.key, kFenceStoreKinds); !best.empty()) {
        message += "; did you mean '" + std::string(best) + "'?";
      } else {
        message += "; fences are shared in etcd only (write etcd: {...})";
      }
      Error(kind.key_at, message);
    }
    if (!etcd) {
      if (errors_.size() == errors_before) {
        Error(At(e.value, e.key_at), path + ": give etcd, the store's kind (etcd: {endpoints: [...], prefix: \"/...\"})");
      }
      return;
    }
    const std::string etcd_path = path + ".etcd";
    if (!etcd->value.IsMap()) {
      Error(At(etcd->value, etcd->key_at),
            etcd_path + ": expected a mapping with endpoints and prefix, got " + Describe(etcd->value));
      return;
    }
    FenceStoreConfig store;
    bool have_prefix = false;
    LoadEtcd(etcd->value, At(etcd->value), etcd_path, kFenceStoreEtcdKeys, "each etcd call of a raise waits this long",
             &store.etcd, [&](const Entry& f, const std::string& key_path) {
               if (f.key == "prefix") {
                 have_prefix = true;
                 auto check = [](std::string_view text, std::string* prefix) -> std::string {
                   std::string problem = CheckFenceStorePrefix(text);
                   if (problem.empty()) *prefix = std::string(text);
                   return problem;
                 };
                 Checked(f, key_path, check, &store.prefix);
               } else if (f.key == "member_ttl") {
                 MemberTtl(f, key_path, &store.member_ttl);
               }
             });
    if (!have_prefix) {
      Error(At(etcd->value), etcd_path + ": missing required key 'prefix' (the etcd key prefix of the shared fences: "
                                         "every proxy with the same prefix shares every fence, e.g. "
                                         "\"/fencing-proxy/orders-db\")");
    }
    if (errors_.size() == errors_before) config_->fence_store = std::move(store);
  }

  // The membership lease's TTL: a duration in whole seconds (etcd grants lease TTLs in seconds),
  // from 2s to 300s.
  void MemberTtl(const Entry& e, const std::string& path, std::chrono::seconds* field) {
    std::chrono::milliseconds value{};
    if (!Checked(e, path, CheckDuration, &value)) return;
    const std::string got = " (got " + Quote(e.value.Scalar()) + ")";
    // Whole seconds first: "1500ms" is a TTL etcd cannot grant, whatever the bounds.
    if (value % std::chrono::seconds(1) != std::chrono::milliseconds(0)) {
      Error(At(e.value), path + ": must be whole seconds: etcd lease TTLs are seconds" + got);
      return;
    }
    if (value < kMinMemberTtl || value > kMaxMemberTtl) {
      Error(At(e.value), path + ": must be from 2s to 300s" + got);
      return;
    }
    *field = std::chrono::duration_cast<std::chrono::seconds>(value);
  }

  // What a fence store rules out elsewhere in the file, reported where it is written: a state file
  // (the fences live in one place), and forgetting idle keys (the shared store keeps every key:
  // forgetting one would fold its max into a floor that every proxy of the prefix must agree on).
  void CheckFenceStoreUse(const ProxyConfig& c) {
    if (!top_.fence_store_at) return;
    if (top_.state_file_at) {
      Error(*top_.fence_store_at,
            "fence_store and state_file (line " + std::to_string(top_.state_file_at->line) +
                ") exclude each other; a fence_store keeps the fences in etcd: remove state_file (or "
                "fence_store, to keep them in the state file)");
    }
    for (size_t i = 0; i < c.routes.size() && i < route_keys_.size(); ++i) {
      const RouteKeys& at = route_keys_[i];
      if (!at.forget_at || !c.routes[i].fence_key.keyed()) continue;  // without fence_key: an error already
      Error(*at.forget_at, at.where + ".forget_idle_keys_after: not with fence_store: keys are not forgotten in the "
                                      "shared store (etcd keeps every key's max); remove forget_idle_keys_after");
    }
  }

  // backend_tls describes the TLS of an https:// backend: with http:// it would be ignored, and a
  // setting that is silently ignored is a setting the operator believes is in force. Checked once
  // the whole file is read (backend may come after it).
  void CheckBackendTls(const ProxyConfig& c) {
    if (top_.backend_tls_at && top_.backend_ok && !c.backend_https) {
      Error(*top_.backend_tls_at, "backend_tls: the backend is http://; TLS settings need an https:// backend (write "
                                  "https://, or drop backend_tls)");
    }
    // h2c is HTTP/2 in the clear: an http:// backend; h2 is HTTP/2 over TLS: an https:// one.
    if (top_.backend_protocol_at && top_.backend_ok) {
      if (c.backend_protocol == BackendProtocol::kH2 && !c.backend_https) {
        Error(*top_.backend_protocol_at, "backend_protocol: h2 is HTTP/2 over TLS and the backend is http://; "
                                         "write h2c for HTTP/2 in the clear, or an https:// backend");
      } else if (c.backend_protocol == BackendProtocol::kH2c && c.backend_https) {
        Error(*top_.backend_protocol_at, "backend_protocol: h2c is HTTP/2 in the clear and the backend is https://; "
                                         "write h2 for HTTP/2 over TLS, or an http:// backend");
      }
    }
  }

  // A lock service's (or the fence store's) timeout: a raise waits this long for the answer, at
  // most a minute. why: what waits, for the message.
  void LockServiceTimeout(const Entry& e, const std::string& path, std::chrono::milliseconds* field,
                          std::string_view why = "a raise waits this long for the lock service") {
    std::chrono::milliseconds value{};
    if (!Checked(e, path, CheckDuration, &value)) return;
    if (value > kMaxLockServiceTimeout) {
      Error(At(e.value), path + ": must be at most 1m (" + std::string(why) + ")");
      return;
    }
    *field = value;
  }

  bool NonEmpty(const Entry& e, const std::string& path, std::string* out) {
    auto check = [](std::string_view text, std::string* value) -> std::string {
      if (text.empty()) return "must not be empty";
      *value = std::string(text);
      return "";
    };
    return Checked(e, path, check, out);
  }

  // writers: a non-empty list of distinct identities (CheckWriter). Whether the file asks for
  // client certificates at all is checked once the whole file is read (CheckListenTls).
  void LoadWriters(const Entry& e, const std::string& path) {
    route_.writers_at = At(e.value, e.key_at);
    if (!e.value.IsSequence()) {
      Error(At(e.value, e.key_at), path + ": expected a list of identities such as "
                                          "[\"spiffe://cluster.local/ns/shop/sa/writer\", \"dns:batch.shop.svc\"], got " +
                                          Describe(e.value));
      route_.ok = false;
      return;
    }
    if (e.value.size() == 0) {
      Error(At(e.value), path + ": must list at least one identity (leave writers out to let any client write)");
      route_.ok = false;
      return;
    }
    std::vector<std::string> writers;
    for (auto it = e.value.begin(); it != e.value.end(); ++it) {
      const YAML::Node item = *it;
      if (!item.IsScalar()) {
        Error(At(item), path + ": expected an identity, got " + Describe(item));
        route_.ok = false;
        continue;
      }
      const std::string writer = item.Scalar();
      if (const std::string problem = CheckWriter(writer); !problem.empty()) {
        Error(At(item), path + ": " + problem + " (got " + Quote(writer) + ")");
        route_.ok = false;
        continue;
      }
      if (std::find(writers.begin(), writers.end(), writer) != writers.end()) {
        Error(At(item), path + ": duplicate identity " + Quote(writer));
        route_.ok = false;
        continue;
      }
      writers.push_back(writer);
    }
    if (route_.ok) route_.route.writers = std::move(writers);
  }

  // verify: {service: NAME, lock: "..."}. Whether the service exists, and what its kind asks of
  // the lock, is checked once the whole file is read (lock_services may come after routes).
  void LoadVerify(const Entry& e, const std::string& path) {
    route_.verify_at = At(e.value, e.key_at);
    if (!e.value.IsMap()) {
      Error(At(e.value, e.key_at), path + ": expected a mapping, {service: NAME, lock: \"/locks/...\"}, got " +
                                       Describe(e.value));
      route_.ok = false;
      return;
    }
    const size_t errors_before = errors_.size();
    VerifySpec spec;
    for (const Entry& f : Entries(e.value, kVerifyKeys, path)) {
      const std::string key_path = path + "." + f.key;
      if (f.key == "service") {
        route_.verify_service_at = At(f.value, f.key_at);
        NonEmpty(f, key_path, &spec.service);
      } else {
        route_.verify_lock_at = At(f.value, f.key_at);
        auto check = [](std::string_view text, std::string* lock) -> std::string {
          std::string problem = CheckLockTemplate(text);
          if (problem.empty()) *lock = std::string(text);
          return problem;
        };
        Checked(f, key_path, check, &spec.lock);
      }
    }
    if (!route_.verify_service_at) {
      Error(*route_.verify_at, path + ": missing required key 'service' (a name under lock_services)");
    }
    if (!route_.verify_lock_at) {
      Error(*route_.verify_at, path + ": missing required key 'lock' (the lock's name in the service)");
    }
    if (errors_.size() != errors_before) {
      route_.ok = false;
      return;
    }
    route_.route.verify = std::move(spec);
  }

  // {key} is the fence key: only a keyed route has one, and a keyed route needs it, or every key
  // would be verified against one lock.
  void CheckVerifyKey(const std::string& where) {
    const RouteConfig& route = route_.route;
    if (!route.verify.enabled() || !route_.verify_lock_at) return;
    // A fence_key in error is reported already; whether it meant a key is not known.
    if (route_.fence_key_written && !route.fence_key.keyed()) return;
    const bool has_key = route.verify.lock.find("{key}") != std::string::npos;
    if (has_key && !route.fence_key.keyed()) {
      Error(*route_.verify_lock_at,
            where + ".verify.lock: {key} is the fence key, and this route has none; add fence_key "
                    "({path_segment: N} or {header: NAME}), or name the one lock without {key}");
      route_.ok = false;
    } else if (!has_key && route.fence_key.keyed()) {
      Error(*route_.verify_lock_at,
            where + ".verify.lock: a keyed route's lock must contain {key} (each key is its own lock); "
                    "without it every key would be verified against the one lock " + Quote(route.verify.lock) +
                    ", whose holder could then raise any key");
      route_.ok = false;
    }
  }

  // Each verified route's service exists, and a ZooKeeper lock is a znode path. Reported at the
  // route's service or lock.
  void CheckVerifyServices(const ProxyConfig& c) {
    std::vector<std::string_view> names;
    for (const LockServiceConfig& service : c.lock_services) names.push_back(service.name);
    for (size_t i = 0; i < c.routes.size() && i < route_keys_.size(); ++i) {
      const VerifySpec& verify = c.routes[i].verify;
      const RouteKeys& at = route_keys_[i];
      if (!verify.enabled()) continue;
      const LockServiceConfig* service = c.FindLockService(verify.service);
      if (!service) {
        if (lock_services_written_.contains(verify.service)) continue;  // already an error of its own
        std::string message = at.where + ".verify.service: no lock service " + Quote(verify.service);
        if (names.empty()) {
          message += "; define it under lock_services";
        } else if (const std::string_view best = Nearest(verify.service, names); !best.empty()) {
          message += "; did you mean '" + std::string(best) + "'?";
        } else {
          std::string known;
          for (std::string_view name : names) known += (known.empty() ? "" : ", ") + std::string(name);
          message += " (lock_services has: " + known + ")";
        }
        Error(at.verify_service_at.value_or(at.route_at), message);
        continue;
      }
      if (service->kind == LockServiceConfig::Kind::kZooKeeper) {
        if (const std::string problem = ZnodePathProblem(verify.lock); !problem.empty()) {
          Error(at.verify_lock_at.value_or(at.route_at),
                at.where + ".verify.lock: " + problem + ": '" + service->name +
                    "' is a ZooKeeper service, whose locks are znode paths such as /locks/objects/{key} (got " +
                    Quote(verify.lock) + ")");
        }
      }
    }
  }

  // The key settings of one route, on their own: they describe a fence's keys, so they need a
  // fence_key; and forgetting needs one cluster-wide counter. The route stays in the later checks
  // (it is complete), so a disagreement with another route is reported in the same round.
  void CheckKeySettings(const std::string& where) {
    const RouteConfig& route = route_.route;
    if (!route_.fence_key_written) {
      const std::pair<const std::optional<Position>&, const char*> settings[] = {
          {route_.max_keys_at, "max_keys"},
          {route_.token_order_at, "token_order"},
          {route_.forget_at, "forget_idle_keys_after"}};
      for (const auto& [at, name] : settings) {
        if (!at) continue;
        Error(*at, where + "." + name + ": only for a keyed route; add fence_key ({path_segment: N} or "
                                        "{header: NAME}) to take a fence key from each request");
      }
      return;
    }
    if (route_.forget_at && route.token_order != TokenOrder::kGlobal) {
      Error(*route_.forget_at,
            where + ".forget_idle_keys_after: needs token_order: global. A forgotten key restarts at the "
                    "fence's floor, which is safe only when every lock's tokens come from one cluster-wide "
                    "counter (etcd revisions, ZooKeeper zxids); with per-lock counters such as Consul's "
                    "LockIndex a forgotten lock's next token can be lower than its last one");
    }
  }

  // Routes naming one fence share its keys: they agree on whether it is keyed and on how many
  // keys it holds, how their tokens are ordered and when idle ones are forgotten. Reported at the
  // disagreeing route, naming the first route of the fence.
  void CheckFenceAgreement() {
    std::map<std::string, size_t> first_of_fence;
    for (size_t i = 0; i < config_->routes.size(); ++i) {
      const RouteConfig& route = config_->routes[i];
      const RouteKeys& at = route_keys_[i];
      auto [it, added] = first_of_fence.emplace(route.fence, i);
      if (added) continue;
      const RouteConfig& first = config_->routes[it->second];
      const RouteKeys& first_at = route_keys_[it->second];
      const std::string other = "route '" + first.name + "' (line " + std::to_string(first_at.route_at.line) + ")";
      if (route.fence_key.keyed() != first.fence_key.keyed()) {
        Error(at.fence_key_at.value_or(at.route_at),
              at.where + ": fence '" + route.fence + "' is " + (first.fence_key.keyed() ? "keyed" : "not keyed") +
                  " on " + other + " but " + (route.fence_key.keyed() ? "keyed" : "not keyed") +
                  " here; routes naming one fence must agree on whether it is keyed (give them the same "
                  "kind, or this route another fence)");
        continue;
      }
      // One fence, one lock per key: otherwise whether a raise passes would depend on the route
      // it came through.
      if (route.verify != first.verify) {
        Error(at.verify_at.value_or(at.route_at),
              at.where + ".verify: " + VerifyText(route.verify) + " here, but " + VerifyText(first.verify) + " on " +
                  other + ", which names the same fence '" + route.fence + "'; routes naming one fence must agree "
                  "on verify (service and lock)");
      }
      if (!route.fence_key.keyed()) continue;
      auto differs = [&](std::optional<Position> written, const char* name, const std::string& mine,
                         const std::string& theirs) {
        if (mine == theirs) return;
        Error(written.value_or(at.route_at),
              at.where + "." + name + ": " + mine + " here, but " + theirs + " on " + other +
                  ", which names the same fence '" + route.fence + "'; routes naming one fence share its keys "
                  "and must agree on " + name);
      };
      differs(at.max_keys_at, "max_keys", std::to_string(route.max_keys), std::to_string(first.max_keys));
      differs(at.token_order_at, "token_order", TokenOrderName(route.token_order), TokenOrderName(first.token_order));
      differs(at.forget_at, "forget_idle_keys_after", DurationText(route.forget_idle_keys_after),
              DurationText(first.forget_idle_keys_after));
    }
  }

  static std::string VerifyText(const VerifySpec& verify) {
    if (!verify.enabled()) return "no verify";
    return "service '" + verify.service + "', lock " + Quote(verify.lock);
  }
  static std::string TokenOrderName(TokenOrder order) { return order == TokenOrder::kGlobal ? "global" : "per_lock"; }
  static std::string DurationText(std::chrono::milliseconds d) {
    return d.count() == 0 ? "never (not set)" : std::to_string(d.count()) + "ms";
  }

  // A key header, against the top-level keys it must not clash with (written anywhere in the file).
  void CheckKeyHeaders(const ProxyConfig& c) {
    for (size_t i = 0; i < c.routes.size() && i < route_keys_.size(); ++i) {
      const FenceKeySpec& spec = c.routes[i].fence_key;
      const RouteKeys& at = route_keys_[i];
      if (spec.source != FenceKeySpec::Source::kHeader || !at.header_at) continue;
      const std::string path = at.where + ".fence_key.header";
      if (EqualsIgnoreCase(spec.header, c.token_header)) {
        Error(*at.header_at, path + ": '" + spec.header + "' is the token_header; the fence key and the token "
                                    "must come from different fields");
      } else if (spec.header.find('_') != std::string::npos &&
                 c.headers_with_underscores != HeadersWithUnderscores::kAllow) {
        Error(*at.header_at,
              path + ": must not contain '_' unless headers_with_underscores is allow: the proxy "
                     "drops or refuses fields whose names have '_' (CGI-style backends read '_' and '-' "
                     "alike), so the backend would not see the field the key was taken from, and a '-' "
                     "field could stand in for it (got '" + spec.header + "')");
      }
    }
  }

  // A route's name, prefix or fence: a string passing check. Any problem makes the route invalid.
  std::optional<std::string> RouteString(const Entry& e, const std::string& path,
                                         std::string (*check)(std::string_view)) {
    std::optional<std::string> text = String(e, path);
    if (!text) {
      route_.ok = false;
      return std::nullopt;
    }
    if (const std::string problem = check(*text); !problem.empty()) {
      Error(At(e.value), path + ": " + problem + " (got " + Quote(*text) + ")");
      route_.ok = false;
      return std::nullopt;
    }
    return text;
  }

  // Route names and prefixes are unique across routes; a repeat is reported naming the first.
  void Unique(std::map<std::string, int>* seen, const std::string& text, const Entry& e, const std::string& path,
              const char* what) {
    if (auto [first, added] = seen->emplace(text, At(e.value).line); !added) {
      Error(At(e.value), path + ": duplicate " + what + " '" + text + "' (first at line " +
                             std::to_string(first->second) + ")");
      route_.ok = false;
    }
  }

  struct FoldedPrefix {
    int line;
    bool case_insensitive;
  };

  bool Methods(const Entry& e, const std::string& path, std::vector<std::string>* out) {
    if (!e.value.IsSequence()) {
      Error(At(e.value, e.key_at), path + ": expected a list of methods such as [POST, PUT], got " +
                                       Describe(e.value));
      return false;
    }
    if (e.value.size() == 0) {
      Error(At(e.value), path + ": must list at least one method");
      return false;
    }
    std::vector<std::string> methods;
    std::set<std::string> seen;
    bool ok = true;
    for (auto it = e.value.begin(); it != e.value.end(); ++it) {
      const YAML::Node item = *it;
      if (!item.IsScalar()) {
        Error(At(item), path + ": expected a method name, got " + Describe(item));
        ok = false;
        continue;
      }
      const std::string method = item.Scalar();
      if (std::string problem = CheckMethod(method); !problem.empty()) {
        Error(At(item), path + ": " + problem);
        ok = false;
        continue;
      }
      if (!seen.insert(method).second) {
        Error(At(item), path + ": duplicate method '" + method + "'");
        ok = false;
        continue;
      }
      methods.push_back(method);
    }
    if (ok) *out = std::move(methods);
    return ok;
  }

  std::string_view text_;
  std::string file_;
  std::vector<ConfigError> errors_;
  ProxyConfig* config_ = nullptr;  // what the key loaders fill in

  // What the cross-key checks need to know about the top level.
  struct TopLevel {
    std::optional<Position> listen_at, admin_at, backend_at, plain_at;  // where written
    std::optional<Position> state_file_at, fence_store_at;      // their keys, where written
    std::optional<Position> tls_at, client_certificate_at;      // tls and tls.client_certificate
    bool listen_ok = true, admin_ok = true, backend_ok = false, plain_ok = false;
    std::optional<Position> backend_tls_at;                     // its key, where written
    std::optional<Position> backend_protocol_at;                // its value, where written
  } top_;
  std::optional<Position> buffered_at_;  // where limits.buffered_body_bytes was written (and valid)

  // The route being read.
  struct RouteState {
    RouteConfig route;
    bool ok = true;  // false: a problem that leaves it out of the later checks
    bool have_name = false, have_prefix = false, have_fence = false;  // valid values read
    bool fence_key_written = false;
    // Where the key settings were written, for the checks across keys and routes.
    std::optional<Position> fence_key_at, header_at, max_keys_at, token_order_at, forget_at;
    std::optional<Position> verify_at, verify_service_at, verify_lock_at;
    std::optional<Position> writers_at, identity_header_at;
  } route_;
  // For each route kept (parallel to config_->routes): where its key settings are.
  struct RouteKeys {
    std::string where;  // "routes[2]"
    std::string name, fence;
    Position route_at;
    std::optional<Position> fence_key_at, header_at, max_keys_at, token_order_at, forget_at;
    std::optional<Position> verify_at, verify_service_at, verify_lock_at;
    std::optional<Position> writers_at, identity_header_at;
  };
  std::vector<RouteKeys> route_keys_;
  std::set<std::string, std::less<>> lock_services_written_;  // every name under lock_services
  std::map<std::string, int> route_names_;     // name -> line, over all routes
  std::map<std::string, int> route_prefixes_;  // prefix -> line
  std::map<std::string, FoldedPrefix> folded_prefix_;
};

}  // namespace config_internal

namespace {

using config_internal::Entry;
using config_internal::Loader;

// The parse for one key, and the comparison a restart-only key needs.
using Load = void (*)(Loader&, const Entry&, const std::string&);
using Same = bool (*)(const ProxyConfig&, const ProxyConfig&);

// Every key. The order within a section is the order of the "known keys" messages.
// GCC warns about members left to their defaults even in designated initializers.
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wmissing-field-initializers"
const ConfigKey kKeys[] = {
    // Top level.
    {.section = KeySection::kTop, .name = "listen", .type = "address", .default_value = "\"0.0.0.0:8080\"",
     .restart_only = true,
     .same = [](const ProxyConfig& a, const ProxyConfig& b) { return a.listen.ToString() == b.listen.ToString(); },
     .load =
         [](Loader& l, const Entry& e, const std::string& path) {
           l.top_.listen_at = l.At(e.value, e.key_at);
           l.top_.listen_ok = l.Checked(e, path, CheckListenAddress, &l.config_->listen);
         }},
    {.section = KeySection::kTop, .name = "admin_listen", .type = "address", .default_value = "\"127.0.0.1:9901\"",
     .restart_only = true,
     .same = [](const ProxyConfig& a,
                const ProxyConfig& b) { return a.admin_listen.ToString() == b.admin_listen.ToString(); },
     .load =
         [](Loader& l, const Entry& e, const std::string& path) {
           l.top_.admin_at = l.At(e.value, e.key_at);
           l.top_.admin_ok = l.Checked(e, path, CheckListenAddress, &l.config_->admin_listen);
         }},
    // Restart-only, the whole block: the listener's TLS context is built from it at start-up (the
    // files' contents are re-read whenever they change, proxy/tls/reloader.h; their names are not).
    {.section = KeySection::kTop, .name = "tls", .type = "mapping", .restart_only = true,
     .same = [](const ProxyConfig& a, const ProxyConfig& b) { return a.tls.has_value() == b.tls.has_value(); },
     .load = [](Loader& l, const Entry& e, const std::string& path) { l.LoadListenTls(e, path); }},
    {.section = KeySection::kTop, .name = "plain_listen", .type = "address", .restart_only = true,
     .same =
         [](const ProxyConfig& a, const ProxyConfig& b) {
           return a.plain_listen.has_value() == b.plain_listen.has_value() &&
                  (!a.plain_listen || a.plain_listen->ToString() == b.plain_listen->ToString());
         },
     .load =
         [](Loader& l, const Entry& e, const std::string& path) {
           l.top_.plain_at = l.At(e.value, e.key_at);
           HostPort address;
           l.top_.plain_ok = l.Checked(e, path, CheckListenAddress, &address);
           if (l.top_.plain_ok) l.config_->plain_listen = address;
         }},
    {.section = KeySection::kTop, .name = "backend", .type = "URL", .required = true,
     .required_hint = "the legacy resource, e.g. http://127.0.0.1:8081", .restart_only = true,
     // As written: the connection pool is built from it at start-up.
     .same = [](const ProxyConfig& a, const ProxyConfig& b) { return a.backend_url == b.backend_url; },
     .load =
         [](Loader& l, const Entry& e, const std::string& path) {
           l.top_.backend_at = l.At(e.value, e.key_at);
           auto check = [&l](std::string_view text, HostPort* out) {
             return CheckBackendUrl(text, out, &l.config_->backend_https);
           };
           l.top_.backend_ok = l.Checked(e, path, check, &l.config_->backend);
           if (l.top_.backend_ok) l.config_->backend_url = e.value.Scalar();
         }},
    // Applied on reload, as nginx applies its proxy_ssl_* settings: new backend connections use
    // the new settings and the files are read again (so a SIGHUP picks up a renewed client
    // certificate or CA); pooled connections made under the old ones are closed. The scheme is
    // backend's, which needs a restart.
    {.section = KeySection::kTop, .name = "backend_tls", .type = "mapping",
     .load = [](Loader& l, const Entry& e, const std::string& path) {
       l.top_.backend_tls_at = e.key_at;
       l.LoadTls(e, path, &l.config_->backend_tls);
     }},
    // Restart-only: the store's membership lease, watch and loaded fences are set up at start-up,
    // and a change of store or prefix would move every fence to another max. Before state_file,
    // so that a reload moving between the two is refused naming fence_store.
    {.section = KeySection::kTop, .name = "fence_store", .type = "mapping", .restart_only = true,
     .same = [](const ProxyConfig& a, const ProxyConfig& b) { return a.fence_store == b.fence_store; },
     .load = [](Loader& l, const Entry& e, const std::string& path) { l.LoadFenceStore(e, path); }},
    {.section = KeySection::kTop, .name = "state_file", .type = "path", .required = true,
     .required_hint = "where the highest tokens are kept; or give fence_store, to keep them in etcd",
     .required_unless = "fence_store", .restart_only = true,
     .same = [](const ProxyConfig& a, const ProxyConfig& b) { return a.state_file == b.state_file; },
     .load =
         [](Loader& l, const Entry& e, const std::string& path) {
           l.top_.state_file_at = e.key_at;
           auto check = [](std::string_view text, std::string* out) -> std::string {
             if (text.empty()) return "must not be empty";
             *out = std::string(text);
             return "";
           };
           l.Checked(e, path, check, &l.config_->state_file);
         }},
    {.section = KeySection::kTop, .name = "token_header", .type = "header name",
     .default_value = "\"X-Fencing-Token\"",
     .load =
         [](Loader& l, const Entry& e, const std::string& path) {
           // A backend that reads headers as CGI variables could not tell it from the same name
           // with '-', and headers_with_underscores: drop would drop it.
           l.Checked(e, path, ProxyFieldName, &l.config_->token_header);
         }},
    {.section = KeySection::kTop, .name = "threads", .type = "integer 0–256", .default_value = "0",
     .restart_only = true,
     .same = [](const ProxyConfig& a, const ProxyConfig& b) { return a.threads == b.threads; },
     .load =
         [](Loader& l, const Entry& e, const std::string& path) {
           if (std::optional<uint64_t> n = l.Unsigned(e, path)) {
             if (*n > kMaxThreads) {
               l.Error(l.At(e.value), path + ": expected 0 (one per core) to " + std::to_string(kMaxThreads) +
                                          ", got " + std::to_string(*n));
             } else {
               l.config_->threads = static_cast<unsigned>(*n);
             }
           }
         }},
    // Restart-only: the backend's connections (and what the listeners offer clients) are set up
    // for one protocol at start-up.
    {.section = KeySection::kTop, .name = "backend_protocol", .type = "http1 | h2c | h2", .default_value = "http1",
     .restart_only = true,
     .same = [](const ProxyConfig& a, const ProxyConfig& b) { return a.backend_protocol == b.backend_protocol; },
     .load =
         [](Loader& l, const Entry& e, const std::string& path) {
           l.top_.backend_protocol_at = l.At(e.value, e.key_at);
           l.Choice(e, path,
                    {{"http1", BackendProtocol::kHttp1}, {"h2c", BackendProtocol::kH2c}, {"h2", BackendProtocol::kH2}},
                    &l.config_->backend_protocol);
         }},
    {.section = KeySection::kTop, .name = "unmatched", .type = "pass | reject", .default_value = "pass",
     .load =
         [](Loader& l, const Entry& e, const std::string& path) {
           l.Choice(e, path, {{"pass", Unmatched::kPass}, {"reject", Unmatched::kReject}}, &l.config_->unmatched);
         }},
    {.section = KeySection::kTop, .name = "timeouts", .type = "mapping",
     .load =
         [](Loader& l, const Entry& e, const std::string& path) {
           if (l.Mapping(e, path)) l.Walk(e.value, KeySection::kTimeouts, path, l.At(e.value));
         }},
    {.section = KeySection::kTop, .name = "limits", .type = "mapping",
     .load =
         [](Loader& l, const Entry& e, const std::string& path) {
           if (l.Mapping(e, path)) l.LoadLimits(e.value);
         }},
    // Restart-only: the clients are built at start-up (connections, sessions, the password read
    // from its file), and the shared fences of the next issue will hang on them too.
    {.section = KeySection::kTop, .name = "lock_services", .type = "mapping", .restart_only = true,
     .same = [](const ProxyConfig& a, const ProxyConfig& b) { return a.lock_services == b.lock_services; },
     .load = [](Loader& l, const Entry& e, const std::string& path) { l.LoadLockServices(e, path); }},
    {.section = KeySection::kTop, .name = "routes", .type = "list",
     .load =
         [](Loader& l, const Entry& e, const std::string& path) {
           if (e.value.IsSequence()) {
             l.LoadRoutes(e.value);
           } else if (!e.value.IsNull()) {
             l.Error(l.At(e.value), path + ": expected a list of routes, got " + Loader::Describe(e.value));
           }
         }},
    {.section = KeySection::kTop, .name = "access_log", .type = "true | false", .default_value = "true",
     .load =
         [](Loader& l, const Entry& e, const std::string& path) {
           if (std::optional<bool> b = l.Bool(e, path)) l.config_->access_log = *b;
         }},
    {.section = KeySection::kTop, .name = "headers_with_underscores", .type = "drop | reject | allow",
     .default_value = "drop",
     .load =
         [](Loader& l, const Entry& e, const std::string& path) {
           l.Choice(e, path,
                    {{"drop", HeadersWithUnderscores::kDrop},
                     {"reject", HeadersWithUnderscores::kReject},
                     {"allow", HeadersWithUnderscores::kAllow}},
                    &l.config_->headers_with_underscores);
         }},

    // timeouts.
    {.section = KeySection::kTimeouts, .name = "connect", .type = "duration", .default_value = "2s",
     .restart_only = true,  // the backend connection pool takes it when it is built
     .same = [](const ProxyConfig& a, const ProxyConfig& b) { return a.timeouts.connect == b.timeouts.connect; },
     .load = [](Loader& l, const Entry& e, const std::string& path) {
       l.Timeout(e, path, &l.config_->timeouts.connect);
     }},
    {.section = KeySection::kTimeouts, .name = "request", .type = "duration", .default_value = "30s",
     .load = [](Loader& l, const Entry& e, const std::string& path) {
       l.Timeout(e, path, &l.config_->timeouts.request);
     }},
    {.section = KeySection::kTimeouts, .name = "idle", .type = "duration", .default_value = "60s",
     .load = [](Loader& l, const Entry& e, const std::string& path) { l.Timeout(e, path, &l.config_->timeouts.idle); }},
    {.section = KeySection::kTimeouts, .name = "header_read", .type = "duration", .default_value = "10s",
     .load = [](Loader& l, const Entry& e, const std::string& path) {
       l.Timeout(e, path, &l.config_->timeouts.header_read);
     }},
    {.section = KeySection::kTimeouts, .name = "shutdown", .type = "duration", .default_value = "25s",
     .load = [](Loader& l, const Entry& e, const std::string& path) {
       l.Timeout(e, path, &l.config_->timeouts.shutdown);
     }},

    // limits.
    {.section = KeySection::kLimits, .name = "max_header_bytes", .type = "size", .default_value = "16KiB",
     .load =
         [](Loader& l, const Entry& e, const std::string& path) {
           std::optional<uint64_t> bytes = l.Size(e, path);
           if (!bytes) return;
           if (*bytes < kMinHeaderBytes || *bytes > kMaxHeaderBytes) {
             l.Error(l.At(e.value),
                     path + ": must be from 1KiB to 1MiB, got " + std::to_string(*bytes) + " bytes");
             return;
           }
           l.config_->limits.max_header_bytes = *bytes;
         }},
    {.section = KeySection::kLimits, .name = "max_body_bytes", .type = "size", .default_value = "64MiB",
     .load =
         [](Loader& l, const Entry& e, const std::string& path) {
           std::optional<uint64_t> bytes = l.Size(e, path);
           if (!bytes) return;
           // nginx reads 0 as "unlimited"; here there is no unlimited, so 0 is a mistake.
           if (*bytes == 0) {
             l.Error(l.At(e.value), path + ": must be at least 1 byte (there is no 'unlimited')");
             return;
           }
           l.config_->limits.max_body_bytes = *bytes;
         }},
    {.section = KeySection::kLimits, .name = "max_connections", .type = "integer", .default_value = "10000",
     .restart_only = true,  // the listener's connection slots are sized at start-up
     .same = [](const ProxyConfig& a,
                const ProxyConfig& b) { return a.limits.max_connections == b.limits.max_connections; },
     .load =
         [](Loader& l, const Entry& e, const std::string& path) {
           std::optional<uint64_t> n = l.Unsigned(e, path);
           if (!n) return;
           if (*n < 1) {
             l.Error(l.At(e.value), path + ": must be at least 1");
             return;
           }
           l.config_->limits.max_connections = *n;
         }},
    {.section = KeySection::kLimits, .name = "buffered_body_bytes", .type = "size", .default_value = "1MiB",
     .load =
         [](Loader& l, const Entry& e, const std::string& path) {
           std::optional<uint64_t> bytes = l.Size(e, path);
           if (!bytes) return;
           l.config_->limits.buffered_body_bytes = *bytes;  // 0: every body streams
           l.buffered_at_ = l.At(e.value);                  // checked against max_body_bytes after
         }},

    // tls: TLS on listen. Every key is restart-only, like the block (see "tls" above).
    {.section = KeySection::kTls, .name = "cert_file", .type = "path", .required = true,
     .required_hint = "the listener's certificate, PEM, followed by its intermediates", .restart_only = true,
     .same = [](const ProxyConfig& a, const ProxyConfig& b) { return TlsField(a, b, &ListenTlsConfig::cert_file); },
     .load =
         [](Loader& l, const Entry& e, const std::string& path) {
           l.TlsFile(e, path, &l.config_->tls->cert_file, &l.config_->tls->cert_file_at);
         }},
    {.section = KeySection::kTls, .name = "key_file", .type = "path", .required = true,
     .required_hint = "the certificate's private key, PEM", .restart_only = true,
     .same = [](const ProxyConfig& a, const ProxyConfig& b) { return TlsField(a, b, &ListenTlsConfig::key_file); },
     .load =
         [](Loader& l, const Entry& e, const std::string& path) {
           l.TlsFile(e, path, &l.config_->tls->key_file, &l.config_->tls->key_file_at);
         }},
    {.section = KeySection::kTls, .name = "client_ca_file", .type = "path", .restart_only = true,
     .same =
         [](const ProxyConfig& a, const ProxyConfig& b) { return TlsField(a, b, &ListenTlsConfig::client_ca_file); },
     .load =
         [](Loader& l, const Entry& e, const std::string& path) {
           l.TlsFile(e, path, &l.config_->tls->client_ca_file, &l.config_->tls->client_ca_file_at);
         }},
    {.section = KeySection::kTls, .name = "client_certificate", .type = "require | optional",
     .default_value = "require", .restart_only = true,
     .same =
         [](const ProxyConfig& a, const ProxyConfig& b) {
           return TlsField(a, b, &ListenTlsConfig::client_certificate);
         },
     .load =
         [](Loader& l, const Entry& e, const std::string& path) {
           l.top_.client_certificate_at = l.At(e.value, e.key_at);
           l.Choice(e, path,
                    {{"require", ListenTlsConfig::ClientCertificate::kRequire},
                     {"optional", ListenTlsConfig::ClientCertificate::kOptional}},
                    &l.config_->tls->client_certificate);
         }},
    {.section = KeySection::kTls, .name = "min_version", .type = "\"1.2\" | \"1.3\"", .default_value = "\"1.2\"",
     .restart_only = true,
     .same = [](const ProxyConfig& a, const ProxyConfig& b) { return TlsField(a, b, &ListenTlsConfig::min_version); },
     .load =
         [](Loader& l, const Entry& e, const std::string& path) {
           l.Choice(e, path, {{"1.2", ListenTlsConfig::Version::k1_2}, {"1.3", ListenTlsConfig::Version::k1_3}},
                    &l.config_->tls->min_version);
         }},

    // A route.
    {.section = KeySection::kRoute, .name = "name", .type = "string", .required = true,
     .load =
         [](Loader& l, const Entry& e, const std::string& path) {
           std::optional<std::string> text = l.RouteString(e, path, CheckName);
           if (!text) return;
           l.route_.have_name = true;
           l.route_.route.name = *text;
           l.Unique(&l.route_names_, *text, e, path, "route name");
         }},
    {.section = KeySection::kRoute, .name = "prefix", .type = "path", .required = true,
     .load =
         [](Loader& l, const Entry& e, const std::string& path) {
           std::optional<std::string> text = l.RouteString(e, path, CheckPrefix);
           if (!text) return;
           l.route_.have_prefix = true;
           l.route_.route.prefix = *text;
           l.Unique(&l.route_prefixes_, *text, e, path, "prefix");
         }},
    // Its default is the route's name, so there is no value to write.
    {.section = KeySection::kRoute, .name = "fence", .type = "string",
     .load =
         [](Loader& l, const Entry& e, const std::string& path) {
           std::optional<std::string> text = l.RouteString(e, path, CheckName);
           if (!text) return;
           l.route_.have_fence = true;
           l.route_.route.fence = *text;
         }},
    {.section = KeySection::kRoute, .name = "methods", .type = "list", .default_value = "[POST, PUT, PATCH, DELETE]",
     .load =
         [](Loader& l, const Entry& e, const std::string& path) {
           l.route_.ok = l.Methods(e, path, &l.route_.route.methods) && l.route_.ok;
         }},
    {.section = KeySection::kRoute, .name = "missing_token", .type = "reject | allow", .default_value = "reject",
     .load =
         [](Loader& l, const Entry& e, const std::string& path) {
           l.Choice(e, path, {{"reject", MissingToken::kReject}, {"allow", MissingToken::kAllow}},
                    &l.route_.route.missing_token);
         }},
    {.section = KeySection::kRoute, .name = "mode", .type = "enforce | observe", .default_value = "enforce",
     .load =
         [](Loader& l, const Entry& e, const std::string& path) {
           l.Choice(e, path, {{"enforce", FenceMode::kEnforce}, {"observe", FenceMode::kObserve}},
                    &l.route_.route.mode);
         }},
    {.section = KeySection::kRoute, .name = "forward_token", .type = "true | false", .default_value = "true",
     .load =
         [](Loader& l, const Entry& e, const std::string& path) {
           if (std::optional<bool> b = l.Bool(e, path)) l.route_.route.forward_token = *b;
         }},
    {.section = KeySection::kRoute, .name = "path_case_insensitive", .type = "true | false",
     .default_value = "false",
     .load =
         [](Loader& l, const Entry& e, const std::string& path) {
           if (std::optional<bool> b = l.Bool(e, path)) l.route_.route.path_case_insensitive = *b;
         }},
    {.section = KeySection::kRoute, .name = "max_token_jump", .type = "integer", .default_value = "0",
     .load =
         [](Loader& l, const Entry& e, const std::string& path) {
           if (std::optional<uint64_t> n = l.Unsigned(e, path)) l.route_.route.max_token_jump = *n;
         }},
    // Fence keys. Restart-only per fence: the running fence registry holds the keys of a fence
    // as these settings shaped them (a fence new in the file takes them at once).
    {.section = KeySection::kRoute, .name = "fence_key", .type = "mapping", .restart_only = true,
     .same_fence = [](const RouteConfig& a, const RouteConfig& b) { return a.fence_key.keyed() == b.fence_key.keyed(); },
     .load = [](Loader& l, const Entry& e, const std::string& path) { l.LoadFenceKey(e, path); }},
    {.section = KeySection::kRoute, .name = "max_keys", .type = "integer", .default_value = "1000000",
     .restart_only = true,
     .same_fence = [](const RouteConfig& a, const RouteConfig& b) { return a.max_keys == b.max_keys; },
     .load =
         [](Loader& l, const Entry& e, const std::string& path) {
           l.route_.max_keys_at = l.At(e.value, e.key_at);
           std::optional<uint64_t> n = l.Unsigned(e, path);
           if (!n) return;
           if (*n < 1) {
             l.Error(l.At(e.value), path + ": must be at least 1 (there is no 'unlimited': at the cap a new key "
                                           "gets 503)");
             return;
           }
           l.route_.route.max_keys = *n;
         }},
    {.section = KeySection::kRoute, .name = "token_order", .type = "per_lock | global", .default_value = "per_lock",
     .restart_only = true,
     .same_fence = [](const RouteConfig& a, const RouteConfig& b) { return a.token_order == b.token_order; },
     .load =
         [](Loader& l, const Entry& e, const std::string& path) {
           l.route_.token_order_at = l.At(e.value, e.key_at);
           l.Choice(e, path, {{"per_lock", TokenOrder::kPerLock}, {"global", TokenOrder::kGlobal}},
                    &l.route_.route.token_order);
         }},
    // No default to write: left out, keys are never forgotten.
    {.section = KeySection::kRoute, .name = "forget_idle_keys_after", .type = "duration", .restart_only = true,
     .same_fence =
         [](const RouteConfig& a, const RouteConfig& b) {
           return a.forget_idle_keys_after == b.forget_idle_keys_after;
         },
     .load =
         [](Loader& l, const Entry& e, const std::string& path) {
           l.route_.forget_at = l.At(e.value, e.key_at);
           l.Checked(e, path, CheckDuration, &l.route_.route.forget_idle_keys_after);
         }},
    // Applied on reload: the max stays durable whatever verifies the next raise, so a new lock
    // or service only makes later raises pass or fail differently (never a token above the max).
    {.section = KeySection::kRoute, .name = "verify", .type = "mapping",
     .load = [](Loader& l, const Entry& e, const std::string& path) { l.LoadVerify(e, path); }},
    // Applied on reload, like every per-request decision: they decide who may write next, and
    // nothing a fence holds depends on them.
    {.section = KeySection::kRoute, .name = "writers", .type = "list",
     .load = [](Loader& l, const Entry& e, const std::string& path) { l.LoadWriters(e, path); }},
    {.section = KeySection::kRoute, .name = "identity_header", .type = "header name",
     .load =
         [](Loader& l, const Entry& e, const std::string& path) {
           l.route_.identity_header_at = l.At(e.value, e.key_at);
           l.Checked(e, path, ProxyFieldName, &l.route_.route.identity_header);
         }},
};
#pragma GCC diagnostic pop

const NestedConfigKeys kNestedKeys[] = {
    {"routes[].fence_key", kFenceKeyKeys},
    {"routes[].verify", kVerifyKeys},
    {"lock_services.NAME", kLockServiceKinds},
    {"lock_services.NAME.etcd", kEtcdKeys},
    {"lock_services.NAME.etcd.tls", kTlsKeys},
    {"lock_services.NAME.zookeeper", kZooKeeperKeys},
    {"fence_store", kFenceStoreKinds},
    {"fence_store.etcd", kFenceStoreEtcdKeys},
    {"fence_store.etcd.tls", kTlsKeys},
    {"backend_tls", kTlsKeys},
};

}  // namespace

std::span<const ConfigKey> ConfigKeys() { return kKeys; }

std::span<const NestedConfigKeys> NestedKeys() { return kNestedKeys; }

std::string_view SectionName(KeySection section) {
  switch (section) {
    case KeySection::kTop:
      return "";
    case KeySection::kTimeouts:
      return "timeouts";
    case KeySection::kLimits:
      return "limits";
    case KeySection::kTls:
      return "tls";
    case KeySection::kRoute:
      return "routes";
  }
  return "";
}

std::string ConfigKey::Path() const {
  if (section == KeySection::kTop) return std::string(name);
  if (section == KeySection::kRoute) return "routes[]." + std::string(name);
  return std::string(SectionName(section)) + "." + std::string(name);
}

ConfigError ErrorAt(const ProxyConfig& config, std::string_view path, std::string message) {
  ConfigError error{config.source_path, 0, 0, std::string(path) + ": " + std::move(message)};
  if (auto it = config.written_at.find(path); it != config.written_at.end()) {
    std::tie(error.line, error.column) = it->second;
  }
  return error;
}

std::string ConfigError::ToString() const {
  return file + ":" + std::to_string(line) + ":" + std::to_string(column) + ": " + message;
}

ConfigResult ParseConfig(std::string_view yaml_text, const std::string& file_name) {
  return Loader(yaml_text, file_name).Run();
}

ConfigResult LoadConfigFile(const std::string& path) {
  auto fail = [&](const std::string& reason) {
    ConfigResult result;
    result.errors.push_back(ConfigError{path, 0, 0, "cannot read the route file: " + reason});
    return result;
  };
  // POSIX I/O for an exact errno (ifstream hides why it failed, and "opens" directories).
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) return fail(std::error_code(errno, std::generic_category()).message());
  std::string text;
  char buffer[64 * 1024];
  for (;;) {
    const ssize_t n = ::read(fd, buffer, sizeof buffer);
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) {
      const int saved = errno;
      ::close(fd);
      return fail(std::error_code(saved, std::generic_category()).message());
    }
    if (n == 0) break;
    text.append(buffer, static_cast<size_t>(n));
    if (text.size() > kMaxFileBytes) {
      ::close(fd);
      return fail("larger than 16 MiB; is this the right file?");
    }
  }
  ::close(fd);
  return ParseConfig(text, path);
}

}  // namespace fencing
