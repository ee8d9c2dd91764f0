#include "hwmodels/ecmp.h"

#include <algorithm>
#include <cmath>
#include <map>
#include <utility>
#include <vector>

namespace moesim {

namespace {

// P(no bin holds more than k balls) for `balls` balls in `bins` bins: the multinomial drawn bin after bin,
// the balls in the next bin binomial over the balls left with probability 1 / (bins left).
// state[r]: probability that the bins so far hold at most k each and r balls are left.
double prob_max_at_most(int balls, int bins, int k, std::vector<double>& state, std::vector<double>& next) {
  const auto nb = static_cast<std::size_t>(balls);
  state.assign(nb + 1, 0.0);
  state[nb] = 1.0;
  for (int b = bins; b > 1; --b) {
    next.assign(nb + 1, 0.0);
    const double p = 1.0 / b;
    const double odds = p / (1.0 - p);
    for (int r = 0; r <= balls; ++r) {
      const double w = state[static_cast<std::size_t>(r)];
      if (w == 0.0) continue;
      double pmf = std::pow(1.0 - p, r);  // n = 0; then pmf(n + 1) = pmf(n) (r - n) / (n + 1) p / (1 - p)
      for (int n = 0; n <= std::min(k, r); ++n) {
        next[static_cast<std::size_t>(r - n)] += w * pmf;
        pmf *= static_cast<double>(r - n) / (n + 1) * odds;
      }
    }
    state.swap(next);
  }
  // The last bin takes every ball left.
  double sum = 0;
  for (int r = 0; r <= std::min(k, balls); ++r) sum += state[static_cast<std::size_t>(r)];
  return sum;
}

}  // namespace

double expected_max_load_exact(int flows, int uplinks) {
  if (flows <= 0) return 0.0;
  if (uplinks <= 1) return flows;
  // E[max] = sum over k >= 0 of P(max > k); max >= ceil(flows / uplinks) always.
  const int low = (flows + uplinks - 1) / uplinks;
  double e = low;
  std::vector<double> state;
  std::vector<double> next;
  for (int k = low; k < flows; ++k) {
    const double tail = 1.0 - prob_max_at_most(flows, uplinks, k, state, next);
    if (tail < 1e-15) break;
    e += tail;
  }
  return e;
}

double expected_max_std_normal(int n) {
  if (n <= 1) return 0.0;
  // E[max] = integral of x n phi(x) Phi(x)^(n-1) dx, Simpson's rule on [-12, 12].
  constexpr int kSteps = 24000;
  constexpr double kLo = -12.0;
  constexpr double kHi = 12.0;
  const double h = (kHi - kLo) / kSteps;
  const double inv_sqrt_2pi = 1.0 / std::sqrt(2.0 * M_PI);
  const auto f = [n, inv_sqrt_2pi](double x) {
    const double phi = inv_sqrt_2pi * std::exp(-0.5 * x * x);
    const double cdf = 0.5 * std::erfc(-x / std::sqrt(2.0));
    return x * n * phi * std::pow(cdf, n - 1);
  };
  double s = f(kLo) + f(kHi);
  for (int i = 1; i < kSteps; ++i) s += f(kLo + i * h) * (i % 2 == 1 ? 4.0 : 2.0);
  return s * h / 3.0;
}

double ecmp_max_load_factor(int flows, int uplinks) {
  if (flows <= 0 || uplinks <= 1) return 1.0;
  // The exact value costs up to ~30 ms (512 flows); a fabric asks again whenever its group changes. Each
  // thread keeps its own answers (the values are pure functions of the pair, so runs stay deterministic).
  thread_local std::map<std::pair<int, int>, double> known;
  const auto [it, fresh] = known.try_emplace({flows, uplinks}, 0.0);
  if (!fresh) return it->second;
  const double mean = static_cast<double>(flows) / uplinks;
  it->second = flows <= kEcmpExactFlows ? expected_max_load_exact(flows, uplinks) / mean
                                        : (mean + std::sqrt(mean) * expected_max_std_normal(uplinks)) / mean;
  return it->second;
}

}  // namespace moesim
