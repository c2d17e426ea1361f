// The whole request-head path of a session, without sockets: FindHeadEnd, CheckRawHead,
// RequestHead::Parse fed the head exactly as Session::ReadHead feeds it (and Beast's parser beside
// it, which must read it alike), PlanRequest against a fixed runtime,
// Fence::Admit (a synchronous fake persister stands in for the state writer) and ApplyAdmission,
// then the upstream request the session would send, serialised and read back.
//
// Oracles (each abort is a bypass, a smuggling vector or a crash):
//  - FindHeadEnd finds the same end however the bytes arrive, at the first empty line, bare LF or
//    bare CR;
//  - nothing CheckRawHead refuses is planned; RequestHead reads the head as Beast's parser does;
//  - no beginning of a head that is read is refused early (HeadInProgress);
//  - a forwarded request has unambiguous framing, a target CheckRequestTarget accepts, the route
//    a brute-force match picks, and, on an enforce route that fences its method, an admission;
//  - a kFence plan carries exactly one token header, which ParseTokenValue accepts as plan.token;
//  - the fence answers per fence.h and ends with nothing in flight or waiting;
//  - the upstream head is clean (CheckRawHead), parses back to the same method and target, and
//    plans to the same route (the backend cannot see another route than the fence did);
//  - a forwarded path routes the same once ";params" are dropped from its segments, as servlet
//    containers do ("/orders;x/1" is "/orders/1" to them);
//  - on a route with writers, a fenced method from a client none of whose identities they admit
//    (the input picks none, a writer or another) is refused 403 with no token read, and nothing
//    else is refused for who sent it; the route's identity header reaches the backend once with
//    the client's identity, or not at all.

#include "metrics/metrics.h"
#include "common/log.h"
#include "config/config.h"
#include "fence/fence.h"
#include "fence/token.h"
#include "../unit/http/beast_oracle.h"
#include "fuzz_check.h"
#include "routing/path_check.h"
#include "http/framing.h"
#include "http/header_rewrite.h"
#include "http/problem.h"
#include "http/raw_head.h"
#include "http/request_head.h"
#include "http/rules.h"
#include "http/uri.h"
#include "server/request_plan.h"
#include "server/runtime.h"
#include "tls/server_identity.h"

#include <boost/asio/buffer.hpp>
#include <boost/beast/core/string.hpp>
#include <boost/beast/http.hpp>

#include <atomic>
#include <cctype>
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <limits>
#include <map>
#include <memory>
#include <optional>
#include <sstream>
#include <string>
#include <string_view>
#include <vector>

namespace {

using namespace fencing;
namespace http = boost::beast::http;
using Parser = http::request_parser<http::buffer_body>;  // reads the upstream head back

constexpr uint64_t kStartMax = 100;  // every fence starts here, so stale, equal and raise all occur

// Two configs, chosen per input: nested, observe, allow and GET-fencing routes with the default
// token header, unmatched: pass and headers_with_underscores: drop; then a renamed token header,
// unmatched: reject and headers_with_underscores: reject.
constexpr std::string_view kRoutes = R"(
routes:
  - {name: orders, prefix: /orders}
  - {name: archive, prefix: /orders/archive, fence: orders}
  - {name: notes, prefix: /notes, mode: observe}
  - {name: open, prefix: /open, missing_token: allow, forward_token: false}
  - {name: reads, prefix: /reads, methods: [GET, HEAD, POST]}
  - {name: quiet, prefix: /quiet, mode: observe, forward_token: false, methods: [DELETE]}
  - {name: legacy, prefix: /Legacy, path_case_insensitive: true}
  - {name: jumpy, prefix: /jumpy, max_token_jump: 50}
  - {name: guarded, prefix: /guarded, writers: ["spiffe://td/w", "dns:*"], identity_header: X-Client-Identity}
)";
// Client certificates are asked for (writers need them); the files are never read here.
constexpr std::string_view kTls = "tls: {cert_file: /nonexistent/c.pem, key_file: /nonexistent/k.pem, "
                                  "client_ca_file: /nonexistent/ca.pem}\n";
constexpr std::string_view kConfigA = R"(backend: "http://127.0.0.1:1"
state_file: /nonexistent/fences.log
)";
constexpr std::string_view kConfigB = R"(backend: "http://backend.internal:8081"
state_file: /nonexistent/fences.log
unmatched: reject
token_header: X-Lock-Token
headers_with_underscores: reject
limits: {max_header_bytes: 2KiB}
)";

struct Env {
  Metrics metrics;
  std::shared_ptr<const ProxyConfig> configs[2];
};

Env& GetEnv() {
  static Env* env = [] {
    auto* e = new Env();
    const std::string_view bases[2] = {kConfigA, kConfigB};
    for (int i = 0; i < 2; ++i) {
      ConfigResult r = ParseConfig(std::string(bases[i]) + std::string(kTls) + std::string(kRoutes), "fuzz-head.yaml");
      if (!r.ok()) {
        for (const ConfigError& err : r.errors) std::fprintf(stderr, "%s\n", err.ToString().c_str());
        std::abort();
      }
      e->configs[i] = r.config;
    }
    return e;
  }();
  return *env;
}

// Makes a raise durable at once (or fails it), inside Persist: the fence allows that.
class SyncPersister : public FencePersister {
 public:
  explicit SyncPersister(bool ok) : ok_(ok) {}
  void Persist(Fence& fence, uint64_t token) override {
    ++calls;
    fence.OnPersisted(token, ok_);
  }
  int calls = 0;

 private:
  bool ok_;
};

class RecordingWaiter : public RaiseWaiter {
 public:
  void Resolve(Admission admission, uint64_t max_token) override {
    ++resolves;
    last = admission;
    last_max = max_token;
  }
  int resolves = 0;
  Admission last = Admission::kWaiting;
  uint64_t last_max = 0;
};

// A fresh runtime per input: fences keep state, and the fuzzer wants each input to mean the same.
struct World {
  World(Env& env, const std::shared_ptr<const ProxyConfig>& config, bool persist_ok, bool state_failed)
      : persister(persist_ok), failed(state_failed) {
    std::vector<RouteRuntime> routes;
    for (const RouteConfig& route : config->routes) {
      auto& fence = fences[route.fence];
      if (!fence) {
        fence = std::make_unique<Fence>(route.fence, kStartMax, persister, failed, [] { return 0.0; },
                                        &env.metrics.ForFence(route.fence));
      }
      routes.push_back(RouteRuntime{&route, fence.get(), &env.metrics.ForRoute(route.name)});
    }
    runtime = std::make_unique<Runtime>(config, std::move(routes),
                                        &env.metrics.ForRoute(kNoRouteLabel));
  }
  SyncPersister persister;
  std::atomic<bool> failed;
  std::map<std::string, std::unique_ptr<Fence>> fences;
  std::unique_ptr<Runtime> runtime;
};

// ASCII case-insensitive equality. Not boost::beast::iequals: Beast 1.81's reads one byte past
// both strings when they differ only in case (found here through RouteRuntime::FencesMethod).
bool EqualsNoCase(std::string_view a, std::string_view b) {
  if (a.size() != b.size()) return false;
  for (size_t i = 0; i < a.size(); ++i) {
    if (std::tolower(static_cast<unsigned char>(a[i])) != std::tolower(static_cast<unsigned char>(b[i]))) return false;
  }
  return true;
}

uint32_t Mix(std::string_view input) {
  uint32_t h = 2166136261u;  // FNV-1a: any stable spread of the input will do
  for (unsigned char c : input) h = (h ^ c) * 16777619u;
  return h;
}

// FindHeadEnd over bytes arriving `step` at a time must agree with one call over all of them.
size_t IncrementalHeadEnd(std::string_view input, size_t step) {
  size_t scanned = 0;
  for (size_t have = std::min(step, input.size());; have = std::min(have + step, input.size())) {
    size_t end = FindHeadEnd(input.substr(0, have), &scanned);
    FUZZ_CHECK(scanned <= have, "FindHeadEnd scanned past the data");
    if (end != 0 || have == input.size()) return end;
  }
}

// Where FindHeadEnd may end a head: just after an empty line (CRLF CRLF), a bare LF, or the byte
// after a bare CR.
bool IsHeadEnd(std::string_view data, size_t end) {
  if (end == 0 || end > data.size()) return false;
  const char last = data[end - 1];
  if (end >= 2 && data[end - 2] == '\r' && last != '\n') return true;  // bare CR
  if (last != '\n') return false;
  if (end == 1 || data[end - 2] != '\r') return true;  // bare LF
  return end >= 4 && data[end - 3] == '\n' && data[end - 4] == '\r';
}

// An independent reading of what CheckRawHead must at least refuse.
void CheckAcceptedRawHead(std::string_view head) {
  FUZZ_CHECK(head.size() >= 4 && head.substr(head.size() - 4) == "\r\n\r\n", "an accepted head not ending in CRLFCRLF");
  size_t start = 0;
  bool first = true;
  while (start < head.size()) {
    size_t crlf = head.find("\r\n", start);
    FUZZ_CHECK(crlf != std::string_view::npos, "an accepted head with a line not ending in CRLF");
    std::string_view line = head.substr(start, crlf - start);
    FUZZ_CHECK(line.find('\n') == std::string_view::npos && line.find('\r') == std::string_view::npos,
               "an accepted head with a bare CR or LF");
    FUZZ_CHECK(line.find('\0') == std::string_view::npos, "an accepted head with NUL");
    start = crlf + 2;
    if (line.empty()) {
      FUZZ_CHECK(!first && start == head.size(), "an accepted head with an empty line inside");
      break;
    }
    if (!first) {
      FUZZ_CHECK(line.front() != ' ' && line.front() != '\t', "an accepted obs-fold line");
      size_t colon = line.find(':');
      FUZZ_CHECK(colon != std::string_view::npos && colon > 0, "an accepted field line without a name");
      FUZZ_CHECK(line.substr(0, colon).find_first_of(" \t") == std::string_view::npos,
                 "an accepted field name with whitespace");
    }
    first = false;
  }
}

template <typename FieldList>
size_t CountFields(const FieldList& fields, std::string_view name) {
  size_t n = 0;
  for (const auto& f : fields) n += EqualsNoCase(f.name_string(), name) ? 1 : 0;
  return n;
}

template <typename FieldList>
bool NamedByConnection(const FieldList& fields, std::string_view name) {
  for (const auto& f : fields) {
    if (f.name() != http::field::connection) continue;
    for (auto token : http::token_list(f.value())) {
      if (EqualsNoCase(token, name)) return true;
    }
  }
  return false;
}

bool IsSegmentPrefix(const RouteConfig& route, std::string_view path) {
  const std::string_view prefix = route.prefix;
  if (prefix == "/") return true;
  if (path.size() < prefix.size() || (path.size() > prefix.size() && path[prefix.size()] != '/')) return false;
  const std::string_view head = path.substr(0, prefix.size());
  return route.path_case_insensitive ? EqualsNoCase(head, prefix) : head == prefix;
}

// Drops ";params" from every segment, as servlet containers do before routing.
std::string WithoutParams(std::string_view path) {
  std::string out;
  size_t start = 0;
  while (start < path.size()) {
    size_t end = path.find('/', start + 1);
    if (end == std::string_view::npos) end = path.size();
    std::string_view segment = path.substr(start, end - start);
    out.append(segment.substr(0, segment.find(';')));
    start = end;
  }
  return out;
}

bool EnforcesOn(const RouteRuntime* route, std::string_view method) {
  return route && route->config->mode == FenceMode::kEnforce && route->config->missing_token == MissingToken::kReject &&
         route->FencesMethod(method);
}

void CheckForwardable(const RequestHead& req, const RequestPlan& plan, const Runtime& runtime) {
  FUZZ_CHECK(CheckRequestFraming(req).ok, "a forwarded request with ambiguous framing");
  FUZZ_CHECK(req.method() != http::verb::connect, "a forwarded CONNECT");
  FUZZ_CHECK(req.count(http::field::upgrade) == 0, "a forwarded Upgrade");
  if (runtime.config().headers_with_underscores == HeadersWithUnderscores::kReject) {
    for (const auto& f : req) {
      FUZZ_CHECK(f.name_string().find('_') == std::string_view::npos,
                 "a field named with '_' forwarded under headers_with_underscores: reject");
    }
  }
  for (std::string_view p : {std::string_view(runtime.config().token_header), std::string_view("Host"),
                             std::string_view("Content-Length"), std::string_view("Transfer-Encoding")}) {
    FUZZ_CHECK(!NamedByConnection(req, p), "a forwarded request whose Connection names a field the proxy relies on");
  }
  for (const auto& f : req) {
    if (f.name() != http::field::host) continue;
    FUZZ_CHECK(IsValidHostPort(f.value()), "a forwarded request with a Host that is not host[:port]");
  }
  const TargetCheck target = CheckRequestTarget(req.target());
  FUZZ_CHECK(target.ok, "a forwarded request whose target CheckRequestTarget refuses");
  FUZZ_CHECK(plan.host == target.authority, "the Host sent upstream is not the absolute-form target's authority");
  FUZZ_CHECK(!plan.origin_target.empty() && plan.origin_target.front() == '/', "an origin target not starting with '/'");
  const TargetCheck origin = CheckRequestTarget(plan.origin_target);
  FUZZ_CHECK(origin.ok && origin.path == target.path, "the origin target reads as another path");

  // The route is the longest whole-segment prefix, found by brute force.
  const ProxyConfig& config = runtime.config();
  const RouteConfig* want = nullptr;
  for (const RouteConfig& r : config.routes) {
    if (IsSegmentPrefix(r, target.path) && (!want || r.prefix.size() > want->prefix.size())) want = &r;
  }
  FUZZ_CHECK((plan.route ? plan.route->config : nullptr) == want, "the plan routes elsewhere than the longest prefix");
  FUZZ_CHECK(plan.route || config.unmatched == Unmatched::kPass, "an unmatched request forwarded under unmatched: reject");
  // (plan.problem.token: the token a fenced request carried, kept once the fence has answered)
  FUZZ_CHECK(plan.rewrite_token == (plan.problem.token.has_value() && plan.route && plan.route->config->forward_token),
             "a fenced token not rewritten for the backend, or another rewritten");
  FUZZ_CHECK(plan.drop_header == (plan.route && (!plan.route->config->forward_token || plan.rewrite_token)
                                      ? std::string_view(config.token_header)
                                      : std::string_view()),
             "the token header is dropped where it should be kept, or kept where it should be dropped");

  FUZZ_CHECK(runtime.Match(WithoutParams(target.path)) == plan.route,
             "a forwarded path routes elsewhere once ';params' are dropped");
}

// The clients a request may come from: none (no certificate, or the plain listener), a writer of
// the guarded route, and another.
const ClientIdentity* Identities() {
  static const ClientIdentity identities[3] = {
      ClientIdentity{}, ClientIdentity::Of({"dns:batch.svc", "spiffe://td/w"}), ClientIdentity::Of({"spiffe://td/r"})};
  return identities;
}

// Who may write is decided on the route and the method, before the token: a fenced method on a
// route with writers from a client they do not admit is refused (and nothing else is, for that).
void CheckWriters(const RequestHead& req, const RequestPlan& plan, const ClientIdentity& identity) {
  bool admitted = false;
  const bool guarded = plan.route && !plan.route->config->writers.empty();
  if (guarded) {
    for (const std::string& writer : plan.route->config->writers) {
      for (const std::string& name : identity.names) admitted = admitted || WriterAdmits(writer, name);
    }
  }
  const bool must_refuse = guarded && plan.route->FencesMethod(req.method_string()) && !admitted;
  const bool refused = plan.outcome == Outcome::kRejectedWriter;
  FUZZ_CHECK(must_refuse == refused, must_refuse ? "a client that may not write was not refused as such"
                                                 : "a client refused as a writer that may write");
  if (refused) {
    FUZZ_CHECK(plan.action == RequestPlan::Action::kReject && plan.problem.status == http::status::forbidden &&
                   !plan.problem.token && !plan.problem.max_token,
               "a writer refusal that is no 403 without a token");
  }
}

// What the session sends upstream, read back.
void CheckUpstream(const RequestHead& req, const RequestPlan& plan, const Runtime& runtime,
                   const ClientIdentity& identity) {
  const bool drop_underscored = runtime.config().headers_with_underscores == HeadersWithUnderscores::kDrop;
  // As the session frames it: streaming (nothing whole in hand), or a body held whole.
  const bool whole = req.method_string().size() % 2 == 0;
  const uint64_t held = req.target().size();
  const NextHopFraming framing = UpstreamRequestFraming(req, whole ? std::optional<uint64_t>(held) : std::nullopt);
  // As Session::Forward: the route's identity header, with the client's identity.
  const std::string_view identity_header =
      plan.route ? std::string_view(plan.route->config->identity_header) : std::string_view();
  const std::string wire = UpstreamRequestHead(req, framing, plan.origin_target, plan.host, "127.0.0.1",
                                               runtime.config().backend.ToString(), plan.drop_header, drop_underscored,
                                               plan.rewrite_token ? std::optional<uint64_t>(plan.token) : std::nullopt,
                                               identity_header,
                                               identity_header.empty() ? std::string_view() : identity.joined);

  FUZZ_CHECK(CheckRawHead(wire).ok, "the upstream head is one CheckRawHead would refuse");
  Parser back;
  back.header_limit(1 << 20);
  back.body_limit(std::numeric_limits<uint64_t>::max());  // Beast's default (1 MB) is not the proxy's
  boost::system::error_code ec;
  const size_t used = back.put(boost::asio::buffer(wire.data(), wire.size()), ec);
  FUZZ_CHECK(!ec && back.is_header_done() && used == wire.size(), "the upstream head does not parse back");
  const auto& up = back.get();
  FUZZ_CHECK(up.method_string() == req.method_string(), "the upstream method differs");
  FUZZ_CHECK(up.target() == plan.origin_target, "the upstream target differs from the origin target");
  RequestHead up_head;  // the upstream head as the proxy itself reads one
  FUZZ_CHECK(!up_head.Parse(wire, std::numeric_limits<uint64_t>::max()), "the upstream head does not read back");
  FUZZ_CHECK(CheckRequestFraming(up_head).ok, "the upstream framing is ambiguous");
  FUZZ_CHECK(up.count(http::field::upgrade) == 0, "an Upgrade sent upstream");
  for (const auto& f : up) {
    FUZZ_CHECK(!drop_underscored || f.name_string().find('_') == std::string_view::npos,
               "a field named with '_' sent upstream under headers_with_underscores: drop");
  }
  if (!plan.host.empty()) {
    FUZZ_CHECK(up.count(http::field::host) == 1 && up[http::field::host] == plan.host,
               "an absolute-form target's authority is not the one Host sent upstream");
  }
  // The body is framed for the backend by the proxy: one Content-Length in plain decimal (the
  // client's, or a chunked body's held whole), chunks of its own, or nothing; never the client's
  // framing bytes.
  FUZZ_CHECK(up.count(http::field::content_length) <= 1 && up.count(http::field::transfer_encoding) <= 1,
             "a framing field twice upstream");
  if (req.count(http::field::content_length) != 0) {
    FUZZ_CHECK(up[http::field::content_length] == std::to_string(*req.content_length()),
               "a Content-Length upstream that is not the client's length in plain decimal");
  } else if (req.count(http::field::transfer_encoding) != 0) {
    if (whole) {
      FUZZ_CHECK(!up.chunked() && up[http::field::content_length] == std::to_string(held),
                 "a chunked body held whole not sent with its length upstream");
    } else {
      FUZZ_CHECK(up.chunked() && !up.has_content_length(), "a streaming chunked body not sent chunked upstream");
      FUZZ_CHECK(up[http::field::transfer_encoding] == "chunked", "a Transfer-Encoding other than chunked upstream");
    }
  } else {
    FUZZ_CHECK(!up.chunked() && !up.has_content_length(), "body framing upstream for a request without a body");
  }
  const std::string& token_header = runtime.config().token_header;
  if (plan.rewrite_token) {
    FUZZ_CHECK(CountFields(up.base(), token_header) == 1 && up[token_header] == std::to_string(plan.token),
               "a fenced token not sent upstream once, in plain decimal");
  } else if (!plan.drop_header.empty()) {
    FUZZ_CHECK(CountFields(up.base(), token_header) == 0, "a dropped token header sent upstream");
  } else if (EnforcesOn(plan.route, req.method_string())) {
    FUZZ_CHECK(CountFields(up.base(), token_header) == 1, "a fenced write sent upstream without its one token");
  }

  // The identity header: the proxy's alone, once with an identity, else absent.
  if (plan.route && !plan.route->config->identity_header.empty()) {
    const std::string& name = plan.route->config->identity_header;
    FUZZ_CHECK(CountFields(up.base(), name) == (identity.empty() ? 0u : 1u) &&
                   (identity.empty() || up[name] == identity.joined),
               "the identity header upstream is not exactly the client's identity");
  }

  // The backend sees the same route the fence was asked about, and nothing ambiguous.
  const RequestPlan again = PlanRequest(up_head, runtime, identity);
  FUZZ_CHECK(again.action != RequestPlan::Action::kReject ||
                 (again.outcome != Outcome::kRejectedPath && again.outcome != Outcome::kRejectedRequest),
             "the upstream request is one the proxy itself would refuse");
  FUZZ_CHECK(again.route == plan.route, "the upstream request plans to another route");
}

}  // namespace

extern "C" int LLVMFuzzerInitialize(int*, char***) {
  SetLogLevel(LogLevel::kError);
  GetEnv();
  return 0;
}

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string_view input = fuzz::AsView(data, size);
  Env& env = GetEnv();
  const uint32_t mix = Mix(input);

  // 1. Where the head ends, however the bytes arrive.
  size_t scanned = 0;
  const size_t head_length = FindHeadEnd(input, &scanned);
  FUZZ_CHECK(IncrementalHeadEnd(input, 1 + mix % 13) == head_length, "FindHeadEnd depends on how bytes arrive");
  if (head_length == 0) {
    for (size_t i = 1; i <= input.size(); ++i) FUZZ_CHECK(!IsHeadEnd(input, i), "FindHeadEnd missed a head end");
    return 0;  // the session reads on (or answers 431 at the limit)
  }
  FUZZ_CHECK(IsHeadEnd(input, head_length), "FindHeadEnd stopped where no head ends");
  for (size_t i = 1; i < head_length; ++i) FUZZ_CHECK(!IsHeadEnd(input, i), "FindHeadEnd skipped an earlier head end");

  const std::shared_ptr<const ProxyConfig>& config = env.configs[mix & 1];
  if (head_length > config->limits.max_header_bytes) return 0;  // 431 before anything parses it
  const std::string_view head = input.substr(0, head_length);

  // 2. The byte-level check, then the head read, as Session::ReadHead does them.
  const RawHeadCheck raw = CheckRawHead(head);
  if (!raw.ok) {
    FUZZ_CHECK(raw.reason != nullptr && *raw.reason != '\0', "a refused head without a reason");
    return 0;  // 400 and close: nothing is planned, nothing forwarded
  }
  CheckAcceptedRawHead(head);

  const std::string differs = CompareWithBeast(head, config->limits.max_body_bytes);
  FUZZ_CHECK(differs.empty(), differs.c_str());
  RequestHead req;
  if (req.Parse(head, config->limits.max_body_bytes)) return 0;  // 400 (or 413): refused
  // A head that is read was never refused early: ReadHead asks HeadInProgress about every part
  // of it that arrives before its end, and only what can never become valid may be refused.
  HeadInProgress so_far;
  for (size_t n = 0; n < head.size(); n += 1 + mix % 7) {
    FUZZ_CHECK(so_far.Check(head.substr(0, n)).ok, "the start of a valid request head refused early");
  }

  // 3. The plan, and the fence's answer for a fenced write.
  const bool persist_ok = mix % 13 != 0;  // now and then the state write fails, or has failed
  World world(env, config, persist_ok, /*state_failed=*/mix % 29 == 0);

  const Runtime& runtime = *world.runtime;
  const ClientIdentity& identity = Identities()[(mix >> 4) % 3];
  RequestPlan plan = PlanRequest(req, runtime, identity);
  CheckWriters(req, plan, identity);

  if (plan.action == RequestPlan::Action::kFence) {
    FUZZ_CHECK(plan.route != nullptr && plan.route->FencesMethod(req.method_string()), "a kFence plan without a fenced route");
    const std::string& header = config->token_header;
    FUZZ_CHECK(CountFields(req, header) == 1, "a kFence plan without exactly one token header");
    std::string_view value;
    for (const auto& f : req) {
      if (EqualsNoCase(f.name_string(), header)) value = f.value();
    }
    const ParsedToken token = ParseTokenValue(value);
    FUZZ_CHECK(token.status == TokenParse::kOk && token.value == plan.token, "a kFence plan whose token does not parse to plan.token");

    Fence& fence = *plan.route->fence;
    RecordingWaiter waiter;
    const uint64_t max_jump = plan.route->config->max_token_jump;
    const AdmitResult admit = fence.Admit(plan.token, waiter, max_jump);  // as Session::WaitForRaise
    Admission admission = admit.admission;
    uint64_t max_token = admit.max_token;
    if (world.failed.load()) {
      FUZZ_CHECK(admission == Admission::kFailed, "a failed state store admitted or queued a write");
    } else if (plan.token < kStartMax) {
      FUZZ_CHECK(admission == Admission::kStale && max_token == kStartMax, "a stale token was not refused");
    } else if (max_jump != 0 && plan.token - kStartMax > max_jump) {
      FUZZ_CHECK(admission == Admission::kTooFar && world.persister.calls == 0, "a jump past max_token_jump was not refused");
    } else if (plan.token == kStartMax) {
      FUZZ_CHECK(admission == Admission::kAdmitted && world.persister.calls == 0, "the current token was not admitted at once");
    } else {
      FUZZ_CHECK(admission == Admission::kWaiting && world.persister.calls == 1, "a raise did not wait for one persist");
      FUZZ_CHECK(waiter.resolves == 1, "a waiter was not resolved exactly once");
      admission = waiter.last;
      max_token = waiter.last_max;
      FUZZ_CHECK(admission == (persist_ok ? Admission::kAdmitted : Admission::kFailed),
                 "a raise ended other than its persist");
    }
    ApplyAdmission(plan, admission, max_token);
    if (admission == Admission::kAdmitted) fence.Release();
    const FenceSnapshot snap = fence.Snapshot();
    FUZZ_CHECK(snap.inflight == 0 && snap.waiting == 0 && snap.pending == 0, "the fence kept a write in flight or waiting");
    if (admission == Admission::kAdmitted) {
      FUZZ_CHECK(plan.action == RequestPlan::Action::kForward && plan.outcome == Outcome::kForwarded, "an admitted write not forwarded");
      FUZZ_CHECK(snap.max_token == std::max(kStartMax, plan.token), "an admitted raise did not become the max");
    } else if (plan.route->config->mode == FenceMode::kEnforce) {
      FUZZ_CHECK(plan.action == RequestPlan::Action::kReject, "enforce mode forwarded a write the fence refused");
    }
  }

  if (plan.action == RequestPlan::Action::kForward) {
    // No unfenced way through an enforced route: it forwards only what the fence admitted.
    if (EnforcesOn(plan.route, req.method_string())) {
      FUZZ_CHECK(plan.outcome == Outcome::kForwarded, "an enforced fenced write forwarded without admission");
    }
    CheckForwardable(req, plan, runtime);
    CheckUpstream(req, plan, runtime, identity);
  } else {
    FUZZ_CHECK(plan.action == RequestPlan::Action::kReject, "a plan left undecided");
    const auto response = MakeProblemResponse(plan.problem, req.version(), !plan.close && req.keep_alive());
    FUZZ_CHECK(response.result() == plan.problem.status, "the response status differs from the problem's");
    FUZZ_CHECK(static_cast<unsigned>(plan.problem.status) >= 400, "a rejection without an error status");
    // Request bytes echoed into the problem (method, reasons) must not split the response head.
    std::ostringstream out;
    out << response.base();
    const std::string wire = out.str();
    size_t cr = 0, lf = 0, crlf = 0;
    for (size_t i = 0; i < wire.size(); ++i) {
      cr += wire[i] == '\r';
      lf += wire[i] == '\n';
      crlf += wire[i] == '\n' && i > 0 && wire[i - 1] == '\r';
    }
    FUZZ_CHECK(cr == crlf && lf == crlf, "a bare CR or LF in the response head");
  }
  return 0;
}
