// Speculative decoding in the runtime (deployment.speculative): the tokens a run emits per verifying
// sequence-step against the expectation from the acceptance rates, and what a verify step costs.
#include <catch2/catch.hpp>
#include <cmath>
#include <fstream>
#include <string>
#include <vector>

#include "hwmodels/roofline_cost_model.h"
#include "sim/scenario/scenario_parser.h"
#include "sim/serving/features/speculative.h"
#include "sim/serving/runtime/serving_simulation.h"
#include "sim/serving/step/step_planner.h"

using namespace moesim;

namespace {

Json tiny_model() {
  std::ifstream f(std::string(MOESIM_SOURCE_DIR) + "/scenarios/tiny/tiny_model_closed_loop.json");
  return Json::parse(f);
}

Report run(const Json& j) {
  const LoadedScenario sc = parse_scenario(j, MOESIM_SOURCE_DIR);
  const RooflineCostModel gpu(sc.spec.cluster.gpu);
  return simulate(sc.spec, gpu);
}

}  // namespace

TEST_CASE("the tokens emitted per verifying sequence-step converge to 1 + sum of the prefix acceptances") {
  Json j = tiny_model();
  j["deployment"]["speculative"] =
      Json{{"draft_tokens", 3}, {"acceptance", {0.8, 0.7, 0.5}}, {"draft", "mtp"}};
  j["workload"]["output_tokens"]["tokens"] = 400;
  j["run"]["requests"] = 40;
  const Report r = run(j);
  REQUIRE(r.requests_finished == 40);
  REQUIRE(r.output_tokens == 40 * 400);  // accepted drafts never overshoot a request's output
  // E = 1 + 0.8 + 0.8 x 0.7 + 0.8 x 0.7 x 0.5 = 2.64; the variance of one draw from its distribution:
  // P(1) = 0.2, P(2) = 0.8 x 0.3 = 0.24, P(3) = 0.56 x 0.5 = 0.28, P(4) = 0.28.
  const double e = 1 + 0.8 + 0.56 + 0.28;
  const double var = 0.2 * 1 + 0.24 * 4 + 0.28 * 9 + 0.28 * 16 - e * e;
  SpeculativeSpec spec;
  spec.draft_tokens = 3;
  spec.acceptance = {0.8, 0.7, 0.5};
  REQUIRE(expected_tokens_per_step(spec) == Approx(e));
  const double n = static_cast<double>(r.speculative.sequence_steps);
  // Every decode step after the first token verifies: about output / E steps per request.
  REQUIRE(n > 40 * 399 / 4.0);
  CHECK(r.speculative.expected_tokens_per_step == Approx(e));
  CHECK(std::abs(r.speculative.mean_tokens_per_step - e) < 4.0 * std::sqrt(var / n));
  CHECK(r.speculative.measured_acceptance_rate == Approx((r.speculative.mean_tokens_per_step - 1) / 3));
  // Mean acceptance (E - 1) / k = 54.7% < 60%: the checklist alert.
  bool alert = false;
  for (const auto& a : r.alerts)
    alert = alert || a.find("speculative decoding accepts 54.7%") != std::string::npos;
  CHECK(alert);
}

TEST_CASE("speculative decoding with well-accepted drafts lowers TPOT and raises no alert") {
  Json j = tiny_model();
  j["workload"]["output_tokens"]["tokens"] = 200;
  const Report plain = run(j);
  j["deployment"]["speculative"] = "deepseek-v3-mtp";  // k = 1, 85% accepted
  const Report mtp = run(j);
  REQUIRE(mtp.speculative.enabled);
  CHECK(mtp.speculative.acceptance_rate == Approx(0.85));
  CHECK(mtp.tpot.mean < plain.tpot.mean);
  for (const auto& a : mtp.alerts) CHECK(a.find("speculative") == std::string::npos);
}

TEST_CASE("a decode step verifying one draft costs more than a plain step and less than two") {
  Json j = tiny_model();
  const ScenarioSpec plain_spec = parse_scenario(j, MOESIM_SOURCE_DIR).spec;
  j["deployment"]["speculative"] = "deepseek-v3-mtp";
  const ScenarioSpec mtp_spec = parse_scenario(j, MOESIM_SOURCE_DIR).spec;
  REQUIRE(mtp_spec.production.speculative);
  const RooflineCostModel gpu(plain_spec.cluster.gpu);
  const Fabric fabric(plain_spec.cluster.fabric);
  // Top-4 of 4 experts: routing is deterministic, so the two planners see the same expert work per token.
  const ExpertPopularity pop(PopularitySpec{}, 2, 4, 4, Rng(1));
  StepPlanner plain(plain_spec, gpu, fabric, pop, Rng(2));
  StepPlanner mtp(mtp_spec, gpu, fabric, pop, Rng(2));
  // 16 sequences with 99 tokens cached each: one token each, or the token and one draft (the draft
  // attends to 101 tokens).
  GroupBatch one{.decode_seqs = 16, .decode_context_tokens = 16 * 100.0, .sampled_seqs = 16};
  GroupBatch verify = one;
  verify.decode_draft_tokens = 16;
  verify.decode_draft_pairs = 16 * 101.0;
  verify.sampled_seqs = 32;
  const std::vector<GroupBatch> a{one};
  const std::vector<GroupBatch> b{verify};
  const Duration t1 = plain.plan(a, Time{}).total;
  const Duration tv = mtp.plan(b, Time{}).total;
  CHECK(tv > t1);
  CHECK(tv < t1 * 2);
}
