// Online expert statistics: EWMA arithmetic, hot/warm/cold by cumulative share, co-activation estimate.
#include "sim/serving/experts/expert_stats.h"

#include <catch2/catch.hpp>
#include <cmath>
#include <vector>

#include "sim/serving/experts/placement.h"

namespace moesim {

TEST_CASE("the expert EWMA starts at the first batch and forgets with alpha = 2 / (W + 1)") {
  ExpertStats stats(1, 2, 1, {.window_batches = 9});  // alpha = 0.2
  CHECK(stats.alpha() == Approx(0.2));
  const std::vector<std::int32_t> first = {100, 0};
  const std::vector<std::int32_t> next = {0, 50};
  stats.observe(0, first);
  CHECK(stats.load(0)[0] == Approx(100.0));
  for (int i = 0; i < 5; ++i) stats.observe(0, next);
  // After n batches of a new value v, the estimate is v + (old - v)(1 - alpha)^n.
  CHECK(stats.load(0)[0] == Approx(100.0 * std::pow(0.8, 5)));
  CHECK(stats.load(0)[1] == Approx(50.0 * (1.0 - std::pow(0.8, 5))));
  CHECK(stats.batches(0) == 6);
}

TEST_CASE("hot is the smallest set holding the hot share of load, warm the next up to the warm share") {
  ExpertStats stats(1, 6, 1, {.window_batches = 10, .hot_share = 0.8, .warm_share = 0.95});
  const std::vector<std::int32_t> counts = {5, 50, 2, 30, 10, 3};  // total 100
  stats.observe(0, counts);
  std::vector<Hotness> h(6);
  stats.classify(0, h);
  // Sorted: 50, 30 (cumulative 80% -> hot), 10, 5 (95% -> warm), 3, 2 cold.
  CHECK(h[1] == Hotness::kHot);
  CHECK(h[3] == Hotness::kHot);
  CHECK(h[4] == Hotness::kWarm);
  CHECK(h[0] == Hotness::kWarm);
  CHECK(h[5] == Hotness::kCold);
  CHECK(h[2] == Hotness::kCold);
}

TEST_CASE("the co-activation estimate equals the model's pair rate at exact loads") {
  const int n = 16;
  const int top_k = 4;
  const CoactivationModel model({.group_size = 4, .rho = 0.7}, 1, n, Rng(2));
  ExpertStats stats(1, n, model.groups(), {.window_batches = 100});
  // 64 tokens, uniform: 16 picks per expert and 16 home tokens per group, exactly the expectations.
  const std::vector<std::int32_t> counts(n, 16);
  const std::vector<std::int64_t> groups(static_cast<std::size_t>(model.groups()), 16);
  stats.observe(0, counts);
  stats.observe_groups(0, groups);
  std::vector<double> full(n * n);
  std::vector<double> grouped(n * n);
  std::vector<double> affinity(n * n);
  stats.coactivation(0, model, top_k, false, full);
  stats.coactivation(0, model, top_k, true, grouped);
  const std::vector<double> p(n, 1.0 / n);
  coactivation_affinity(model, 0, p, top_k, affinity);
  for (int a = 0; a < n; ++a) {
    for (int b = 0; b < n; ++b) {
      if (a == b) continue;
      const auto i = static_cast<std::size_t>(a * n + b);
      CHECK(full[i] == Approx(model.pair_rate(0, p, top_k, a, b)));
      CHECK(grouped[i] == Approx(affinity[i]).margin(1e-12));
    }
  }
}

}  // namespace moesim
