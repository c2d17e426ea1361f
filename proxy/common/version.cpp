#include "common/version.h"

namespace fencing {

std::string_view Version() { return FP_VERSION; }
std::string_view Revision() { return FP_REVISION; }

}  // namespace fencing
