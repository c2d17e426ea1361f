#pragma once
// Request-target checks done before routing. A path that the backend could normalise into a
// different route's path (dot segments, encoded slashes, ...) is refused: one request that
// slips past a fenced prefix reopens the hole the proxy exists to close.

#include <string_view>

namespace fencing {

struct TargetCheck {
  bool ok = false;
  std::string_view path;   // the path part of the target (no query), when ok
  std::string_view authority;  // absolute-form: what is between "://" and the path, unchecked; else empty
  const char* reason = ""; // why the target was refused, when !ok
};

// Accepts origin-form ("/a/b?q") and absolute-form ("http://host/a/b?q"; routed by its path, its
// authority given apart).
// Refuses: empty or other forms, "." and ".." segments, empty segments ("//"), backslashes,
// the escapes RefusedEscapeReason lists ("%2f" "%5c" "%3b", control bytes, any unreserved
// character: a backend may decode "%6Frders" to "orders"), double-encoded escapes ("%252e"),
// malformed percent escapes, control bytes, spaces and '#'.
TargetCheck CheckRequestTarget(std::string_view target);

// Why a percent-escape in a path that decodes to `decoded` is refused, or null when it is not
// (path_check.cpp's kRefusedEscapes is the list, with the reason for each).
const char* RefusedEscapeReason(unsigned char decoded);

}  // namespace fencing
