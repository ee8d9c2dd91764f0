// The serving simulation's entry points: memory plans as a run wires them, the fit checks, and simulate(),
// which builds the cluster (cluster.h) and runs it.
#include "sim/serving/runtime/serving_simulation.h"

#include <memory>
#include <string>
#include <vector>

#include "sim/serving/runtime/cluster.h"
#include "sim/serving/step/serving_models.h"

namespace moesim {

std::vector<MemoryPlan> deployed_memory_plans(const ScenarioSpec& s, const GpuCostModel& gpu) {
  std::vector<MemoryPlan> out;
  const RandomStreams streams(s.run.seed);
  std::unique_ptr<ServingModels> models;
  if (s.experts.quantization) models = std::make_unique<ServingModels>(s, streams);
  int first_replica = 0;
  for (const PoolSpec& p : s.pool_specs()) {
    std::unique_ptr<ScenarioSpec> own;
    if (s.disaggregated()) own = std::make_unique<ScenarioSpec>(s.pool_view(p));
    const ScenarioSpec& view = own ? *own : s;
    if (!models || p.instances == 0) {
      out.push_back(plan_memory(view));
    } else {
      // As a run wires the pool's first instance.
      const auto planner = models->make_standalone(
          view, gpu, streams.stream("routing", static_cast<std::uint64_t>(first_replica)));
      out.push_back(plan_memory(view, planner->routed_expert_bytes_per_gpu()));
    }
    first_replica += p.instances;
  }
  return out;
}

MemoryPlan deployed_memory_plan(const ScenarioSpec& s, const GpuCostModel& gpu) {
  const std::vector<MemoryPlan> plans = deployed_memory_plans(s, gpu);
  for (const MemoryPlan& m : plans) {
    if (!m.fits()) return m;
  }
  return plans.front();
}

void check_pool_fits(const ScenarioSpec& s, std::size_t pool, const MemoryPlan& m) {
  if (!s.disaggregated()) {
    check_fits(s, m);
    return;
  }
  try {
    check_fits(s.pool_view(s.pools[pool]), m);
  } catch (const InputError& e) {
    throw InputError("deployment.pools[" + std::to_string(pool) + "]", e.what());
  }
}

void check_deployment_fits(const ScenarioSpec& s, const GpuCostModel& gpu) {
  const std::vector<MemoryPlan> plans = deployed_memory_plans(s, gpu);
  for (std::size_t i = 0; i < plans.size(); ++i) check_pool_fits(s, i, plans[i]);
}

Report simulate(const ScenarioSpec& s, const GpuCostModel& gpu, SimulationObserver* observer, int threads) {
  Cluster cluster(s, gpu, observer, threads);
  return cluster.run();
}

}  // namespace moesim