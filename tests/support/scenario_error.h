// Shared by the parser tests: the message parse_scenario refuses a scenario with, empty when it parses.
#pragma once

#include <string>

#include "sim/engine/check.h"
#include "sim/scenario/scenario_parser.h"

namespace moesim_test {

inline std::string error_of(const moesim::Json& j) {
  try {
    (void)moesim::parse_scenario(j, "");
  } catch (const moesim::InputError& e) {
    return e.what();
  }
  return "";
}

}  // namespace moesim_test
