// report.json: the scenario echo and every metric of a Report, as JSON (seconds and bytes, SI).
#pragma once

#include "sim/scenario/json_reader.h"
#include "sim/serving/report/report.h"

namespace moesim {

Json report_to_json(const Report& r, const Json& scenario_echo);

}  // namespace moesim
