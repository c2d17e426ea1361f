#pragma once
// Every response the proxy makes itself is an RFC 9457 problem: application/problem+json with
// type, title, status, detail and, where they apply, route, fence, token and max_token.

#include <boost/beast/http/message.hpp>
#include <boost/beast/http/string_body.hpp>

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>

namespace fencing {

struct Problem {
  boost::beast::http::status status = boost::beast::http::status::bad_request;
  std::string_view type;   // short slug, e.g. "stale-token"; becomes "urn:fencing-proxy:problem:<slug>"
  std::string_view title;  // stable per type
  std::string detail;      // this occurrence
  std::string_view route;  // empty: omitted
  std::string_view fence;  // empty: omitted
  std::optional<uint64_t> token;
  std::optional<uint64_t> max_token;
};

// A problem without route or token details.
inline Problem MakeProblem(boost::beast::http::status status, std::string_view type, std::string_view title,
                           std::string detail) {
  Problem p;
  p.status = status;
  p.type = type;
  p.title = title;
  p.detail = std::move(detail);
  return p;
}

std::string ProblemJson(const Problem& problem);

// The full response; 409 carries X-Fencing-Token-Max. keep_alive false adds Connection: close.
boost::beast::http::response<boost::beast::http::string_body> MakeProblemResponse(
    const Problem& problem, unsigned http_version, bool keep_alive);

}  // namespace fencing
