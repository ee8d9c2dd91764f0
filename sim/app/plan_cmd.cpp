// `moesim plan`: the capacity review of a scenario (memory by precision, fit, KV vs concurrency,
// throughput estimate, topology advice), instantly; `--simulate` adds measured percentiles and SLA results.
#include <filesystem>
#include <fstream>
#include <iostream>
#include <memory>

#include "sim/app/commands.h"
#include "sim/engine/check.h"
#include "sim/scenario/plan_json.h"
#include "sim/scenario/profile_io.h"
#include "sim/scenario/scenario_parser.h"
#include "sim/serving/capacity_plan.h"
#include "sim/serving/capacity_plan_report.h"

namespace moesim {

namespace {

struct PlanCliOptions {
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

void plan(const PlanCliOptions& o) {
  const LoadedScenario sc = load_scenario(o.file, effective_overrides(o.scenario));
  PlanOptions po;
  po.context_tokens = o.context;
  po.concurrency = o.concurrency;
  const std::unique_ptr<GpuCostModel> gpu = make_gpu_cost_model(sc.spec.cluster.gpu);
  CapacityPlan p = plan_capacity(sc.spec, *gpu, po);
  const bool json_to_stdout = o.json_file == "-";
  if (o.simulate) {
    try {
      add_simulation(p, sc.spec, *gpu, o.batch_sizes);
    } catch (const InputError&) {
      // The deployment as configured cannot run (it does not fit): show the review that says why.
      if (!o.quiet && !json_to_stdout) std::cout << format_plan_table(p) << "\n";
      throw;
    }
  }
  if (!o.quiet && !json_to_stdout) std::cout << format_plan_table(p);
  if (!o.json_file.empty()) write_text_file(o.json_file, plan_to_json(p, sc.effective).dump(2) + "\n");
  if (!o.markdown_file.empty()) write_text_file(o.markdown_file, format_plan_markdown(p));
}

}  // namespace

void add_plan_command(CLI::App& app) {
  auto o = std::make_shared<PlanCliOptions>();
  CLI::App* cmd = app.add_subcommand(
      "plan",
      "Capacity review without simulation: memory by precision, fit and nodes, KV vs concurrency, "
      "throughput estimate, topology advice (--simulate adds measured latency and SLA results)");
  cmd->add_option("scenario", o->file, "Scenario JSON (default: the built-in scenarios/default.json)");
  add_scenario_options(*cmd, o->scenario);
  cmd->add_option("--context", o->context,
                  "Tokens per sequence for KV sizing (default: workload prompt mean + output mean, or 4096)")
      ->check(CLI::Range(std::int64_t{1}, std::int64_t{100000000}));
  cmd->add_option("--concurrency", o->concurrency,
                  "Concurrent sequences in the cluster (default: max_batch_size x attention groups)")
      ->check(CLI::Range(std::int64_t{1}, std::int64_t{1000000000}));
  cmd->add_option("--json", o->json_file, "Write the plan as JSON to FILE ('-' for stdout, then no table)");
  cmd->add_option("--markdown", o->markdown_file, "Write the capacity-review document (markdown) to FILE");
  cmd->add_flag("--simulate", o->simulate, "Also run the simulation and add measured results to the review");
  cmd->add_option("--batch-sizes", o->batch_sizes,
                  "With --simulate: max_batch_size values for throughput vs batch size, e.g. 8,32,128")
      ->delimiter(',')
      ->check(CLI::PositiveNumber);
  cmd->add_flag("-q,--quiet", o->quiet, "Do not print the tables");
  cmd->callback([o] { plan(*o); });
}

}  // namespace moesim
