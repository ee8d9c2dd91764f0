// The serving simulation: replicas (entities) that run continuous-batching iterations costed by the step
// planner, a request router, a lazily pulled request source, and the metrics recorder. One run is
// deterministic: same scenario and seed, same report, whether its step plans run on one thread or several.
#pragma once

#include <cstdint>
#include <memory>
#include <span>
#include <vector>

#include "hwmodels/gpu_cost_model.h"
#include "sim/serving/report/report.h"
#include "sim/serving/spec/memory_plan.h"
#include "sim/serving/spec/scenario_spec.h"
#include "sim/serving/step/step_planner.h"

namespace moesim {

struct StepRecord {
  int replica = 0;
  int pool = 0;
  double start_s = 0;
  const StepPlan* plan = nullptr;
  // The step's routed (token, expert) pairs per expert-parallel rank, summed over the MoE layers
  // (StepPlanner::rank_pairs).
  std::span<const double> rank_pairs = {};
  std::int64_t decode_seqs = 0;
  std::int64_t prefill_tokens = 0;
  std::int64_t running = 0;
  std::int64_t waiting = 0;
};

struct RequestRecord {
  std::int64_t id = 0;
  double arrival_s = 0;
  std::int64_t prompt_tokens = 0;
  std::int64_t output_tokens = 0;
  bool dropped = false;
  double queueing_s = 0;
  double ttft_s = 0;
  double tpot_s = 0;
  double e2e_s = 0;
  int preemptions = 0;
  int replica = 0;
  int group = 0;
};

// A stretch of an instance's life under the autoscaling planner: loading its weights, starting (engine,
// CUDA graphs), or draining before its GPUs are freed.
struct InstanceSpan {
  int replica = 0;
  int pool = 0;
  const char* what = "";
  double start_s = 0;
  double end_s = 0;
};

// Optional outputs (per-step CSV, per-request CSV, timeline traces) subscribe here.
class SimulationObserver {
 public:
  virtual ~SimulationObserver() = default;
  virtual void on_step(const StepRecord& step) = 0;
  virtual void on_request(const RequestRecord& request) = 0;
  // Reported when the span ends.
  virtual void on_instance(const InstanceSpan& span) { (void)span; }
};

// Memory per GPU as a run plans it: under per-expert quantisation the routed-expert weights are those of the
// placement's fullest GPU at each copy's precision (replica 0's planner, wired as a run wires it), else the
// uniform plan. `validate`, `plan` and `run` all decide "fits" from it.
// With pools: the plan of the first pool that does not fit, else of the first pool.
MemoryPlan deployed_memory_plan(const ScenarioSpec& s, const GpuCostModel& gpu);
// One plan per pool (ScenarioSpec::pool_specs), each from its own deployment, as a run wires it.
std::vector<MemoryPlan> deployed_memory_plans(const ScenarioSpec& s, const GpuCostModel& gpu);
// check_fits for pool `pool` (its errors name deployment.pools[i] under disaggregation).
void check_pool_fits(const ScenarioSpec& s, std::size_t pool, const MemoryPlan& m);
// Every pool fits, decided as `run` decides it (validate calls this).
void check_deployment_fits(const ScenarioSpec& s, const GpuCostModel& gpu);

// Runs a whole scenario; throws InputError if it does not fit on the cluster. `threads` > 1 computes the
// step plans of different replicas on that many threads (the report is the same for any value).
Report simulate(const ScenarioSpec& s, const GpuCostModel& gpu, SimulationObserver* observer = nullptr,
                int threads = 1);

}  // namespace moesim
