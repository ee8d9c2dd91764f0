#include "workloads/skew_calibration.h"

#include <algorithm>
#include <numeric>
#include <vector>

#include "sim/engine/check.h"
#include "sim/engine/random.h"
#include "workloads/expert_popularity.h"

namespace moesim {

double expected_imbalance_ratio(double zipf_exponent, const SkewSetting& setting) {
  MOESIM_CHECK(setting.ranks == 0 || setting.experts % setting.ranks == 0, "ranks must divide experts");
  const auto n = static_cast<std::size_t>(setting.experts);
  auto base = zipf_probabilities(setting.experts, zipf_exponent);
  cap_for_top_k(base, setting.top_k);
  std::vector<double> probs(n);
  std::vector<std::int32_t> counts(n);
  std::vector<int> perm(n);
  std::vector<double> bins(setting.ranks > 0 ? static_cast<std::size_t>(setting.ranks) : n);
  Rng rng(setting.seed);
  double sum = 0;
  for (int it = 0; it < setting.iterations; ++it) {
    std::iota(perm.begin(), perm.end(), 0);
    for (std::size_t i = n - 1; i > 0; --i) std::swap(perm[i], perm[rng.below(i + 1)]);
    for (std::size_t e = 0; e < n; ++e) probs[static_cast<std::size_t>(perm[e])] = base[e];
    sample_routing_counts(probs, setting.tokens, setting.top_k, rng, counts);
    std::fill(bins.begin(), bins.end(), 0.0);
    const std::size_t per = n / bins.size();
    for (std::size_t e = 0; e < n; ++e) bins[e / per] += counts[e];
    const double mean = std::accumulate(bins.begin(), bins.end(), 0.0) / static_cast<double>(bins.size());
    sum += (*std::max_element(bins.begin(), bins.end()) - mean) / mean;
  }
  return sum / setting.iterations;
}

double calibrate_zipf_exponent(double target, const SkewSetting& setting) {
  double lo = 0.0;
  double hi = 4.0;
  if (expected_imbalance_ratio(lo, setting) >= target) return lo;
  if (expected_imbalance_ratio(hi, setting) <= target) return hi;
  for (int i = 0; i < 40; ++i) {
    const double mid = 0.5 * (lo + hi);
    (expected_imbalance_ratio(mid, setting) < target ? lo : hi) = mid;
  }
  return 0.5 * (lo + hi);
}

}  // namespace moesim
