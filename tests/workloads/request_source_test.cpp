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
