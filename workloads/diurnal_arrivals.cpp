// Diurnal arrivals by thinning (diurnal_arrivals.h).
#include "workloads/diurnal_arrivals.h"

#include <algorithm>
#include <cmath>
#include <numbers>
#include <numeric>

#include "sim/engine/check.h"

namespace moesim {

double diurnal_rate(const DiurnalArrivals& d, double t_s) {
  const double phase = std::fmod(t_s, d.period_s) / d.period_s;  // in [0, 1)
  if (!d.rates_per_s.empty()) {
    const auto n = d.rates_per_s.size();
    const auto slot = std::min(n - 1, static_cast<std::size_t>(phase * static_cast<double>(n)));
    return d.rates_per_s[slot];
  }
  return d.mean_rate_per_s *
         (1 + d.amplitude * std::cos(2 * std::numbers::pi * (t_s - d.peak_s) / d.period_s));
}

double diurnal_max_rate(const DiurnalArrivals& d) {
  if (!d.rates_per_s.empty()) return *std::max_element(d.rates_per_s.begin(), d.rates_per_s.end());
  return d.mean_rate_per_s * (1 + d.amplitude);
}

double diurnal_mean_rate(const DiurnalArrivals& d) {
  if (d.rates_per_s.empty()) return d.mean_rate_per_s;
  return std::accumulate(d.rates_per_s.begin(), d.rates_per_s.end(), 0.0) /
         static_cast<double>(d.rates_per_s.size());
}

double next_diurnal_arrival(const DiurnalArrivals& d, double t_s, Rng& rng) {
  const double top = diurnal_max_rate(d);
  MOESIM_CHECK(top > 0, "a diurnal arrival process needs a positive rate somewhere");
  for (;;) {
    t_s += sample_exponential(rng, top);
    if (rng.uniform() * top < diurnal_rate(d, t_s)) return t_s;
  }
}

}  // namespace moesim
