// Scenario JSON -> failures (the top-level "faults" object; fault_spec.h): given failures, MTBFs, what
// happens to in-flight requests and how an EP group recovers. Strict: unknown keys and out-of-range values
// are errors with their JSON path.
#pragma once

#include "sim/scenario/json_reader.h"
#include "sim/serving/spec/scenario_spec.h"

namespace moesim {

// Reads `faults` against the parsed cluster and deployment of `s` (GPU and node indices, the reload path's
// defaults from deployment.autoscale). Throws InputError.
FaultsSpec parse_faults(JsonReader& r, const ScenarioSpec& s);

}  // namespace moesim
