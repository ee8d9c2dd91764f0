// Expert tensor parallelism: each expert's matrices split over expert_tp GPUs, the
// rank's grouped GEMMs at inter / tp, the all-reduce that sums the partial outputs, and the memory plan.
#include <catch2/catch.hpp>
#include <string>
#include <vector>

#include "hwmodels/roofline_cost_model.h"
#include "sim/scenario/scenario_parser.h"
#include "sim/serving/spec/memory_plan.h"
#include "sim/serving/step/step_planner.h"
#include "tests/support/scenario_error.h"

using namespace moesim;

namespace {
// 8 GPUs in one node, 8 experts of which every token picks all 8 (so every count is the token count and
// the costs follow by hand). The fit's own expert kernel (cutlass_grouped, factor 1): a launch costs what
// the cost model's grouped_experts gives.
Json base() {
  return Json::parse(R"({
    "model": {"num_layers": 2, "hidden": 2048, "vocab": 1000, "attention": "gqa", "num_heads": 16,
              "num_kv_heads": 8, "head_dim": 128, "routed_experts": 8, "top_k": 8, "expert_inter": 1024},
    "cluster": {"gpu": "h100-sxm", "nodes": 1, "gpus_per_node": 8},
    "deployment": {"ep_size": 8, "max_batched_tokens": 8192, "expert_kernel": "cutlass_grouped"},
    "workload": {"arrival": {"kind": "poisson", "rate_per_s": 1},
                 "prompt_tokens": {"kind": "fixed", "tokens": 8}, "output_tokens": {"kind": "fixed", "tokens": 8}},
    "run": {"requests": 1}})");
}

ScenarioSpec spec(int attention_tp, int expert_tp) {
  Json j = base();
  j["deployment"]["attention"] = {{"tp", attention_tp}, {"dp", 8 / attention_tp}};
  j["deployment"]["expert_tp_size"] = expert_tp;
  return parse_scenario(j, "").spec;
}

using moesim_test::error_of;

struct Planned {
  StepPlan plan;
  std::vector<double> flops;
};

// `seqs` decode sequences in each attention group.
Planned plan(const ScenarioSpec& s, std::int64_t seqs) {
  const RooflineCostModel gpu(s.cluster.gpu);
  const Fabric fabric(s.cluster.fabric);
  const ExpertPopularity pop(PopularitySpec{}, s.model.moe_layers(), 8, 8, Rng(1));
  StepPlanner planner(s, gpu, fabric, pop, Rng(2));
  GroupBatch b;
  b.decode_seqs = seqs;
  b.decode_context_tokens = static_cast<double>(seqs) * 256;
  b.sampled_seqs = seqs;
  const std::vector<GroupBatch> groups(static_cast<std::size_t>(s.deployment.attention_dp), b);
  Planned p{planner.plan(groups, Time{}), {}};
  p.flops.assign(planner.gpu_flops().begin(), planner.gpu_flops().end());
  return p;
}
}  // namespace

TEST_CASE("under TP8 every GPU runs every expert at an eighth of the columns and no All-to-All runs") {
  // vLLM's MoE under --tensor-parallel-size 8: attention TP8, expert TP8, one expert-parallel rank.
  const ScenarioSpec s = spec(8, 8);
  const RooflineCostModel gpu(s.cluster.gpu);
  const std::int64_t tokens = 256;  // one attention group
  const Planned p = plan(s, tokens);
  // Each GPU: one grouped launch over the 8 experts with every token's 8 pairs, inter 1024 / 8.
  const Duration shard = gpu.grouped_experts(
      GroupedExpertsWork{.experts = 8, .tokens = tokens * 8, .hidden = 2048, .inter = 1024 / 8});
  REQUIRE(p.plan.part(StepPart::kExperts) == shard * 2);  // two MoE layers
  // The tokens are already on every GPU of the TP group and the partial sums are the attention group's
  // post-FFN all-reduce: no dispatch, no combine.
  REQUIRE(p.plan.part(StepPart::kDispatch) == Duration::zero());
  REQUIRE(p.plan.part(StepPart::kCombine) == Duration::zero());
  REQUIRE(p.plan.dispatch_nvlink_bytes == 0.0);
  // FLOPs: the shard is an eighth of the expert's 6 x hidden x inter per (token, expert) pair.
  const ScenarioSpec whole = spec(8, 1);
  const Planned ep = plan(whole, tokens);
  const double expert_flops = 2.0 * tokens * 8 * 6.0 * 2048 * 1024;  // both layers, all GPUs' share
  double tp_sum = 0;
  double ep_sum = 0;
  for (std::size_t g = 0; g < 8; ++g) {
    tp_sum += p.flops[g];
    ep_sum += ep.flops[g];
    CHECK(p.flops[g] == Approx(p.flops[0]));  // every GPU does the same work
  }
  // The same attention work, and the same expert FLOPs summed over GPUs, however the experts are split.
  REQUIRE(tp_sum == Approx(ep_sum));
  REQUIRE(tp_sum - 8 * (p.flops[0] - expert_flops / 8) == Approx(expert_flops));
}

TEST_CASE("expert TP under data-parallel attention adds the all-reduce of every token's hidden state") {
  const ScenarioSpec s = spec(1, 8);  // 8 attention groups, one expert rank of 8 GPUs
  const RooflineCostModel gpu(s.cluster.gpu);
  const Fabric fabric(s.cluster.fabric);
  const std::int64_t seqs = 32;
  const Planned p = plan(s, seqs);
  const double tokens = 8.0 * seqs;
  const Duration shard = gpu.grouped_experts(GroupedExpertsWork{
      .experts = 8, .tokens = static_cast<std::int64_t>(tokens) * 8, .hidden = 2048, .inter = 128});
  REQUIRE(p.plan.part(StepPart::kExperts) == shard * 2);
  // All-reduce of tokens x hidden x 2 bytes (BF16) over the 8 GPUs, by the kernel the engine picks for that
  // size (vLLM: the custom two-shot kernel at 1 MiB).
  const double bytes = tokens * 2048 * 2.0;
  REQUIRE(all_reduce_kernel(s.deployment.engine, bytes, 8, true) == AllReduceKernel::kTwoShot);
  const Duration reduce = fabric.all_reduce(bytes, 8, true, AllReduceKernel::kTwoShot);
  REQUIRE(p.plan.part(StepPart::kDispatch) == Duration::zero());
  REQUIRE(p.plan.part(StepPart::kCombine) == reduce * 2);
}

TEST_CASE("TP2 x EP4 experts: four ranks of two GPUs, each shard at half the columns") {
  const ScenarioSpec s = spec(1, 2);
  REQUIRE(s.deployment.expert_ranks() == 4);
  const RooflineCostModel gpu(s.cluster.gpu);
  const Fabric fabric(s.cluster.fabric);
  const std::int64_t seqs = 32;
  const Planned p = plan(s, seqs);
  const double tokens = 8.0 * seqs;
  // Contiguous placement: 2 experts per rank; every token picks every expert, so every rank gets every
  // token twice (once per local expert).
  const Duration shard = gpu.grouped_experts(GroupedExpertsWork{
      .experts = 2, .tokens = static_cast<std::int64_t>(tokens) * 2, .hidden = 2048, .inter = 512});
  REQUIRE(p.plan.part(StepPart::kExperts) == shard * 2);
  // The All-to-All crosses ranks; the rank's sum of partial outputs over its 2 GPUs comes on top.
  const Duration reduce = fabric.all_reduce(tokens * 2048 * 2.0, 2, true);
  REQUIRE(p.plan.part(StepPart::kDispatch) > Duration::zero());
  REQUIRE(p.plan.part(StepPart::kCombine) > reduce * 2);
  // Each GPU's dispatch sends every one of its tokens to the 3 other ranks (6 GPUs, half each) and half
  // to its own rank's other GPU: BF16 dispatch (BF16 weights) and BF16 combine, hidden x 2 bytes each.
  const double per_gpu = seqs * (3.0 + 0.5) * 2048 * (2.0 + 2.0);
  REQUIRE(p.plan.dispatch_nvlink_bytes == Approx(8 * per_gpu * 2));
}

TEST_CASE("a GPU of an expert-TP rank holds its share of every expert's weights") {
  // Qwen3-235B-A22B in BF16 on 8 GPUs with its experts TP8: each GPU holds 1/8 of all 128 experts.
  Json j = Json::parse(R"({"model": "qwen3-235b-a22b", "precision": {"weights": "bf16"},
    "cluster": {"gpu": "h200-sxm", "nodes": 1, "gpus_per_node": 8},
    "deployment": {"ep_size": 8, "attention": {"tp": 8, "dp": 1}, "expert_tp_size": 8},
    "workload": {"arrival": {"kind": "poisson", "rate_per_s": 1},
                 "prompt_tokens": {"kind": "fixed", "tokens": 8}, "output_tokens": {"kind": "fixed", "tokens": 8}},
    "run": {"requests": 1}})");
  const ScenarioSpec tp = parse_scenario(j, "").spec;
  const MemoryPlan m = plan_memory(tp);
  const double expert = 3.0 * double(tp.model.hidden) * double(tp.model.expert_inter);
  REQUIRE(m.experts_per_gpu == 128);
  REQUIRE(m.weights_per_gpu.routed_experts == Approx(expert * 128 * tp.model.moe_layers() * 2.0 / 8));
  // The same bytes as EP8 (16 whole experts per GPU): expert TP moves work, not memory.
  j["deployment"]["expert_tp_size"] = 1;
  REQUIRE(plan_memory(parse_scenario(j, "").spec).weights_per_gpu.routed_experts ==
          Approx(m.weights_per_gpu.routed_experts));
}

TEST_CASE("expert TP sizes that do not divide the GPUs, the node or the intermediate size are refused") {
  Json j = base();
  j["deployment"]["expert_tp_size"] = 3;
  REQUIRE(
      error_of(j) ==
      "deployment.expert_tp_size: 3 does not divide deployment.ep_size = 8 (the GPUs that hold the experts)");
  j = base();
  j["cluster"]["gpus_per_node"] = 6;
  j["deployment"]["ep_size"] = 6;
  j["deployment"]["expert_tp_size"] = 3;
  j["model"]["routed_experts"] = 6;
  j["model"]["top_k"] = 2;
  REQUIRE_THAT(error_of(j), Catch::StartsWith("deployment.expert_tp_size: 3 does not divide the model's "
                                              "expert_inter (1024)"));
  j = base();
  j["cluster"]["nodes"] = 2;
  j["cluster"]["gpus_per_node"] = 4;
  j["deployment"]["expert_tp_size"] = 8;
  REQUIRE_THAT(error_of(j),
               Catch::StartsWith("deployment.expert_tp_size: 8 does not divide cluster.gpus_per_node = 4"));
  // The experts must divide over the ranks: 8 experts over 8 / 2 = 4 ranks is fine, over 6 / 2 = 3 not.
  j = base();
  j["cluster"]["gpus_per_node"] = 6;
  j["deployment"]["ep_size"] = 6;
  j["deployment"]["expert_tp_size"] = 2;
  REQUIRE_THAT(error_of(j),
               Catch::StartsWith("deployment.expert_tp_size: deployment.ep_size / expert_tp_size "
                                 "= 3 ranks does not divide 8 experts"));
}
