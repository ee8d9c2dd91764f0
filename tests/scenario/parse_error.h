// The message parse_scenario refuses a document with, or "" when it takes it (for tests of refusals).
#pragma once

#include <string>

#include "sim/scenario/scenario_parser.h"

namespace moesim {

inline std::string parse_error_of(const Json& j) {
  try {
    (void)parse_scenario(j, "");
    return "";
  } catch (const InputError& e) {
    return e.what();
  }
}

}  // namespace moesim
