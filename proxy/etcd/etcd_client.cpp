#include "etcd/etcd_client.h"

#include <boost/asio/as_tuple.hpp>
#include <boost/asio/co_spawn.hpp>
#include <boost/asio/detached.hpp>
#include <boost/asio/executor_work_guard.hpp>
#include <boost/asio/io_context.hpp>
#include <boost/asio/ip/tcp.hpp>
#include <boost/asio/post.hpp>
#include <boost/asio/ssl.hpp>
#include <boost/asio/steady_timer.hpp>
#include <boost/asio/use_awaitable.hpp>
#include <boost/beast/core/error.hpp>
#include <boost/beast/core/flat_buffer.hpp>
#include <boost/beast/core/tcp_stream.hpp>
#include <boost/beast/http.hpp>
#include <boost/beast/ssl/ssl_stream.hpp>
#include <boost/json/parse.hpp>
#include <boost/json/serialize.hpp>
#include <boost/json/stream_parser.hpp>

#include <algorithm>
#include <array>
#include <atomic>
#include <charconv>
#include <cstring>
#include <deque>
#include <fstream>
#include <mutex>
#include <sstream>
#include <thread>
#include <unordered_map>

#include <netinet/in.h>
#include <netinet/tcp.h>
#include <sys/socket.h>

namespace fencing {

namespace net = boost::asio;
namespace beast = boost::beast;
namespace http = beast::http;
namespace ssl = net::ssl;
namespace json = boost::json;
using tcp = net::ip::tcp;
using Clock = std::chrono::steady_clock;

// =================================================================================== pure rules
namespace etcd {

namespace {
constexpr char kBase64Alphabet[] = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";

int Base64Value(char c) {
  if (c >= 'A' && c <= 'Z') return c - 'A';
  if (c >= 'a' && c <= 'z') return c - 'a' + 26;
  if (c >= '0' && c <= '9') return c - '0' + 52;
  if (c == '+') return 62;
  if (c == '/') return 63;
  return -1;
}
}  // namespace

std::string Base64Encode(std::string_view bytes) {
  std::string out;
  out.reserve((bytes.size() + 2) / 3 * 4);
  size_t i = 0;
  for (; i + 3 <= bytes.size(); i += 3) {
    uint32_t v = (uint32_t(uint8_t(bytes[i])) << 16) | (uint32_t(uint8_t(bytes[i + 1])) << 8) | uint8_t(bytes[i + 2]);
    for (int shift = 18; shift >= 0; shift -= 6) out += kBase64Alphabet[(v >> shift) & 63];
  }
  size_t rest = bytes.size() - i;
  if (rest > 0) {
    uint32_t v = uint32_t(uint8_t(bytes[i])) << 16;
    if (rest == 2) v |= uint32_t(uint8_t(bytes[i + 1])) << 8;
    out += kBase64Alphabet[(v >> 18) & 63];
    out += kBase64Alphabet[(v >> 12) & 63];
    out += rest == 2 ? kBase64Alphabet[(v >> 6) & 63] : '=';
    out += '=';
  }
  return out;
}

bool Base64Decode(std::string_view text, std::string* bytes) {
  if (text.size() % 4 != 0) return false;
  std::string out;
  out.reserve(text.size() / 4 * 3);
  for (size_t i = 0; i < text.size(); i += 4) {
    bool last = i + 4 == text.size();
    int pad = 0;
    uint32_t v = 0;
    for (size_t j = 0; j < 4; ++j) {
      char c = text[i + j];
      if (c == '=') {
        // Padding only at the end of the last quantum, and at most two.
        if (!last || j < 2) return false;
        ++pad;
        v <<= 6;
        continue;
      }
      if (pad > 0) return false;  // data after padding
      int d = Base64Value(c);
      if (d < 0) return false;
      v = (v << 6) | uint32_t(d);
    }
    out += char((v >> 16) & 0xff);
    if (pad < 2) out += char((v >> 8) & 0xff);
    if (pad < 1) out += char(v & 0xff);
  }
  *bytes = std::move(out);
  return true;
}

std::string PrefixRangeEnd(std::string_view prefix) {
  std::string end(prefix);
  while (!end.empty()) {
    auto& last = reinterpret_cast<unsigned char&>(end.back());
    if (last < 0xff) {
      ++last;
      return end;
    }
    end.pop_back();
  }
  return std::string(1, '\0');
}

bool ReadInt64(const json::object& object, std::string_view field, int64_t* out, std::string* error) {
  const json::value* v = object.if_contains(field);
  if (v == nullptr) {
    *out = 0;
    return true;
  }
  if (v->is_int64()) {
    *out = v->get_int64();
    return true;
  }
  if (v->is_uint64() && v->get_uint64() <= uint64_t(INT64_MAX)) {
    *out = int64_t(v->get_uint64());
    return true;
  }
  if (v->is_string()) {
    std::string_view s = v->get_string();
    int64_t value = 0;
    auto [end, ec] = std::from_chars(s.data(), s.data() + s.size(), value);
    if (!s.empty() && ec == std::errc() && end == s.data() + s.size()) {
      *out = value;
      return true;
    }
  }
  *error = "field \"" + std::string(field) + "\" is not an int64: " + json::serialize(*v);
  return false;
}

bool ParseEndpoint(std::string_view text, Endpoint* out, std::string* error) {
  Endpoint ep;
  ep.text = std::string(text);
  std::string_view rest = text;
  if (rest.starts_with("http://")) {
    rest.remove_prefix(7);
  } else if (rest.starts_with("https://")) {
    ep.tls = true;
    rest.remove_prefix(8);
  } else {
    *error = "etcd endpoint \"" + ep.text + "\" must start with http:// or https://";
    return false;
  }
  if (!rest.empty() && rest.back() == '/') rest.remove_suffix(1);  // "http://h:2379/" is common
  if (rest.find_first_of("/@?#") != std::string_view::npos) {
    *error = "etcd endpoint \"" + ep.text + "\" must be scheme://host:port, without a path or user";
    return false;
  }
  std::string_view host, port;
  if (rest.starts_with("[")) {  // [IPv6]:port
    size_t close = rest.find(']');
    if (close == std::string_view::npos || close + 1 >= rest.size() || rest[close + 1] != ':') {
      *error = "etcd endpoint \"" + ep.text + "\": an IPv6 host is written [addr]:port";
      return false;
    }
    host = rest.substr(1, close - 1);
    port = rest.substr(close + 2);
  } else {
    size_t colon = rest.rfind(':');
    if (colon == std::string_view::npos) {
      *error = "etcd endpoint \"" + ep.text + "\" has no port (etcd's is usually 2379)";
      return false;
    }
    host = rest.substr(0, colon);
    port = rest.substr(colon + 1);
  }
  unsigned value = 0;
  auto [end, ec] = std::from_chars(port.data(), port.data() + port.size(), value);
  if (host.empty() || port.empty() || ec != std::errc() || end != port.data() + port.size() || value == 0 ||
      value > 65535) {
    *error = "etcd endpoint \"" + ep.text + "\" needs a host and a port in 1..65535";
    return false;
  }
  ep.host = std::string(host);
  ep.port = uint16_t(value);
  *out = std::move(ep);
  return true;
}

namespace {
bool Fail(std::string* error, std::string text) {
  *error = std::move(text);
  return false;
}
std::string Int64Text(int64_t v) { return std::to_string(v); }
}  // namespace

bool ReadKeyValue(const json::object& kv, KeyValue* out, std::string* error) {
  KeyValue r;
  const json::value* key = kv.if_contains("key");
  if (key == nullptr || !key->is_string()) return Fail(error, "a kv without a key: " + json::serialize(kv));
  if (!Base64Decode(key->get_string(), &r.key)) {
    return Fail(error, "a kv's key is not base64: " + json::serialize(*key));
  }
  if (const json::value* value = kv.if_contains("value")) {
    if (!value->is_string() || !Base64Decode(value->get_string(), &r.value)) {
      return Fail(error, "the value of key \"" + r.key + "\" is not base64: " + json::serialize(*value));
    }
  }
  std::string why;
  if (!ReadInt64(kv, "create_revision", &r.create_revision, &why) ||
      !ReadInt64(kv, "mod_revision", &r.mod_revision, &why) || !ReadInt64(kv, "version", &r.version, &why) ||
      !ReadInt64(kv, "lease", &r.lease, &why)) {
    return Fail(error, "key \"" + r.key + "\": " + why);
  }
  *out = std::move(r);
  return true;
}

bool ReadRange(const json::object& range_response, std::vector<KeyValue>* out, bool* more, std::string* error) {
  std::vector<KeyValue> kvs;
  if (const json::value* v = range_response.if_contains("kvs")) {
    if (!v->is_array()) return Fail(error, "a range's \"kvs\" is not an array: " + json::serialize(*v));
    for (const json::value& kv : v->get_array()) {
      if (!kv.is_object()) return Fail(error, "a range's kv is not an object: " + json::serialize(kv));
      KeyValue r;
      if (!ReadKeyValue(kv.get_object(), &r, error)) return false;
      kvs.push_back(std::move(r));
    }
  }
  bool has_more = false;
  if (const json::value* v = range_response.if_contains("more")) {
    if (!v->is_bool()) return Fail(error, "a range's \"more\" is not a boolean: " + json::serialize(*v));
    has_more = v->get_bool();
  }
  *out = std::move(kvs);
  *more = has_more;
  return true;
}

int64_t HeaderRevision(const json::object& response) {
  const json::value* header = response.if_contains("header");
  if (header == nullptr || !header->is_object()) return 0;
  int64_t revision = 0;
  std::string ignored;
  if (!ReadInt64(header->get_object(), "revision", &revision, &ignored)) return 0;
  return revision;
}

json::object RangeRequest(std::string_view key, std::string_view range_end, int64_t revision, int64_t limit) {
  json::object r{{"key", Base64Encode(key)}};
  if (!range_end.empty()) r["range_end"] = Base64Encode(range_end);
  if (revision > 0) r["revision"] = Int64Text(revision);
  if (limit > 0) r["limit"] = Int64Text(limit);
  return r;
}

json::object CompareModRevision(std::string_view key, int64_t revision) {
  return {{"key", Base64Encode(key)}, {"result", "EQUAL"}, {"target", "MOD"}, {"mod_revision", Int64Text(revision)}};
}

json::object PutOp(std::string_view key, std::string_view value, int64_t lease) {
  json::object put{{"key", Base64Encode(key)}, {"value", Base64Encode(value)}};
  if (lease != 0) put["lease"] = Int64Text(lease);
  return {{"request_put", std::move(put)}};
}

json::object DeleteOp(std::string_view key) {
  return {{"request_delete_range", json::object{{"key", Base64Encode(key)}}}};
}

json::object RangeOp(std::string_view key, std::string_view range_end) {
  return {{"request_range", RangeRequest(key, range_end)}};
}

json::object Txn(std::vector<json::object> compare, std::vector<json::object> success,
                 std::vector<json::object> failure) {
  auto array = [](std::vector<json::object>& objects) {
    json::array a;
    a.reserve(objects.size());
    for (auto& o : objects) a.emplace_back(std::move(o));
    return a;
  };
  return {{"compare", array(compare)}, {"success", array(success)}, {"failure", array(failure)}};
}

bool ReadTxn(const json::object& response, TxnResult* out, std::string* error) {
  TxnResult r;
  r.revision = HeaderRevision(response);
  if (const json::value* v = response.if_contains("succeeded")) {
    if (!v->is_bool()) return Fail(error, "a txn's \"succeeded\" is not a boolean: " + json::serialize(*v));
    r.succeeded = v->get_bool();
  }
  if (const json::value* v = response.if_contains("responses")) {
    if (!v->is_array()) return Fail(error, "a txn's \"responses\" is not an array: " + json::serialize(*v));
    // Each a ResponseOp: a oneof, so one member (response_range, response_put, ...) whose value
    // is the op's response.
    for (const json::value& op : v->get_array()) {
      if (!op.is_object() || op.get_object().size() != 1 || !op.get_object().begin()->value().is_object()) {
        return Fail(error, "a txn's response is not one op's response: " + json::serialize(op));
      }
      r.responses.push_back(op.get_object().begin()->value().get_object());
    }
  }
  *out = std::move(r);
  return true;
}

bool ReadWatchEvents(const json::object& watch_response, std::vector<WatchEvent>* out, std::string* error) {
  std::vector<WatchEvent> events;
  if (const json::value* v = watch_response.if_contains("events")) {
    if (!v->is_array()) return Fail(error, "a watch response's \"events\" is not an array: " + json::serialize(*v));
    for (const json::value& e : v->get_array()) {
      if (!e.is_object()) return Fail(error, "a watch event is not an object: " + json::serialize(e));
      const json::object& event = e.get_object();
      WatchEvent w;
      if (const json::value* type = event.if_contains("type")) {
        // The gateway writes enum names; a number is the same enum written the other way.
        if (*type == json::value("DELETE") || *type == json::value(1)) w.type = WatchEvent::Type::kDelete;
        else if (*type != json::value("PUT") && *type != json::value(0))
          return Fail(error, "a watch event of unknown type: " + json::serialize(*type));
      }
      const json::value* kv = event.if_contains("kv");
      if (kv == nullptr || !kv->is_object()) return Fail(error, "a watch event without a kv: " + json::serialize(e));
      if (!ReadKeyValue(kv->get_object(), &w.kv, error)) return false;
      events.push_back(std::move(w));
    }
  }
  *out = std::move(events);
  return true;
}

}  // namespace etcd

// =================================================================================== the client
namespace {

constexpr auto kTuple = net::as_tuple(net::use_awaitable);
constexpr const char* kAuthenticatePath = "/v3/auth/authenticate";
constexpr size_t kMaxIdleConnections = 4;
// Unary answers are small (a range of one key); larger ones are a bug or a wrong server.
constexpr uint64_t kMaxResponseBytes = 16 * 1024 * 1024;

bool ReadPasswordFile(const std::string& path, std::string* password, std::string* error) {
  std::ifstream in(path, std::ios::binary);
  if (!in) {
    *error = "cannot read the etcd password_file " + path + ": " + std::strerror(errno);
    return false;
  }
  std::ostringstream text;
  text << in.rdbuf();
  std::string value = text.str();
  // One line: a trailing newline (an editor's, `echo`'s) is not part of the password.
  while (!value.empty() && (value.back() == '\n' || value.back() == '\r')) value.pop_back();
  if (value.empty()) {
    *error = "the etcd password_file " + path + " is empty";
    return false;
  }
  if (value.find('\n') != std::string::npos) {
    *error = "the etcd password_file " + path + " has more than one line";
    return false;
  }
  *password = std::move(value);
  return true;
}

// "250ms", as the lock services write a duration in their errors.
std::string MillisecondsText(std::chrono::milliseconds d) { return std::to_string(d.count()) + "ms"; }

std::string Describe(const beast::error_code& ec) {
  if (ec == beast::error::timeout) return "timed out";
  return ec.message();
}


// etcd's error answer through the gateway: {"error": "...", "code": N, "message": "..."}.
void ReadStatus(const std::string& body, std::string* message, int* code) {
  boost::system::error_code ec;
  json::value v = json::parse(body, ec);
  if (ec || !v.is_object()) {
    *message = body.substr(0, 200);
    return;
  }
  const json::object& o = v.get_object();
  if (const auto* m = o.if_contains("message"); m && m->is_string()) *message = m->get_string();
  else if (const auto* e = o.if_contains("error"); e && e->is_string()) *message = e->get_string();
  if (const auto* c = o.if_contains("code"); c && c->is_int64()) *code = int(c->get_int64());
}

// The status in a streaming answer's {"error": {...}}: grpc_code (or code) and message.
void ReadStreamStatus(const json::object& o, std::string* message, int* code) {
  if (const auto* m = o.if_contains("message"); m && m->is_string()) *message = m->get_string();
  for (const char* field : {"grpc_code", "code"}) {
    if (const auto* c = o.if_contains(field); c && c->is_int64()) {
      *code = int(c->get_int64());
      break;
    }
  }
}

// An invalid or expired token, or one issued before the auth store changed: authenticate again.
bool IsTokenError(const EtcdResult& r) {
  return r.grpc_code == 16 || r.error.find("invalid auth token") != std::string::npos ||
         r.error.find("revision of auth store is old") != std::string::npos;
}

}  // namespace

class EtcdClient::Impl {
 public:
  struct Connection {
    size_t endpoint = 0;
    std::unique_ptr<beast::tcp_stream> plain;
    std::unique_ptr<beast::ssl_stream<beast::tcp_stream>> tls;
    beast::flat_buffer buffer;
    bool reused = false;
    beast::tcp_stream& tcp() { return plain ? *plain : beast::get_lowest_layer(*tls); }
    void Close() {
      beast::error_code ignored;
      tcp().socket().shutdown(tcp::socket::shutdown_both, ignored);
      tcp().close();
    }
  };
  using ConnectionPtr = std::shared_ptr<Connection>;

  struct PendingCall {
    explicit PendingCall(net::io_context& ioc) : guard(ioc) {}
    uint64_t id = 0;
    Callback done;
    bool finished = false;
    Clock::time_point deadline;
    net::steady_timer guard;            // the deadline, whatever the call is waiting for
    std::weak_ptr<Connection> current;  // closed on timeout and stop, to end its waits
    std::vector<std::string> failures;  // per endpoint, for the final error
    bool one_message = false;           // a streaming method's one {"result"} or {"error"} message
  };
  using CallPtr = std::shared_ptr<PendingCall>;

  Impl(const EtcdClientConfig& config, std::vector<etcd::Endpoint> endpoints, std::string password)
      : work_(net::make_work_guard(ioc_)),
        endpoints_(std::move(endpoints)),
        timeout_(config.timeout),
        username_(config.username) {
    if (!username_.empty()) {
      auth_body_ = json::serialize(json::object{{"name", username_}, {"password", password}});
    }
    tls_settings_ = config.tls_settings;
  }

  bool SetUpTls(std::string* error) {
    bool any_tls = std::any_of(endpoints_.begin(), endpoints_.end(), [](const auto& e) { return e.tls; });
    if (!any_tls) return true;
    tls_ = std::make_unique<ssl::context>(ssl::context::tls_client);
    beast::error_code ec;
    tls_->set_options(ssl::context::default_workarounds | ssl::context::no_sslv2 | ssl::context::no_sslv3 |
                          ssl::context::no_tlsv1 | ssl::context::no_tlsv1_1,
                      ec);
    const TlsSettings& t = tls_settings_;
    if (!t.ca_file.empty()) {
      tls_->load_verify_file(t.ca_file, ec);
      if (ec) return Fail(error, "cannot load the etcd tls ca_file " + t.ca_file + ": " + ec.message());
    } else {
      tls_->set_default_verify_paths(ec);
      if (ec) return Fail(error, "cannot load the system's trust store for etcd: " + ec.message());
    }
    if (t.cert_file.empty() != t.key_file.empty()) {
      return Fail(error, "etcd tls: cert_file and key_file go together (mutual TLS)");
    }
    if (!t.cert_file.empty()) {
      tls_->use_certificate_chain_file(t.cert_file, ec);
      if (ec) return Fail(error, "cannot load the etcd tls cert_file " + t.cert_file + ": " + ec.message());
      tls_->use_private_key_file(t.key_file, ssl::context::pem, ec);
      if (ec) return Fail(error, "cannot load the etcd tls key_file " + t.key_file + ": " + ec.message());
    }
    tls_->set_verify_mode(ssl::verify_peer, ec);
    return true;
  }

  void Start() {
    thread_ = std::thread([this] { ioc_.run(); });
  }

  ~Impl() { Stop(); }

  void Call(std::string path, json::object request, Callback done, bool one_message = false) {
    std::unique_lock lock(stop_mutex_);
    if (stopped_) {
      lock.unlock();
      done(EtcdResult{{}, "etcd client stopped", -1});
      return;
    }
    // Registered in the posted handler, before the coroutine starts: Stop's handler, posted
    // after this one, then finds it in pending_ whatever the coroutine has reached.
    net::post(ioc_, [this, path = std::move(path), body = json::serialize(request), done = std::move(done),
                     one_message]() mutable {
      auto call = std::make_shared<PendingCall>(ioc_);
      call->id = next_id_++;
      call->done = std::move(done);
      call->one_message = one_message;
      call->deadline = Clock::now() + timeout_;
      pending_.emplace(call->id, call);
      call->guard.expires_at(call->deadline);
      call->guard.async_wait([this, weak = std::weak_ptr<PendingCall>(call)](beast::error_code ec) {
        if (ec) return;
        if (auto c = weak.lock()) TimedOut(c);
      });
      net::co_spawn(ioc_, Run(call, std::move(path), std::move(body)), net::detached);
    });
  }

  void Stop() {
    {
      std::lock_guard lock(stop_mutex_);
      if (stopped_) return;
      stopped_ = true;
      net::post(ioc_, [this] {
        auto pending = pending_;  // Finish erases
        for (auto& [id, call] : pending) {
          if (auto c = call->current.lock()) c->Close();
          Finish(call, EtcdResult{{}, "etcd client stopped", -1});
        }
        auto watches = watches_;  // EndWatch erases
        for (auto& [id, w] : watches) EndWatch(w, Ended("etcd client stopped"));
        for (auto& c : idle_) c->Close();
        idle_.clear();
        // Coroutines still suspended (a resolve) are destroyed with the io_context.
        ioc_.stop();
      });
    }
    if (thread_.joinable()) thread_.join();
  }

  std::chrono::milliseconds timeout() const { return timeout_; }

  // ---- Watches: the state, the start and the cancel (both from any thread).
  struct WatchState {
    explicit WatchState(net::io_context& ioc) : guard(ioc) {}
    uint64_t id = 0;
    WatchEvents on_events;
    WatchEnded on_end;
    bool ended = false;
    bool created = false;    // the first message came: no deadline from then on
    net::steady_timer guard;  // until created: the config's timeout
    // Connect and authenticate go through the unary machinery, which keeps its deadline, the
    // connection being set up and the failures per endpoint in a call.
    CallPtr setup;
    ConnectionPtr conn;  // the watch's own
    std::string endpoint;
  };
  using WatchPtr = std::shared_ptr<WatchState>;

  class Handle final : public WatchHandle {
   public:
    Handle(std::weak_ptr<Impl> impl, uint64_t id) : impl_(std::move(impl)), id_(id) {}
    void Cancel() override {
      if (auto impl = impl_.lock()) impl->CancelWatch(id_);
    }

   private:
    std::weak_ptr<Impl> impl_;
    const uint64_t id_;
  };

  uint64_t NewWatchId() { return next_watch_id_.fetch_add(1); }

  static WatchEnd Ended(std::string error) { return WatchEnd{WatchEnd::Reason::kError, 0, std::move(error)}; }

  void StartWatch(uint64_t id, const WatchOptions& options, WatchEvents on_events, WatchEnded on_end) {
    std::unique_lock lock(stop_mutex_);
    if (stopped_) {
      lock.unlock();
      on_end(Ended("etcd client stopped"));
      return;
    }
    json::object create{{"key", etcd::Base64Encode(options.key)}};
    if (!options.range_end.empty()) create["range_end"] = etcd::Base64Encode(options.range_end);
    if (options.start_revision > 0) create["start_revision"] = std::to_string(options.start_revision);
    if (options.progress_notify) create["progress_notify"] = true;
    // The whole create_request in one body with a Content-Length: etcd 3.4's gateway reads the
    // first message only from a complete body. The end of the request body does not end the
    // watch (etcd stops reading, not watching).
    std::string body = json::serialize(json::object{{"create_request", std::move(create)}});
    net::post(ioc_, [this, id, body = std::move(body), on_events = std::move(on_events),
                     on_end = std::move(on_end)]() mutable {
      auto w = std::make_shared<WatchState>(ioc_);
      w->id = id;
      w->on_events = std::move(on_events);
      w->on_end = std::move(on_end);
      w->setup = std::make_shared<PendingCall>(ioc_);
      w->setup->deadline = Clock::now() + timeout_;
      watches_.emplace(id, w);
      w->guard.expires_at(w->setup->deadline);
      w->guard.async_wait([this, weak = std::weak_ptr<WatchState>(w)](beast::error_code ec) {
        if (ec) return;
        if (auto w = weak.lock()) WatchTimedOut(w);
      });
      net::co_spawn(ioc_, RunWatch(w, std::move(body)), net::detached);
    });
  }

  void CancelWatch(uint64_t id) {
    std::lock_guard lock(stop_mutex_);
    if (stopped_) return;  // Stop has ended it (or will, in the handler it posted)
    net::post(ioc_, [this, id] {
      auto it = watches_.find(id);
      if (it != watches_.end()) EndWatch(it->second, WatchEnd{WatchEnd::Reason::kCancelled, 0, ""});
    });
  }

 private:
  static bool Fail(std::string* error, std::string text) {
    *error = std::move(text);
    return false;
  }

  void Finish(const CallPtr& call, EtcdResult result) {
    if (call->finished) return;
    call->finished = true;
    call->guard.cancel();
    pending_.erase(call->id);
    Callback done = std::move(call->done);
    done(std::move(result));
  }

  void TimedOut(const CallPtr& call) {
    if (call->finished) return;
    if (auto c = call->current.lock()) c->Close();  // ends the coroutine's wait; it then sees finished
    std::string error = "timed out after " + MillisecondsText(timeout_);
    if (!call->failures.empty()) error += " (" + JoinFailures(*call) + ")";
    Finish(call, EtcdResult{{}, std::move(error), -1});
  }

  static std::string JoinFailures(const PendingCall& call) {
    std::string out;
    for (const auto& f : call.failures) out += (out.empty() ? "" : "; ") + f;
    return out;
  }

  net::awaitable<void> Run(CallPtr call, std::string path, std::string body) {
    if (call->finished) co_return;
    EtcdResult result = co_await WithAuth(call, path, body);
    Finish(call, std::move(result));
  }

  // With a username: sets token_ unless it is set already. Ok, or why not.
  net::awaitable<EtcdResult> EnsureToken(const CallPtr& call) {
    if (username_.empty() || !token_.empty()) co_return EtcdResult{};
    EtcdResult auth = co_await Unary(call, kAuthenticatePath, auth_body_, "");
    if (!auth.ok()) {
      auth.error = "etcd authenticate as \"" + username_ + "\": " + auth.error;
      co_return auth;
    }
    const json::value* token = auth.response.if_contains("token");
    if (token == nullptr || !token->is_string() || token->get_string().empty()) {
      co_return EtcdResult{{}, "etcd authenticate as \"" + username_ + "\": the answer has no token", -1};
    }
    token_ = token->get_string();
    co_return EtcdResult{};
  }

  net::awaitable<EtcdResult> WithAuth(const CallPtr& call, const std::string& path, const std::string& body) {
    if (username_.empty()) co_return co_await Unary(call, path, body, "");
    for (int attempt = 0;; ++attempt) {
      EtcdResult auth = co_await EnsureToken(call);
      if (!auth.ok()) co_return auth;
      std::string used = token_;
      EtcdResult result = co_await Unary(call, path, body, used);
      if (result.ok() || attempt == 1 || !IsTokenError(result)) co_return result;
      if (token_ == used) token_.clear();  // unless another call has renewed it meanwhile
    }
  }

  struct Exchanged {
    beast::error_code ec;
    std::string where;
    bool nothing_received = false;  // the server closed before answering a byte
    unsigned status = 0;
    bool keep_alive = false;
    std::string body;
    std::string endpoint;
  };

  // What one endpoint made of the request.
  struct Attempt {
    bool next_endpoint = false;  // try the next one (failure says why)
    std::string failure;
    EtcdResult result;  // !next_endpoint: the call's result
  };

  net::awaitable<EtcdResult> Unary(const CallPtr& call, const std::string& path, const std::string& body,
                                   const std::string& token) {
    const size_t n = endpoints_.size();
    const size_t first = preferred_;
    for (size_t k = 0; k < n; ++k) {
      if (call->finished) co_return EtcdResult{{}, "etcd call ended", -1};
      Clock::time_point now = Clock::now();
      if (now >= call->deadline) break;
      // An equal share of what is left for each endpoint still to try (the last one gets all of
      // it): a black-holed or hung member cannot use up the whole deadline.
      Clock::time_point attempt_deadline = now + (call->deadline - now) / int(n - k);
      size_t index = (first + k) % n;
      Attempt a = co_await TryEndpoint(call, index, attempt_deadline, path, body, token);
      if (!a.next_endpoint) {
        if (a.result.ok()) preferred_ = index;
        co_return std::move(a.result);
      }
      call->failures.push_back(endpoints_[index].text + ": " + a.failure);
    }
    std::string error = JoinFailures(*call);
    if (Clock::now() >= call->deadline) error = "timed out after " + MillisecondsText(timeout_) + " (" + error + ")";
    co_return EtcdResult{{}, error.empty() ? "no etcd endpoint answered" : error, -1};
  }

  net::awaitable<Attempt> TryEndpoint(const CallPtr& call, size_t index, Clock::time_point deadline,
                                      const std::string& path, const std::string& body, const std::string& token) {
    Attempt a;
    ConnectionPtr conn = TakeIdle(index);
    for (int round = 0; round < 2; ++round) {
      if (!conn) {
        conn = co_await Connect(call, index, deadline, &a.failure);
        if (!conn) {
          a.next_endpoint = true;
          co_return a;
        }
      }
      call->current = conn;
      Exchanged x = co_await Exchange(*conn, deadline, path, body, token);
      call->current.reset();
      if (x.ec) {
        bool stale = conn->reused && x.nothing_received;
        conn.reset();
        if (stale && !call->finished) continue;  // the server had closed it while idle: once more, fresh
        a.next_endpoint = true;
        a.failure = x.where + ": " + Describe(x.ec);
        co_return a;
      }
      if (x.keep_alive) Release(std::move(conn));
      co_return Interpret(x, call->one_message && path != kAuthenticatePath);
    }
    a.next_endpoint = true;
    a.failure = "the connection closed twice";
    co_return a;
  }

  static Attempt Interpret(const Exchanged& x, bool one_message);

  net::awaitable<ConnectionPtr> Connect(const CallPtr& call, size_t index, Clock::time_point deadline,
                                        std::string* failure) {
    const etcd::Endpoint& ep = endpoints_[index];
    std::vector<tcp::endpoint> targets;
    beast::error_code ec;
    net::ip::address address = net::ip::make_address(ep.host, ec);
    if (!ec) {
      targets.emplace_back(address, ep.port);
    } else {
      // A host name: the call's guard timer bounds a slow resolver (getaddrinfo cannot be
      // cancelled; the call completes anyway).
      tcp::resolver resolver(ioc_);
      auto [rec, results] = co_await resolver.async_resolve(ep.host, std::to_string(ep.port), kTuple);
      if (rec) {
        *failure = "resolve " + ep.host + ": " + rec.message();
        co_return nullptr;
      }
      for (const auto& r : results) targets.push_back(r.endpoint());
    }
    if (call->finished) co_return nullptr;

    auto conn = std::make_shared<Connection>();
    conn->endpoint = index;
    if (ep.tls) conn->tls = std::make_unique<beast::ssl_stream<beast::tcp_stream>>(ioc_, *tls_);
    else conn->plain = std::make_unique<beast::tcp_stream>(ioc_);
    call->current = conn;
    conn->tcp().expires_at(deadline);
    auto [cec, connected] = co_await conn->tcp().async_connect(targets, kTuple);
    if (cec) {
      *failure = "connect: " + Describe(cec);
      co_return nullptr;
    }
    conn->tcp().socket().set_option(tcp::no_delay(true), ec);
    if (conn->tls) {
      const std::string& name = tls_settings_.server_name.empty() ? ep.host : tls_settings_.server_name;
      // SNI (a name, never an address: RFC 6066) and the name the certificate must carry.
      net::ip::make_address(name, ec);
      if (ec) SSL_set_tlsext_host_name(conn->tls->native_handle(), name.c_str());
      conn->tls->set_verify_callback(ssl::host_name_verification(name));
      auto [hec] = co_await conn->tls->async_handshake(ssl::stream_base::client, kTuple);
      if (hec) {
        *failure = "TLS handshake: " + Describe(hec);
        co_return nullptr;
      }
    }
    co_return conn;
  }

  template <typename Stream>
  static net::awaitable<void> WriteRead(Stream& stream, beast::flat_buffer& buffer,
                                        http::request<http::string_body>& request,
                                        http::response_parser<http::string_body>& parser, Exchanged* x) {
    auto [wec, written] = co_await http::async_write(stream, request, kTuple);
    if (wec) {
      x->ec = wec;
      x->where = "send";
      x->nothing_received = true;
      co_return;
    }
    auto [rec, read] = co_await http::async_read(stream, buffer, parser, kTuple);
    if (rec) {
      x->ec = rec;
      x->where = "receive";
      x->nothing_received = !parser.got_some() &&
                            (rec == http::error::end_of_stream || rec == net::error::connection_reset ||
                             rec == net::error::eof || rec == ssl::error::stream_truncated);
    }
  }

  net::awaitable<Exchanged> Exchange(Connection& conn, Clock::time_point deadline, const std::string& path,
                                     const std::string& body, const std::string& token) {
    const etcd::Endpoint& ep = endpoints_[conn.endpoint];
    http::request<http::string_body> request{http::verb::post, path, 11};
    request.set(http::field::host, ep.host + ":" + std::to_string(ep.port));
    request.set(http::field::content_type, "application/json");
    if (!token.empty()) request.set(http::field::authorization, token);
    request.keep_alive(true);
    request.body() = body;
    request.prepare_payload();

    http::response_parser<http::string_body> parser;
    parser.body_limit(kMaxResponseBytes);
    conn.tcp().expires_at(deadline);
    Exchanged x;
    x.endpoint = ep.text;
    if (conn.tls) co_await WriteRead(*conn.tls, conn.buffer, request, parser, &x);
    else co_await WriteRead(*conn.plain, conn.buffer, request, parser, &x);
    if (x.ec) co_return x;
    auto& response = parser.get();
    x.status = response.result_int();
    x.keep_alive = response.keep_alive();
    x.body = std::move(response.body());
    co_return x;
  }

  ConnectionPtr TakeIdle(size_t index) {
    for (auto it = idle_.rbegin(); it != idle_.rend(); ++it) {
      if ((*it)->endpoint != index) continue;
      ConnectionPtr conn = std::move(*it);
      idle_.erase(std::next(it).base());
      conn->reused = true;
      return conn;
    }
    return nullptr;
  }

  void Release(ConnectionPtr conn) {
    conn->buffer.clear();
    if (idle_.size() >= kMaxIdleConnections) {
      idle_.front()->Close();
      idle_.erase(idle_.begin());
    }
    idle_.push_back(std::move(conn));
  }

  // ---- Watches on the io thread.
  // By value: a caller's reference may be the watches_ entry that this erases.
  void EndWatch(WatchPtr w, WatchEnd end) {
    if (w->ended) return;
    w->ended = true;
    w->guard.cancel();
    w->setup->finished = true;  // the unary machinery (connect, authenticate) stops at its next step
    if (auto c = w->setup->current.lock()) c->Close();
    if (w->conn) w->conn->Close();  // ends the read; the coroutine then sees ended
    watches_.erase(w->id);
    WatchEnded on_end = std::move(w->on_end);
    on_end(std::move(end));
  }

  void WatchTimedOut(const WatchPtr& w) {
    if (w->ended || w->created) return;
    std::string error = "etcd watch: timed out after " + MillisecondsText(timeout_) + " waiting for it to start";
    if (!w->setup->failures.empty()) error += " (" + JoinFailures(*w->setup) + ")";
    EndWatch(w, Ended(std::move(error)));
  }

  // A watch's response, read as it comes: the body into buffer, split into messages.
  struct WatchStream {
    http::response_parser<http::buffer_body> parser;
    json::stream_parser splitter;
    std::deque<json::object> messages;  // complete, not handled yet
    std::array<char, 16 * 1024> buffer;
  };

  struct WatchAttempt {
    enum class Kind { kNextEndpoint, kFailed, kStarted } kind = Kind::kNextEndpoint;
    std::string failure;  // kNextEndpoint, kFailed
    int grpc_code = -1;   // kFailed
    std::unique_ptr<WatchStream> stream;  // kStarted: its first message is in messages
  };

  net::awaitable<void> RunWatch(WatchPtr w, std::string body) {
    for (int attempt = 0;; ++attempt) {
      EtcdResult auth = co_await EnsureToken(w->setup);
      if (w->ended) co_return;
      if (!auth.ok()) {
        EndWatch(w, Ended("etcd watch: " + auth.error));
        co_return;
      }
      std::string used = token_;
      WatchAttempt a = co_await OpenWatch(w, body, used);
      if (w->ended) co_return;
      if (a.kind == WatchAttempt::Kind::kStarted) {
        co_await ReadWatch(w, *a.stream);
        co_return;
      }
      EtcdResult failed{{}, a.failure, a.grpc_code};
      if (attempt == 0 && !used.empty() && IsTokenError(failed)) {
        if (token_ == used) token_.clear();  // once more with a new token
        continue;
      }
      EndWatch(w, Ended("etcd watch: " + a.failure));
      co_return;
    }
  }

  // The endpoints in turn, as Unary: the first that starts the watch keeps it.
  net::awaitable<WatchAttempt> OpenWatch(const WatchPtr& w, const std::string& body, const std::string& token) {
    const CallPtr& setup = w->setup;
    const size_t n = endpoints_.size();
    const size_t first = preferred_;
    for (size_t k = 0; k < n; ++k) {
      Clock::time_point now = Clock::now();
      if (w->ended || now >= setup->deadline) break;
      Clock::time_point attempt_deadline = now + (setup->deadline - now) / int(n - k);
      size_t index = (first + k) % n;
      WatchAttempt a = co_await TryWatchEndpoint(w, index, attempt_deadline, body, token);
      if (a.kind == WatchAttempt::Kind::kStarted) preferred_ = index;
      if (a.kind != WatchAttempt::Kind::kNextEndpoint) co_return a;
      setup->failures.push_back(endpoints_[index].text + ": " + a.failure);
    }
    WatchAttempt a;
    a.kind = WatchAttempt::Kind::kFailed;
    a.failure = setup->failures.empty() ? "no etcd endpoint answered" : JoinFailures(*setup);
    co_return a;
  }

  net::awaitable<WatchAttempt> TryWatchEndpoint(const WatchPtr& w, size_t index, Clock::time_point deadline,
                                                const std::string& body, const std::string& token) {
    WatchAttempt a;
    ConnectionPtr conn = co_await Connect(w->setup, index, deadline, &a.failure);
    if (w->ended) co_return a;
    if (!conn) co_return a;
    w->conn = conn;
    w->endpoint = endpoints_[index].text;
    SetKeepAliveProbes(*conn);

    const etcd::Endpoint& ep = endpoints_[index];
    http::request<http::string_body> request{http::verb::post, "/v3/watch", 11};
    request.set(http::field::host, ep.host + ":" + std::to_string(ep.port));
    request.set(http::field::content_type, "application/json");
    if (!token.empty()) request.set(http::field::authorization, token);
    request.body() = body;
    request.prepare_payload();
    conn->tcp().expires_at(deadline);
    // if/else, never ?: : GCC 12 miscompiles a co_await inside a conditional expression (it
    // resumed into the TLS branch of a plain connection).
    beast::error_code ec;
    if (conn->tls) ec = co_await Write(*conn->tls, request);
    else ec = co_await Write(*conn->plain, request);
    if (w->ended) co_return a;
    if (ec) {
      a.failure = "send: " + Describe(ec);
      co_return a;
    }
    auto stream = std::make_unique<WatchStream>();
    stream->parser.body_limit(boost::none);  // a watch's body lasts as long as the watch
    if (conn->tls) ec = co_await ReadHeader(*conn->tls, conn->buffer, stream->parser);
    else ec = co_await ReadHeader(*conn->plain, conn->buffer, stream->parser);
    if (w->ended) co_return a;
    if (ec) {
      a.failure = "receive: " + Describe(ec);
      co_return a;
    }
    std::string message;
    int code = -1;
    const unsigned status = stream->parser.get().result_int();
    if (status != 200) {
      std::string error_body;
      std::string failure = co_await ReadErrorBody(*conn, *stream, &error_body);
      if (w->ended) co_return a;
      ReadStatus(error_body, &message, &code);
      if (message.empty()) message = failure.empty() ? "no error message" : failure;
      a.failure = "HTTP " + std::to_string(status) + ": " + message;
      if (status < 500 && code != 14) {
        a.kind = WatchAttempt::Kind::kFailed;
        a.grpc_code = code;
        if (code >= 0) a.failure += " (gRPC code " + std::to_string(code) + ")";
      }
      co_return a;
    }
    std::string failure = co_await ReadMessages(*conn, *stream);
    if (w->ended) co_return a;
    if (!failure.empty()) {
      a.failure = std::move(failure);
      co_return a;
    }
    // The first message: the watch's "created", or the stream's error.
    const json::object& first = stream->messages.front();
    if (const json::value* e = first.if_contains("error"); e && e->is_object()) {
      ReadStreamStatus(e->get_object(), &message, &code);
      a.failure = message.empty() ? json::serialize(first).substr(0, 200) : message;
      if (code != 14) {
        a.kind = WatchAttempt::Kind::kFailed;
        a.grpc_code = code;
        if (code >= 0) a.failure += " (gRPC code " + std::to_string(code) + ")";
      }
      co_return a;
    }
    a.kind = WatchAttempt::Kind::kStarted;
    a.stream = std::move(stream);
    co_return a;
  }

  // Until the watch ends: each message in turn.
  net::awaitable<void> ReadWatch(WatchPtr w, WatchStream& stream) {
    for (;;) {
      while (!stream.messages.empty()) {
        json::object message = std::move(stream.messages.front());
        stream.messages.pop_front();
        HandleWatchMessage(w, message);
        if (w->ended) co_return;
      }
      std::string failure = co_await ReadMessages(*w->conn, stream);
      if (w->ended) co_return;
      if (!failure.empty()) {
        EndWatch(w, Ended("etcd watch on " + w->endpoint + ": " + failure));
        co_return;
      }
    }
  }

  void HandleWatchMessage(const WatchPtr& w, const json::object& message) {
    const std::string where = "etcd watch on " + w->endpoint + ": ";
    if (const json::value* e = message.if_contains("error")) {
      std::string text;
      int code = -1;
      if (e->is_object()) ReadStreamStatus(e->get_object(), &text, &code);
      if (text.empty()) text = json::serialize(*e).substr(0, 200);
      if (code >= 0) text += " (gRPC code " + std::to_string(code) + ")";
      EndWatch(w, Ended(where + text));
      return;
    }
    const json::value* result = message.if_contains("result");
    if (result == nullptr || !result->is_object()) {
      EndWatch(w, Ended(where + "a message with neither a result nor an error: " + json::serialize(message).substr(0, 200)));
      return;
    }
    const json::object& r = result->get_object();
    int64_t compact_revision = 0;
    std::string error;
    if (!etcd::ReadInt64(r, "compact_revision", &compact_revision, &error)) {
      EndWatch(w, Ended(where + error));
      return;
    }
    if (compact_revision > 0) {
      EndWatch(w, WatchEnd{WatchEnd::Reason::kCompacted, compact_revision, ""});
      return;
    }
    if (const json::value* canceled = r.if_contains("canceled"); canceled && *canceled == json::value(true)) {
      std::string reason;
      if (const json::value* why = r.if_contains("cancel_reason"); why && why->is_string()) reason = why->get_string();
      EndWatch(w, Ended(where + "etcd canceled the watch" + (reason.empty() ? "" : ": " + reason)));
      return;
    }
    std::vector<etcd::WatchEvent> events;
    if (!etcd::ReadWatchEvents(r, &events, &error)) {
      EndWatch(w, Ended(where + error));
      return;
    }
    if (!w->created) {
      w->created = true;
      w->guard.cancel();
      w->conn->tcp().expires_never();
    }
    w->on_events(etcd::HeaderRevision(r), std::move(events));
  }

  // One read of the response body into stream.buffer; *data: what it read. A full buffer is
  // no error (the caller takes it and reads on).
  net::awaitable<beast::error_code> ReadChunk(Connection& conn, WatchStream& stream, std::string_view* data) {
    auto& body = stream.parser.get().body();
    body.data = stream.buffer.data();
    body.size = stream.buffer.size();
    beast::error_code ec;
    // (if/else, not ?: : GCC 12 miscompiles co_await inside a conditional expression.)
    if (conn.tls) ec = co_await ReadSome(*conn.tls, conn.buffer, stream.parser);
    else ec = co_await ReadSome(*conn.plain, conn.buffer, stream.parser);
    if (ec == http::error::need_buffer) ec = {};
    *data = std::string_view(stream.buffer.data(), stream.buffer.size() - body.size);
    co_return ec;
  }

  // Reads on until at least one whole message is in stream.messages. Empty, or why not.
  net::awaitable<std::string> ReadMessages(Connection& conn, WatchStream& stream) {
    while (stream.messages.empty()) {
      if (stream.parser.is_done()) co_return "etcd ended the watch's response";
      std::string_view data;
      beast::error_code ec = co_await ReadChunk(conn, stream, &data);
      if (ec) {
        if (ec == http::error::end_of_stream || ec == net::error::eof || ec == net::error::connection_reset ||
            ec == ssl::error::stream_truncated)
          co_return "the connection closed (" + Describe(ec) + ")";
        co_return "receive: " + Describe(ec);
      }
      while (!data.empty()) {
        boost::system::error_code jec;
        size_t used = stream.splitter.write_some(data.data(), data.size(), jec);
        if (jec) co_return "a message that is not JSON (" + jec.message() + ")";
        data.remove_prefix(used);
        if (stream.splitter.done()) {
          json::value v = stream.splitter.release();
          stream.splitter.reset();
          if (!v.is_object()) co_return "a message that is not a JSON object: " + json::serialize(v).substr(0, 200);
          stream.messages.push_back(std::move(v.get_object()));
        }
      }
    }
    co_return "";
  }

  // An error answer's body (small: at most the buffer). Empty, or why it could not be read.
  net::awaitable<std::string> ReadErrorBody(Connection& conn, WatchStream& stream, std::string* out) {
    while (!stream.parser.is_done() && out->size() < stream.buffer.size()) {
      std::string_view data;
      beast::error_code ec = co_await ReadChunk(conn, stream, &data);
      out->append(data);
      if (ec) co_return "receive: " + Describe(ec);
    }
    co_return "";
  }

  // A watch is quiet for as long as nothing changes: probes after 10 s of silence notice a peer
  // that is gone without a FIN or RST (power off, a partition) within about 25 s.
  static void SetKeepAliveProbes(Connection& conn) {
    int fd = conn.tcp().socket().native_handle();
    int on = 1, idle = 10, interval = 5, count = 3;
    ::setsockopt(fd, SOL_SOCKET, SO_KEEPALIVE, &on, sizeof on);
    ::setsockopt(fd, IPPROTO_TCP, TCP_KEEPIDLE, &idle, sizeof idle);
    ::setsockopt(fd, IPPROTO_TCP, TCP_KEEPINTVL, &interval, sizeof interval);
    ::setsockopt(fd, IPPROTO_TCP, TCP_KEEPCNT, &count, sizeof count);
  }

  template <typename Stream>
  static net::awaitable<beast::error_code> Write(Stream& stream, http::request<http::string_body>& request) {
    auto [ec, n] = co_await http::async_write(stream, request, kTuple);
    co_return ec;
  }
  template <typename Stream>
  static net::awaitable<beast::error_code> ReadHeader(Stream& stream, beast::flat_buffer& buffer,
                                                      http::response_parser<http::buffer_body>& parser) {
    auto [ec, n] = co_await http::async_read_header(stream, buffer, parser, kTuple);
    co_return ec;
  }
  template <typename Stream>
  static net::awaitable<beast::error_code> ReadSome(Stream& stream, beast::flat_buffer& buffer,
                                                    http::response_parser<http::buffer_body>& parser) {
    auto [ec, n] = co_await http::async_read_some(stream, buffer, parser, kTuple);
    co_return ec;
  }

  // Declared first: destroyed last, after everything that holds its executor.
  net::io_context ioc_{1};
  net::executor_work_guard<net::io_context::executor_type> work_;
  std::thread thread_;
  std::mutex stop_mutex_;
  bool stopped_ = false;            // under stop_mutex_

  std::vector<etcd::Endpoint> endpoints_;
  std::chrono::milliseconds timeout_;
  std::string username_;
  std::string auth_body_;  // {"name","password"}: the password is kept only in here
  TlsSettings tls_settings_;
  std::unique_ptr<ssl::context> tls_;

  // The io thread's state.
  size_t preferred_ = 0;  // the endpoint that answered last
  std::string token_;     // etcd auth token
  uint64_t next_id_ = 1;
  std::unordered_map<uint64_t, CallPtr> pending_;
  std::vector<ConnectionPtr> idle_;  // most recently used last
  std::unordered_map<uint64_t, WatchPtr> watches_;
  std::atomic<uint64_t> next_watch_id_{1};  // taken on the caller's thread: the handle knows its watch
};

EtcdClient::Impl::Attempt EtcdClient::Impl::Interpret(const Exchanged& x, bool one_message) {
  Attempt a;
  std::string where = x.endpoint + " (HTTP " + std::to_string(x.status) + ")";
  std::string message;
  int code = -1;
  if (x.status == 200) {
    boost::system::error_code ec;
    json::value v = json::parse(x.body, ec);
    if (ec || !v.is_object()) {
      a.result.error = "etcd " + where + " answered with something that is not a JSON object: " + x.body.substr(0, 200);
      return a;
    }
    if (!one_message) {
      a.result.response = std::move(v.get_object());
      return a;
    }
    // A streaming method's answer: {"result": message} or {"error": status}.
    json::object& o = v.get_object();
    if (json::value* result = o.if_contains("result"); result && result->is_object()) {
      a.result.response = std::move(result->get_object());
      return a;
    }
    const json::value* status = o.if_contains("error");
    if (status == nullptr || !status->is_object()) {
      a.result.error = "etcd " + where + " answered with neither a result nor an error: " + x.body.substr(0, 200);
      return a;
    }
    ReadStreamStatus(status->get_object(), &message, &code);
  } else {
    ReadStatus(x.body, &message, &code);
  }
  if (message.empty()) message = "no error message";
  // Another member may be healthy: a 5xx or UNAVAILABLE (no leader, request timed out) goes on.
  if (x.status >= 500 || code == 14) {
    a.next_endpoint = true;
    a.failure = "HTTP " + std::to_string(x.status) + ": " + message;
    return a;
  }
  a.result.error = "etcd " + where + ": " + message;
  if (code >= 0) a.result.error += " (gRPC code " + std::to_string(code) + ")";
  a.result.grpc_code = code;
  return a;
}

std::unique_ptr<EtcdClient> EtcdClient::Create(const EtcdClientConfig& config, std::string* error) {
  if (config.endpoints.empty()) {
    *error = "etcd client: no endpoints";
    return nullptr;
  }
  if (config.timeout <= std::chrono::milliseconds::zero()) {
    *error = "etcd client: the timeout must be positive";
    return nullptr;
  }
  std::vector<etcd::Endpoint> endpoints;
  for (const auto& text : config.endpoints) {
    etcd::Endpoint ep;
    if (!etcd::ParseEndpoint(text, &ep, error)) return nullptr;
    endpoints.push_back(std::move(ep));
  }
  std::string password;
  if (!config.username.empty()) {
    if (config.password_file.empty()) {
      *error = "etcd user \"" + config.username + "\" needs a password_file";
      return nullptr;
    }
    if (!ReadPasswordFile(config.password_file, &password, error)) return nullptr;
  } else if (!config.password_file.empty()) {
    *error = "etcd password_file " + config.password_file + " is set without a username";
    return nullptr;
  }
  auto impl = std::make_shared<Impl>(config, std::move(endpoints), std::move(password));
  if (!impl->SetUpTls(error)) return nullptr;
  impl->Start();
  return std::unique_ptr<EtcdClient>(new EtcdClient(std::move(impl)));
}

EtcdClient::EtcdClient(std::shared_ptr<Impl> impl) : impl_(std::move(impl)) {}
EtcdClient::~EtcdClient() { Stop(); }

void EtcdClient::Call(std::string path, json::object request, Callback done) {
  impl_->Call(std::move(path), std::move(request), std::move(done));
}

void EtcdClient::Stop() { impl_->Stop(); }

namespace {
// A lease answer's ID and TTL (and its "error" text, which LeaseGrant may carry).
void LeaseAnswer(EtcdResult result, const EtcdClient::LeaseCallback& done, const char* what) {
  int64_t id = 0, ttl = 0;
  if (result.ok()) {
    std::string error;
    if (!etcd::ReadInt64(result.response, "ID", &id, &error) || !etcd::ReadInt64(result.response, "TTL", &ttl, &error)) {
      result.error = std::string("etcd ") + what + ": " + error;
    } else if (const json::value* e = result.response.if_contains("error"); e && e->is_string() && !e->get_string().empty()) {
      result.error = std::string("etcd ") + what + ": " + std::string(e->get_string());
    }
  }
  if (!result.ok()) id = ttl = 0;
  done(std::move(result), id, ttl);
}
}  // namespace

void EtcdClient::LeaseGrant(int64_t ttl_seconds, LeaseCallback done) {
  impl_->Call("/v3/lease/grant", {{"TTL", std::to_string(ttl_seconds)}},
              [done = std::move(done)](EtcdResult r) { LeaseAnswer(std::move(r), done, "lease grant"); });
}

void EtcdClient::LeaseKeepAlive(int64_t id, LeaseCallback done) {
  // A stream's one message: after it etcd sees the request body end and ends the answer.
  impl_->Call(
      "/v3/lease/keepalive", {{"ID", std::to_string(id)}},
      [done = std::move(done)](EtcdResult r) { LeaseAnswer(std::move(r), done, "lease keep-alive"); },
      /*one_message=*/true);
}

void EtcdClient::LeaseRevoke(int64_t id, Callback done) {
  impl_->Call("/v3/lease/revoke", {{"ID", std::to_string(id)}}, std::move(done));
}

std::shared_ptr<EtcdClient::WatchHandle> EtcdClient::Watch(WatchOptions options, WatchEvents on_events,
                                                           WatchEnded on_end) {
  uint64_t id = impl_->NewWatchId();
  impl_->StartWatch(id, options, std::move(on_events), std::move(on_end));
  return std::make_shared<Impl::Handle>(std::weak_ptr<Impl>(impl_), id);
}

std::chrono::milliseconds EtcdClient::timeout() const { return impl_->timeout(); }

}  // namespace fencing
