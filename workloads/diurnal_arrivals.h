// A time-varying open-loop arrival process over a repeating period (a day by default): a sinusoidal rate
// or a piecewise-constant one, sampled as a non-homogeneous Poisson process by thinning (Lewis & Shedler,
// "Simulation of nonhomogeneous Poisson processes by thinning", Naval Research Logistics Quarterly 26(3),
// 1979): candidates from a homogeneous process at the maximum rate, each kept with probability
// rate(t) / maximum.
#pragma once

#include <vector>

#include "sim/engine/random.h"

namespace moesim {

struct DiurnalArrivals {
  // Sinusoidal: rate(t) = mean x (1 + amplitude x cos(2 pi (t - peak_s) / period_s)), amplitude in [0, 1].
  double mean_rate_per_s = 1;
  double amplitude = 0.5;
  double period_s = 86400;
  double peak_s = 14 * 3600.0;
  // Piecewise (used when not empty): rates over equal slots of period_s / rates_per_s.size(), in order.
  std::vector<double> rates_per_s;
};

[[nodiscard]] double diurnal_rate(const DiurnalArrivals& d, double t_s);
[[nodiscard]] double diurnal_max_rate(const DiurnalArrivals& d);
[[nodiscard]] double diurnal_mean_rate(const DiurnalArrivals& d);
// The first arrival after `t_s` (seconds); the maximum rate must be positive.
[[nodiscard]] double next_diurnal_arrival(const DiurnalArrivals& d, double t_s, Rng& rng);

}  // namespace moesim
