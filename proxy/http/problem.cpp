#include "http/problem.h"

#include <boost/json/object.hpp>
#include <boost/json/serialize.hpp>

namespace fencing {

namespace http = boost::beast::http;

std::string ProblemJson(const Problem& problem) {
  boost::json::object body;
  std::string type = "urn:fencing-proxy:problem:";
  type += problem.type;
  body["type"] = type;
  body["title"] = problem.title;
  body["status"] = static_cast<unsigned>(problem.status);
  body["detail"] = problem.detail;
  if (!problem.route.empty()) body["route"] = problem.route;
  if (!problem.fence.empty()) body["fence"] = problem.fence;
  if (!problem.key.empty()) body["key"] = problem.key;
  if (problem.token) body["token"] = *problem.token;
  if (problem.max_token) body["max_token"] = *problem.max_token;
  if (!problem.lock_service.empty()) body["lock_service"] = problem.lock_service;
  std::string text = boost::json::serialize(body);
  text.push_back('\n');
  return text;
}

http::response<http::string_body> MakeProblemResponse(const Problem& problem, unsigned http_version,
                                                      bool keep_alive, bool head_request) {
  http::response<http::string_body> response{problem.status, http_version};
  response.set(http::field::content_type, "application/problem+json");
  response.set(http::field::cache_control, "no-store");
  if (problem.status == http::status::conflict && problem.max_token) {
    response.set("X-Fencing-Token-Max", std::to_string(*problem.max_token));
  }
  if (problem.retry_after) response.set(http::field::retry_after, std::to_string(*problem.retry_after));
  response.body() = ProblemJson(problem);
  response.keep_alive(keep_alive);
  response.prepare_payload();
  if (head_request) response.body().clear();  // Content-Length stays: what a GET would get
  return response;
}

}  // namespace fencing

namespace fencing {

GrpcStatus GrpcStatusOf(const Problem& problem) {
  for (const ProblemTypeInfo& info : kProblemTypes) {
    if (info.slug == problem.type) return info.grpc;
  }
  return GrpcStatus::kUnknown;
}

}  // namespace fencing
