// run.moe_layer_sample: a step costs a systematic sample of its MoE layers, each weighted by layers /
// sample (StepPlanner::choose_layers). Checked against the plan that costs every layer.
#include <catch2/catch.hpp>
#include <cmath>
#include <string>
#include <vector>

#include "hwmodels/roofline_cost_model.h"
#include "sim/scenario/scenario_parser.h"
#include "sim/serving/step/serving_models.h"
#include "tests/scenario/parse_error.h"

using namespace moesim;

namespace {

Json spec_json(int experts, int top_k, const std::string& popularity, bool tbo) {
  Json j = Json::parse(R"({
    "model": {"num_layers": 10, "hidden": 1024, "vocab": 1000, "attention": "gqa", "num_heads": 8,
              "num_kv_heads": 8, "head_dim": 128, "routed_experts": 8, "top_k": 8, "expert_inter": 512},
    "cluster": {"gpu": "h100-sxm", "nodes": 1, "gpus_per_node": 4},
    "deployment": {"ep_size": 4, "attention": {"dp": 4, "tp": 1}, "max_batched_tokens": 1024},
    "workload": {"arrival": {"kind": "poisson", "rate_per_s": 1},
                 "prompt_tokens": {"kind": "fixed", "tokens": 8}, "output_tokens": {"kind": "fixed", "tokens": 8}},
    "run": {"requests": 1}})");
  j["model"]["routed_experts"] = experts;
  j["model"]["top_k"] = top_k;
  j["workload"]["expert_popularity"] = Json::parse(popularity);
  j["deployment"]["two_batch_overlap"] = tbo;
  return j;
}

ScenarioSpec spec(const Json& j, int sample) {
  Json k = j;
  k["run"]["moe_layer_sample"] = sample;
  return parse_scenario(k, "").spec;
}

std::vector<GroupBatch> decode(std::int64_t seqs) {
  GroupBatch b;
  b.decode_seqs = seqs;
  b.decode_context_tokens = static_cast<double>(seqs) * 500;
  b.sampled_seqs = seqs;
  return {b, b, b, b};
}

struct Planned {
  ScenarioSpec s;
  RooflineCostModel gpu;
  ServingModels models;
  StandalonePlanner p;
  explicit Planned(ScenarioSpec spec)
      : s(std::move(spec)),
        gpu(s.cluster.gpu),
        models(s, RandomStreams(7)),
        p(models.make_standalone(gpu, Rng(11))) {}
};

}  // namespace

TEST_CASE("every token on every expert: a sampled step costs what the whole step does") {
  // Top-8 of 8 experts: every layer's routing and so its cost is the same and certain, so the weighted sum
  // of any 3 layers (weight 10 / 3) is the sum of all 10, to the picosecond each part is rounded to.
  for (const bool tbo : {false, true}) {
    INFO("two-batch overlap " << tbo);
    const Json j = spec_json(8, 8, R"({"kind": "uniform"})", tbo);
    Planned all(spec(j, 0));
    Planned some(spec(j, 3));
    const auto batch = decode(24);
    const StepPlan a = all.p.plan(batch, Time::zero());
    const StepPlan b = some.p.plan(batch, Time::zero());
    REQUIRE(some.p.planner->costed_layers().size() == 3);
    REQUIRE(all.p.planner->costed_layers().size() == 10);
    for (std::size_t i = 0; i < kStepParts; ++i) {
      INFO("part " << i);
      CHECK(std::abs(a.parts.d[i].ps() - b.parts.d[i].ps()) <= 1);
    }
    CHECK(std::abs(a.total.ps() - b.total.ps()) <= static_cast<std::int64_t>(kStepParts));
    CHECK(std::abs(a.comm_hidden.ps() - b.comm_hidden.ps()) <= 1);
    CHECK(b.dispatch_nvlink_bytes == Approx(a.dispatch_nvlink_bytes).epsilon(1e-12));
    for (int g = 0; g < 4; ++g) {
      CHECK(some.p.planner->gpu_busy_s()[g] == Approx(all.p.planner->gpu_busy_s()[g]).epsilon(1e-9));
      CHECK(some.p.planner->gpu_flops()[g] == Approx(all.p.planner->gpu_flops()[g]).epsilon(1e-12));
      CHECK(some.p.planner->rank_pairs()[g] == Approx(all.p.planner->rank_pairs()[g]).epsilon(1e-12));
    }
  }
}

TEST_CASE("systematic sampling takes each MoE layer with probability sample / layers") {
  Planned some(spec(spec_json(8, 2, R"({"kind": "zipf", "exponent": 1.2})", false), 3));
  const auto batch = decode(8);
  std::vector<int> taken(10, 0);
  constexpr int kSteps = 20000;
  for (int i = 0; i < kSteps; ++i) {
    (void)some.p.plan(batch, Time::zero());
    const auto layers = some.p.planner->costed_layers();
    REQUIRE(layers.size() == 3);
    for (std::size_t k = 1; k < layers.size(); ++k) CHECK(layers[k] > layers[k - 1]);  // spread, distinct
    for (const int l : layers) ++taken[static_cast<std::size_t>(l)];
  }
  // Each step takes layer l with probability 3 / 10, independently of other steps: a binomial count with
  // mean 6,000 and sd sqrt(20,000 x 0.3 x 0.7) = 64.8; 5 sd either way.
  for (int l = 0; l < 10; ++l) {
    INFO("layer " << l);
    CHECK(std::abs(taken[static_cast<std::size_t>(l)] - 6000) < 5 * 64.8);
  }
}

TEST_CASE("a sampled step's expected time is the whole step's under skewed routing") {
  // Zipf routing over 8 experts top-2 on 4 GPUs: layers differ (each its own permutation of popularity)
  // and each is random. The means of 4,000 plans each, sampled (3 of 10 layers) and whole, differ by less
  // than 4 standard errors of their difference (the sampled one's spread is the larger).
  const Json j = spec_json(8, 2, R"({"kind": "zipf", "exponent": 1.2})", false);
  Planned all(spec(j, 0));
  Planned some(spec(j, 3));
  const auto batch = decode(16);
  auto moments = [&](Planned& x) {
    double sum = 0;
    double sq = 0;
    constexpr int kPlans = 4000;
    for (int i = 0; i < kPlans; ++i) {
      const double t = x.p.plan(batch, Time::zero()).total.seconds();
      sum += t;
      sq += t * t;
    }
    const double mean = sum / kPlans;
    return std::pair{mean, (sq / kPlans - mean * mean) / (kPlans - 1)};  // the mean's variance
  };
  const auto [mean_all, var_all] = moments(all);
  const auto [mean_some, var_some] = moments(some);
  INFO("whole " << mean_all << ", sampled " << mean_some);
  CHECK(std::abs(mean_all - mean_some) < 4 * std::sqrt(var_all + var_some));
  CHECK(var_some > var_all);  // fewer layers drawn: a noisier step
}

TEST_CASE("layer sampling is refused where per-layer state or the pipeline needs every layer") {
  Json j = spec_json(8, 2, R"({"kind": "uniform"})", false);
  j["run"]["moe_layer_sample"] = 11;
  CHECK(parse_error_of(j).rfind("run.moe_layer_sample", 0) == 0);  // 10 MoE layers
  j["run"]["moe_layer_sample"] = -1;
  CHECK(parse_error_of(j).rfind("run.moe_layer_sample", 0) == 0);
  j["run"]["moe_layer_sample"] = 4;
  CHECK(parse_error_of(j).empty());
  Json loop = j;
  loop["experts"] = Json{{"placement", "round_robin"}};
  CHECK(parse_error_of(loop).rfind("run.moe_layer_sample: cannot sample layers while an experts-in-the-loop",
                                   0) == 0);
  Json pipeline = j;
  pipeline["deployment"]["pipeline"] = Json{{"stages", 2}};
  pipeline["deployment"]["ep_size"] = 2;
  pipeline["deployment"]["attention"] = Json{{"dp", 2}, {"tp", 1}};
  INFO(parse_error_of(pipeline));
  CHECK(parse_error_of(pipeline).rfind("run.moe_layer_sample: cannot sample layers under pipeline", 0) == 0);
}
