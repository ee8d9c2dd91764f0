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
