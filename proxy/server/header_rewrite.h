#pragma once
// What crosses the proxy in each direction: end-to-end fields are copied, hop-by-hop fields
// (RFC 9110 section 7.6.1: Connection and every field it names, Keep-Alive, Proxy-Connection, TE,
// Trailer, Transfer-Encoding, Upgrade) are not. Message framing is set afresh for the next hop.

#include <boost/beast/http/fields.hpp>
#include <boost/beast/http/message.hpp>

#include <string_view>

namespace fencing {

// Copies `from` into `to` without hop-by-hop fields, Content-Length, Expect (the proxy answers
// 100-continue itself), and `drop` (the token header when a route does not forward it; may be
// empty).
void CopyEndToEndFields(const boost::beast::http::fields& from, boost::beast::http::fields& to,
                        std::string_view drop);

// The request to send upstream: method, origin-form target, HTTP/1.1, end-to-end fields,
// X-Forwarded-For with client_ip appended, Host kept (or set to backend_host if absent). Body
// framing (Content-Length or chunked) is not copied: the caller sets it for the next hop.
void PrepareUpstreamRequest(const boost::beast::http::request_header<>& client, std::string_view origin_target,
                            std::string_view client_ip, std::string_view backend_host, std::string_view drop,
                            boost::beast::http::request_header<>& upstream);

}  // namespace fencing
