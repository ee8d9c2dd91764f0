// The autoscaling planner on hand-built states: its predictors, the instances a pool needs, the GPU budget
// shared between pools, and the schedule of decisions over a stepped load, computed by hand below.
#include "sim/serving/runtime/autoscaler.h"

#include <catch2/catch.hpp>
#include <vector>

using namespace moesim;

namespace {

// One colocated pool of 1 to 8 instances of 8 GPUs, 10 req/s each, within its SLA, nothing queued.
PoolObservation calm_pool(double rate) {
  return PoolObservation{.role = PoolRole::kBoth,
                         .active = 1,
                         .min_instances = 1,
                         .max_instances = 8,
                         .gpus_per_instance = 8,
                         .capacity_req_per_s = 10,
                         .arrival_rate_per_s = rate,
                         .ttft_p_s = 0.5,
                         .tpot_p_s = 0.05};
}

AutoscaleView view_of(std::span<const PoolObservation> pools) {
  return AutoscaleView{.pools = pools, .interval_s = 60, .gpu_budget = 0, .sla_ttft_s = 2, .sla_tpot_s = 0.1};
}

// The targets of a planner fed the stepped load, one interval after another.
std::vector<int> schedule(PredictorSpec spec, const std::vector<double>& rates) {
  Autoscaler planner(spec, 1);
  std::vector<int> out;
  for (const double r : rates) {
    const PoolObservation p = calm_pool(r);
    out.push_back(planner.decide(view_of(std::span(&p, 1))).front());
  }
  return out;
}

// 5 req/s for two intervals, a step to 25 for three, down to 12 for two, back to 5.
const std::vector<double> kSteps = {5, 5, 25, 25, 25, 12, 12, 5};

}  // namespace

TEST_CASE("the last-interval planner follows a stepped load one interval late") {
  // Target = ceil(rate / 10): 5 -> 1, 25 -> 3, 12 -> 2.
  CHECK(schedule({.kind = PredictorKind::kLast}, kSteps) == std::vector<int>{1, 1, 3, 3, 3, 2, 2, 1});
}

TEST_CASE("the moving-average planner smooths a stepped load") {
  // Means of the last three rates: 5, 5, 35/3 = 11.67, 55/3 = 18.33, 25, 62/3 = 20.67, 49/3 = 16.33,
  // 29/3 = 9.67; over 10 req/s per instance, rounded up: 1, 1, 2, 2, 3, 3, 2, 1.
  CHECK(schedule({.kind = PredictorKind::kMovingAverage, .window = 3}, kSteps) ==
        std::vector<int>{1, 1, 2, 2, 3, 3, 2, 1});
}

TEST_CASE("Holt's smoothing forecasts the trend of a stepped load") {
  // alpha = beta = 0.5; l1 = 5, b1 = 0. Forecasts l + b after each rate:
  //  5: l 5, b 0 -> 5              25: l 22.5, b 6.25 -> 28.75        12: l 22.09375, b 0.265625 -> 22.359375
  //  5: l 5, b 0 -> 5              25: l 26.875, b 5.3125 -> 32.1875  12: l 17.1796875, b -2.32421875
  // 25: l 15, b 5 -> 20                                                   -> 14.85546875
  //  5: l 9.927734375, b -4.7880859375 -> 5.1396484375
  // Targets (ceil of forecast / 10): 1, 1, 2, 3, 4, 3, 2, 1: ahead of the step up, one interval later down.
  const PredictorSpec holt{.kind = PredictorKind::kHolt, .alpha = 0.5, .beta = 0.5};
  CHECK(schedule(holt, kSteps) == std::vector<int>{1, 1, 2, 3, 4, 3, 2, 1});
  LoadPredictor p(holt);
  const std::vector<double> forecasts = {5, 5, 20, 28.75, 32.1875, 22.359375, 14.85546875, 5.1396484375};
  for (std::size_t i = 0; i < kSteps.size(); ++i) {
    p.observe(kSteps[i]);
    CHECK(p.predict() == Approx(forecasts[i]).epsilon(1e-12));
  }
}

TEST_CASE("a predictor with nothing observed predicts no load, and Holt never predicts a negative rate") {
  CHECK(LoadPredictor({.kind = PredictorKind::kMovingAverage}).predict() == 0);
  LoadPredictor p({.kind = PredictorKind::kHolt, .alpha = 1, .beta = 1});
  p.observe(30);
  p.observe(0);  // l = 0, b = -30: the forecast -30 is clamped
  CHECK(p.predict() == 0);
}

TEST_CASE("a pool over its SLA scales its need by the overrun and never shrinks") {
  PoolObservation p = calm_pool(20);  // 2 instances' worth
  p.active = 3;
  const AutoscaleView v = view_of(std::span(&p, 1));
  CHECK(instances_needed(p, 20, v) == 2);  // within the SLA: shrinks to 2
  p.ttft_p_s = 3;                          // 1.5x the 2 s limit: 20 x 1.5 = 30 req/s -> 3
  CHECK(instances_needed(p, 20, v) == 3);
  p.ttft_p_s = 0.5;
  p.tpot_p_s = 0.25;  // 2.5x the 100 ms limit: 50 req/s -> 5
  CHECK(instances_needed(p, 20, v) == 5);
  p.tpot_p_s = 0.05;
  p.kv_used_share = 0.95;  // KV pressure: holds the 3 it runs
  CHECK(instances_needed(p, 5, v) == 3);
}

TEST_CASE("a backlog is served within one interval and the bounds hold") {
  PoolObservation p = calm_pool(10);
  p.queued = 1200;  // 1200 / 60 s = 20 req/s more: 30 -> 3
  const AutoscaleView v = view_of(std::span(&p, 1));
  CHECK(instances_needed(p, 10, v) == 3);
  CHECK(instances_needed(p, 1000, v) == 8);  // max
  p.queued = 0;
  p.min_instances = 2;
  CHECK(instances_needed(p, 0, v) == 2);  // min
}

TEST_CASE("the GPU budget is shared one instance at a time, pool after pool, from the minimums") {
  // Prefill instances of 8 GPUs, decode instances of 16; both want 3 (25 req/s at 10 each).
  std::vector<PoolObservation> pools = {calm_pool(25), calm_pool(25)};
  pools[0].role = PoolRole::kPrefill;
  pools[1].role = PoolRole::kDecode;
  pools[1].gpus_per_instance = 16;
  AutoscaleView v = view_of(pools);
  const std::vector<double> predicted = {25, 25};
  // Unbounded: 3 and 3.
  CHECK(plan_instances(v, predicted) == std::vector<int>{3, 3});
  // 48 GPUs: minimums 8 + 16 = 24; round one 2 (32) and 2 (48); round two neither fits: 2 and 2.
  v.gpu_budget = 48;
  CHECK(plan_instances(v, predicted) == std::vector<int>{2, 2});
  // 56 GPUs: after round one (48) prefill's third fits (56), decode's third does not: 3 and 2.
  v.gpu_budget = 56;
  CHECK(plan_instances(v, predicted) == std::vector<int>{3, 2});
}

TEST_CASE("a capacity in tokens per second is sized into requests by the observed tokens per request") {
  PoolObservation p = calm_pool(5);
  p.role = PoolRole::kDecode;
  p.capacity_req_per_s = 0;
  p.capacity_tokens_per_s = 6000;  // output tokens per second of one decode instance
  p.active = 2;
  const AutoscaleView v = view_of(std::span(&p, 1));
  // Nothing finished yet: no capacity known, the pool holds what it runs.
  CHECK(instance_capacity_req_per_s(p) == 0);
  CHECK(instances_needed(p, 5, v) == 2);
  // Long outputs (3,000 tokens): 2 req/s per instance, 5 req/s -> ceil(2.5) = 3.
  p.tokens_per_request = 3000;
  CHECK(instance_capacity_req_per_s(p) == 2);
  CHECK(instances_needed(p, 5, v) == 3);
  // Short ones (750 tokens): 8 req/s per instance, 5 req/s -> 1.
  p.tokens_per_request = 750;
  CHECK(instances_needed(p, 5, v) == 1);
  // A request rate, when given, is the capacity whatever the lengths.
  p.capacity_req_per_s = 10;
  CHECK(instance_capacity_req_per_s(p) == 10);
}

TEST_CASE("a decode pool over the TTFT limit by its own part of it scales by the overrun") {
  PoolObservation p = calm_pool(20);
  p.role = PoolRole::kDecode;
  p.active = 2;
  const AutoscaleView v = view_of(std::span(&p, 1));
  CHECK(instances_needed(p, 20, v) == 2);
  // Its admission queue holds the first token 4 s against the 2 s limit: 20 x 2 = 40 req/s -> 4.
  p.ttft_p_s = 4;
  CHECK(instances_needed(p, 20, v) == 4);
}

TEST_CASE("a full KV cache with requests waiting grows the pool by one, without them it holds") {
  PoolObservation p = calm_pool(5);  // half an instance's worth of requests
  p.role = PoolRole::kDecode;
  p.active = 2;
  p.loading = 1;
  const AutoscaleView v = view_of(std::span(&p, 1));
  p.kv_used_share = 0.95;
  CHECK(instances_needed(p, 5, v) == 3);  // holds the 2 it runs and the 1 it loads
  p.queued = 6;                           // 6 / 60 s adds 0.1 req/s: the rate alone still wants 1
  CHECK(instances_needed(p, 5, v) == 4);
  p.kv_used_share = 0.5;  // waiting without memory pressure: the rate decides (5.1 / 10 -> 1)
  CHECK(instances_needed(p, 5, v) == 1);
  p.kv_used_share = 0.95;
  p.max_instances = 3;  // the bound holds
  CHECK(instances_needed(p, 5, v) == 3);
}

TEST_CASE("a decode pool's part of the TTFT is held to what the prefill pool's part leaves of the limit") {
  std::vector<PoolObservation> pools = {calm_pool(10), calm_pool(10)};  // one instance's worth each
  pools[0].role = PoolRole::kPrefill;
  pools[1].role = PoolRole::kDecode;
  pools[0].ttft_p_s = 1.5;  // of the 2 s limit: 0.5 s left for the decode pool's part
  pools[1].ttft_p_s = 1.0;  // within 2 s alone, twice its 0.5 s: 10 x 2 = 20 req/s -> 2
  AutoscaleView v = view_of(pools);
  const std::vector<double> predicted = {10, 10};
  CHECK(plan_instances(v, predicted) == std::vector<int>{1, 2});
  // The prefill pool alone over the limit (3 s, 1.5x: 15 req/s -> 2): the decode pool is held to the whole
  // limit, within it.
  pools[0].ttft_p_s = 3.0;
  v = view_of(pools);
  CHECK(plan_instances(v, predicted) == std::vector<int>{2, 1});
}
