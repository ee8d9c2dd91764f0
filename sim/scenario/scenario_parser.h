// The ONLY place that turns scenario JSON into the typed ScenarioSpec: strict keys, units converted
// once (key names carry them), ranges and cross-field rules checked with the JSON path in every error.
#pragma once

#include <string>
#include <string_view>
#include <vector>

#include "sim/scenario/json_reader.h"
#include "sim/serving/spec/scenario_spec.h"

namespace moesim {

struct LoadedScenario {
  ScenarioSpec spec;
  Json effective;  // the scenario after overrides, with catalog references resolved (echoed in reports)
};

// Applies "path.to.key=value" to `j`. The value is read as JSON when it parses (numbers, true/false,
// objects), else as a string. Intermediate objects are created; a path through a non-object fails.
void apply_override(Json& j, std::string_view assignment);

// Parses a scenario. `base_dir` resolves relative file paths (traces) inside it.
LoadedScenario parse_scenario(const Json& j, const std::string& base_dir);

// The scenario document of a file, read once (a FIFO or process substitution works), or the compiled-in
// default when path is empty; InputError unless it is a JSON object.
Json read_scenario_document(const std::string& path);
// Applies overrides to a document of read_scenario_document(path) and parses it (relative paths in it
// resolve next to `path`).
LoadedScenario load_scenario_document(Json j, const std::string& path,
                                      const std::vector<std::string>& overrides);
// Both: loads a file (or the compiled-in default when path is empty), applies overrides, parses.
LoadedScenario load_scenario(const std::string& path, const std::vector<std::string>& overrides);

ModelSpec parse_model(JsonReader& r);
GpuSpec parse_gpu(JsonReader& r, const std::string& name);

}  // namespace moesim
