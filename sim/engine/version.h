// The version of this build, for reports and --version.
#pragma once

#include <string_view>

namespace moesim {
std::string_view version();
}  // namespace moesim
