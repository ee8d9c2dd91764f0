#include "workloads/expert_popularity.h"

#include <algorithm>
#include <array>
#include <cmath>
#include <numeric>

#include "sim/engine/check.h"

namespace moesim {

std::vector<double> zipf_probabilities(int n, double s) {
  std::vector<double> p(static_cast<std::size_t>(n));
  double sum = 0;
  for (int i = 0; i < n; ++i) {
    p[static_cast<std::size_t>(i)] = std::pow(static_cast<double>(i + 1), -s);
    sum += p[static_cast<std::size_t>(i)];
  }
  for (double& x : p) x /= sum;
  return p;
}

void cap_for_top_k(std::vector<double>& p, int top_k) {
  const double cap = 1.0 / top_k;
  for (int iter = 0; iter < 64; ++iter) {
    double excess = 0;
    double free_mass = 0;
    for (const double x : p) {
      if (x >= cap) {
        excess += x - cap;
      } else {
        free_mass += x;
      }
    }
    if (excess <= 1e-15 || free_mass <= 0) break;
    for (double& x : p) x = x >= cap ? cap : x * (1.0 + excess / free_mass);
  }
}

double top_share(std::span<const double> p, double fraction) {
  std::vector<double> sorted(p.begin(), p.end());
  std::sort(sorted.begin(), sorted.end(), std::greater<>());
  const auto top = static_cast<std::size_t>(std::lround(fraction * static_cast<double>(sorted.size())));
  return std::accumulate(sorted.begin(), sorted.begin() + static_cast<std::ptrdiff_t>(top), 0.0);
}

double zipf_exponent_for_top_share(int n, int top_k, double fraction, double share) {
  auto share_at = [&](double s) {
    auto p = zipf_probabilities(n, s);
    cap_for_top_k(p, top_k);
    return top_share(p, fraction);
  };
  double lo = 0;
  double hi = 8;
  for (int i = 0; i < 100; ++i) {
    const double mid = 0.5 * (lo + hi);
    (share_at(mid) < share ? lo : hi) = mid;
  }
  return 0.5 * (lo + hi);
}

ExpertPopularity::ExpertPopularity(const PopularitySpec& spec, int moe_layers, int experts, int top_k,
                                   Rng rng)
    : layers_(moe_layers), experts_(experts) {
  std::vector<double> base = spec.kind == PopularitySpec::Kind::kZipf
                                 ? zipf_probabilities(experts, spec.zipf_exponent)
                                 : std::vector<double>(static_cast<std::size_t>(experts), 1.0 / experts);
  cap_for_top_k(base, top_k);
  probs_.resize(static_cast<std::size_t>(moe_layers) * static_cast<std::size_t>(experts));
  std::vector<int> perm(static_cast<std::size_t>(experts));
  for (int l = 0; l < moe_layers; ++l) {
    std::iota(perm.begin(), perm.end(), 0);
    if (spec.shuffle_per_layer) {
      for (int i = experts - 1; i > 0; --i) {  // Fisher-Yates with our own generator
        std::swap(perm[static_cast<std::size_t>(i)],
                  perm[rng.below(static_cast<std::uint64_t>(i) + 1)]);
      }
    }
    auto row = mutable_layer(l);
    for (int rank = 0; rank < experts; ++rank) {
      row[static_cast<std::size_t>(perm[static_cast<std::size_t>(rank)])] =
          base[static_cast<std::size_t>(rank)];
    }
  }
}

namespace {

// Inverse standard-normal CDF (Acklam's rational approximation, relative error < 1.2e-9).
double inverse_normal_cdf(double p) {
  static constexpr double a[] = {-3.969683028665376e+01, 2.209460984245205e+02, -2.759285104469687e+02,
                                 1.383577518672690e+02,  -3.066479806614716e+01, 2.506628277459239e+00};
  static constexpr double b[] = {-5.447609879822406e+01, 1.615858368580409e+02, -1.556989798598866e+02,
                                 6.680131188771972e+01,  -1.328068155288572e+01};
  static constexpr double c[] = {-7.784894002430293e-03, -3.223964580411365e-01, -2.400758277161838e+00,
                                 -2.549732539343734e+00, 4.374664141464968e+00,  2.938163982698783e+00};
  static constexpr double d[] = {7.784695709041462e-03, 3.224671290700398e-01, 2.445134137142996e+00,
                                 3.754408661907416e+00};
  const double lo = 0.02425;
  if (p < lo) {
    const double q = std::sqrt(-2 * std::log(p));
    return (((((c[0] * q + c[1]) * q + c[2]) * q + c[3]) * q + c[4]) * q + c[5]) /
           ((((d[0] * q + d[1]) * q + d[2]) * q + d[3]) * q + 1);
  }
  if (p > 1 - lo) return -inverse_normal_cdf(1 - p);
  const double q = p - 0.5;
  const double r = q * q;
  return (((((a[0] * r + a[1]) * r + a[2]) * r + a[3]) * r + a[4]) * r + a[5]) * q /
         (((((b[0] * r + b[1]) * r + b[2]) * r + b[3]) * r + b[4]) * r + 1);
}

struct NormalTable {
  std::array<double, 4096> z{};
  NormalTable() {
    for (std::size_t i = 0; i < z.size(); ++i) z[i] = inverse_normal_cdf((static_cast<double>(i) + 0.5) / 4096.0);
  }
};
const NormalTable kNormalTable;

// e^-m for 0 <= m < kColdMean: e^-(m/8) by its Taylor series (|m/8| < 1, 9 terms, error < 3e-7
// relative), then cubed by squaring three times. Plain arithmetic: the same bits on every machine.
double exp_neg_small(double m) {
  const double x = -m * 0.125;
  double t = 1.0 + x * (1.0 + x * (0.5 + x * (1.0 / 6 + x * (1.0 / 24 + x * (1.0 / 120 + x * (1.0 / 720 + x * (1.0 / 5040 + x / 40320)))))));
  t *= t;
  t *= t;
  return t * t;
}

// Poisson(m) by inversion for small m.
std::int32_t poisson_small(double m, Rng& rng) {
  double u = rng.uniform();
  double prob = exp_neg_small(m);
  std::int32_t k = 0;
  while (u > prob && k < 64) {
    u -= prob;
    ++k;
    prob *= m / k;
  }
  return k;
}

}  // namespace

double table_normal(std::uint64_t bits12) { return kNormalTable.z[bits12 & 4095]; }

RoutingSampler::RoutingSampler(int experts)
    : x_(static_cast<std::size_t>(experts)), hot_(static_cast<std::size_t>(experts)) {}

void RoutingSampler::sample(std::span<const double> probs, std::int64_t tokens, int top_k, Rng& rng,
                            std::span<std::int32_t> counts) {
  MOESIM_CHECK(counts.size() == probs.size() && probs.size() <= x_.size(), "routing sampler size mismatch");
  const std::size_t n = probs.size();
  const std::int64_t slots = tokens * top_k;
  const double t = static_cast<double>(tokens);
  const auto cap = static_cast<std::int32_t>(std::min<std::int64_t>(tokens, INT32_MAX));
  if (slots == 0) {
    std::fill(counts.begin(), counts.end(), 0);
    return;
  }
  // A token includes expert e with probability pi_e = k p_e, so a count is a sum of `tokens` Bernoulli
  // trials: mean T pi, variance T pi (1 - pi). Rare experts (small mean and pi): Poisson. The others:
  // Gaussian, conditioned on the total that the rare ones leave.
  std::int64_t cold_total = 0;
  double hot_mean = 0;
  double hot_var = 0;
  std::size_t hot = 0;
  for (std::size_t e = 0; e < n; ++e) {
    const double pi = std::min(1.0, top_k * probs[e]);
    const double m = t * pi;
    if (m < kColdMean && pi < 0.1) {
      const std::int32_t c = std::min(poisson_small(m, rng), cap);
      counts[e] = c;
      cold_total += c;
    } else {
      hot_[hot++] = static_cast<int>(e);
      hot_mean += m;
      hot_var += m * (1.0 - pi);
    }
  }
  std::int64_t residual = slots - cold_total;
  if (hot > 0) {
    // X_e = m_e + w_e (H - sum m) + a_e z_e - w_e sum_j a_j z_j, w_e = var_e / sum var: the Gaussian
    // with variances var_e conditioned on summing to H.
    const double target = static_cast<double>(residual);
    double s = 0;
    std::uint64_t bits = 0;
    for (std::size_t i = 0; i < hot; ++i) {
      if ((i & 3) == 0) bits = rng.next_u64();
      const double pi = std::min(1.0, top_k * probs[static_cast<std::size_t>(hot_[i])]);
      const double az = std::sqrt(t * pi * (1.0 - pi)) * table_normal(bits >> 52);
      bits <<= 16;
      x_[i] = az;
      s += az;
    }
    std::int64_t assigned = 0;
    for (std::size_t i = 0; i < hot; ++i) {
      const double pi = std::min(1.0, top_k * probs[static_cast<std::size_t>(hot_[i])]);
      const double m = t * pi;
      const double w = hot_var > 0 ? m * (1.0 - pi) / hot_var : m / hot_mean;
      const double x = m + w * (target - hot_mean) + x_[i] - w * s;
      const auto c = static_cast<std::int32_t>(std::clamp(std::floor(x + 0.5), 0.0, static_cast<double>(cap)));
      counts[static_cast<std::size_t>(hot_[i])] = c;
      assigned += c;
    }
    residual -= assigned;
  }
  // Spread the residual of rounding and clamping by +-1, starting at a random expert (hot first).
  for (int pass = 0; pass < 2 && residual != 0; ++pass) {
    const std::size_t m = pass == 0 ? hot : n;
    if (m == 0) continue;
    const std::size_t start = rng.below(m);
    for (std::size_t sweep = 0; sweep < 64 && residual != 0; ++sweep) {
      bool moved = false;
      for (std::size_t j = 0; j < m && residual != 0; ++j) {
        const std::size_t e = pass == 0 ? static_cast<std::size_t>(hot_[(start + j) % m]) : (start + j) % m;
        if (residual > 0 && counts[e] < cap) {
          ++counts[e];
          --residual;
          moved = true;
        } else if (residual < 0 && counts[e] > 0) {
          --counts[e];
          ++residual;
          moved = true;
        }
      }
      if (!moved) break;
    }
  }
  MOESIM_CHECK(residual == 0, "routing counts could not be made to sum to tokens x top_k");
}

void sample_routing_counts(std::span<const double> probs, std::int64_t tokens, int top_k, Rng& rng,
                           std::span<std::int32_t> counts) {
  RoutingSampler sampler(static_cast<int>(probs.size()));
  sampler.sample(probs, tokens, top_k, rng, counts);
}

}  // namespace moesim
