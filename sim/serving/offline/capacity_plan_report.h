// The human side of a capacity review: the plain-text tables `moesim plan` prints and the markdown
// capacity-review document that follows the seed's deployment checklist (section 8).
#pragma once

#include <string>

#include "sim/serving/offline/capacity_plan.h"

namespace moesim {

// Aligned text tables for stdout: model, memory by precision, KV vs concurrency, throughput, advice.
std::string format_plan_table(const CapacityPlan& plan);

// A markdown document: assessment, benchmark, optimisation hints, operation (monitoring thresholds).
std::string format_plan_markdown(const CapacityPlan& plan);

}  // namespace moesim
