// Which steps TensorRT-LLM launches eagerly (runs_eagerly; CUDAGraphRunner.maybe_get_cuda_graph), and an
// eager step's cost in the planner (the launch pipeline of hwmodels/eager_launch.h).
#include <catch2/catch.hpp>
#include <string>
#include <vector>

#include "hwmodels/engine_profile.h"
#include "hwmodels/roofline_cost_model.h"
#include "sim/scenario/scenario_parser.h"
#include "sim/serving/step/cuda_graph_step.h"
#include "sim/serving/step/step_planner.h"

using namespace moesim;

namespace {
GroupBatch decode(std::int64_t n) {
  return GroupBatch{
      .decode_seqs = n, .decode_context_tokens = static_cast<double>(n) * 256, .sampled_seqs = n};
}
GroupBatch with_context(std::int64_t n, std::int64_t prompt) {
  GroupBatch b = decode(n);
  b.prefill_tokens = prompt;
  b.prefill_pairs = static_cast<double>(prompt) * static_cast<double>(prompt + 1) / 2;
  b.prefill_kv_tokens = static_cast<double>(prompt);
  b.sampled_seqs += 1;
  return b;
}
const EngineProfile kTrtllm = engine_profile(EngineKind::kTrtllm);
}  // namespace

TEST_CASE("TensorRT-LLM runs a step eagerly when any attention-DP rank runs a context") {
  const std::vector<int> none;
  CHECK_FALSE(runs_eagerly(std::vector{decode(8), decode(8), decode(8), decode(8)}, kTrtllm, none));
  CHECK(runs_eagerly(std::vector{decode(8), decode(8), with_context(8, 100), decode(8)}, kTrtllm, none));
  CHECK(runs_eagerly(std::vector{with_context(0, 100)}, kTrtllm, none));
  // Without captured sizes the graphs cover every generation-only batch, equal or not.
  CHECK_FALSE(runs_eagerly(std::vector{decode(3), decode(8)}, kTrtllm, none));
  for (const EngineKind k : {EngineKind::kVllm, EngineKind::kSglang, EngineKind::kPytorchGraph}) {
    CHECK_FALSE(runs_eagerly(std::vector{decode(8), with_context(8, 100)}, engine_profile(k), none));
  }
}

TEST_CASE("with captured sizes a batch beyond them, not padded to one, or unequal across ranks is eager") {
  const std::vector<int> sizes{128, 256};
  CHECK_FALSE(runs_eagerly(std::vector{decode(128), decode(128)}, kTrtllm, sizes));
  CHECK_FALSE(runs_eagerly(std::vector{decode(256)}, kTrtllm, sizes));
  CHECK(runs_eagerly(std::vector{decode(128), decode(256)}, kTrtllm, sizes));  // sizes differ
  CHECK(runs_eagerly(std::vector{decode(300), decode(300)}, kTrtllm, sizes));  // beyond the largest
  CHECK(runs_eagerly(std::vector{decode(100)}, kTrtllm, sizes));               // not a captured size
  CHECK(runs_eagerly(std::vector{decode(128), with_context(127, 50)}, kTrtllm, sizes));
}

namespace {
// 8 MoE layers, EP2 with two attention-DP groups, TensorRT-LLM without its sampler's host time.
Json json() {
  return Json::parse(R"({
    "model": {"num_layers": 8, "hidden": 2048, "vocab": 64, "attention": "gqa", "num_heads": 16,
              "num_kv_heads": 4, "head_dim": 128, "routed_experts": 4, "top_k": 4, "expert_inter": 1024},
    "cluster": {"gpu": "h100-sxm", "nodes": 1, "gpus_per_node": 8},
    "deployment": {"engine": "trtllm", "ep_size": 2, "attention": {"dp": 2, "tp": 1},
                   "max_batched_tokens": 8192, "host_us_per_sequence": 0},
    "workload": {"arrival": {"kind": "poisson", "rate_per_s": 1},
                 "prompt_tokens": {"kind": "fixed", "tokens": 8}, "output_tokens": {"kind": "fixed", "tokens": 8}},
    "run": {"requests": 1}})");
}
ScenarioSpec spec() { return parse_scenario(json(), "").spec; }

StepPlan plan(const ScenarioSpec& s, const std::vector<GroupBatch>& groups) {
  const RooflineCostModel gpu(s.cluster.gpu);
  const Fabric fabric(s.cluster.fabric);
  const ExpertPopularity pop(PopularitySpec{}, s.model.moe_layers(), 4, 4, Rng(1));
  StepPlanner planner(s, gpu, fabric, pop, Rng(2));
  return planner.plan(groups, Time{});
}
}  // namespace

// A context on one rank of two makes the step eager. With no launch cost the pipeline is the GPU's work
// alone, never beyond the GPU parts (each part spread over its kernels loses at most picoseconds): no host
// part. With a launch cost far above every kernel's time the host paces the step: it lasts the launches of
// all its kernels plus the last kernel, so (total - last) / launch is the step's kernel count.
TEST_CASE("an eager step is the GPU step without launch cost and the launches when the host paces it") {
  ScenarioSpec s = spec();
  const std::vector<GroupBatch> mixed{decode(16), with_context(16, 64)};
  s.deployment.engine.eager_launch_us = 0;
  const StepPlan free = plan(s, mixed);
  CHECK(free.eager);
  const Duration gpu = free.total - free.part(StepPart::kHost);
  CHECK(free.part(StepPart::kHost) == Duration::zero());
  CHECK_FALSE(plan(s, {decode(16), decode(16)}).eager);

  s.deployment.engine.eager_launch_us = 1000;  // 1 ms a launch, far above any kernel of this model
  const StepPlan paced = plan(s, mixed);
  CHECK(paced.eager);
  CHECK(paced.total - paced.part(StepPart::kHost) == gpu);  // the GPU parts do not change
  // Kernels of a layer of this BF16 GQA model under trtllm (docs/engines.md's table): QKV and O GEMMs, the
  // decode and the prefill attention cores, the router GEMM (5); residual add + RMSNorm fused twice, KV
  // write, rotary, fused top-k, align, permute gather, unpermute gather-sum (8 small kernels; no FP8
  // quantisation); dispatch, grouped up GEMM, activation, grouped down GEMM, combine (5): 18. Eight
  // layers and the LM head: 145 launches, the last kernel (the LM head) after the 145th.
  const double kernels = (paced.total - paced.part(StepPart::kLmHead)).seconds() / 1e-3;
  CHECK(kernels == Approx(145).margin(1e-6));
  // A decode-only step keeps its graph: no launch cost.
  const StepPlan graph = plan(s, {decode(16), decode(16)});
  CHECK(graph.part(StepPart::kHost) == Duration::zero());
}

TEST_CASE("a bad eager launch cost names its key") {
  Json j = json();
  CHECK(parse_scenario(j, "").spec.deployment.engine.eager_launch_us == 26.3);
  j["deployment"]["eager_launch_us"] = -1;
  CHECK_THROWS_WITH(parse_scenario(j, ""), Catch::StartsWith("deployment.eager_launch_us"));
  j["deployment"]["eager_launch_us"] = 12.5;
  CHECK(parse_scenario(j, "").spec.deployment.engine.eager_launch_us == 12.5);
}
