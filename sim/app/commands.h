// The moesim verbs, each a function of a plain options struct. The command line that fills these structs
// (every verb, option, default, validator and help text: CLI11) is declared in sim/app/main.cpp alone; no
// other file includes CLI11. Every verb throws InputError for bad input.
#pragma once

#include <cstdint>
#include <filesystem>
#include <string>
#include <vector>

namespace moesim {

// Options every scenario verb shares.
struct ScenarioOptions {
  std::vector<std::string> overrides;
  long long seed = -1;
};
// --set values after the seed flag, as the scenario loader expects them.
std::vector<std::string> effective_overrides(const ScenarioOptions& o);

// How each point is measured: replications over seeds and capacity at SLA (run, sweep, compare).
struct MeasureOptions {
  int seeds = 0;  // 0: the scenario's run.seeds (default 1)
  bool capacity = false;
  double capacity_tol = 0.02;
};

// Writes `text` to `path` (creating its folder; "-" is stdout); InputError naming the path on failure.
void write_text_file(const std::string& path, const std::string& text);
// out/<prefix><name>, the default output folder of a scenario: InputError at `name` unless the scenario
// name is a plain file name (1 to 100 letters, digits, '.', '_', '-', not starting with '.'), so that no
// name writes outside out/ (no "../", "/", or control characters); --out takes any folder.
std::filesystem::path default_output_dir(const std::string& prefix, const std::string& name);
// Creates the output folder and proves it writable (a probe file), before any simulation runs; InputError
// naming the folder otherwise.
void prepare_output_dir(const std::filesystem::path& dir);

// `moesim run`: one scenario, or replications over seeds and/or the capacity search (run_cmd.cpp).
struct RunOptions {
  std::string file;  // empty: the built-in scenarios/default.json
  ScenarioOptions scenario;
  MeasureOptions measure;
  unsigned jobs = 0;
  std::string out_dir;
  bool requests_csv = false;
  bool steps_csv = false;
  std::string trace;
  double trace_limit_s = 600;
  bool quiet = false;
};
void execute_run(const RunOptions& o);

// `moesim validate`: keys, types, ranges and memory fit, without running (run_cmd.cpp).
struct ValidateOptions {
  std::string file;
  ScenarioOptions scenario;
};
void execute_validate(const ValidateOptions& o);

// `moesim sweep`: a grid over the --set lists (sweep_cmd.cpp).
struct SweepOptions {
  std::string file;
  ScenarioOptions scenario;
  MeasureOptions measure;
  std::string out_dir;
  unsigned jobs = 0;
};
void execute_sweep(const SweepOptions& o);

// `moesim compare`: scenarios side by side (compare_cmd.cpp).
struct CompareOptions {
  std::vector<std::string> files;
  ScenarioOptions scenario;
  MeasureOptions measure;
  std::string out_dir;
  std::string json_file;
  unsigned jobs = 0;
  bool roofline = false;
};
void execute_compare(const CompareOptions& o);

// `moesim plan`: the capacity review (plan_cmd.cpp). Not PlanOptions: that is the planner's own
// (sim/serving/offline/capacity_plan.h), which this fills.
struct PlanCommandOptions {
  std::string file;
  ScenarioOptions scenario;
  std::int64_t context = 0;
  std::int64_t concurrency = 0;
  std::string json_file;
  std::string markdown_file;
  bool simulate = false;
  std::vector<int> batch_sizes;
  bool quiet = false;
};
void execute_plan(const PlanCommandOptions& o);

// `moesim calibrate`: fits a GPU profile (hwmodels/profiles/<gpu>.json) from stored measurements, or from a
// fresh run of the CUDA timing harness on a GPU machine, and prints the residual report (calibrate_cmd.cpp).
struct CalibrateOptions {
  std::vector<std::string> fit_files;
  std::string harness;
  std::string out;
  std::string gpu;
  std::vector<std::string> leave_out;
  std::string validate;
  double anomaly_tolerance = 0.05;
  bool dry_run = false;
};
void execute_calibrate(const CalibrateOptions& o);

// `moesim trace-stats`: prefix-cache figures of a keyed trace, see sim/scenario/trace_stats.h
// (trace_stats_cmd.cpp).
struct TraceStatsOptions {
  std::string file;
  std::string format = "mooncake_jsonl";
  std::vector<std::int64_t> cache_blocks;
  std::string json_file;
};
void execute_trace_stats(const TraceStatsOptions& o);

// `moesim search`: the best deployments of a model on a GPU budget under an SLA, static then simulated
// (search_cmd.cpp, deployment_search.h).
struct SearchCommandOptions {
  std::string file;
  long long seed = -1;  // overrides the SPEC's run.seed
  std::string out_dir;
  unsigned jobs = 0;
  bool quiet = false;
};
void execute_search(const SearchCommandOptions& o);

}  // namespace moesim
