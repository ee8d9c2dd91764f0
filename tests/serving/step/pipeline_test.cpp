// Pipeline parallelism: stages of consecutive layers, micro-batches, bubbles and activation transfers.
#include <catch2/catch.hpp>
#include <vector>

#include "hwmodels/roofline_cost_model.h"
#include "sim/scenario/scenario_parser.h"
#include "sim/serving/spec/memory_plan.h"
#include "sim/serving/step/step_planner.h"

using namespace moesim;

namespace {
// 8 identical MoE layers (every token picks all 4 experts), EP2 per stage, a tiny LM head.
ScenarioSpec spec(int stages, int microbatches) {
  Json j = Json::parse(R"({
    "model": {"num_layers": 8, "hidden": 2048, "vocab": 64, "attention": "gqa", "num_heads": 16,
              "num_kv_heads": 4, "head_dim": 128, "routed_experts": 4, "top_k": 4, "expert_inter": 1024},
    "cluster": {"gpu": "h100-sxm", "nodes": 1, "gpus_per_node": 8},
    "deployment": {"ep_size": 2, "max_batched_tokens": 8192},
    "workload": {"arrival": {"kind": "poisson", "rate_per_s": 1},
                 "prompt_tokens": {"kind": "fixed", "tokens": 8}, "output_tokens": {"kind": "fixed", "tokens": 8}},
    "run": {"requests": 1}})");
  j["deployment"]["pipeline"] = Json{{"stages", stages}, {"microbatches", microbatches}};
  return parse_scenario(j, "").spec;
}

StepPlan plan(const ScenarioSpec& s, std::int64_t seqs) {
  const RooflineCostModel gpu(s.cluster.gpu);
  const Fabric fabric(s.cluster.fabric);
  const ExpertPopularity pop(PopularitySpec{}, s.model.moe_layers(), 4, 4, Rng(1));
  StepPlanner planner(s, gpu, fabric, pop, Rng(2));
  GroupBatch b;
  b.decode_seqs = seqs;
  b.decode_context_tokens = static_cast<double>(seqs) * 256;
  b.sampled_seqs = seqs;
  return planner.plan(std::vector<GroupBatch>(2, b), Time{});
}
}  // namespace

TEST_CASE("one micro-batch through two stages costs the unpipelined step plus one activation transfer") {
  const ScenarioSpec flat = spec(1, 1);
  const ScenarioSpec two = spec(2, 1);
  const StepPlan a = plan(flat, 64);
  const StepPlan b = plan(two, 64);
  REQUIRE(b.part(StepPart::kPipelineSend) > Duration::zero());
  REQUIRE(b.total == a.total + b.part(StepPart::kPipelineSend));
  // Each stage idles while the other works: half of the step is bubble (S - 1 of S stage slots).
  REQUIRE((b.part(StepPart::kPipelineBubble)).seconds() ==
          Approx((b.total - b.part(StepPart::kPipelineSend)).seconds() / 2).epsilon(0.02));
}

TEST_CASE("the bubble share of balanced stages is (S - 1) / (M + S - 1)") {
  for (const auto& [stages, micro] : std::vector<std::pair<int, int>>{{2, 2}, {2, 8}, {4, 4}}) {
    const StepPlan p = plan(spec(stages, micro), 64 * micro);
    const double busy = (p.total - p.part(StepPart::kPipelineSend)).seconds();
    INFO(stages << " stages, " << micro << " micro-batches");
    // The LM head on the last stage unbalances the stages a little: 2% tolerance.
    REQUIRE(p.part(StepPart::kPipelineBubble).seconds() / busy ==
            Approx(double(stages - 1) / (micro + stages - 1)).epsilon(0.02));
  }
}

TEST_CASE("stages split the weights and the KV cache of a GPU") {
  const MemoryPlan one = plan_memory(spec(1, 1));
  const MemoryPlan two = plan_memory(spec(2, 2));
  REQUIRE(two.weights_per_gpu.routed_experts == Approx(one.weights_per_gpu.routed_experts / 2));
  REQUIRE(two.weights_per_gpu.attention == Approx(one.weights_per_gpu.attention / 2));
  REQUIRE(two.kv_bytes_per_token == Approx(one.kv_bytes_per_token / 2));
  REQUIRE(spec(2, 2).replicas() == 2);  // 8 GPUs as replicas of 2 stages x EP2
}

TEST_CASE("a stage count that does not fit the cluster is refused with its path") {
  REQUIRE_THROWS_WITH(spec(3, 1),
                      Catch::StartsWith("deployment.pipeline.stages: ep_size x stages = 6 does not divide"));
  REQUIRE_THROWS_WITH(spec(16, 1), Catch::StartsWith("deployment.pipeline.stages: cannot exceed"));
}
