// The expert load distributions of report.json (expert_load.rank_share_of_mean, layer_max_over_mean):
// exact where every token routes to every expert, spread where popularity is skewed.
#include <algorithm>
#include <catch2/catch.hpp>
#include <cmath>
#include <string>

#include "hwmodels/roofline_cost_model.h"
#include "sim/scenario/scenario_parser.h"
#include "sim/serving/runtime/serving_simulation.h"

using namespace moesim;

namespace {
// 4 GPUs (EP4), 8 experts of hidden 1024; `top_k` of them per token.
Report run(int top_k, const std::string& popularity, int hidden = 1024, int prompt = 64) {
  Json j = Json::parse(R"({
    "model": {"num_layers": 4, "hidden": 1024, "vocab": 1000, "attention": "gqa", "num_heads": 8,
              "num_kv_heads": 8, "head_dim": 128, "routed_experts": 8, "expert_inter": 512},
    "cluster": {"gpu": "h100-sxm", "nodes": 1, "gpus_per_node": 4},
    "deployment": {"ep_size": 4, "max_batched_tokens": 4096},
    "workload": {"arrival": {"kind": "poisson", "rate_per_s": 50},
                 "prompt_tokens": {"kind": "fixed", "tokens": 64}, "output_tokens": {"kind": "fixed", "tokens": 16}},
    "run": {"requests": 400, "seed": 3}})");
  j["model"]["top_k"] = top_k;
  j["model"]["hidden"] = hidden;
  j["workload"]["prompt_tokens"]["tokens"] = prompt;
  j["workload"]["expert_popularity"] = Json::parse(popularity);
  const ScenarioSpec s = parse_scenario(j, "").spec;
  const RooflineCostModel gpu(s.cluster.gpu);
  return simulate(s, gpu);
}
}  // namespace

TEST_CASE("every token on every expert: every rank carries the mean and every layer is balanced") {
  const Report r = run(8, R"({"kind": "uniform"})");
  // A ratio of exactly 1 is read back within the histogram's bucket (1.2%); the mean is exact.
  CHECK(r.rank_load_share.mean == Approx(1.0).epsilon(1e-12));
  CHECK(r.rank_load_share.p50 == Approx(1.0).epsilon(0.012));
  CHECK(r.rank_load_share.max == Approx(1.0).epsilon(1e-12));
  CHECK(r.layer_max_over_mean.max == Approx(1.0).epsilon(1e-12));
  CHECK(r.layer_max_over_mean.mean == Approx(r.gpu_load_imbalance).epsilon(1e-9));
}

TEST_CASE("skewed popularity spreads the per-rank shares around a mean of one") {
  const Report r = run(2, R"({"kind": "zipf", "exponent": 1.5})");
  CHECK(r.rank_load_share.mean == Approx(1.0).epsilon(1e-12));  // shares of their own mean
  CHECK(r.rank_load_share.max > 1.2);
  // Zipf 1.5 over 8 experts gives the hottest 1 / (1 + 2^-1.5 + ... + 8^-1.5) = 0.519 of the pairs, so
  // whichever of the 4 ranks holds it carries at least 4 x 0.519 = 2.08 of the mean in expectation; a
  // layer's largest rank is at most all of it (4).
  CHECK(r.layer_max_over_mean.p50 > 1.5);
  INFO("layer max/mean " << r.layer_max_over_mean.mean);
  CHECK(r.layer_max_over_mean.mean == Approx(2.08).margin(0.6));
  CHECK(r.layer_max_over_mean.max <= 4.0 + 1e-9);
}

// report.json all_to_all: milliseconds per step by MoE layer and by GPU, before overlap hides any.
TEST_CASE("every token on every expert: every GPU's All-to-All is the collective's, none the slowest") {
  const Report r = run(8, R"({"kind": "uniform"})");
  REQUIRE(r.all_to_all.size() == 1);
  const AllToAllReport& a = r.all_to_all[0];
  REQUIRE(a.layer_dispatch_ms.size() == 4);  // 4 layers, all MoE
  REQUIRE(a.gpu_dispatch_ms.size() == 4);
  double dispatch = 0;
  double combine = 0;
  for (std::size_t i = 0; i < a.layer_dispatch_ms.size(); ++i) {
    dispatch += a.layer_dispatch_ms[i];
    combine += a.layer_combine_ms[i];
  }
  // Each GPU sends and receives the same, so each one's own time in every collective is the collective's.
  for (std::size_t g = 0; g < 4; ++g) {
    CHECK(a.gpu_dispatch_ms[g] == Approx(dispatch).epsilon(1e-9));
    CHECK(a.gpu_combine_ms[g] == Approx(combine).epsilon(1e-9));
    CHECK(a.gpu_slowest_share[g] == Approx(0.25).epsilon(1e-12));
  }
}

TEST_CASE("the All-to-All by layer adds up to the step's exposed dispatch and combine without overlap") {
  const Report r = run(2, R"({"kind": "zipf", "exponent": 1.5})");
  REQUIRE(r.all_to_all.size() == 1);
  const AllToAllReport& a = r.all_to_all[0];
  CHECK(a.steps == r.steps);
  double layers = 0;
  double dispatch = 0;
  for (std::size_t i = 0; i < a.layer_dispatch_ms.size(); ++i) {
    layers += a.layer_dispatch_ms[i] + a.layer_combine_ms[i];
    dispatch += a.layer_dispatch_ms[i];
  }
  // Without two-batch overlap every collective is on the critical path: the step parts' dispatch and
  // combine, accumulated separately, are the same time.
  CHECK(layers == Approx(r.all_to_all_share() * r.mean_step_s * 1e3).epsilon(1e-9));
  CHECK(dispatch == Approx(r.share(StepPart::kDispatch) * r.mean_step_s * 1e3).epsilon(1e-9));
  // Each collective's slowest GPUs share it: the shares add up to one.
  double shares = 0;
  double top = 0;
  for (std::size_t g = 0; g < a.gpu_dispatch_ms.size(); ++g) {
    shares += a.gpu_slowest_share[g];
    top = std::max(top, a.gpu_slowest_share[g]);
  }
  CHECK(shares == Approx(1.0).epsilon(1e-12));
  CHECK(top >= 0.25);
}

TEST_CASE("under skew, with data beyond the kernels' floors, the GPUs holding hot experts are the slowest") {
  // 2,048-token prompts of hidden 7,168: a layer's dispatch moves megabytes, far above the floors. The
  // hottest of 8 experts takes 0.519 of the pairs (Zipf 1.5), so its GPU receives about twice the mean
  // and is the slowest of that layer's collective, whichever GPU it is on.
  const Report r = run(2, R"({"kind": "zipf", "exponent": 1.5})", 7168, 2048);
  REQUIRE(r.all_to_all.size() == 1);
  const AllToAllReport& a = r.all_to_all[0];
  double dispatch = 0;
  for (const double x : a.layer_dispatch_ms) dispatch += x;
  double top = 0;
  double own_min = HUGE_VAL;
  for (std::size_t g = 0; g < a.gpu_dispatch_ms.size(); ++g) {
    top = std::max(top, a.gpu_slowest_share[g]);
    own_min = std::min(own_min, a.gpu_dispatch_ms[g]);
  }
  INFO("largest slowest share " << top << ", least loaded GPU's dispatch " << own_min << " of " << dispatch);
  CHECK(top > 0.25);                // more than an even share of the collectives
  CHECK(own_min < dispatch * 0.9);  // some GPU waits on the hot one
}
