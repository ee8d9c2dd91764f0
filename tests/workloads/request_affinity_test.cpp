// Per-request expert affinity (workloads/request_affinity.h): the step law's log-sd from the step's requests,
// and the counts it draws against an explicit simulation of every request's own law.
#include "workloads/request_affinity.h"

#include <catch2/catch.hpp>
#include <cmath>
#include <vector>

#include "workloads/expert_popularity.h"

namespace moesim {

namespace {

// Sum over experts of the variance of each expert's count over `reps` draws of `draw` (which fills counts).
template <class Draw>
double summed_count_variance(int experts, int reps, Draw&& draw) {
  const auto n = static_cast<std::size_t>(experts);
  std::vector<double> sum(n, 0.0);
  std::vector<double> sq(n, 0.0);
  std::vector<std::int32_t> counts(n);
  for (int r = 0; r < reps; ++r) {
    draw(counts);
    for (std::size_t e = 0; e < n; ++e) {
      sum[e] += counts[e];
      sq[e] += double(counts[e]) * counts[e];
    }
  }
  double var = 0;
  for (std::size_t e = 0; e < n; ++e) var += (sq[e] - sum[e] * sum[e] / reps) / (reps - 1);
  return var;
}

}  // namespace

TEST_CASE("the step law's log-sd follows the pairs of tokens that share a request") {
  const double sigma = 1.2;
  const double v = std::expm1(sigma * sigma);
  // One token per request (a decode step): nothing beyond the multinomial.
  CHECK(step_affinity_sd(sigma, 0.0, 4096) == 0.0);
  CHECK(step_affinity_sd(0.0, 1e6, 4096) == 0.0);
  // One request alone: the step law is that request's law.
  CHECK(step_affinity_sd(sigma, 4096.0 * 4095.0, 4096) == Approx(sigma));
  // n equal requests of t tokens: exp(s^2) - 1 = V (t - 1) / (n t - 1).
  for (const auto& [n, t] : {std::pair{128.0, 4096.0}, std::pair{4.0, 2000.0}, std::pair{64.0, 2.0}}) {
    const double s = step_affinity_sd(sigma, n * t * (t - 1), n * t);
    CHECK(std::expm1(s * s) == Approx(v * (t - 1) / (n * t - 1)));
  }
  // Prefill (128 prompts of 4,096 tokens) is skewed more than a step of 4,096 one-token decodes with
  // MTP-style 2-token requests, and fewer prompts skew more than many.
  const double prefill = step_affinity_sd(sigma, 128 * 4096.0 * 4095.0, 128 * 4096.0);
  const double mtp = step_affinity_sd(sigma, 4096 * 2.0, 8192);
  const double few = step_affinity_sd(sigma, 4 * 4096.0 * 4095.0, 4 * 4096.0);
  CHECK(mtp < prefill);
  CHECK(prefill < few);
}

TEST_CASE("the step law has the population law as its mean and exp(s^2) - 1 as relative variance") {
  auto p = zipf_probabilities(256, 0.5);
  cap_for_top_k(p, 8);
  const double s = 0.6;
  Rng rng(7);
  std::vector<double> q;
  std::vector<double> mean(p.size(), 0.0);
  std::vector<double> rel_sq(p.size(), 0.0);
  const int reps = 20000;
  for (int r = 0; r < reps; ++r) {
    perturb_popularity(p, s, 8, rng, q);
    for (std::size_t e = 0; e < p.size(); ++e) {
      mean[e] += q[e] / reps;
      rel_sq[e] += (q[e] / p[e] - 1) * (q[e] / p[e] - 1) / reps;
    }
  }
  // E[exp(s Z - s^2 / 2)] = 1; the normalisation moves it by O(sum p^2) (here 0.7%): summed over experts
  // |mean - p| stays under 1%, and each expert's mean is within 3% (its Monte-Carlo error is 0.5%).
  double off = 0;
  for (std::size_t e = 0; e < p.size(); ++e) {
    off += std::abs(mean[e] - p[e]);
    CHECK(mean[e] == Approx(p[e]).epsilon(0.03));
  }
  CHECK(off < 0.01);
  // Relative variance exp(s^2) - 1 for the experts of the tail (the head's own mass is in the normaliser).
  double tail = 0;
  for (std::size_t e = 128; e < p.size(); ++e) tail += rel_sq[e] / 128;
  CHECK(tail == Approx(std::expm1(s * s)).epsilon(0.05));
}

TEST_CASE("a step's counts have the variance of its requests each drawing from its own law") {
  // 128 experts top-4, uniform population (pi = 1/32). Independent reference: each request draws its own
  // affinity, and each of its tokens includes expert e with probability top_k q_r,e (a Bernoulli trial per
  // token and expert: the exact per-expert law of a top-k pick), summed over the step's requests. The
  // variance of a count is then T pi (1 - pi) + pi^2 (exp(sigma^2) - 1) sum_r t_r (t_r - 1) (law of total
  // variance). The normalisation of a request's law, left out of that formula, shrinks its heavy tail by
  // O(V / experts): at sigma = 1 over 64 experts a 256-token request came out 16% below it, here under 3%.
  const int experts = 128;
  const int k = 4;
  const double pi = double(k) / experts;
  const std::vector<double> p(experts, 1.0 / experts);
  const double sigma = 0.6;
  Rng rng(11);
  std::vector<double> law;
  const auto bernoulli_counts = [&](std::int64_t tokens, std::vector<std::int32_t>& c) {
    for (std::size_t e = 0; e < c.size(); ++e) {
      for (std::int64_t i = 0; i < tokens; ++i) c[e] += rng.uniform() < k * law[e] ? 1 : 0;
    }
  };
  for (const auto& [n, t] : {std::pair{128, 1}, std::pair{4, 64}, std::pair{1, 256}}) {
    const double tokens = double(n) * t;
    const double pairs = double(n) * t * (t - 1);
    const double formula = experts * (tokens * pi * (1 - pi) + pi * pi * std::expm1(sigma * sigma) * pairs);
    const double explicit_requests = summed_count_variance(experts, 2000, [&](std::vector<std::int32_t>& c) {
      std::fill(c.begin(), c.end(), 0);
      for (int r = 0; r < n; ++r) {
        perturb_popularity(p, sigma, k, rng, law);
        bernoulli_counts(t, c);
      }
    });
    const double s = step_affinity_sd(sigma, pairs, tokens);
    const double step_law = summed_count_variance(experts, 2000, [&](std::vector<std::int32_t>& c) {
      std::fill(c.begin(), c.end(), 0);
      perturb_popularity(p, s, k, rng, law);
      bernoulli_counts(static_cast<std::int64_t>(tokens), c);
    });
    INFO("requests " << n << " x " << t << " tokens");
    CHECK(explicit_requests == Approx(formula).epsilon(0.05));
    CHECK(step_law == Approx(explicit_requests).epsilon(0.05));
  }
  // The planner's draw (the step law, then the routing sampler's counts) for one 256-token request: the
  // sampler's counts are Poisson-like below kColdMean (variance 4% above the binomial's at these sizes).
  const double s = step_affinity_sd(sigma, 256.0 * 255.0, 256);
  const double sampled = summed_count_variance(experts, 2000, [&](std::vector<std::int32_t>& c) {
    perturb_popularity(p, s, k, rng, law);
    sample_routing_counts(law, 256, k, rng, c);
  });
  CHECK(sampled == Approx(experts * (256 * pi * (1 - pi) + pi * pi * std::expm1(sigma * sigma) * 256 * 255))
                       .epsilon(0.06));
}

}  // namespace moesim
