#include "workloads/request_source.h"

#include <catch2/catch.hpp>
#include <cmath>

using namespace moesim;

TEST_CASE("Poisson arrivals have the configured rate and stop at the request limit") {
  const RandomStreams streams(3);
  SyntheticSource src(PoissonArrivals{50.0}, FixedLength{100}, FixedLength{10},
                      RunLimits{.max_requests = 20000}, streams);
  int n = 0;
  Time last;
  while (auto r = src.next()) {
    ++n;
    REQUIRE(r->arrival >= last);
    last = r->arrival;
    REQUIRE(r->prompt_tokens == 100);
  }
  REQUIRE(n == 20000);
  REQUIRE(src.exhausted());
  REQUIRE(n / last.seconds() == Approx(50.0).epsilon(0.02));
}

TEST_CASE("Gamma arrivals keep the mean rate and have the configured coefficient of variation") {
  const RandomStreams streams(4);
  SyntheticSource src(GammaArrivals{20.0, 3.0}, FixedLength{1}, FixedLength{1},
                      RunLimits{.max_requests = 50000}, streams);
  double sum = 0;
  double sq = 0;
  Time last;
  int n = 0;
  while (auto r = src.next()) {
    const double gap = (r->arrival - last).seconds();
    last = r->arrival;
    sum += gap;
    sq += gap * gap;
    ++n;
  }
  const double mean = sum / n;
  const double cv = std::sqrt(sq / n - mean * mean) / mean;
  REQUIRE(mean == Approx(1.0 / 20).epsilon(0.03));
  REQUIRE(cv == Approx(3.0).epsilon(0.06));
}

TEST_CASE("a closed loop issues a new request only when one finishes") {
  const RandomStreams streams(1);
  SyntheticSource src(ClosedLoop{2, 0.5}, FixedLength{8}, FixedLength{4}, RunLimits{.max_requests = 5},
                      streams);
  REQUIRE(src.next().has_value());
  REQUIRE(src.next().has_value());
  REQUIRE_FALSE(src.next().has_value());
  src.on_finished(Time::at(Duration::from_seconds(1.0)));
  const auto r = src.next();
  REQUIRE(r.has_value());
  REQUIRE(r->arrival.seconds() == Approx(1.5));
}

TEST_CASE("lognormal lengths have the configured mean and stay inside their bounds") {
  Rng rng(8);
  const LognormalLength spec{.mean = 500, .sigma = 0.5, .min = 1, .max = 1000000};
  double sum = 0;
  for (int i = 0; i < 100000; ++i) {
    const auto x = sample_length(spec, rng);
    REQUIRE(x >= 1);
    sum += static_cast<double>(x);
  }
  REQUIRE(sum / 100000 == Approx(500).epsilon(0.01));
  const LognormalLength tight{.mean = 100, .sigma = 2.0, .min = 50, .max = 150};
  for (int i = 0; i < 1000; ++i) {
    const auto x = sample_length(tight, rng);
    REQUIRE(x >= 50);
    REQUIRE(x <= 150);
  }
}

// The bounded mean is the lognormal's partial moment: for ln X ~ N(0, 1) (mean e^0.5) above 1,
// E[X | X >= 1] = e^0.5 x P(Z >= -1) / P(Z >= 0) = e^0.5 x 0.8413447 / 0.5 (the normal table's Phi(1)).
TEST_CASE("a lognormal's bounded mean follows its partial moment and its draws") {
  const double e_half = std::exp(0.5);
  CHECK(lognormal_bounded_mean(e_half, 1.0, 1.0, 1e300) == Approx(e_half * 0.8413447 / 0.5).epsilon(1e-6));
  // Wide bounds leave the mean as it is; both bounds below or above every draw pin it to the nearer bound.
  CHECK(lognormal_bounded_mean(500, 0.5, 1e-9, 1e12) == Approx(500).epsilon(1e-9));
  CHECK(lognormal_bounded_mean(1e9, 0.1, 10, 20) == Approx(20));
  CHECK(lognormal_bounded_mean(1e-9, 0.1, 10, 20) == Approx(10));
  // MLPerf DeepSeek-R1's outputs: a published mean of 3,744 under the 20,000-token cap needs a lognormal of
  // mean above 3,744 (resampling cuts the tail off). The sampler's own draws average the bounded mean.
  const double m = lognormal_mean_for_bounded_mean(3744, 0.8, 15.5, 20000.5);
  CHECK(m > 3744);
  CHECK(lognormal_bounded_mean(m, 0.8, 15.5, 20000.5) == Approx(3744).epsilon(1e-9));
  Rng rng(21);
  const LognormalLength spec{.mean = m, .sigma = 0.8, .min = 16, .max = 20000};
  constexpr int kDraws = 400000;
  double sum = 0;
  for (int i = 0; i < kDraws; ++i) sum += static_cast<double>(sample_length(spec, rng));
  // Standard error of the mean: sd / sqrt(n), sd about 3,744 x sqrt(e^0.64 - 1) = 3,300: 5.2 tokens; 0.5%
  // is 19 tokens, over 3.5 standard errors.
  CHECK(sum / kDraws == Approx(3744).epsilon(0.005));
  // The untruncated law of the same mean draws visibly less inside the cap.
  CHECK(lognormal_bounded_mean(3744, 0.8, 15.5, 20000.5) < 3744 * 0.98);
}

// The quantile law's draw is the inverse of its piecewise-linear CDF: between two points uniform, so the
// mean is the mean of the trapezoids, and each point's share of the draws below it is its index / (n - 1).
TEST_CASE("quantile lengths invert the piecewise-linear CDF of their points") {
  Rng rng(11);
  const QuantileLength flat{.points = {10, 20}};  // uniform on [10, 20]: mean 15
  REQUIRE(mean_length(flat) == Approx(15));
  REQUIRE(max_length(flat) == 20);
  const QuantileLength half{.points = {1, 1, 100}};  // half the mass at 1, half uniform on [1, 100]
  REQUIRE(mean_length(half) == Approx(0.5 * 1 + 0.5 * 50.5));
  constexpr int kDraws = 200000;
  double flat_sum = 0;
  double half_sum = 0;
  int ones = 0;
  for (int i = 0; i < kDraws; ++i) {
    const auto f = sample_length(flat, rng);
    REQUIRE(f >= 10);
    REQUIRE(f <= 20);
    flat_sum += static_cast<double>(f);
    const auto h = sample_length(half, rng);
    REQUIRE(h >= 1);
    REQUIRE(h <= 100);
    half_sum += static_cast<double>(h);
    ones += h == 1 ? 1 : 0;
  }
  // Rounding to a token is symmetric inside [10, 20] but for the two half-width ends, which balance.
  CHECK(flat_sum / kDraws == Approx(15).epsilon(0.002));
  // Draws of 1: the lower half, plus the upper half's values below 1.5 (u < 0.5 + 0.5 x 0.5 / 99).
  CHECK(double(ones) / kDraws == Approx(0.5 + 0.25 / 99).epsilon(0.01));
  // The mean: each draw rounded; rounding shifts the values in [1, 1.5) down and moves nothing else on
  // average (x 0.5 x 0.5 / 99 x 0.25), far below the tolerance.
  CHECK(half_sum / kDraws == Approx(25.75).epsilon(0.01));
}
