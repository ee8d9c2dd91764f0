// Scenario JSON -> experts-in-the-loop configuration: the top-level "experts" object (placement,
// rebalancing, online statistics, tiers, quantisation, rerouting, admission) and the popularity
// extensions under workload.expert_popularity (drift, co-activation, skew calibrated to a measured
// imbalance ratio). Strict: unknown keys and out-of-range values are errors with their JSON path.
#pragma once

#include "sim/scenario/json_reader.h"
#include "sim/serving/spec/scenario_spec.h"

namespace moesim {

// Reads `experts` (the object, or an empty one when absent) against the parsed model, cluster,
// deployment and workload of `s`. Throws InputError.
ExpertsSpec parse_experts(JsonReader r, const ScenarioSpec& s);

// Inside workload.expert_popularity: reads the optional "drift" and "coactivation" objects into `w`.
void parse_popularity_extensions(JsonReader& r, const ModelSpec& m, WorkloadSpec& w);

// Kind "calibrated": the Zipf exponent whose expected imbalance ratio (max - mean) / mean matches
// "imbalance_ratio" at "tokens_per_iteration", by expert or by rank ("ranks" > 0) (skew_calibration.h).
double parse_calibrated_exponent(JsonReader& r, const ModelSpec& m);

}  // namespace moesim
