// `moesim run` and `moesim validate`. With --seeds N, run replicates the scenario over N seeds and prints
// the mean and 95% interval of each metric; with --capacity it searches the capacity at SLA.
#include <cmath>
#include <filesystem>
#include <fstream>
#include <iostream>

#include "sim/app/commands.h"
#include "sim/app/metrics_table.h"
#include "sim/app/outputs.h"
#include "sim/app/point_result.h"
#include "sim/app/replications.h"
#include "sim/app/task_pool.h"
#include "sim/engine/check.h"
#include "sim/scenario/chrome_trace.h"
#include "sim/scenario/profile_io.h"
#include "sim/scenario/report_json.h"
#include "sim/scenario/scenario_parser.h"
#include "sim/serving/memory_plan.h"
#include "sim/serving/serving_simulation.h"

namespace moesim {

void add_scenario_options(CLI::App& cmd, ScenarioOptions& o) {
  cmd.add_option(
      "--set", o.overrides,
      "Override a scenario value: path.to.key=value (repeatable), e.g. --set deployment.ep_size=16");
  // The same range as run.seed in a scenario (an exact JSON integer).
  const CLI::Validator seed_range(
      [](std::string& v) -> std::string {
        long long x = 0;
        std::size_t used = 0;
        try {
          x = std::stoll(v, &used);
        } catch (const std::exception&) {
          used = 0;
        }
        if (used == 0 || used != v.size() || x < 0 || x > (1LL << 53))
          return "\"" + v + "\" is not a seed: give an integer in [0, 2^53], e.g. --seed 7";
        return "";
      },
      "SEED");
  cmd.add_option("--seed", o.seed, "Random seed (overrides run.seed)")->check(seed_range);
}

void write_text_file(const std::string& path, const std::string& text) {
  if (path == "-") {
    std::cout << text;
    return;
  }
  const std::filesystem::path p(path);
  std::error_code ec;
  if (p.has_parent_path()) std::filesystem::create_directories(p.parent_path(), ec);
  if (ec) throw InputError(path, "cannot create its folder (" + ec.message() + ")");
  std::ofstream f(p);
  if (!(f << text))
    throw InputError(path, "cannot write the file (does its folder exist and is it writable?)");
}

void prepare_output_dir(const std::filesystem::path& dir) {
  std::error_code ec;
  std::filesystem::create_directories(dir, ec);
  if (ec || !std::filesystem::is_directory(dir)) {
    throw InputError(dir.string(), "cannot create the output folder (" +
                                       (ec ? ec.message() : std::string("a file of that name exists")) +
                                       "); choose another with --out");
  }
  const std::filesystem::path probe = dir / ".moesim-write-probe";
  {
    std::ofstream f(probe);
    if (!(f << "probe")) {
      throw InputError(dir.string(), "the output folder is not writable; choose another with --out");
    }
  }
  std::filesystem::remove(probe, ec);
}

void add_measure_options(CLI::App& cmd, MeasureOptions& o) {
  cmd.add_option("--seeds", o.seeds,
                 "Replications: run seeds seed..seed+N-1 and report the mean and 95% interval of each metric "
                 "(default: the scenario's run.seeds, else 1)")
      ->check(CLI::Range(1, kMaxSeeds));
  cmd.add_flag("--capacity", o.capacity,
               "Find the highest arrival rate (workload.arrival.rate_per_s, Poisson or gamma) that meets the "
               "SLA, by bracketing and bisection; report the metrics at that rate");
  cmd.add_option(
         "--capacity-tol", o.capacity_tol,
         "Capacity search: stop when the bracket is narrower than this share of the rate (default 0.02)")
      ->check(CLI::Range(1e-4, 1.0));
}

std::vector<std::string> effective_overrides(const ScenarioOptions& o) {
  std::vector<std::string> out = o.overrides;
  if (o.seed >= 0) out.push_back("run.seed=" + std::to_string(o.seed));
  return out;
}

namespace {

struct RunOptions {
  std::string file;
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

// Replications and/or the capacity search: a table of mean and interval per metric, replications.json.
void run_measured(const RunOptions& o, const ReplicatedScenario& rs, int seeds,
                  const std::filesystem::path& dir) {
  if (o.requests_csv || o.steps_csv || !o.trace.empty()) {
    throw InputError("--seeds/--capacity", "the per-request/step CSVs and the trace are for a single run");
  }
  PointSettings settings;
  settings.capacity = o.measure.capacity;
  settings.search.rel_tol = o.measure.capacity_tol;
  TaskPool pool(o.jobs);
  const std::vector<PointResult> results =
      run_points(pool, {rs.loaded.spec}, {seeds}, {rs.loaded.spec.name}, settings);
  if (!pool.is_output_rank()) return;
  const PointResult& p = results.front();
  if (!p.ok()) throw InputError(o.file.empty() ? "run" : o.file, p.error());
  Json doc{{"scenario", rs.loaded.effective}};
  doc.update(point_json(p, true));
  write_text_file((dir / "replications.json").string(), doc.dump(2) + "\n");
  if (!o.quiet) {
    std::printf("%s: %d seed(s) from %llu%s\n", rs.loaded.spec.name.c_str(), seeds,
                static_cast<unsigned long long>(rs.loaded.spec.run.seed),
                o.measure.capacity ? ", metrics at the capacity at SLA" : "");
    if (o.measure.capacity) {
      std::printf("  %-36s %s\n", "capacity_req_s", format_interval("%.3f", p.capacity(), true).c_str());
    }
    for (std::size_t i = 0; i < metric_columns().size(); ++i) {
      const MetricColumn& c = metric_columns()[i];
      std::printf("  %-36s %s\n", c.name.c_str(), format_interval(c.format, p.metric(i), c.interval).c_str());
    }
    if (seeds > 1) std::printf("(mean \u00b1 half width of the 95%% Student-t interval over the seeds)\n");
  }
  std::cout << "\nreplications: " << (dir / "replications.json").string() << "\n";
}

void run(const RunOptions& o) {
  const ReplicatedScenario rs = load_replicated_scenario(o.file, effective_overrides(o.scenario));
  const LoadedScenario& sc = rs.loaded;
  const std::filesystem::path dir =
      o.out_dir.empty() ? std::filesystem::path("out") / sc.spec.name : std::filesystem::path(o.out_dir);
  prepare_output_dir(dir);
  const int seeds = o.measure.seeds > 0 ? o.measure.seeds : rs.seeds;
  if (seeds > 1 || o.measure.capacity) {
    run_measured(o, rs, seeds, dir);
    return;
  }
  CsvOutputs outputs(o.requests_csv ? dir / "requests.csv" : "", o.steps_csv ? dir / "steps.csv" : "");
  const auto gpu = make_gpu_cost_model(sc.spec.cluster.gpu);
  std::unique_ptr<ChromeTraceWriter> trace;
  if (!o.trace.empty()) trace = std::make_unique<ChromeTraceWriter>(o.trace, o.trace_limit_s);
  ObserverPair observers(outputs.active() ? &outputs : nullptr, trace.get());
  const Report r = simulate(sc.spec, *gpu, outputs.active() || trace ? &observers : nullptr);
  trace.reset();  // closes the JSON
  write_text_file((dir / "report.json").string(), report_to_json(r, sc.effective).dump(2) + "\n");
  if (!o.quiet) std::cout << format_summary(r);
  std::cout << "\nreport: " << (dir / "report.json").string() << "\n";
}

void validate(const std::string& file, const ScenarioOptions& so) {
  const LoadedScenario sc = load_replicated_scenario(file, effective_overrides(so)).loaded;
  const auto gpu = make_gpu_cost_model(sc.spec.cluster.gpu);
  const MemoryPlan m = deployed_memory_plan(sc.spec, *gpu);  // what run decides "fits" from
  check_fits(sc.spec, m);
  const ScenarioSpec& s = sc.spec;
  std::printf("%s: OK\n", file.empty() ? "scenarios/default.json (built in)" : file.c_str());
  std::printf("  model %s: %.1fB total, %.1fB active parameters%s\n", s.model.name.c_str(),
              s.model.total_params() / 1e9, s.model.active_params() / 1e9,
              s.model.architecture_known ? "" : " (architecture ASSUMED)");
  std::printf("  cluster: %d x %d %s, %d replica(s) of EP%d (attention DP%d x TP%d)\n", s.cluster.nodes,
              s.cluster.gpus_per_node, s.cluster.gpu.name.c_str(), s.replicas(), s.deployment.ep_size,
              s.deployment.attention_dp, s.deployment.attention_tp);
  std::printf("  memory per GPU: weights %.1f GiB, KV pool %.1f GiB (%lld tokens per attention group)\n",
              m.weights_per_gpu.total() / kGiB, m.kv_pool_bytes_per_gpu / kGiB,
              static_cast<long long>(m.kv_tokens_per_group));
}

}  // namespace

void add_run_command(CLI::App& app) {
  auto o = std::make_shared<RunOptions>();
  CLI::App* cmd = app.add_subcommand("run", "Simulate one scenario and print its serving report");
  cmd->add_option("scenario", o->file, "Scenario JSON (default: the built-in scenarios/default.json)");
  add_scenario_options(*cmd, o->scenario);
  add_measure_options(*cmd, o->measure);
  cmd->add_option("-j,--jobs", o->jobs, "Parallel replications with --seeds (default: all cores)");
  cmd->add_option("--out", o->out_dir,
                  "Output folder for report.json and CSVs (default: out/<scenario name>)");
  cmd->add_flag("--requests-csv", o->requests_csv, "Also write requests.csv (one row per request)");
  cmd->add_flag("--steps-csv", o->steps_csv, "Also write steps.csv (one row per replica step)");
  cmd->add_option(
      "--trace", o->trace,
      "Write a Chrome/Perfetto timeline of the steps (open in ui.perfetto.dev or chrome://tracing)");
  cmd->add_option("--trace-limit-s", o->trace_limit_s,
                  "Only trace steps that start in the first N simulated s (0 = all)")
      ->check(CLI::NonNegativeNumber);
  cmd->add_flag("-q,--quiet", o->quiet, "Do not print the summary");
  cmd->callback([o] { run(*o); });
}

void add_validate_command(CLI::App& app) {
  auto file = std::make_shared<std::string>();
  auto so = std::make_shared<ScenarioOptions>();
  CLI::App* cmd =
      app.add_subcommand("validate", "Check a scenario (keys, types, ranges, memory fit) without running it");
  cmd->add_option("scenario", *file, "Scenario JSON (default: the built-in default)");
  add_scenario_options(*cmd, *so);
  cmd->callback([file, so] { validate(*file, *so); });
}

}  // namespace moesim
