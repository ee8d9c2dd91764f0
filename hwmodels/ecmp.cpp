#include "hwmodels/ecmp.h"

#include <algorithm>
#include <boost/math/distributions/normal.hpp>
#include <boost/math/quadrature/gauss_kronrod.hpp>
#include <cmath>
#include <limits>
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
  // E[max] = integral over the real line of x n phi(x) Phi(x)^(n-1) dx (adaptive Gauss-Kronrod).
  const boost::math::normal_distribution<double> z;
  const auto f = [&z, n](double x) { return x * n * pdf(z, x) * std::pow(cdf(z, x), n - 1); };
  constexpr double kInf = std::numeric_limits<double>::infinity();
  return boost::math::quadrature::gauss_kronrod<double, 61>::integrate(f, -kInf, kInf, 15, 1e-12);
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
