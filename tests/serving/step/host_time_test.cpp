// The engine's host work per iteration (EngineProfile::host_us_per_sequence, exposed_host_s): hidden behind
// the GPU step under the overlap scheduler, added to it without; TensorRT-LLM only (docs/engines.md).
#include <catch2/catch.hpp>
#include <string>
#include <vector>

#include "hwmodels/engine_profile.h"
#include "hwmodels/roofline_cost_model.h"
#include "sim/engine/check.h"
#include "sim/scenario/scenario_parser.h"
#include "sim/serving/step/step_planner.h"

using namespace moesim;

namespace {
// 8 MoE layers (every token picks all 4 experts), EP2 with two attention-DP groups.
Json base(const std::string& engine) {
  Json j = Json::parse(R"({
    "model": {"num_layers": 8, "hidden": 2048, "vocab": 64, "attention": "gqa", "num_heads": 16,
              "num_kv_heads": 4, "head_dim": 128, "routed_experts": 4, "top_k": 4, "expert_inter": 1024},
    "cluster": {"gpu": "h100-sxm", "nodes": 1, "gpus_per_node": 8},
    "deployment": {"ep_size": 2, "attention": {"dp": 2, "tp": 1}, "max_batched_tokens": 8192},
    "workload": {"arrival": {"kind": "poisson", "rate_per_s": 1},
                 "prompt_tokens": {"kind": "fixed", "tokens": 8}, "output_tokens": {"kind": "fixed", "tokens": 8}},
    "run": {"requests": 1}})");
  j["deployment"]["engine"] = engine;
  return j;
}

ScenarioSpec spec(const std::string& engine, double host_us, bool overlap) {
  Json j = base(engine);
  j["deployment"]["host_us_per_sequence"] = host_us;
  j["deployment"]["overlap_scheduler"] = overlap;
  return parse_scenario(j, "").spec;
}

// Decode steps of `small` and `large` sequences on the two groups (the executor of the larger one is the
// busiest).
StepPlan plan(const ScenarioSpec& s, std::int64_t small, std::int64_t large) {
  const RooflineCostModel gpu(s.cluster.gpu);
  const Fabric fabric(s.cluster.fabric);
  const ExpertPopularity pop(PopularitySpec{}, s.model.moe_layers(), 4, 4, Rng(1));
  StepPlanner planner(s, gpu, fabric, pop, Rng(2));
  std::vector<GroupBatch> groups;
  for (const std::int64_t n : {small, large}) {
    groups.push_back(GroupBatch{
        .decode_seqs = n, .decode_context_tokens = static_cast<double>(n) * 256, .sampled_seqs = n});
  }
  return planner.plan(groups, Time{});
}

std::string error_of(const std::string& key, const Json& value) {
  Json j = base("trtllm");
  j["deployment"][key] = value;
  try {
    (void)parse_scenario(j, "");
    return "";
  } catch (const InputError& e) {
    return e.what();
  }
}
}  // namespace

// 13.8 us per sequence (TensorRT-LLM PR #11983: 13.8 ms at batch 1,000): at 384 sequences 5.2992 ms of
// host work, at 896 12.3648 ms. Under the overlap scheduler only what exceeds the GPU step shows.
TEST_CASE("the exposed host time is host - GPU under the overlap scheduler and all of host without") {
  EngineProfile e = engine_profile(EngineKind::kTrtllm);
  CHECK(e.host_us_per_sequence == 13.8);
  CHECK(e.overlap_scheduler);
  CHECK(exposed_host_s(e, 384, 75.6e-3) == 0.0);  // the B200 row's GPU step hides it
  CHECK(exposed_host_s(e, 384, 2e-3) == Approx(5.2992e-3 - 2e-3).epsilon(1e-12));
  CHECK(exposed_host_s(e, 896, 10e-3) == Approx(12.3648e-3 - 10e-3).epsilon(1e-12));
  e.overlap_scheduler = false;
  CHECK(exposed_host_s(e, 384, 75.6e-3) == Approx(5.2992e-3).epsilon(1e-12));
  CHECK(exposed_host_s(e, 896, 10e-3) == Approx(12.3648e-3).epsilon(1e-12));
  for (const EngineKind k :
       {EngineKind::kVllm, EngineKind::kSglang, EngineKind::kPytorchGraph, EngineKind::kPytorchLoop}) {
    CHECK(engine_profile(k).host_us_per_sequence == 0);
    CHECK(exposed_host_s(engine_profile(k), 896, 0) == 0);
  }
}

// The step with host time against the same step without it (host_us_per_sequence 0: the GPU step G): the
// busiest group's sequences n at h us each give H = n h; the step is G + H without the overlap scheduler
// and max(G, H) with it. Two batch sizes, one where the GPU hides H and one where it does not; times are
// whole picoseconds (1e-11 s margin).
TEST_CASE("the step adds the busiest executor's host time, hidden up to the GPU step when overlapped") {
  for (const auto& [small, large] : std::vector<std::pair<std::int64_t, std::int64_t>>{{8, 16}, {32, 256}}) {
    const StepPlan gpu = plan(spec("trtllm", 0, true), small, large);
    REQUIRE(gpu.part(StepPart::kHost) == Duration::zero());
    const double g = gpu.total.seconds();
    // h such that H = 1.5 G at the large batch; at the small batch the same h is 1.5 G x 16 / 256 < G.
    const double h_us = 1.5 * plan(spec("trtllm", 0, true), 32, 256).total.seconds() / 256 * 1e6;
    const double host = h_us * 1e-6 * static_cast<double>(large);
    INFO(small << " and " << large << " sequences: GPU " << g << " s, host " << host << " s");
    const StepPlan serial = plan(spec("trtllm", h_us, false), small, large);
    CHECK(serial.total.seconds() == Approx(g + host).margin(1e-11));
    CHECK(serial.part(StepPart::kHost).seconds() == Approx(host).margin(1e-11));
    const StepPlan overlapped = plan(spec("trtllm", h_us, true), small, large);
    CHECK(overlapped.total.seconds() == Approx(std::max(g, host)).margin(1e-11));
    CHECK(overlapped.parts.sum() == overlapped.total);
    if (large == 16) CHECK(overlapped.part(StepPart::kHost) == Duration::zero());
    if (large == 256) CHECK(overlapped.part(StepPart::kHost).seconds() == Approx(host - g).margin(1e-11));
  }
}

TEST_CASE("engines without a host figure plan the same step with either overlap setting") {
  for (const std::string engine : {"vllm", "sglang", "pytorch_graph"}) {
    Json on = base(engine);
    Json off = base(engine);
    off["deployment"]["overlap_scheduler"] = false;
    const StepPlan a = plan(parse_scenario(on, "").spec, 32, 256);
    const StepPlan b = plan(parse_scenario(off, "").spec, 32, 256);
    CHECK(a.total == b.total);
    CHECK(a.part(StepPart::kHost) == Duration::zero());
  }
}

TEST_CASE("bad host settings name their key") {
  CHECK_THAT(error_of("host_us_per_sequence", -1), Catch::StartsWith("deployment.host_us_per_sequence"));
  CHECK_THAT(error_of("overlap_scheduler", "yes"), Catch::StartsWith("deployment.overlap_scheduler"));
}
