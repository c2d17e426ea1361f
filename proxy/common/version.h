#pragma once

#include <string_view>

namespace fencing {

std::string_view Version();   // e.g. "0.1.0"
std::string_view Revision();  // git revision the binary was built from, or "unknown"

}  // namespace fencing
