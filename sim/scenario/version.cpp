// The version string of this build, for reports.
#include <string_view>

namespace moesim {
std::string_view version() { return MOESIM_VERSION; }
}  // namespace moesim
