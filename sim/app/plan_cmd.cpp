// `moesim plan`: the capacity review of a scenario (memory by precision, fit, KV vs concurrency,
// throughput estimate, topology advice), instantly; `--simulate` adds measured percentiles and SLA results.
#include <filesystem>
#include <fstream>
#include <iostream>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "sim/app/commands.h"
#include "sim/app/replications.h"
#include "sim/engine/check.h"
#include "sim/scenario/plan_json.h"
#include "sim/scenario/profile_io.h"
#include "sim/scenario/scenario_parser.h"
#include "sim/serving/offline/capacity_plan.h"
#include "sim/serving/offline/capacity_plan_report.h"
#include "sim/serving/runtime/serving_simulation.h"

namespace moesim {

void execute_plan(const PlanCommandOptions& o) {
  // run.seeds is read (and echoed) as run, validate and sweep read it; a review has no seeds to replicate.
  const LoadedScenario sc = load_replicated_scenario(o.file, effective_overrides(o.scenario)).loaded;
  PlanOptions po;
  po.context_tokens = o.context;
  po.concurrency = o.concurrency;
  const std::unique_ptr<GpuCostModel> gpu = make_gpu_cost_model(sc.spec.cluster.gpu);
  // With deployment.pools the memory review covers one pool's deployment: the first that does not fit
  // (what validate and run refuse), else the first pool; every pool's memory as deployed is listed, the
  // throughput rows cost each phase on its pools' deployments, and a simulation runs them all.
  std::optional<ScenarioSpec> pool_view;
  std::size_t reviewed = 0;
  if (sc.spec.disaggregated()) {
    const std::vector<MemoryPlan> plans = deployed_memory_plans(sc.spec, *gpu);
    while (reviewed + 1 < plans.size() && plans[reviewed].fits()) ++reviewed;
    if (plans[reviewed].fits()) reviewed = 0;
    pool_view = sc.spec.pool_view(sc.spec.pools[reviewed]);
  }
  CapacityPlan p = plan_capacity(sc.spec, pool_view ? *pool_view : sc.spec, *gpu, po);
  if (sc.spec.disaggregated()) {
    const std::vector<MemoryPlan> plans = deployed_memory_plans(sc.spec, *gpu);
    for (std::size_t i = 0; i < plans.size(); ++i) {
      const PoolSpec& ps = sc.spec.pools[i];
      p.pools.push_back({.role = to_string(ps.role),
                         .instances = ps.instances,
                         .ep_size = ps.deployment.ep_size,
                         .gpus = ps.gpus(),
                         .memory = plans[i]});
    }
  }
  if (pool_view) {
    p.notes.push_back("deployment.pools: the memory review covers pool " + std::to_string(reviewed) + " (" +
                      to_string(sc.spec.pools[reviewed].role) +
                      ", its own deployment); validate and run decide the fit of every pool; the throughput "
                      "rows cost decode on the decode pools and prefill on the prefill pools");
  }
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

}  // namespace moesim
