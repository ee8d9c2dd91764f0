#include "sim/engine/version.h"

namespace moesim {
std::string_view version() { return MOESIM_VERSION; }
}  // namespace moesim
