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
#include <utility>

#include <yaml-cpp/yaml.h>

#include "config/config.h"
#include "config/value_parsers.h"
#include "http/ascii.h"

namespace fencing {
namespace {

using namespace config_internal;

constexpr size_t kMaxFileBytes = 16 * 1024 * 1024;  // a route file is kilobytes; stop on mistakes

constexpr std::string_view kTopKeys[] = {"listen",     "admin_listen", "backend",   "state_file",
                                         "token_header", "threads",   "unmatched", "timeouts",
                                         "limits",     "routes",       "access_log", "headers_with_underscores"};
constexpr std::string_view kTimeoutKeys[] = {"connect", "request", "idle", "header_read", "shutdown"};
constexpr std::string_view kLimitKeys[] = {"max_header_bytes", "max_body_bytes", "max_connections",
                                           "buffered_body_bytes"};
constexpr std::string_view kRouteKeys[] = {"name",          "prefix", "fence",         "methods",
                                           "missing_token", "mode",   "forward_token", "path_case_insensitive",
                                           "max_token_jump"};

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

class Loader {
 public:
  Loader(std::string_view text, std::string file_name) : text_(text), file_(std::move(file_name)) {}

  ConfigResult Run() {
    auto config = std::make_shared<ProxyConfig>();
    config->source_path = file_;
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

 private:
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
      if (std::find(known.begin(), known.end(), key) == known.end()) {
        Error(key_at, Prefixed(where, UnknownKeyMessage(key, known, where)));
        continue;
      }
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
    std::string_view best;
    size_t best_distance = 3;
    for (std::string_view candidate : known) {
      const size_t d = EditDistance(key, candidate);
      if (d < best_distance) {
        best_distance = d;
        best = candidate;
      }
    }
    if (!best.empty()) return message + "; did you mean '" + std::string(best) + "'?";
    if (key == "<<") return message + " (YAML merge keys are not supported)";
    // A nested key at the top level is usually an indentation slip.
    if (where.empty()) {
      const std::pair<std::span<const std::string_view>, const char*> nested[] = {
          {kTimeoutKeys, "timeouts"}, {kLimitKeys, "limits"}, {kRouteKeys, "a route under routes"}};
      for (const auto& [keys, owner] : nested) {
        if (std::find(keys.begin(), keys.end(), key) != keys.end()) {
          return message + "; it belongs in " + owner + " (check the indentation)";
        }
      }
    }
    return message + " (known keys: " + Join(known) + ")";
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
      Error(Position{}, "the route file is empty; it needs at least 'backend' and 'state_file'");
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
    std::optional<Position> listen_at, admin_at, backend_at;
    bool listen_ok = true, admin_ok = true, backend_ok = false;
    bool have_backend = false, have_state_file = false;
    for (const Entry& e : Entries(root, kTopKeys, "")) {
      const std::string& k = e.key;
      if (k == "listen") {
        listen_at = At(e.value, e.key_at);
        listen_ok = Checked(e, k, CheckListenAddress, &config->listen);
      } else if (k == "admin_listen") {
        admin_at = At(e.value, e.key_at);
        admin_ok = Checked(e, k, CheckListenAddress, &config->admin_listen);
      } else if (k == "backend") {
        have_backend = true;
        backend_at = At(e.value, e.key_at);
        backend_ok = Checked(e, k, CheckBackendUrl, &config->backend);
        if (backend_ok) config->backend_url = e.value.Scalar();
      } else if (k == "state_file") {
        have_state_file = true;
        auto check = [](std::string_view text, std::string* out) -> std::string {
          if (text.empty()) return "must not be empty";
          *out = std::string(text);
          return "";
        };
        Checked(e, k, check, &config->state_file);
      } else if (k == "token_header") {
        auto check = [](std::string_view text, std::string* out) -> std::string {
          std::string problem = CheckHeaderName(text);
          // A backend that reads headers as CGI variables could not tell it from the same name
          // with '-', and headers_with_underscores: drop would drop it.
          if (problem.empty() && text.find('_') != std::string_view::npos) {
            problem = "must not contain '_' (CGI-style backends read '_' and '-' alike)";
          }
          if (problem.empty()) *out = std::string(text);
          return problem;
        };
        Checked(e, k, check, &config->token_header);
      } else if (k == "threads") {
        if (std::optional<uint64_t> n = Unsigned(e, k)) {
          if (*n > kMaxThreads) {
            Error(At(e.value), "threads: expected 0 (one per core) to " + std::to_string(kMaxThreads) +
                                   ", got " + std::to_string(*n));
          } else {
            config->threads = static_cast<unsigned>(*n);
          }
        }
      } else if (k == "access_log") {
        if (std::optional<bool> b = Bool(e, k)) config->access_log = *b;
      } else if (k == "unmatched") {
        Choice(e, k, {{"pass", Unmatched::kPass}, {"reject", Unmatched::kReject}}, &config->unmatched);
      } else if (k == "headers_with_underscores") {
        Choice(e, k,
               {{"drop", HeadersWithUnderscores::kDrop},
                {"reject", HeadersWithUnderscores::kReject},
                {"allow", HeadersWithUnderscores::kAllow}},
               &config->headers_with_underscores);
      } else if (k == "timeouts") {
        if (Mapping(e, k)) ValidateTimeouts(e.value, &config->timeouts);
      } else if (k == "limits") {
        if (Mapping(e, k)) ValidateLimits(e.value, &config->limits);
      } else if (k == "routes") {
        if (e.value.IsSequence()) {
          ValidateRoutes(e.value, &config->routes);
        } else if (!e.value.IsNull()) {
          Error(At(e.value), "routes: expected a list of routes, got " + Describe(e.value));
        }
      }
    }
    if (!have_backend) {
      Error(root_at, "missing required key 'backend' (the legacy resource, e.g. http://127.0.0.1:8081)");
    }
    if (!have_state_file) {
      Error(root_at, "missing required key 'state_file' (where the highest tokens are kept)");
    }
    CheckAddresses(*config, listen_ok, admin_ok, backend_ok, listen_at, admin_at,
                   backend_at.value_or(root_at));
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
    }
  }

  void ValidateTimeouts(const YAML::Node& map, Timeouts* out) {
    for (const Entry& e : Entries(map, kTimeoutKeys, "timeouts")) {
      std::chrono::milliseconds* field = e.key == "connect"       ? &out->connect
                                         : e.key == "request"     ? &out->request
                                         : e.key == "idle"        ? &out->idle
                                         : e.key == "header_read" ? &out->header_read
                                                                  : &out->shutdown;
      const std::string path = "timeouts." + e.key;
      std::chrono::milliseconds value{};
      if (!Checked(e, path, CheckDuration, &value)) continue;
      if (value > kMaxTimeout) {
        Error(At(e.value), path + ": must be at most 24h");
        continue;
      }
      *field = value;
    }
  }

  void ValidateLimits(const YAML::Node& map, Limits* out) {
    std::optional<Position> buffered_at;  // where buffered_body_bytes was written (and valid)
    for (const Entry& e : Entries(map, kLimitKeys, "limits")) {
      const std::string path = "limits." + e.key;
      if (e.key == "max_connections") {
        std::optional<uint64_t> n = Unsigned(e, path);
        if (!n) continue;
        if (*n < 1) {
          Error(At(e.value), path + ": must be at least 1");
          continue;
        }
        out->max_connections = *n;
        continue;
      }
      uint64_t bytes = 0;
      if (!Checked(e, path, CheckSize, &bytes)) continue;
      if (e.key == "buffered_body_bytes") {
        out->buffered_body_bytes = bytes;  // 0: every body streams
        buffered_at = At(e.value);
      } else if (e.key == "max_header_bytes") {
        if (bytes < kMinHeaderBytes || bytes > kMaxHeaderBytes) {
          Error(At(e.value), path + ": must be from 1KiB to 1MiB, got " + std::to_string(bytes) + " bytes");
          continue;
        }
        out->max_header_bytes = bytes;
      } else {
        // nginx reads 0 as "unlimited"; here there is no unlimited, so 0 is a mistake.
        if (bytes == 0) {
          Error(At(e.value), path + ": must be at least 1 byte (there is no 'unlimited')");
          continue;
        }
        out->max_body_bytes = bytes;
      }
    }
    // A buffered body is a whole body: it cannot be larger than a body may be. Left out, the
    // default follows a smaller max_body_bytes.
    if (!buffered_at) {
      out->buffered_body_bytes = std::min(out->buffered_body_bytes, out->max_body_bytes);
    } else if (out->buffered_body_bytes > out->max_body_bytes) {
      Error(*buffered_at, "limits.buffered_body_bytes: must be at most limits.max_body_bytes (" +
                              std::to_string(out->max_body_bytes) + " bytes), got " +
                              std::to_string(out->buffered_body_bytes) + " bytes");
    }
  }

  void ValidateRoutes(const YAML::Node& list, std::vector<RouteConfig>* out) {
    std::map<std::string, int> name_line;
    std::map<std::string, int> prefix_line;
    std::map<std::string, FoldedPrefix> folded_prefix;
    size_t index = 0;
    for (auto it = list.begin(); it != list.end(); ++it, ++index) {
      const YAML::Node item = *it;
      const std::string where = "routes[" + std::to_string(index) + "]";
      if (!item.IsMap()) {
        Error(At(item), where + ": expected a route (a mapping with name and prefix), got " +
                            Describe(item));
        continue;
      }
      RouteConfig route;
      bool ok = true;
      bool have_name = false, have_prefix = false, have_fence = false;
      bool name_written = false, prefix_written = false;  // even when the value is bad
      for (const Entry& e : Entries(item, kRouteKeys, where)) {
        const std::string path = where + "." + e.key;
        const std::string& k = e.key;
        name_written = name_written || k == "name";
        prefix_written = prefix_written || k == "prefix";
        if (k == "name" || k == "fence" || k == "prefix") {
          std::optional<std::string> text = String(e, path);
          if (!text) {
            ok = false;
            continue;
          }
          const std::string problem = k == "prefix" ? CheckPrefix(*text) : CheckName(*text);
          if (!problem.empty()) {
            Error(At(e.value), path + ": " + problem + " (got " + Quote(*text) + ")");
            ok = false;
            continue;
          }
          const int line = At(e.value).line;
          if (k == "name") {
            have_name = true;
            route.name = *text;
            if (auto [first, added] = name_line.emplace(*text, line); !added) {
              Error(At(e.value), path + ": duplicate route name '" + *text + "' (first at line " +
                                     std::to_string(first->second) + ")");
              ok = false;
            }
          } else if (k == "prefix") {
            have_prefix = true;
            route.prefix = *text;
            if (auto [first, added] = prefix_line.emplace(*text, line); !added) {
              Error(At(e.value), path + ": duplicate prefix '" + *text + "' (first at line " +
                                     std::to_string(first->second) + ")");
              ok = false;
            }
          } else {
            have_fence = true;
            route.fence = *text;
          }
        } else if (k == "methods") {
          ok = Methods(e, path, &route.methods) && ok;
        } else if (k == "missing_token") {
          Choice(e, path, {{"reject", MissingToken::kReject}, {"allow", MissingToken::kAllow}},
                 &route.missing_token);
        } else if (k == "mode") {
          Choice(e, path, {{"enforce", FenceMode::kEnforce}, {"observe", FenceMode::kObserve}}, &route.mode);
        } else if (k == "forward_token") {
          if (std::optional<bool> b = Bool(e, path)) route.forward_token = *b;
        } else if (k == "path_case_insensitive") {
          if (std::optional<bool> b = Bool(e, path)) route.path_case_insensitive = *b;
        } else if (k == "max_token_jump") {
          if (std::optional<uint64_t> n = Unsigned(e, path)) route.max_token_jump = *n;
        }
      }
      const Position route_at = At(item);
      if (!name_written) {
        Error(route_at, where + ": missing required key 'name'");
        ok = false;
      }
      if (!prefix_written) {
        Error(route_at, where + ": missing required key 'prefix'");
        ok = false;
      }
      if (!have_fence) route.fence = route.name;
      // Errors already make the whole file invalid; only complete routes are kept.
      if (ok && have_name && have_prefix) {
        // A prefix matched without case must not collide, folded, with any other prefix: the
        // longest-match rule could not choose between them.
        const std::string folded = ToAsciiLower(route.prefix);
        if (auto [first, added] = folded_prefix.emplace(folded, FoldedPrefix{At(item).line, route.path_case_insensitive});
            !added && (route.path_case_insensitive || first->second.case_insensitive)) {
          Error(route_at, where + ": prefix '" + route.prefix +
                              "' is the same, ignoring case, as the prefix at line " +
                              std::to_string(first->second.line) + ", and one of them has path_case_insensitive");
          continue;
        }
        out->push_back(std::move(route));
      }
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
};

}  // namespace

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
