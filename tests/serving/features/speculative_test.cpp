// Speculative decoding / MTP: expected tokens per step from the acceptance rates, the sampler against it
// within a confidence interval from the exact variance, the verify width and the 60% checklist alert.
#include "sim/serving/features/speculative.h"

#include <catch2/catch.hpp>
#include <cmath>
#include <vector>

namespace moesim {
namespace {

SpeculativeSpec spec(int k, std::vector<double> acceptance) {
  SpeculativeSpec s;
  s.draft_tokens = k;
  s.acceptance = std::move(acceptance);
  return s;
}

}  // namespace

TEST_CASE("expected tokens per step are one plus the products of the conditional acceptances") {
  const SpeculativeSpec s = spec(3, {0.8, 0.7, 0.5});
  CHECK(expected_tokens_per_step(s) == Approx(1 + 0.8 + 0.8 * 0.7 + 0.8 * 0.7 * 0.5));
  CHECK(prefix_acceptance(s, 0) == 1.0);
  CHECK(prefix_acceptance(s, 2) == Approx(0.56));
  CHECK(verify_positions_per_sequence(s) == 4);
  // DeepSeek-V3 MTP (one draft token accepted 85% of the time): 1.85 tokens per step.
  const SpeculativeSpec mtp = spec(1, {0.85});
  CHECK(expected_tokens_per_step(mtp) == Approx(1.85));
  // One draft token: the count is 1 + Bernoulli(a), variance a (1 - a).
  CHECK(tokens_per_step_variance(mtp) == Approx(0.85 * 0.15));
}

TEST_CASE("the sampled tokens per step have the expected mean and distribution") {
  const SpeculativeSpec s = spec(3, {0.9, 0.6, 0.4});
  Rng rng(11);
  const int n = 200000;
  std::vector<int> count(5, 0);
  double sum = 0;
  for (int i = 0; i < n; ++i) {
    const int t = sample_tokens_per_step(s, rng);
    REQUIRE(t >= 1);
    REQUIRE(t <= 4);
    ++count[static_cast<std::size_t>(t)];
    sum += t;
  }
  const double e = expected_tokens_per_step(s);
  const double var = tokens_per_step_variance(s);
  CHECK(std::abs(sum / n - e) < 4.0 * std::sqrt(var / n));
  // P(N = 1 + m) = a_1 ... a_m (1 - a_{m+1}); P(N = 4) = a_1 a_2 a_3.
  const std::vector<double> p{0.1, 0.9 * 0.4, 0.9 * 0.6 * 0.6, 0.9 * 0.6 * 0.4};
  for (std::size_t m = 0; m < p.size(); ++m) {
    const double f = double(count[m + 1]) / n;
    CHECK(std::abs(f - p[m]) < 4.0 * std::sqrt(p[m] * (1 - p[m]) / n));
  }
}

TEST_CASE("the checklist alert fires when the mean acceptance is below 60 percent") {
  const SpeculativeSpec good = spec(1, {0.85});
  const SpeculativeSpec poor = spec(2, {0.7, 0.5});  // (0.7 + 0.35) / 2 = 0.525
  CHECK_FALSE(acceptance_below_alert(good));
  CHECK(mean_acceptance_rate(poor) == Approx(0.525));
  CHECK(acceptance_below_alert(poor));
}

}  // namespace moesim
