// Scenario sections of the production serving features (issue 12) that the runtime does not read yet:
// synthetic shared prefixes and speculative decoding. The parser fills them into LoadedScenario; the
// runtime's wiring moves them into ScenarioSpec.
#pragma once

#include <optional>

#include "sim/serving/speculative.h"
#include "workloads/prefixed_source.h"

namespace moesim {

struct ProductionSpec {
  std::optional<PrefixWorkloadSpec> prefix;    // workload.prefix
  std::optional<SpeculativeSpec> speculative;  // deployment.speculative
};

}  // namespace moesim
