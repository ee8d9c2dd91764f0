// The step as the first GPU's profiler shows it (StepPlan::first_gpu_dispatch_wait, first_gpu_combine_wait):
// of the critical path's attention side and experts, the time that GPU idles inside the collectives while the
// slowest attention group and expert-parallel rank finish.
#include <catch2/catch.hpp>
#include <string>
#include <vector>

#include "hwmodels/roofline_cost_model.h"
#include "sim/engine/random.h"
#include "sim/scenario/scenario_parser.h"
#include "sim/serving/step/step_planner.h"

using namespace moesim;

namespace {
// 4 GPUs on one node, 4 attention groups (one per GPU), EP4 over 8 experts, `layers` MoE layers.
ScenarioSpec spec(int layers, int top_k, bool tbo = false) {
  Json j = Json::parse(R"({
    "model": {"hidden": 4096, "vocab": 1000, "attention": "gqa", "num_heads": 32,
              "num_kv_heads": 8, "head_dim": 128, "routed_experts": 8, "expert_inter": 1024},
    "cluster": {"nodes": 1, "gpus_per_node": 4},
    "deployment": {"ep_size": 4, "attention": {"dp": 4, "tp": 1}, "max_batched_tokens": 8192,
                   "all_to_all": "low_latency"},
    "workload": {"arrival": {"kind": "poisson", "rate_per_s": 1},
                 "prompt_tokens": {"kind": "fixed", "tokens": 8}, "output_tokens": {"kind": "fixed", "tokens": 8}},
    "run": {"requests": 1}})");
  j["model"]["num_layers"] = layers;
  j["model"]["top_k"] = top_k;
  j["cluster"]["gpu"] = "h200-sxm";
  j["deployment"]["two_batch_overlap"] = tbo;
  return parse_scenario(j, "").spec;
}

GroupBatch decode(std::int64_t seqs, double context_per_seq) {
  GroupBatch b;
  b.decode_seqs = seqs;
  b.decode_context_tokens = static_cast<double>(seqs) * context_per_seq;
  b.sampled_seqs = seqs;
  return b;
}

struct Planned {
  StepPlan plan;
  Duration rank0_experts;  // the last MoE layer's expert time of rank 0
};

Planned plan(const ScenarioSpec& s, const std::vector<GroupBatch>& groups) {
  const RooflineCostModel gpu(s.cluster.gpu);
  const Fabric fabric(s.cluster.fabric);
  const ExpertPopularity pop(PopularitySpec{}, s.model.moe_layers(), s.model.routed_experts, s.model.top_k,
                             Rng(1));
  StepPlanner planner(s, gpu, fabric, pop, Rng(2));
  const StepPlan p = planner.plan(groups, Time{});
  return Planned{.plan = p, .rank0_experts = planner.expert_cost().time(0)};
}
}  // namespace

TEST_CASE("a GPU whose attention group is lighter waits for the slowest group inside the dispatch") {
  // Every token picks all 8 experts: each rank's two experts see every token, so the ranks' expert loads
  // are equal and nobody waits in the combine. Group 0 reads 256 context tokens per sequence, the other
  // three 4,096, at the same token count (same small kernels, shared experts and gate).
  const ScenarioSpec s = spec(4, 8);
  const GroupBatch light = decode(256, 256);
  const GroupBatch heavy = decode(256, 4096);
  const Planned mixed = plan(s, {light, heavy, heavy, heavy});
  // The attention side of each group alone, from steps whose groups are all alike: the critical path
  // takes the slowest group's, the first GPU spends the difference waiting in every MoE layer's dispatch.
  const Duration light_side = plan(s, {light, light, light, light}).plan.part(StepPart::kAttention);
  const Duration heavy_side = plan(s, {heavy, heavy, heavy, heavy}).plan.part(StepPart::kAttention);
  REQUIRE(heavy_side > light_side);
  CHECK(mixed.plan.part(StepPart::kAttention) == heavy_side);
  CHECK(mixed.plan.first_gpu_dispatch_wait.us() == Approx((heavy_side - light_side).us()).epsilon(1e-9));
  CHECK(mixed.plan.first_gpu_combine_wait == Duration::zero());
  // The heaviest group's own GPU would see no wait: with group 0 heavy there is none.
  const Planned first_heavy = plan(s, {heavy, light, light, light});
  CHECK(first_heavy.plan.first_gpu_dispatch_wait == Duration::zero());
  // The wait moves time between parts: the step is the same as the critical path's.
  CHECK(mixed.plan.total == mixed.plan.parts.sum());
}

TEST_CASE("the first GPU waits in the combine for the slowest rank's experts, and never beyond them") {
  // One MoE layer, top-2 of 8 experts at 1,024 tokens: the drawn counts differ per rank, the layer's experts
  // are its slowest rank's and the first GPU idles for the rest of them.
  const ScenarioSpec s = spec(1, 2);
  const GroupBatch b = decode(256, 512);
  const Planned p = plan(s, {b, b, b, b});
  const Duration experts = p.plan.part(StepPart::kExperts);
  CHECK(p.plan.first_gpu_combine_wait == experts - p.rank0_experts);
  CHECK(p.plan.first_gpu_combine_wait >= Duration::zero());
  CHECK(p.plan.first_gpu_combine_wait < experts);
  // Equal groups: no wait in the dispatch.
  CHECK(p.plan.first_gpu_dispatch_wait == Duration::zero());
}

TEST_CASE("two-batch overlap reports no first-GPU wait (not costed there)") {
  const ScenarioSpec s = spec(4, 2, true);
  const Planned p = plan(s, {decode(256, 256), decode(256, 4096), decode(256, 4096), decode(256, 4096)});
  CHECK(p.plan.first_gpu_dispatch_wait == Duration::zero());
  CHECK(p.plan.first_gpu_combine_wait == Duration::zero());
}
