// Diurnal arrivals by thinning: the counts per slot of a piecewise day and per quarter of a sinusoidal one
// follow the integral of the rate, within four Poisson standard deviations.
#include "workloads/diurnal_arrivals.h"

#include <catch2/catch.hpp>
#include <cmath>
#include <numbers>
#include <vector>

#include "workloads/request_source.h"

using namespace moesim;

namespace {

// Arrival counts of `d` in `bins` equal bins of its period, over `periods` periods.
std::vector<double> counts(const DiurnalArrivals& d, int bins, int periods) {
  const RandomStreams streams(9);
  SyntheticSource src(d, FixedLength{1}, FixedLength{1},
                      RunLimits{.max_arrival_time = Duration::from_seconds(d.period_s * periods)}, streams);
  std::vector<double> n(static_cast<std::size_t>(bins), 0.0);
  while (auto r = src.next()) {
    const double phase = std::fmod(r->arrival.seconds(), d.period_s) / d.period_s;
    n[std::min(static_cast<std::size_t>(bins - 1), static_cast<std::size_t>(phase * bins))] += 1;
  }
  return n;
}

}  // namespace

TEST_CASE("a piecewise day gives each slot its rate's count") {
  DiurnalArrivals d{.period_s = 400, .rates_per_s = {1, 2, 4, 8}};
  CHECK(diurnal_rate(d, 50) == 1);
  CHECK(diurnal_rate(d, 399) == 8);
  CHECK(diurnal_rate(d, 450) == 1);  // the next period
  CHECK(diurnal_mean_rate(d) == 3.75);
  const int periods = 10;
  const std::vector<double> n = counts(d, 4, periods);
  for (std::size_t i = 0; i < 4; ++i) {
    const double expected = d.rates_per_s[i] * 100 * periods;  // 100 s slots
    CHECK(std::abs(n[i] - expected) < 4 * std::sqrt(expected));
  }
}

TEST_CASE("a sinusoidal day peaks where it is told and keeps its mean") {
  // rate = 10 (1 + 0.8 cos(2 pi (t - 300) / 1200)); the integral over a quarter [a, a + 300) is
  // 10 x 300 + 10 x 0.8 x 1200 / (2 pi) x (sin(2 pi (a + 300 - 300) / 1200) - sin(2 pi (a - 300) / 1200)).
  const DiurnalArrivals d{
      .mean_rate_per_s = 10, .amplitude = 0.8, .period_s = 1200, .peak_s = 300, .rates_per_s = {}};
  CHECK(diurnal_rate(d, 300) == Approx(18));
  CHECK(diurnal_rate(d, 900) == Approx(2));
  CHECK(diurnal_max_rate(d) == Approx(18));
  const int periods = 20;
  const std::vector<double> n = counts(d, 4, periods);
  for (int q = 0; q < 4; ++q) {
    const double a = 300.0 * q;
    const double w = 2 * std::numbers::pi / 1200;
    const double integral =
        10 * 300 + 10 * 0.8 / w * (std::sin(w * (a + 300 - 300)) - std::sin(w * (a - 300)));
    const double expected = integral * periods;
    CHECK(std::abs(n[static_cast<std::size_t>(q)] - expected) < 4 * std::sqrt(expected));
  }
}
