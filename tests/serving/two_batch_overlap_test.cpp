// Two-micro-batch overlap: per layer, the two halves' communication runs while the other half computes.
#include <catch2/catch.hpp>
#include <vector>

#include "hwmodels/roofline_cost_model.h"
#include "sim/scenario/scenario_parser.h"
#include "sim/serving/step_planner.h"

using namespace moesim;

namespace {
// 4 GPUs on 2 nodes, 8 experts of which every token picks all 8: every layer sees identical counts, so a
// layer's compute and communication are the same in every layer.
ScenarioSpec spec(bool overlap) {
  Json j = Json::parse(R"({
    "model": {"num_layers": 4, "hidden": 4096, "vocab": 1000, "attention": "gqa", "num_heads": 32,
              "num_kv_heads": 8, "head_dim": 128, "routed_experts": 8, "top_k": 8, "expert_inter": 1024},
    "cluster": {"gpu": "h100-sxm", "nodes": 2, "gpus_per_node": 2},
    "deployment": {"ep_size": 4, "max_batched_tokens": 8192},
    "workload": {"arrival": {"kind": "poisson", "rate_per_s": 1},
                 "prompt_tokens": {"kind": "fixed", "tokens": 8}, "output_tokens": {"kind": "fixed", "tokens": 8}},
    "run": {"requests": 1}})");
  j["deployment"]["two_batch_overlap"] = overlap;
  return parse_scenario(j, "").spec;
}

std::vector<GroupBatch> decode(std::int64_t seqs) {
  GroupBatch b;
  b.decode_seqs = seqs;
  b.decode_context_tokens = static_cast<double>(seqs) * 512;
  b.sampled_seqs = seqs;
  return std::vector<GroupBatch>(4, b);
}

StepPlan plan(bool overlap, std::int64_t seqs) {
  const ScenarioSpec s = spec(overlap);
  const RooflineCostModel gpu(s.cluster.gpu);
  const Fabric fabric(s.cluster.fabric);
  const ExpertPopularity pop(PopularitySpec{}, s.model.moe_layers(), 8, 8, Rng(1));
  StepPlanner planner(s, gpu, fabric, pop, Rng(2));
  return planner.plan(decode(seqs), Time{});
}
}  // namespace

TEST_CASE("without overlap nothing is hidden and the step is the sum of its parts") {
  const StepPlan p = plan(false, 256);
  REQUIRE(p.comm_hidden == Duration::zero());
  REQUIRE(p.total == p.part(StepPart::kAttention) + p.part(StepPart::kLayerKernels) +
                         p.part(StepPart::kDenseFfn) + p.part(StepPart::kExperts) +
                         p.part(StepPart::kDispatch) + p.part(StepPart::kCombine) +
                         p.part(StepPart::kLmHead));
}

TEST_CASE("with overlap each layer costs the larger of its compute and its communication") {
  const StepPlan p = plan(true, 256);
  // Identical layers: the hidden time summed over layers is min(total compute, total communication).
  const Duration compute = p.part(StepPart::kAttention) + p.part(StepPart::kExperts);
  const Duration comm = p.part(StepPart::kDispatch) + p.part(StepPart::kCombine) + p.comm_hidden;  // issued
  REQUIRE(p.comm_hidden == min(compute, comm));
  REQUIRE(p.total == max(compute, comm) + p.part(StepPart::kDenseFfn) + p.part(StepPart::kLmHead));
}

TEST_CASE("overlap pays off when a large batch crosses nodes and costs compute efficiency at a small one") {
  const StepPlan off_large = plan(false, 1024);
  const StepPlan on_large = plan(true, 1024);
  REQUIRE(on_large.comm_hidden > Duration::zero());
  REQUIRE(on_large.total < off_large.total);
  // Halves read every expert's weights twice: the expert FFN time of the two halves is never less than
  // that of the whole batch.
  REQUIRE(on_large.part(StepPart::kExperts) >= off_large.part(StepPart::kExperts));
  const StepPlan off_small = plan(false, 1);
  const StepPlan on_small = plan(true, 1);
  REQUIRE(on_small.part(StepPart::kExperts) > off_small.part(StepPart::kExperts));
}
