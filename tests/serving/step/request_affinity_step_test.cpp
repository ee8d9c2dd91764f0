// Per-request expert affinity in the step planner: a decode step of one-token requests draws from the
// population law (the same plan with the key on or off), a prefill step of a few long prompts from a law of
// its own, drawn expert by expert in every layer.
#include <catch2/catch.hpp>
#include <vector>

#include "hwmodels/roofline_cost_model.h"
#include "sim/scenario/scenario_parser.h"
#include "sim/serving/step/step_planner.h"
#include "tests/support/toy_moe.h"

using namespace moesim;

namespace {

ScenarioSpec toy_spec(double affinity_sd) {
  Json j = moesim_test::toy_run({.experts = 32, .top_k = 2});
  j["deployment"]["max_batched_tokens"] = 4096;
  if (affinity_sd > 0) {
    j["workload"]["expert_popularity"] = Json{{"kind", "uniform"}, {"request_affinity_sd", affinity_sd}};
  }
  return parse_scenario(j, "").spec;
}

struct Planned {
  std::vector<double> totals;
  double imbalance = 0;  // mean over steps of the mean over layers of max / mean pairs per GPU
  bool measured = true;  // every step measured its expert imbalance (every layer drawn exactly)
};

Planned plan_steps(const ScenarioSpec& s, const std::vector<GroupBatch>& groups, int steps) {
  const RooflineCostModel gpu(s.cluster.gpu);
  const Fabric fabric(s.cluster.fabric);
  const ExpertPopularity pop(s.workload.popularity, s.model.moe_layers(), s.model.routed_experts,
                             s.model.top_k, Rng(1));
  StepPlanner planner(s, gpu, fabric, pop, Rng(2));
  Planned out;
  for (int i = 0; i < steps; ++i) {
    const StepPlan& p = planner.plan(groups, Time{});
    out.totals.push_back(p.total.seconds());
    out.imbalance += p.gpu_imbalance / steps;
    out.measured = out.measured && p.expert_imbalance_measured;
  }
  return out;
}

}  // namespace

TEST_CASE("a decode step of one-token requests is the same plan with per-request affinity on") {
  GroupBatch decode{.decode_seqs = 64, .decode_context_tokens = 64 * 600.0, .sampled_seqs = 64};
  const std::vector<GroupBatch> groups(8, decode);
  REQUIRE(decode.request_token_pairs == 0);
  const Planned off = plan_steps(toy_spec(0), groups, 20);
  const Planned on = plan_steps(toy_spec(1.5), groups, 20);
  REQUIRE(on.totals == off.totals);
}

TEST_CASE("a prefill step of one prompt per group is skewed beyond the population law") {
  // One 512-token prompt per attention group: sum_r t_r (t_r - 1) = 8 x 512 x 511 over T = 4,096 tokens.
  const double c = 512;
  GroupBatch prefill{.prefill_tokens = 512,
                     .prefill_pairs = c * (c + 1) / 2,
                     .prefill_kv_tokens = c,
                     .sampled_seqs = 1,
                     .request_token_pairs = c * (c - 1)};
  const std::vector<GroupBatch> groups(8, prefill);
  const Planned off = plan_steps(toy_spec(0), groups, 200);
  const Planned on = plan_steps(toy_spec(1.0), groups, 200);
  // Each GPU holds 4 of the 32 experts, 1,024 pairs on average. Without affinity a GPU's pairs are near
  // multinomial (sd about sqrt(1024) = 32, 3%), with it each expert's step weight has relative sd
  // sqrt(exp(s^2) - 1) = sqrt((e - 1) x 511 / 4095) = 0.46, a GPU's about 0.46 / 2: the busiest of 8 GPUs
  // is well above the mean (about 1.3x), far beyond the multinomial's few per cent.
  INFO("max/mean pairs per GPU: off " << off.imbalance << ", on " << on.imbalance);
  CHECK(off.imbalance < 1.1);
  CHECK(on.imbalance > 1.2);
  CHECK(on.measured);  // drawn expert by expert in every layer: the binned tables hold the population law
}

TEST_CASE("a prefill step under per-request affinity is the same plan for the same seeds, with overlap too") {
  const double c = 512;
  GroupBatch prefill{.prefill_tokens = 512,
                     .prefill_pairs = c * (c + 1) / 2,
                     .prefill_kv_tokens = c,
                     .sampled_seqs = 1,
                     .request_token_pairs = c * (c - 1)};
  const std::vector<GroupBatch> groups(8, prefill);
  ScenarioSpec s = toy_spec(1.0);
  for (const bool tbo : {false, true}) {
    s.deployment.two_batch_overlap = tbo;
    const Planned a = plan_steps(s, groups, 20);
    const Planned b = plan_steps(s, groups, 20);
    REQUIRE(a.totals == b.totals);
    CHECK(a.imbalance > 1.2);  // as in the test above: the step law's skew, split over two micro-batches
  }
}
