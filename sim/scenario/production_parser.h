// Strict parsing of the production serving keys: workload.prefix (shared system prompt,
// multi-turn conversations), deployment.speculative (MTP or a draft model; catalog
// scenarios/catalog/speculative.json), and the arrival keys that belong to another arrival kind (a `--set`
// that mixes a trace replay with a synthetic arrival gets told what to remove).
#pragma once

#include <optional>
#include <string>

#include "sim/scenario/json_reader.h"
#include "sim/serving/spec/production_spec.h"
#include "sim/serving/spec/scenario_spec.h"

namespace moesim {

// model.routed_experts, with the num_dense_layers rule it implies: 0 is a dense model (every layer dense;
// num_dense_layers must then be num_layers or absent, and is set to num_layers), else num_dense_layers must
// be below num_layers. Call after reading num_layers and num_dense_layers.
int parse_routed_experts(JsonReader& model, ModelSpec& m);

// A dense model (routed_experts 0) has no experts: a scenario that still gives workload.expert_popularity
// or an experts section is refused with the path to remove. `scenario` is the whole scenario JSON.
void check_dense_model(const ModelSpec& m, const Json& scenario);

// workload.prefix, after the workload's lengths are parsed (`s.workload`), with the KV block size of
// `s.deployment`. nullopt when absent.
std::optional<PrefixWorkloadSpec> parse_workload_prefix(JsonReader& workload, const ScenarioSpec& s,
                                                        bool is_trace);

// deployment.speculative: a catalog name, {"base": name, ...} or an object. nullopt when absent.
std::optional<SpeculativeSpec> parse_speculative(JsonReader& deployment);

// Call right after reading workload.arrival.kind: a key of another arrival kind fails with what to remove.
void check_arrival_kind_keys(const JsonReader& arrival, const std::string& kind);
// Call before reading workload.prompt_tokens/output_tokens: a trace takes lengths from its file, a
// synthetic arrival needs them; the message says which to remove or add.
void check_workload_length_keys(const JsonReader& workload, bool is_trace, const std::string& kind);

}  // namespace moesim
