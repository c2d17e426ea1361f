#include "routing/route_table.h"

namespace fencing {

RouteTable::RouteTable(std::shared_ptr<const ProxyConfig> config) : config_(std::move(config)) {
  for (size_t i = 0; i < config_->routes.size(); ++i) by_prefix_.emplace(config_->routes[i].prefix, i);
}

std::optional<size_t> RouteTable::Match(std::string_view path) const {
  if (by_prefix_.empty()) return std::nullopt;
  // Try the whole path, then each shorter prefix that ends at a segment boundary, longest first:
  // one hash lookup per segment, however many routes there are.
  std::string_view candidate = path;
  while (!candidate.empty()) {
    if (auto it = by_prefix_.find(candidate); it != by_prefix_.end()) return it->second;
    size_t slash = candidate.rfind('/');
    if (slash == std::string_view::npos) break;
    candidate = candidate.substr(0, slash);
  }
  if (auto it = by_prefix_.find("/"); it != by_prefix_.end()) return it->second;
  return std::nullopt;
}

}  // namespace fencing
