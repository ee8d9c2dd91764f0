// The expert load distributions of report.json (expert_load.rank_share_of_mean, layer_max_over_mean):
// exact where every token routes to every expert, spread where popularity is skewed.
#include <catch2/catch.hpp>
#include <string>

#include "hwmodels/roofline_cost_model.h"
#include "sim/scenario/scenario_parser.h"
#include "sim/serving/serving_simulation.h"

using namespace moesim;

namespace {
// 4 GPUs (EP4), 8 experts of hidden 1024; `top_k` of them per token.
Report run(int top_k, const std::string& popularity) {
  Json j = Json::parse(R"({
    "model": {"num_layers": 4, "hidden": 1024, "vocab": 1000, "attention": "gqa", "num_heads": 8,
              "num_kv_heads": 8, "head_dim": 128, "routed_experts": 8, "expert_inter": 512},
    "cluster": {"gpu": "h100-sxm", "nodes": 1, "gpus_per_node": 4},
    "deployment": {"ep_size": 4, "max_batched_tokens": 4096},
    "workload": {"arrival": {"kind": "poisson", "rate_per_s": 50},
                 "prompt_tokens": {"kind": "fixed", "tokens": 64}, "output_tokens": {"kind": "fixed", "tokens": 16}},
    "run": {"requests": 400, "seed": 3}})");
  j["model"]["top_k"] = top_k;
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
