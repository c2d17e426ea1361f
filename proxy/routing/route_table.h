#pragma once
// Longest segment-prefix routing over the route file's routes. Pure: built once per config.

#include "config/config.h"

#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <unordered_map>

namespace fencing {

class RouteTable {
 public:
  explicit RouteTable(std::shared_ptr<const ProxyConfig> config);

  // Index into config().routes of the route whose prefix is the longest whole-segment prefix of
  // path ("/orders" matches "/orders" and "/orders/1", never "/ordersX"); nullopt if none.
  // path is the path part only (no query), already checked by CheckRequestTarget. A route with
  // path_case_insensitive also matches its prefix in any ASCII case.
  std::optional<size_t> Match(std::string_view path) const;

  const ProxyConfig& config() const { return *config_; }

 private:
  std::shared_ptr<const ProxyConfig> config_;
  std::unordered_map<std::string_view, size_t> by_prefix_;  // views into config_'s strings
  // Routes with path_case_insensitive, by lower-cased prefix; usually empty, and then free.
  std::unordered_map<std::string, size_t> by_folded_prefix_;
};

}  // namespace fencing
