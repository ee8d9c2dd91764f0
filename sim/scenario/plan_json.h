// plan.json: a CapacityPlan as JSON (bytes, seconds, tokens/s; SI), with the scenario echo, so notebooks
// and tests read `moesim plan` the same way they read report.json.
#pragma once

#include "sim/scenario/json_reader.h"
#include "sim/serving/offline/capacity_plan.h"

namespace moesim {

Json plan_to_json(const CapacityPlan& plan, const Json& scenario_echo);

}  // namespace moesim
