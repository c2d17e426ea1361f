#include "server/request_plan.h"

#include "http/ascii.h"

#include "fence/token.h"
#include "routing/fence_key.h"
#include "routing/path_check.h"
#include "http/framing.h"
#include "http/rules.h"
#include "http/uri.h"

#include <functional>
#include <string>

namespace fencing {

namespace http = boost::beast::http;

namespace {

// Every 400 closes the connection: after a malformed message the next request's boundary is
// unknown. Other refusals close only when the caller says (CONNECT: the next bytes are another
// protocol's).
bool ClosesConnection(const Problem& problem) { return problem.status == http::status::bad_request; }

RequestPlan Reject(Outcome outcome, Problem problem, bool close = false) {
  RequestPlan plan;
  plan.action = RequestPlan::Action::kReject;
  plan.outcome = outcome;
  plan.problem = std::move(problem);
  plan.close = close || ClosesConnection(plan.problem);
  return plan;
}

void Forward(RequestPlan& plan, Outcome outcome) {
  plan.action = RequestPlan::Action::kForward;
  plan.outcome = outcome;
}

// Keeps the route, fence and token already in plan.problem.
void RejectWith(RequestPlan& plan, Outcome outcome, ProblemType type, std::string detail) {
  const ProblemTypeInfo& info = Describe(type);
  plan.action = RequestPlan::Action::kReject;
  plan.outcome = outcome;
  plan.problem.status = info.status;
  plan.problem.type = info.slug;
  plan.problem.title = info.title;
  plan.problem.detail = std::move(detail);
  plan.close = ClosesConnection(plan.problem);
}

// The path as a servlet container (Tomcat, Jetty, Spring MVC) routes it: ";params" dropped from
// every segment ("/orders;x/1" -> "/orders/1").
std::string WithoutPathParameters(std::string_view path) {
  std::string bare;
  bare.reserve(path.size());
  bool in_parameter = false;
  for (char c : path) {
    if (c == '/') in_parameter = false;
    if (c == ';') in_parameter = true;
    if (!in_parameter) bare.push_back(c);
  }
  return bare;
}

// Where the route's key comes from, for a problem's detail.
std::string KeySourceText(const RouteConfig& route) {
  if (route.fence_key.source == FenceKeySpec::Source::kHeader) return "the " + route.fence_key.header + " header";
  return "path segment " + std::to_string(route.fence_key.path_segment) + " after " + route.prefix;
}

// Whether one of the route's writers admits one of the client's identities.
bool MayWrite(const std::vector<std::string>& writers, const ClientIdentity& identity) {
  for (const std::string& name : identity.names) {
    for (const std::string& writer : writers) {
      if (WriterAdmits(writer, name)) return true;
    }
  }
  return false;
}

}  // namespace

RequestPlan PlanRequest(const RequestHead& head, const Runtime& runtime, const ClientIdentity& identity) {
  const ProxyConfig& config = runtime.config();

  OtherFieldCounts counts;
  if (FramingCheck framing = CheckRequestFraming(head, &counts); !framing.ok) {
    return Reject(Outcome::kRejectedRequest,
                  MakeProblem(ProblemType::kAmbiguousFraming,
                              std::string("the request is refused because it has ") + framing.reason),
                  true);
  }
  if (counts.connections > 0) {
    if (std::string_view named = ProtectedFieldNamedByConnection(head, config.token_header, runtime.key_headers());
        !named.empty()) {
      return Reject(Outcome::kRejectedRequest,
                    MakeProblem(ProblemType::kBadConnectionHeader,
                                "the Connection header names " + std::string(named) +
                                    ", which the proxy's decision or the request's framing rests on"));
    }
  }
  // RFC 9112 section 3.2: exactly one Host in HTTP/1.1, at most one in HTTP/1.0.
  if (size_t hosts = counts.hosts; hosts > 1 || (hosts == 0 && head.version() >= 11)) {
    return Reject(Outcome::kRejectedRequest,
                  MakeProblem(ProblemType::kBadHost, hosts ? "the request has more than one Host header"
                                                           : "an HTTP/1.1 request must have a Host header"));
  }
  // RFC 9112 section 3.2: a Host that is not a valid host[:port] is a 400. Empty is not one
  // either: an http URI has a host (RFC 9110 section 4.2.1), and the backend is asked in HTTP/1.1.
  if (counts.hosts == 1 && !IsValidHostPort(counts.host)) {
    return Reject(Outcome::kRejectedRequest,
                  MakeProblem(ProblemType::kBadHost, "the Host header is not a valid host[:port] (RFC 3986)"));
  }
  // A CGI-style backend reads X_Fencing_Token as X-Fencing-Token: such a field could pose as one
  // the proxy checked (drop, the default, leaves them out when forwarding instead).
  if (!counts.underscored.empty() && config.headers_with_underscores == HeadersWithUnderscores::kReject) {
    return Reject(Outcome::kRejectedRequest,
                  MakeProblem(ProblemType::kUnderscoreHeader,
                              "the header " + std::string(counts.underscored) +
                                  " has '_' in its name, which headers_with_underscores: reject refuses"));
  }
  // After CONNECT or an Upgrade the client's next bytes belong to another protocol: the
  // connection is closed rather than read as the next request.
  if (head.method() == http::verb::connect) {
    return Reject(Outcome::kRejectedRequest,
                  MakeProblem(ProblemType::kMethodNotAllowed, "CONNECT is not proxied"), true);
  }
  // TRACE echoes the request back, credentials and cookies included (cross-site tracing); nginx
  // answers it 405 too. The method is refused whatever the route.
  if (head.method() == http::verb::trace) {
    return Reject(Outcome::kRejectedRequest,
                  MakeProblem(ProblemType::kMethodNotAllowed,
                              "TRACE is not proxied: it would echo the request, credentials included, to the client"));
  }
  if (counts.upgrades > 0) {
    // A switched protocol would carry writes the fence never sees.
    return Reject(Outcome::kRejectedRequest,
                  MakeProblem(ProblemType::kUpgradeRefused, "protocol upgrades (Upgrade header) are not proxied"),
                  true);
  }

  TargetCheck target = CheckRequestTarget(head.target());
  if (!target.ok) {
    return Reject(Outcome::kRejectedPath,
                  MakeProblem(ProblemType::kAmbiguousPath,
                              std::string("the path could reach the backend as another route: ") + target.reason));
  }

  // An absolute-form target names the host: it replaces the Host header upstream (RFC 9112
  // section 3.2.2). Userinfo ("user@") is refused with the rest (RFC 9110 section 4.2.4).
  const bool absolute_form = !head.target().starts_with('/');  // the only other form CheckRequestTarget accepts
  if (absolute_form && !IsValidHostPort(target.authority)) {
    return Reject(Outcome::kRejectedRequest,
                  MakeProblem(ProblemType::kBadHost,
                              "the absolute-form target's authority is not a valid host[:port] (RFC 3986)"));
  }

  RequestPlan plan;
  plan.host = target.authority;
  // Origin-form for the backend: the path and query of the checked target. The path is a view
  // into the target, except for an absolute-form target without one ("http://h"), whose path
  // CheckRequestTarget gives as a static "/": subtracting pointers into unrelated objects there
  // threw out_of_range from substr (the connection ended without an answer).
  std::string_view full_target = head.target();
  const std::less_equal<const char*> at_or_before;
  if (at_or_before(full_target.data(), target.path.data()) &&
      at_or_before(target.path.data(), full_target.data() + full_target.size())) {
    plan.origin_target = full_target.substr(static_cast<size_t>(target.path.data() - full_target.data()));
  } else {
    plan.origin_target = target.path;  // "/"
  }

  plan.route = runtime.Match(target.path);
  // A backend that drops path parameters must not see the request under another route than the
  // one that decided on it: "/orders;x/1" matches no route here but is "/orders/1" there.
  if (target.path.find(';') != std::string_view::npos &&
      runtime.Match(WithoutPathParameters(target.path)) != plan.route) {
    return Reject(Outcome::kRejectedPath,
                  MakeProblem(ProblemType::kAmbiguousPath,
                              "the path could reach the backend as another route: a path parameter (';') "
                              "changes the route the path matches"));
  }
  if (!plan.route) {
    if (config.unmatched == Unmatched::kReject) {
      RejectWith(plan, Outcome::kUnmatched, ProblemType::kNoRoute,
                 "no route matches the path and unmatched is reject");
    } else {
      Forward(plan, Outcome::kUnmatched);
    }
    return plan;
  }

  const RouteConfig& route = *plan.route->config;
  plan.problem.route = route.name;
  if (!route.forward_token) plan.drop_header = config.token_header;
  if (!plan.route->FencesMethod(head.method_string())) {
    Forward(plan, Outcome::kUnfenced);
    return plan;
  }
  // Who may write, before the token is read: a client that may not write raises nothing and
  // learns nothing of the fence (no 409, no max). In observe mode too: observe is about tokens.
  if (!route.writers.empty() && !MayWrite(route.writers, identity)) {
    RejectWith(plan, Outcome::kRejectedWriter, ProblemType::kWriterNotAllowed,
               identity.empty()
                   ? "route '" + route.name + "' lets only its writers send " + std::string(head.method_string()) +
                         ", and the request came with no client identity (no verified client certificate, or the "
                         "plain listener)"
                   : "route '" + route.name + "' lets only its writers send " + std::string(head.method_string()) +
                         ", and the client's identity (" + identity.joined + ") is not among them");
    return plan;
  }
  // Named only now: a client the writers refuse is not told which fence guards the route.
  plan.problem.fence = route.fence;

  const bool observe = route.mode == FenceMode::kObserve;
  const std::string& header = config.token_header;
  size_t count = 0;
  std::string_view first;
  for (const auto& field : head) {
    if (!EqualsIgnoreCase(field.name_string(), header)) continue;
    if (count++ == 0) first = field.value();
  }
  ParsedToken token = ParseTokenHeader(count, first);
  // A fenced request on a keyed route names its lock; one forwarded unfenced (no token, and
  // missing_token: allow) needs no key. Key errors are request errors: 400 in observe mode too,
  // and before the token's own problems, which a fence could only judge knowing the key.
  const bool fenced = !(token.status == TokenParse::kMissing && route.missing_token == MissingToken::kAllow);
  if (fenced && route.fence_key.keyed()) {
    const FenceKeyResult key =
        ExtractFenceKey(FenceKeySource{&route.fence_key, route.prefix, route.path_case_insensitive}, target.path, head);
    switch (key.status) {
      case FenceKeyStatus::kOk:
        plan.key = key.key;
        plan.problem.key = key.key;
        break;
      case FenceKeyStatus::kMissing:
        RejectWith(plan, Outcome::kRejectedKey, ProblemType::kMissingFenceKey,
                   std::string(key.reason) + "; this route takes the fence key from " + KeySourceText(route));
        return plan;
      case FenceKeyStatus::kMalformed:
        RejectWith(plan, Outcome::kRejectedKey, ProblemType::kBadFenceKey,
                   std::string(key.reason) + "; a fence key is one value of 1-128 bytes of A-Z a-z 0-9 - . _ ~, "
                   "sent as is, from " + KeySourceText(route));
        return plan;
    }
  }
  switch (token.status) {
    case TokenParse::kMissing:
      if (route.missing_token == MissingToken::kAllow) {
        Forward(plan, Outcome::kUnfenced);
      } else if (observe) {
        Forward(plan, Outcome::kObservedMissing);
      } else {
        RejectWith(plan, Outcome::kRejectedMissing, ProblemType::kMissingToken,
                   "this route fences " + std::string(head.method_string()) +
                       " requests: send the lock's token in " + header);
      }
      return plan;
    case TokenParse::kMalformed:
      if (observe) {
        Forward(plan, Outcome::kObservedMalformed);
      } else {
        RejectWith(plan, Outcome::kRejectedMalformed, ProblemType::kMalformedToken,
                   std::string(token.reason) + "; " + header +
                       " must be one value of 1-20 ASCII digits, at most 18446744073709551615");
      }
      return plan;
    case TokenParse::kOk:
      break;
  }
  plan.action = RequestPlan::Action::kFence;
  plan.token = token.value;
  plan.problem.token = token.value;
  // The token the fence decided on is the one the backend sees: written by the proxy in plain
  // decimal, never the client's spelling of it.
  if (route.forward_token) {
    plan.drop_header = header;
    plan.rewrite_token = true;
  }
  return plan;
}

void ApplyAdmission(RequestPlan& plan, Admission admission, uint64_t max_token) {
  const bool observe = plan.route && plan.route->config->mode == FenceMode::kObserve;
  plan.problem.max_token = max_token;
  switch (admission) {
    case Admission::kAdmitted:
      Forward(plan, Outcome::kForwarded);
      return;
    case Admission::kStale:
      if (observe) {
        Forward(plan, Outcome::kObservedStale);
        return;
      }
      RejectWith(plan, Outcome::kRejectedStale, ProblemType::kStaleToken,
                 "token " + std::to_string(plan.token) + " is below the fence's max_token " +
                     std::to_string(max_token) + ": a newer lock holder has written");
      return;
    case Admission::kTooFar:
      if (observe) {
        Forward(plan, Outcome::kObservedJump);
        return;
      }
      RejectWith(plan, Outcome::kRejectedJump, ProblemType::kTokenJump,
                 "token " + std::to_string(plan.token) + " is more than max_token_jump (" +
                     std::to_string(plan.route->config->max_token_jump) + ") above the fence's max_token " +
                     std::to_string(max_token) + "; if the lock service really moved that far, raise the fence "
                     "with 'fencing-proxy state set'");
      return;
    case Admission::kKeyLimit:
      // Fail closed, observe mode too: the cap keeps the proxy's memory, and a key it cannot
      // hold is a write it cannot fence.
      plan.problem.max_token.reset();
      RejectWith(plan, Outcome::kRejectedKeyLimit, ProblemType::kFenceKeyLimit,
                 "the fence holds max_keys (" + std::to_string(plan.route->config->max_keys) +
                     ") keys: a new key is refused until keys are forgotten or max_keys is raised");
      return;
    case Admission::kUnavailable:
      plan.problem.max_token.reset();
      if (observe) {
        Forward(plan, Outcome::kFenceStoreUnavailable);
        return;
      }
      RejectWith(plan, Outcome::kFenceStoreUnavailable, ProblemType::kFenceStoreUnavailable,
                 "the shared fence store (etcd) cannot promise the order now: this proxy's membership could not "
                 "be renewed in time, or the raise could not be committed with every other proxy's "
                 "acknowledgement; retry later");
      plan.problem.retry_after = 1;
      return;
    case Admission::kFailed:
    case Admission::kWaiting:
      plan.problem.max_token.reset();
      if (observe) {
        Forward(plan, Outcome::kRaiseFailed);
        return;
      }
      RejectWith(plan, Outcome::kRaiseFailed, ProblemType::kStateUnavailable,
                 admission == Admission::kFailed
                     ? "the state file could not be written or synced: fenced writes are refused until an "
                       "operator restarts the proxy"
                     : "the raise did not become durable in time (timeouts.request + 2s; with a fence_store, "
                       "timeouts.request + member_ttl + 1s)");
      return;
  }
}

bool NeedsVerification(const RequestPlan& plan, const AdmitResult& result) {
  return plan.route && plan.route->verifier &&
         (result.admission == Admission::kAdmitted || result.admission == Admission::kWaiting) &&
         plan.token > result.max_token;
}

void ApplyVerification(RequestPlan& plan, const Verification& verification, std::string_view service,
                       std::string_view lock) {
  if (verification.verdict == Verdict::kVerified) return;
  const bool observe = plan.route && plan.route->config->mode == FenceMode::kObserve;
  // The max did not move: a 409 here carries no max (the client is not stale, it is not the
  // holder), and the holder's number is not told to a client that could then send it.
  plan.problem.max_token.reset();
  plan.problem.lock_service = service;
  const std::string in_service = " in lock service '" + std::string(service) + "'";
  switch (verification.verdict) {
    case Verdict::kVerified:
      return;
    case Verdict::kNotHolder:
    case Verdict::kNoHolder:
      if (observe) {
        Forward(plan, Outcome::kObservedUnverified);
        return;
      }
      RejectWith(plan, Outcome::kRejectedUnverified, ProblemType::kTokenNotVerified,
                 "token " + std::to_string(plan.token) + " would raise the fence, but " +
                     (verification.verdict == Verdict::kNoHolder
                          ? "nobody holds lock '" + std::string(lock) + "'" + in_service +
                                (verification.holder.empty() ? "" : " (" + verification.holder + ")")
                          : "it is not the number of the holder of lock '" + std::string(lock) + "'" + in_service));
      return;
    case Verdict::kUnavailable:
      if (observe) {
        Forward(plan, Outcome::kObservedUnverified);
        return;
      }
      // The reason (endpoints, socket errors) is for the operator: the log and /fences.
      RejectWith(plan, Outcome::kLockServiceUnavailable, ProblemType::kLockServiceUnavailable,
                 "token " + std::to_string(plan.token) + " would raise the fence and must be confirmed by lock "
                     "service '" + std::string(service) + "', which could not be asked; retry later (tokens equal "
                     "to the fence's max are still served)");
      plan.problem.retry_after = 1;
      return;
  }
}

}  // namespace fencing
