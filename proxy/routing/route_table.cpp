#include "routing/route_table.h"

#include "http/ascii.h"

namespace fencing {

RouteTable::RouteTable(std::shared_ptr<const ProxyConfig> config) : config_(std::move(config)) {
  for (size_t i = 0; i < config_->routes.size(); ++i) {
    const RouteConfig& route = config_->routes[i];
    if (route.path_case_insensitive) {
      by_folded_prefix_.emplace(ToAsciiLower(route.prefix), i);
    } else {
      by_prefix_.emplace(route.prefix, i);
    }
  }
}

std::optional<size_t> RouteTable::Match(std::string_view path) const {
  if (by_prefix_.empty() && by_folded_prefix_.empty()) return std::nullopt;
  // Folding is done once per request, and only when some route asks for it.
  const std::string folded_path = by_folded_prefix_.empty() ? std::string() : ToAsciiLower(path);
  auto lookup = [&](size_t length) -> std::optional<size_t> {
    if (auto it = by_prefix_.find(path.substr(0, length)); it != by_prefix_.end()) return it->second;
    if (!by_folded_prefix_.empty()) {
      if (auto it = by_folded_prefix_.find(folded_path.substr(0, length)); it != by_folded_prefix_.end()) {
        return it->second;
      }
    }
    return std::nullopt;
  };
  // Try the whole path, then each shorter prefix that ends at a segment boundary, longest first:
  // one hash lookup per segment, however many routes there are.
  size_t length = path.size();
  while (length > 0) {
    if (auto index = lookup(length)) return index;
    size_t slash = path.rfind('/', length - 1);
    if (slash == std::string_view::npos) break;
    length = slash;
  }
  return lookup(1);  // the root route "/", the only prefix one byte long
}

}  // namespace fencing
