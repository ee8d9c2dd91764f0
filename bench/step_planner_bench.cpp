// Cost of costing: one StepPlanner::plan() for DeepSeek-V3 (58 MoE layers x 256 experts) at EP8 to EP256
// (8 GPUs per node, data-parallel attention), for a decode batch and a mixed prefill batch. The design
// target is O(layers x (experts + GPUs)); the target: EP256 steps at most 1 ms of CPU.
#include <benchmark/benchmark.h>

#include "sim/scenario/profile_io.h"
#include "sim/scenario/scenario_parser.h"
#include "sim/serving/step/step_planner.h"

namespace {

void BM_PlanStep(benchmark::State& state) {
  const int ep = static_cast<int>(state.range(0));
  const auto seqs = state.range(1);
  const auto prefill = state.range(2);
  const moesim::ScenarioSpec s = moesim::load_scenario("", {"cluster.nodes=" + std::to_string(ep / 8),
                                                            "deployment.ep_size=" + std::to_string(ep),
                                                            "deployment.attention.dp=" + std::to_string(ep)})
                                     .spec;
  const auto gpu = moesim::make_gpu_cost_model(s.cluster.gpu);
  const moesim::Fabric fabric(s.cluster.fabric);
  const moesim::ExpertPopularity pop(s.workload.popularity, s.model.moe_layers(), s.model.routed_experts,
                                     s.model.top_k, moesim::Rng(1));
  moesim::StepPlanner planner(s, *gpu, fabric, pop, moesim::Rng(2));
  std::vector<moesim::GroupBatch> batches(static_cast<std::size_t>(ep));
  for (auto& b : batches) {
    b.decode_seqs = seqs;
    b.decode_context_tokens = static_cast<double>(seqs) * 1500;
    b.sampled_seqs = seqs;
    b.prefill_tokens = prefill;
    b.prefill_pairs = static_cast<double>(prefill) * static_cast<double>(prefill) / 2;
    b.prefill_kv_tokens = static_cast<double>(prefill);
  }
  for (auto _ : state) {
    benchmark::DoNotOptimize(planner.plan(batches, moesim::Time{}).total);
  }
  state.SetItemsProcessed(state.iterations());
}
BENCHMARK(BM_PlanStep)
    ->ArgNames({"ep", "decode_seqs", "prefill_tokens"})
    ->Args({8, 64, 0})
    ->Args({16, 64, 0})
    ->Args({32, 64, 0})
    ->Args({64, 64, 0})
    ->Args({256, 64, 0})
    ->Args({8, 128, 2048})
    ->Args({16, 128, 2048})
    ->Args({32, 128, 2048})
    ->Args({64, 128, 2048})
    ->Args({256, 128, 2048})
    ->Unit(benchmark::kMicrosecond);

}  // namespace

BENCHMARK_MAIN();
