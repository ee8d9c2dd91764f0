// Scenario JSON -> FabricSpec: the interconnect of `cluster.fabric` (a name from
// scenarios/catalog/fabrics.json, {"base": name, ...overrides} or a full object), read strictly with units
// converted once and the JSON path in every error. Key reference: CALIBRATION_FABRIC.md.
#pragma once

#include <string>
#include <string_view>

#include "hwmodels/fabric_spec.h"
#include "hwmodels/gpu_spec.h"
#include "sim/scenario/json_reader.h"

namespace moesim {

inline constexpr std::string_view kFabricsCatalog = "scenarios/catalog/fabrics.json";

// `resolved` is the fabric object after resolve_entry; `path` prefixes every error ("cluster.fabric").
// Keys left out keep their FabricSpec defaults, except the NVLink and NIC line rates and latencies, which
// default to the GPU entry's figures (so an empty object is the fabric of a cluster without
// `cluster.fabric`). A `gpus_per_node` key must equal the cluster's. The result is checked by wiring
// its Topology. Throws InputError.
FabricSpec parse_fabric(const Json& resolved, const std::string& path, int nodes, int gpus_per_node,
                        const GpuSpec& gpu);

// The fabric's `gpus_per_node` when it is an integer, else `fallback`: the cluster's default GPUs per
// node when `cluster.gpus_per_node` is left out (type errors are reported by parse_fabric).
int fabric_gpus_per_node(const Json& resolved, int fallback);

}  // namespace moesim
