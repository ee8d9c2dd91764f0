// Scenario sections of the production serving features: synthetic shared prefixes, speculative
// decoding, a trace's block keys. The parser fills them into ScenarioSpec::production.
#pragma once

#include <optional>

#include "sim/serving/features/speculative.h"
#include "workloads/prefixed_source.h"

namespace moesim {

struct ProductionSpec {
  std::optional<PrefixWorkloadSpec> prefix;    // workload.prefix
  std::optional<SpeculativeSpec> speculative;  // deployment.speculative
  TraceBlockKeys trace_keys;  // a Mooncake trace's hash_ids, indexed by the rows' prefix_ref/prefix_blocks
};

}  // namespace moesim
