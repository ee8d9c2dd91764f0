// Every path through the step planner costs routed experts with the one expert cost (ExpertCost): the
// per-copy path of tiers and quantisation launches what the engine launches, as the plain path does.
#include <catch2/catch.hpp>
#include <string>
#include <vector>

#include "hwmodels/roofline_cost_model.h"
#include "sim/scenario/scenario_parser.h"
#include "sim/serving/step/serving_models.h"
#include "sim/serving/step/step_planner.h"

using namespace moesim;

namespace {

const std::string kReference =
    std::string(MOESIM_SOURCE_DIR) + "/scenarios/reference/deepseek_v3_2x8xh200_ep16_1h.json";

std::vector<GroupBatch> mixed_batches() {
  std::vector<GroupBatch> batches(16);
  for (GroupBatch& b : batches) {
    b.decode_seqs = 32;
    b.decode_context_tokens = 32.0 * 1200;
    b.sampled_seqs = 32;
  }
  batches[2].prefill_tokens = 1024;
  batches[2].prefill_pairs = 1024.0 * 512;
  batches[2].prefill_kv_tokens = 1024;
  return batches;
}

}  // namespace

TEST_CASE("quantising every expert to the model's own FP8 costs what no quantisation costs") {
  // DeepSeek-V3 is served in FP8: per-expert quantisation with FP8 for every class changes no copy, so each
  // step (same routing draws: the exact per-expert draw on both sides) costs the same, parts and weight bytes
  // included, with the engine's grouped launches and with a per-expert loop, with and without two-batch
  // overlap.
  for (const std::string engine : {"vllm", "pytorch_loop"}) {
    for (const bool tbo : {false, true}) {
      INFO(engine << (tbo ? ", two-batch overlap" : ""));
      std::vector<std::string> sets = {
          "deployment.engine=\"" + engine + "\"",
          std::string("deployment.two_batch_overlap=") + (tbo ? "true" : "false")};
      const LoadedScenario plain = load_scenario(kReference, sets);
      sets.emplace_back(R"(experts.quantization={"hot":"fp8","warm":"fp8","cold":"fp8"})");
      const LoadedScenario quant = load_scenario(kReference, sets);
      const RooflineCostModel gpu(plain.spec.cluster.gpu);
      const RandomStreams streams(3);
      const ServingModels plain_models(plain.spec, streams);
      const ServingModels quant_models(quant.spec, streams);
      auto a = plain_models.make_standalone(gpu, Rng(5));
      auto b = quant_models.make_standalone(gpu, Rng(5));
      a->set_binned_routing(false);
      const auto batches = mixed_batches();
      for (int step = 0; step < 40; ++step) {
        const StepPlan& pa = a.plan(batches, Time{});
        const std::vector<double> bytes_a(a->gpu_bytes().begin(), a->gpu_bytes().end());
        const StepPlan& pb = b.plan(batches, Time{});
        REQUIRE(pa.total == pb.total);
        REQUIRE(pa.part(StepPart::kExperts) == pb.part(StepPart::kExperts));
        for (std::size_t g = 0; g < bytes_a.size(); ++g) REQUIRE(b->gpu_bytes()[g] == Approx(bytes_a[g]));
      }
    }
  }
}

TEST_CASE("under tiers a grouped engine keeps its grouped launches") {
  // Tiers whose HBM holds every copy, every expert classed hot (pinned at setup): no copy is ever loaded, so
  // each step costs what the same draws cost without tiers, one grouped launch per rank (before, the per-copy
  // path replaced the engine's grouped launch by a loop of per-expert FFNs).
  const LoadedScenario plain = load_scenario(kReference, {});
  const LoadedScenario tiers =
      load_scenario(kReference, {R"(experts.tiers={"hbm_expert_gib":48,"cold_home":"host_dram"})",
                                 R"(experts.stats={"hot_share":1.0,"warm_share":1.0})"});
  const RooflineCostModel gpu(plain.spec.cluster.gpu);
  const RandomStreams streams(3);
  const ServingModels plain_models(plain.spec, streams);
  const ServingModels tier_models(tiers.spec, streams);
  auto a = plain_models.make_standalone(gpu, Rng(9));
  auto b = tier_models.make_standalone(gpu, Rng(9));
  a->set_binned_routing(false);
  const auto batches = mixed_batches();
  for (int step = 0; step < 60; ++step) {
    const Time now = Time::at(Duration::from_ms(100.0 * step));
    const StepPlan& pa = a.plan(batches, now);
    const Duration experts_a = pa.part(StepPart::kExperts);
    const Duration total_a = pa.total;
    const StepPlan& pb = b.plan(batches, now);
    REQUIRE(pb.host_loads + pb.nvme_loads == 0);
    REQUIRE(pb.expert_uses == pb.hbm_hits);
    REQUIRE(pb.part(StepPart::kExperts) == experts_a);
    REQUIRE(pb.total == total_a);
  }
}
