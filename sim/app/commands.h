// The moesim command-line verbs. Each add_*_command registers one CLI11 subcommand.
#pragma once

#include <CLI/CLI.hpp>
#include <filesystem>
#include <string>
#include <vector>

namespace moesim {

// Options every scenario verb shares.
struct ScenarioOptions {
  std::vector<std::string> overrides;
  long long seed = -1;
};
void add_scenario_options(CLI::App& cmd, ScenarioOptions& o);
// --set values after the seed flag, as the scenario loader expects them.
std::vector<std::string> effective_overrides(const ScenarioOptions& o);

// How each point is measured: replications over seeds and capacity at SLA (run, sweep, compare).
struct MeasureOptions {
  int seeds = 0;  // 0: the scenario's run.seeds (default 1)
  bool capacity = false;
  double capacity_tol = 0.02;
};
void add_measure_options(CLI::App& cmd, MeasureOptions& o);

// Writes `text` to `path` (creating its folder; "-" is stdout); InputError naming the path on failure.
void write_text_file(const std::string& path, const std::string& text);
// Creates the output folder and proves it writable (a probe file), before any simulation runs; InputError
// naming the folder otherwise.
void prepare_output_dir(const std::filesystem::path& dir);

void add_run_command(CLI::App& app);
void add_validate_command(CLI::App& app);
void add_sweep_command(CLI::App& app);
void add_plan_command(CLI::App& app);
void add_compare_command(CLI::App& app);

}  // namespace moesim
