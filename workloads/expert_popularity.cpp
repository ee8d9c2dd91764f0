#include "workloads/expert_popularity.h"

#include <algorithm>
#include <array>
#include <bit>
#include <cmath>
#include <functional>
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
        std::swap(perm[static_cast<std::size_t>(i)], perm[rng.below(static_cast<std::uint64_t>(i) + 1)]);
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
  static constexpr double a[] = {-3.969683028665376e+01, 2.209460984245205e+02,  -2.759285104469687e+02,
                                 1.383577518672690e+02,  -3.066479806614716e+01, 2.506628277459239e+00};
  static constexpr double b[] = {-5.447609879822406e+01, 1.615858368580409e+02, -1.556989798598866e+02,
                                 6.680131188771972e+01, -1.328068155288572e+01};
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

// e^-x for 0 <= x <= 0.25 by its Taylor series (8 terms, relative error < 1e-10). Plain arithmetic: the
// same bits on every machine.
double exp_neg_quarter(double x) {
  return 1.0 - x * (1.0 - x * (0.5 - x * (1.0 / 6 -
                                          x * (1.0 / 24 - x * (1.0 / 120 - x * (1.0 / 720 - x / 5040))))));
}

// Exact Poisson sampling for the cold experts (mean m < RoutingSampler::kColdMean) without a per-expert
// transcendental call or a long inversion walk: Poisson(m) = Poisson(mu) + Poisson(m - mu) for independent
// parts, mu = floor(4 m) / 4 on a grid. Poisson(mu) is inverted from a tabulated CDF through a guide
// table (Devroye 1986, section III.2.4: start at the first value whose CDF passes the uniform's bucket;
// with 1,024 buckets most draws need no comparison); Poisson(m - mu), m - mu < 1/4, is 0 with probability >
// 0.77.
struct PoissonTables {
  static constexpr int kGrid = 4;           // grid points per unit of mean
  static constexpr int kMeans = 8 * kGrid;  // mu = 0, 1/4, ..., 7.75
  static constexpr int kValues = 48;        // P(X >= 48 | mu = 7.75) < 1e-20
  // 1,024 buckets per mean: a bucket inside one step of the CDF (flag bit clear, ~98% of the draws at the
  // means the cold experts have) gives its value without a comparison or a mispredicted branch.
  static constexpr int kGuideBits = 10;
  static constexpr int kGuide = 1 << kGuideBits;
  static constexpr std::uint8_t kWalk = 0x80;  // flag: the bucket straddles a step, compare from its value
  std::array<std::array<double, kValues>, kMeans> cdf{};
  std::array<std::array<std::uint8_t, kGuide>, kMeans> guide{};
  PoissonTables() {
    const double e_quarter = exp_neg_quarter(0.25);
    double p0 = 1.0;  // e^-mu by repeated multiplication
    for (int g = 0; g < kMeans; ++g) {
      const double mu = static_cast<double>(g) / kGrid;
      auto& f = cdf[static_cast<std::size_t>(g)];
      double prob = p0;
      double sum = 0;
      for (int k = 0; k < kValues; ++k) {
        sum += prob;
        f[static_cast<std::size_t>(k)] = sum;
        prob *= mu / static_cast<double>(k + 1);
      }
      f[kValues - 1] = 2.0;  // the walk always stops
      int k = 0;
      for (int j = 0; j < kGuide; ++j) {
        while (f[static_cast<std::size_t>(k)] <= static_cast<double>(j) / kGuide) ++k;
        // Every u of bucket j is below (j + 1) / kGuide: the value is k when F(k) reaches that bound.
        const bool walk = f[static_cast<std::size_t>(k)] < static_cast<double>(j + 1) / kGuide;
        guide[static_cast<std::size_t>(g)][static_cast<std::size_t>(j)] =
            static_cast<std::uint8_t>(k | (walk ? kWalk : 0));
      }
      p0 *= e_quarter;
    }
  }
  // Poisson(m), 0 <= m < kColdMean, from 32 random bits for the grid part and 32 for the remainder.
  [[nodiscard]] std::int32_t sample(double m, std::uint64_t bits) const {
    const double x = m * kGrid;
    const int g = std::min(static_cast<int>(x), kMeans - 1);
    const auto hi = static_cast<std::uint32_t>(bits >> 32);
    const std::uint8_t entry = guide[static_cast<std::size_t>(g)][hi >> (32 - kGuideBits)];
    std::size_t k = entry & (kWalk - 1);
    if ((entry & kWalk) != 0) {
      const double u = static_cast<double>(hi) * 0x1.0p-32;
      const auto& f = cdf[static_cast<std::size_t>(g)];
      while (u >= f[k]) ++k;
    }
    const double delta = (x - static_cast<double>(g)) / kGrid;
    const double v = static_cast<double>(bits & 0xffffffffU) * 0x1.0p-32;
    if (v < 1.0 - delta) return static_cast<std::int32_t>(k);  // e^-delta >= 1 - delta: no call needed
    double prob = exp_neg_quarter(delta);
    if (v < prob) return static_cast<std::int32_t>(k);
    double left = v - prob;
    std::int32_t extra = 1;
    prob *= delta;
    while (left >= prob && extra < kValues) {
      left -= prob;
      ++extra;
      prob *= delta / extra;
    }
    return static_cast<std::int32_t>(k) + extra;
  }
};
const PoissonTables kPoissonTables;

// e^-x for 0 <= x <= kColdMean by linear interpolation on a grid of 1/128 (error < 8e-6), the grid built by
// repeated multiplication as above: the cold experts' moments without a transcendental call per expert.
struct ExpTable {
  static constexpr int kPerUnit = 128;
  static constexpr int kSize = static_cast<int>(RoutingSampler::kColdMean) * kPerUnit + 2;
  std::array<double, kSize> v{};
  ExpTable() {
    const double step = exp_neg_quarter(0.25 / 32);  // e^(-1/128)
    double e = 1.0;
    for (double& x : v) {
      x = e;
      e *= step;
    }
  }
  [[nodiscard]] double operator()(double x) const {
    const double g = std::clamp(x, 0.0, RoutingSampler::kColdMean) * kPerUnit;
    const auto i = static_cast<std::size_t>(g);
    const double f = g - static_cast<double>(i);
    return v[i] + f * (v[i + 1] - v[i]);
  }
};
const ExpTable kExpTable;

}  // namespace

NormalTable::NormalTable() {
  for (std::size_t i = 0; i < z.size(); ++i)
    z[i] = inverse_normal_cdf((static_cast<double>(i) + 0.5) / 4096.0);
}
const NormalTable kNormalTable;

void build_alias_table(std::span<const double> weights, std::span<std::uint32_t> cut,
                       std::span<std::int32_t> alias) {
  const std::size_t size = weights.size();
  MOESIM_CHECK(cut.size() == size && alias.size() == size, "alias table sized for other weights");
  double mass = 0;
  for (const double w : weights) mass += w;
  // Vose: columns of average height 1; a short column is topped up from a tall one, which keeps the rest.
  std::vector<double> scaled(size);
  std::vector<std::int32_t> small;
  std::vector<std::int32_t> large;
  for (std::size_t j = 0; j < size; ++j) {
    scaled[j] = mass > 0 ? weights[j] * static_cast<double>(size) / mass : 1.0;
    (scaled[j] < 1.0 ? small : large).push_back(static_cast<std::int32_t>(j));
  }
  constexpr double kOne = 0x1.0p32;
  while (!small.empty() && !large.empty()) {
    const auto s_col = static_cast<std::size_t>(small.back());
    small.pop_back();
    const std::int32_t l_col = large.back();
    const auto lu = static_cast<std::size_t>(l_col);
    cut[s_col] = static_cast<std::uint32_t>(std::min(kOne - 1, std::round(scaled[s_col] * kOne)));
    alias[s_col] = l_col;
    scaled[lu] -= 1.0 - scaled[s_col];
    if (scaled[lu] < 1.0) {
      large.pop_back();
      small.push_back(l_col);
    }
  }
  // What remains is full to rounding: it always keeps its column.
  const auto keep = [&](std::int32_t j) {
    cut[static_cast<std::size_t>(j)] = ~std::uint32_t{0};
    alias[static_cast<std::size_t>(j)] = j;
  };
  std::for_each(small.begin(), small.end(), keep);
  std::for_each(large.begin(), large.end(), keep);
}

std::int32_t poisson_cold(double mean, std::uint64_t bits) { return kPoissonTables.sample(mean, bits); }

namespace {

// Cells by descending probability (ties by index).
std::vector<int> descending_order(std::span<const double> probs) {
  std::vector<int> order(probs.size());
  std::iota(order.begin(), order.end(), 0);
  std::stable_sort(order.begin(), order.end(), [&](int a, int b) {
    return probs[static_cast<std::size_t>(a)] > probs[static_cast<std::size_t>(b)];
  });
  return order;
}

// A layer with its cells ordered and its per-cell arrays sized (values filled by the caller).
RoutingSampler::Layer sized_layer(std::span<const double> probs, int top_k) {
  RoutingSampler::Layer l;
  l.top_k = top_k;
  const std::size_t n = probs.size();
  l.order = descending_order(probs);
  l.pi.resize(n);
  l.sd.resize(n);
  l.pi_prefix.assign(n + 1, 0.0);
  l.var_prefix.assign(n + 1, 0.0);
  return l;
}

}  // namespace

RoutingSampler::Layer RoutingSampler::prepare_multinomial(std::span<const double> probs) {
  Layer l = sized_layer(probs, 1);
  const std::size_t n = probs.size();
  for (std::size_t i = 0; i < n; ++i) {
    const double p = std::max(0.0, probs[static_cast<std::size_t>(l.order[i])]);
    l.pi[i] = p;
    l.sd[i] = std::sqrt(p);
    l.pi_prefix[i + 1] = l.pi_prefix[i] + p;
    l.var_prefix[i + 1] = l.var_prefix[i] + p;
  }
  return l;
}

void RoutingSampler::sample_multinomial(const Layer& layer, std::int64_t trials, Rng& rng,
                                        std::span<std::int32_t> counts) {
  if (trials > kDirectTrials) {
    sample(layer, trials, rng, counts);
    return;
  }
  const std::size_t n = layer.order.size();
  MOESIM_CHECK(counts.size() == n, "multinomial sampler size mismatch");
  std::fill(counts.begin(), counts.end(), 0);
  const double total = layer.pi_prefix[n];
  if (n == 0 || total <= 0) {
    MOESIM_CHECK(trials == 0, "multinomial trials over cells of no probability");
    return;
  }
  for (std::int64_t t = 0; t < trials; ++t) {
    const double u = rng.uniform() * total;
    std::size_t i = 0;
    while (i + 1 < n && u >= layer.pi_prefix[i + 1]) ++i;
    ++counts[static_cast<std::size_t>(layer.order[i])];
  }
}

RoutingSampler::Layer RoutingSampler::prepare(std::span<const double> probs, int top_k) {
  Layer l = sized_layer(probs, top_k);
  const std::size_t n = probs.size();
  std::vector<double> v(n);
  double total = 0;
  for (std::size_t i = 0; i < n; ++i) {
    const double pi = std::min(1.0, top_k * probs[static_cast<std::size_t>(l.order[i])]);
    l.pi[i] = pi;
    v[i] = pi * (1.0 - pi);
    total += v[i];
  }
  // Conditioning on the total shrinks a variance a^2 to a^2 (1 - a^2 / A), A = sum a^2. Inflate the
  // unconditioned variances so that the conditioned ones are the Binomial pi (1 - pi): solve
  // f (1 - f) = v / A for f = a^2 / A (fixed point on A; a few iterations converge).
  std::vector<double> a2 = v;
  // Stops early once A no longer moves (usually after three or four sweeps).
  double prev_a = -1;
  for (int iter = 0; iter < 8 && total > 0; ++iter) {
    const double big_a = std::accumulate(a2.begin(), a2.end(), 0.0);
    if (std::abs(big_a - prev_a) <= 1e-14 * big_a) break;
    prev_a = big_a;
    const double inv_a = 1.0 / big_a;
    for (std::size_t i = 0; i < n; ++i) {
      const double r = v[i] * inv_a;
      a2[i] = r < 0.25 ? 0.5 * (1.0 - std::sqrt(1.0 - 4.0 * r)) * big_a : 0.5 * big_a;
    }
  }
  for (std::size_t i = 0; i < n; ++i) {
    l.sd[i] = std::sqrt(a2[i]);
    l.pi_prefix[i + 1] = l.pi_prefix[i] + l.pi[i];
    l.var_prefix[i + 1] = l.var_prefix[i] + a2[i];
  }
  return l;
}

namespace {

// spread_residual(), telling `changed(cell, before, after)` of each count it moves.
template <class Changed>
std::int64_t spread_residual_with(std::span<const int> cells, std::size_t hot, std::int32_t cap,
                                  std::int64_t residual, Rng& rng, std::span<std::int32_t> counts,
                                  Changed changed) {
  for (int pass = 0; pass < 2 && residual != 0; ++pass) {
    const std::size_t m = pass == 0 ? hot : cells.size();
    if (m == 0) continue;
    const std::size_t start = rng.below(m);
    for (std::size_t sweep = 0; sweep < 64 && residual != 0; ++sweep) {
      bool moved = false;
      for (std::size_t j = 0; j < m && residual != 0; ++j) {
        const auto cell = static_cast<std::size_t>(cells[start + j < m ? start + j : start + j - m]);
        auto& c = counts[cell];
        if (residual > 0 && c < cap) {
          changed(cell, c, c + 1);
          ++c;
          --residual;
          moved = true;
        } else if (residual < 0 && c > 0) {
          changed(cell, c, c - 1);
          --c;
          ++residual;
          moved = true;
        }
      }
      if (!moved) break;
    }
  }
  return residual;
}

// Spreads `residual` by +-1 over `nb` bins from `start` (bin k's value at value(k), kept in [0, bound(k)]),
// up to 64 sweeps; returns what could not be placed.
template <class Value, class Bound>
std::int64_t spread_over_bins(std::size_t nb, std::size_t start, std::int64_t residual, Value value,
                              Bound bound) {
  for (int sweep = 0; sweep < 64 && residual != 0; ++sweep) {
    bool moved = false;
    for (std::size_t j = 0; j < nb && residual != 0; ++j) {
      const std::size_t k = start + j < nb ? start + j : start + j - nb;
      std::int64_t& v = value(k);
      if (residual > 0 && v < bound(k)) {
        ++v;
        --residual;
        moved = true;
      } else if (residual < 0 && v > 0) {
        --v;
        ++residual;
        moved = true;
      }
    }
    if (!moved) break;
  }
  return residual;
}

// Positions [0, result) of layer.order are hot at `t` tokens: mean at least RoutingSampler::kColdMean and
// pi at least 0.1 (pi descends, so the cold experts are a suffix).
std::size_t hot_count(const RoutingSampler::Layer& layer, double t) {
  const double cold_pi = std::min(0.1, RoutingSampler::kColdMean / t);
  return static_cast<std::size_t>(
      std::lower_bound(layer.pi.begin(), layer.pi.end(), cold_pi, std::greater<>()) - layer.pi.begin());
}

// Bin k's cold moments at `t` tokens: its entries from bin_hot on (sample_bin_sums' law sums these).
struct ColdMomentSums {
  double e1 = 0, v = 0, me = 0;
};
ColdMomentSums cold_moment_sums(const RoutingSampler::Bins& bins, std::size_t k, std::int32_t bin_hot,
                                double t) {
  ColdMomentSums c;
  const auto last = static_cast<std::size_t>(bins.begin[k + 1]);
  for (auto j = static_cast<std::size_t>(bins.begin[k] + bin_hot); j < last; ++j) {
    const double m = t * bins.pi[j];
    const double e = kExpTable(m);
    c.e1 += e;
    c.v += e * (1 - e);
    c.me += m * e;
  }
  return c;
}

struct ColdDraw {
  std::size_t hot;     // positions [0, hot) of layer.order are hot
  std::int64_t total;  // tokens the cold experts took
};

// The rare experts (mean < kColdMean and pi < 0.1: a suffix of `order`) drawn one by one, Poisson, into
// `counts`; sample() and sample_binned() share it.
ColdDraw draw_cold(const RoutingSampler::Layer& layer, std::int64_t tokens, std::int32_t cap, Rng& rng,
                   std::span<std::int32_t> counts) {
  const double t = static_cast<double>(tokens);
  const auto hot = hot_count(layer, t);
  std::int64_t total = 0;
  for (std::size_t i = hot; i < layer.order.size(); ++i) {
    const std::int32_t c = std::min(kPoissonTables.sample(t * layer.pi[i], rng.next_u64()), cap);
    counts[static_cast<std::size_t>(layer.order[i])] = c;
    total += c;
  }
  return {.hot = hot, .total = total};
}

}  // namespace

RoutingSampler::RoutingSampler(int experts) : z_(static_cast<std::size_t>(experts)) {}

void RoutingSampler::sample(const Layer& layer, std::int64_t tokens, Rng& rng,
                            std::span<std::int32_t> counts) {
  const std::size_t n = layer.order.size();
  MOESIM_CHECK(counts.size() == n && n <= z_.size(), "routing sampler size mismatch");
  const std::int64_t slots = tokens * layer.top_k;
  if (slots == 0) {
    std::fill(counts.begin(), counts.end(), 0);
    return;
  }
  const double t = static_cast<double>(tokens);
  const auto cap = static_cast<std::int32_t>(std::min<std::int64_t>(tokens, INT32_MAX));
  // A token includes expert e with probability pi_e = k p_e, so a count is a sum of `tokens` Bernoulli
  // trials: mean T pi, variance T pi (1 - pi). Rare experts (mean < kColdMean and pi < 0.1, a suffix of
  // `order`): Poisson. The others: Gaussian, conditioned on the total the rare ones leave.
  const ColdDraw cold = draw_cold(layer, tokens, cap, rng, counts);
  const std::size_t hot = cold.hot;
  std::int64_t residual = slots - cold.total;
  if (hot > 0) {
    // X_i = T pi_i + sqrt(T) sd_i z_i + w_i (H - T sum pi - sqrt(T) sum sd_j z_j), w_i = sd_i^2 / sum sd^2:
    // the Gaussian with variances T sd_i^2 conditioned on summing to H.
    const double sqrt_t = std::sqrt(t);
    double s = 0;
    std::uint64_t bits = 0;
    for (std::size_t i = 0; i < hot; ++i) {
      if ((i & 3) == 0) bits = rng.next_u64();
      const double az = sqrt_t * layer.sd[i] * table_normal(bits >> 52);
      bits <<= 16;
      z_[i] = az;
      s += az;
    }
    const double var = layer.var_prefix[hot];
    const double gap = static_cast<double>(residual) - t * layer.pi_prefix[hot] - s;
    const double pi_sum = layer.pi_prefix[hot];
    const double inv_var = var > 0 ? 1.0 / var : 0.0;
    const double inv_pi_sum = 1.0 / pi_sum;
    std::int64_t assigned = 0;
    for (std::size_t i = 0; i < hot; ++i) {
      const double w = var > 0 ? layer.sd[i] * layer.sd[i] * inv_var : layer.pi[i] * inv_pi_sum;
      const double x = t * layer.pi[i] + z_[i] + w * gap;
      // Rounded to the nearest and clamped to [0, cap]; on non-negative values truncation is floor.
      const auto c = static_cast<std::int32_t>(std::clamp(x + 0.5, 0.0, static_cast<double>(cap)));
      counts[static_cast<std::size_t>(layer.order[i])] = c;
      assigned += c;
    }
    residual -= assigned;
  }
  residual = spread_residual(layer.order, hot, cap, residual, rng, counts);
  MOESIM_CHECK(residual == 0, "routing counts could not be made to sum to tokens x top_k");
}

RoutingSampler::Bins RoutingSampler::bin(const Layer& layer, std::span<const int> bin_of_expert, int bins) {
  const std::size_t n = layer.order.size();
  MOESIM_CHECK(bin_of_expert.size() == n && bins >= 1, "binning does not match the layer");
  Bins b;
  b.count = bins;
  b.begin.assign(static_cast<std::size_t>(bins) + 1, 0);
  for (std::size_t i = 0; i < n; ++i) {
    const int bin = bin_of_expert[static_cast<std::size_t>(layer.order[i])];
    MOESIM_CHECK(bin >= 0 && bin < bins, "expert outside the bins");
    ++b.begin[static_cast<std::size_t>(bin) + 1];
  }
  for (int k = 0; k < bins; ++k)
    b.begin[static_cast<std::size_t>(k) + 1] += b.begin[static_cast<std::size_t>(k)];
  b.at.resize(n);
  b.pi.resize(n);
  b.entry.resize(n);
  b.of.resize(n);
  std::vector<int> fill(b.begin.begin(), b.begin.end() - 1);
  for (std::size_t i = 0; i < n; ++i) {  // ascending positions within each bin
    const auto bin = static_cast<std::size_t>(bin_of_expert[static_cast<std::size_t>(layer.order[i])]);
    b.pi[static_cast<std::size_t>(fill[bin])] = layer.pi[i];
    b.entry[i] = fill[bin];
    b.of[i] = static_cast<int>(bin);
    b.at[static_cast<std::size_t>(fill[bin]++)] = static_cast<int>(i);
  }
  b.prefix.assign(n + static_cast<std::size_t>(bins), Bins::Sums{});
  for (int k = 0; k < bins; ++k) {
    const auto base = static_cast<std::size_t>(b.begin[static_cast<std::size_t>(k)] + k);
    for (int j = b.begin[static_cast<std::size_t>(k)]; j < b.begin[static_cast<std::size_t>(k) + 1]; ++j) {
      const auto i = static_cast<std::size_t>(b.at[static_cast<std::size_t>(j)]);
      const auto o = base + static_cast<std::size_t>(j - b.begin[static_cast<std::size_t>(k)]);
      const double var = b.prefix[o].var + layer.sd[i] * layer.sd[i];
      b.prefix[o + 1] = {.pi = b.prefix[o].pi + layer.pi[i], .var = var, .sd = std::sqrt(var)};
    }
  }
  b.alias_cut.assign(n, 0);
  b.alias.assign(n, 0);
  for (int k = 0; k < bins; ++k) {
    const auto first = static_cast<std::size_t>(b.begin[static_cast<std::size_t>(k)]);
    const std::size_t size = static_cast<std::size_t>(b.begin[static_cast<std::size_t>(k) + 1]) - first;
    build_alias_table(std::span(b.pi).subspan(first, size), std::span(b.alias_cut).subspan(first, size),
                      std::span(b.alias).subspan(first, size));
  }
  // The grid spans the counts where use_bin_sums() may hold: from kSumsMinMean pairs per expert to the
  // count at which fewer than kSumsMinCold cold experts per bin remain (pi descends: the one at n - that
  // many turns hot at kColdMean / pi).
  const auto min_cold = static_cast<std::size_t>(kSumsMinCold) * static_cast<std::size_t>(bins);
  if (min_cold <= n && min_cold > 0 && layer.pi[n - min_cold] < 0.1) {
    constexpr std::int64_t kMaxTokens = std::int64_t{1} << 24;
    const double pi = layer.pi[n - min_cold];
    const auto low = static_cast<std::int64_t>(std::ceil(kSumsMinMean * double(n) / layer.top_k));
    const std::int64_t high =
        pi > 0 ? std::min(kMaxTokens, static_cast<std::int64_t>(std::ceil(kColdMean / pi))) : kMaxTokens;
    if (low <= high) {
      b.grid_first = grid_index(low);
      b.grid.resize(static_cast<std::size_t>(grid_index(high) + 2 - b.grid_first));
    }
  }
  return b;
}

std::int64_t RoutingSampler::grid_point(std::int64_t index) {
  constexpr std::int64_t k = kGridPerOctave;
  if (index < k) return index;
  return (k + index % k) << (index / k - 1);
}

std::int64_t RoutingSampler::grid_index(std::int64_t tokens) {
  constexpr std::int64_t k = kGridPerOctave;
  static_assert(std::has_single_bit(static_cast<unsigned>(kGridPerOctave)));
  if (tokens < k) return std::max<std::int64_t>(tokens, 0);
  // tokens in [k << s, 2k << s): point k (s + 1) + (tokens >> s) - k.
  const int s = static_cast<int>(std::bit_width(static_cast<std::uint64_t>(tokens))) -
                static_cast<int>(std::bit_width(static_cast<unsigned>(k)));
  return k * (s + 1) + (tokens >> s) - k;
}

void RoutingSampler::fill_moment_grid(const Layer& layer, Bins& bins, std::int64_t tokens) {
  if (bins.grid.empty()) return;
  const std::int64_t i = grid_index(tokens) - bins.grid_first;
  const auto nb = static_cast<std::size_t>(bins.count);
  for (std::int64_t p = std::max<std::int64_t>(i, 0);
       p <= i + 1 && p < static_cast<std::int64_t>(bins.grid.size()); ++p) {
    std::vector<Bins::Moments>& at = bins.grid[static_cast<std::size_t>(p)];
    if (!at.empty()) continue;
    const double t = static_cast<double>(grid_point(p + bins.grid_first));
    std::vector<std::int32_t> bin_hot(nb);
    split_hot(bins, hot_count(layer, t), bin_hot);
    std::vector<Bins::Moments> moments(nb);
    for (std::size_t k = 0; k < nb; ++k) {
      const ColdMomentSums c = cold_moment_sums(bins, k, bin_hot[k], t);
      moments[k] = {
          .e1 = static_cast<float>(c.e1), .v = static_cast<float>(c.v), .me = static_cast<float>(c.me)};
    }
    at = std::move(moments);
  }
}

// Bin b's hot experts are its entries before the first position >= hot (each bin's positions ascend).
void RoutingSampler::split_hot(const Bins& bins, std::size_t hot, std::span<std::int32_t> bin_hot) {
  for (std::size_t k = 0; k < static_cast<std::size_t>(bins.count); ++k) {
    const auto first = bins.at.begin() + bins.begin[k];
    const auto last = bins.at.begin() + bins.begin[k + 1];
    bin_hot[k] = static_cast<std::int32_t>(std::lower_bound(first, last, static_cast<int>(hot)) - first);
  }
}

void RoutingSampler::move_split(const Bins& bins, std::size_t hot, std::span<std::int32_t> bin_hot,
                                std::size_t& split_for) {
  if (hot == split_for) return;
  if (split_for == kNoSplit) {
    split_hot(bins, hot, bin_hot);
  } else {  // the positions between the two counts change side, each in its own bin
    for (std::size_t i = split_for; i < hot; ++i) ++bin_hot[static_cast<std::size_t>(bins.of[i])];
    for (std::size_t i = hot; i < split_for; ++i) --bin_hot[static_cast<std::size_t>(bins.of[i])];
  }
  split_for = hot;
}

std::int64_t RoutingSampler::draw_hot_bins(const Layer& layer, const Bins& bins, double t, std::int32_t cap,
                                           std::size_t hot, std::int64_t residual, Rng& rng,
                                           std::span<std::int64_t> bin_pairs,
                                           std::span<const std::int32_t> bin_hot) {
  const auto nb = static_cast<std::size_t>(bins.count);
  // Bin b's hot experts: mean T P_b, variance T A_b before conditioning (P, A: sums of pi and sd^2);
  // Y_b = T P_b + sqrt(T A_b) z_b + (A_b / A) (H - T P - sqrt(T) sum sqrt(A_c) z_c) is sample()'s
  // formula summed over the bin.
  const double sqrt_t = std::sqrt(t);
  double s = 0;
  std::uint64_t bits = 0;
  for (std::size_t k = 0; k < nb; ++k) {
    if ((k & 3) == 0) bits = rng.next_u64();
    const double sd_b =
        bins.prefix[static_cast<std::size_t>(bins.begin[k]) + k + static_cast<std::size_t>(bin_hot[k])].sd;
    const double az = sqrt_t * sd_b * table_normal(bits >> 52);
    bits <<= 16;
    z_[k] = az;
    s += az;
  }
  const double var = layer.var_prefix[hot];
  const double pi_sum = layer.pi_prefix[hot];
  const double gap = static_cast<double>(residual) - t * pi_sum - s;
  const double inv_var = var > 0 ? 1.0 / var : 0.0;
  const double inv_pi_sum = 1.0 / pi_sum;
  std::int64_t assigned = 0;
  for (std::size_t k = 0; k < nb; ++k) {
    const std::size_t o = static_cast<std::size_t>(bins.begin[k]) + k + static_cast<std::size_t>(bin_hot[k]);
    const Bins::Sums& sums = bins.prefix[o];
    const double w = var > 0 ? sums.var * inv_var : sums.pi * inv_pi_sum;
    const double x = t * sums.pi + z_[k] + w * gap;
    const double bin_cap = static_cast<double>(bin_hot[k]) * cap;
    const auto c = static_cast<std::int64_t>(std::clamp(x + 0.5, 0.0, bin_cap));
    bin_pairs[k] = c;
    assigned += c;
  }
  residual -= assigned;
  // What rounding left, by +-1 over the bins with hot experts from a random bin (as spread_residual).
  const std::size_t start = rng.below(nb);
  return spread_over_bins(
      nb, start, residual, [&](std::size_t k) -> std::int64_t& { return bin_pairs[k]; },
      [&](std::size_t k) { return static_cast<std::int64_t>(bin_hot[k]) * cap; });
}

void RoutingSampler::sample_binned(const Layer& layer, const Bins& bins, std::int64_t tokens, Rng& rng,
                                   std::span<std::int32_t> cold, std::span<std::int64_t> bin_pairs,
                                   std::span<std::int32_t> bin_hot, std::span<const Tally> tally,
                                   std::span<Tally> bin_cold, std::size_t& split_for) {
  const std::size_t n = layer.order.size();
  const auto nb = static_cast<std::size_t>(bins.count);
  MOESIM_CHECK(cold.size() == n && bins.pi.size() == n && bin_pairs.size() == nb && bin_hot.size() == nb &&
                   bin_cold.size() == nb && tally.size() == kTallyCounts && nb <= z_.size(),
               "binned routing sampler size mismatch");
  const std::int64_t slots = tokens * layer.top_k;
  if (slots == 0) {
    std::fill(bin_pairs.begin(), bin_pairs.end(), 0);
    std::fill(bin_cold.begin(), bin_cold.end(), Tally{});
    std::fill(bin_hot.begin(), bin_hot.end(), 0);
    split_for = kNoSplit;
    std::fill(cold.begin(), cold.end(), 0);
    return;
  }
  const double t = static_cast<double>(tokens);
  const auto cap = static_cast<std::int32_t>(std::min<std::int64_t>(tokens, INT32_MAX));
  // Hot and cold as in sample() (positions [0, hot) of layer.order are hot); each bin's positions ascend,
  // so its hot experts come first and its cold ones are drawn, Poisson, in the bin's order.
  const auto hot = hot_count(layer, t);
  move_split(bins, hot, bin_hot, split_for);
  // draw_hot_bins() sets every bin's hot pairs; with no hot expert they stay 0.
  if (hot == 0) std::fill(bin_pairs.begin(), bin_pairs.end(), 0);
  std::int64_t cold_total = 0;
  // A cold expert's count (mean under kColdMean) stays below kMaxDrawn but for odds under 1e-50; the cap
  // keeps `tally`'s index in range whatever the draw.
  const std::int32_t drawn_cap = std::min(cap, kMaxDrawn);
  Rng draws = rng;  // a local copy keeps the generator's state in registers through the loop
  const double* pi = bins.pi.data();
  const Tally* add = tally.data();
  // Every expert hot (a large step): no cold sums, no draw.
  if (hot == n) std::fill(bin_cold.begin(), bin_cold.end(), Tally{});
  for (std::size_t k = 0; k < nb && hot < n; ++k) {
    const auto bin_first = static_cast<std::size_t>(bins.begin[k]);
    const auto from = static_cast<std::size_t>(bin_hot[k]);
    const auto first = bin_first + from;
    const auto last = static_cast<std::size_t>(bins.begin[k + 1]);
    // Few pairs among many cold experts (a small decode step): their independent Poissons are, exactly,
    // a Poisson total spread over them in proportion to pi (Poisson splitting), a draw per pair instead of
    // one per expert.
    const std::size_t base = bin_first + k;
    const std::size_t to = last - bin_first;
    const double low = bins.prefix[base + from].pi;
    const double mass = bins.prefix[base + to].pi - low;
    const double lambda = t * mass;
    Tally sum;
    // The pairs pick entries from the bin's alias table and a pick of a hot entry is drawn again: (low +
    // mass) / mass draws per pair on average, which must stay under kSplitMean per cold expert.
    if (mass > 0 && lambda * (low + mass) < kSplitMean * static_cast<double>(last - first) * mass) {
      std::fill(cold.begin() + static_cast<std::ptrdiff_t>(first),
                cold.begin() + static_cast<std::ptrdiff_t>(last), 0);
      // Poisson(lambda) as a sum of parts under kColdMean (independent Poissons add).
      const int parts = static_cast<int>(lambda / (kColdMean - 0.5)) + 1;
      const double part = lambda / parts;
      std::int64_t pairs = 0;
      for (int i = 0; i < parts; ++i) pairs += kPoissonTables.sample(part, draws.next_u64());
      const std::uint32_t* cut = bins.alias_cut.data() + bin_first;
      const std::int32_t* alias = bins.alias.data() + bin_first;
      std::int32_t* counts = cold.data() + bin_first;
      const std::uint64_t columns = to;
      const auto hot_entries = static_cast<std::int32_t>(from);
      // The bin's sum as the pairs land: every cold expert's tally at 0, plus what each step of a count
      // adds (the fields wrap as the sums do, so the order of the additions does not matter). A count stops
      // at drawn_cap, as the draw per expert clamps it.
      const std::uint64_t cold_experts = last - first;
      sum.a = cold_experts * add[0].a;
      sum.b = cold_experts * add[0].b;
      for (std::int64_t i = 0; i < pairs;) {
        const std::uint64_t r = draws.next_u64();
        const auto c = static_cast<std::int32_t>(((r >> 32) * columns) >> 32);
        const std::int32_t j = static_cast<std::uint32_t>(r) < cut[c] ? c : alias[c];
        if (j < hot_entries) continue;
        ++i;
        const std::int32_t was = counts[j];
        if (was == drawn_cap) continue;
        counts[j] = was + 1;
        ++cold_total;
        sum.a += add[was + 1].a - add[was].a;
        sum.b += add[was + 1].b - add[was].b;
      }
    } else {
      // One draw per expert, summed as it is drawn.
      for (std::size_t j = first; j < last; ++j) {
        const std::int32_t c = std::min(kPoissonTables.sample(t * pi[j], draws.next_u64()), drawn_cap);
        cold[j] = c;
        cold_total += c;
        sum.a += add[c].a;
        sum.b += add[c].b;
      }
    }
    bin_cold[k] = sum;
  }
  rng = draws;
  std::int64_t residual = slots - cold_total;
  if (hot > 0) residual = draw_hot_bins(layer, bins, t, cap, hot, residual, rng, bin_pairs, bin_hot);
  if (residual != 0) {  // no hot expert, or every hot bin at a bound: the cold experts take the rest
    // In the order of the positions, as sample() spreads it: in the bins' order a residual would land on
    // one or two bins (their variance grew by a quarter in a test with every expert cold).
    cells_.assign(bins.entry.begin() + static_cast<std::ptrdiff_t>(hot), bins.entry.end());
    residual = spread_residual_with(
        cells_, cells_.size(), cap, residual, rng, cold,
        [&](std::size_t j, std::int32_t before, std::int32_t after) {
          const auto k = static_cast<std::size_t>(
              std::upper_bound(bins.begin.begin(), bins.begin.end(), static_cast<int>(j)) -
              bins.begin.begin() - 1);
          const Tally& was = tally[static_cast<std::size_t>(before)];
          const Tally& now = tally[static_cast<std::size_t>(after)];
          bin_cold[k].a = bin_cold[k].a - was.a + now.a;
          bin_cold[k].b = bin_cold[k].b - was.b + now.b;
        });
  }
  MOESIM_CHECK(residual == 0, "routing counts could not be made to sum to tokens x top_k");
}

bool RoutingSampler::use_bin_sums(const Layer& layer, const Bins& bins, std::int64_t tokens) {
  const auto n = static_cast<double>(layer.order.size());
  if (static_cast<double>(tokens) * layer.top_k < kSumsMinMean * n) return false;
  const std::size_t cold = layer.order.size() - hot_count(layer, static_cast<double>(tokens));
  return cold >= static_cast<std::size_t>(kSumsMinCold) * static_cast<std::size_t>(bins.count);
}

void RoutingSampler::sample_bin_sums(const Layer& layer, const Bins& bins, std::int64_t tokens, Rng& rng,
                                     BinLaw& law, std::span<std::int64_t> bin_pairs,
                                     std::span<ColdSums> bin_cold, std::span<std::int32_t> kept_split,
                                     std::size_t& kept_for) {
  const auto nb = static_cast<std::size_t>(bins.count);
  MOESIM_CHECK(bins.pi.size() == layer.order.size() && bin_pairs.size() == nb && bin_cold.size() == nb &&
                   kept_split.size() == nb && nb <= z_.size(),
               "binned routing sampler size mismatch");
  std::fill(bin_pairs.begin(), bin_pairs.end(), 0);
  std::fill(bin_cold.begin(), bin_cold.end(), ColdSums{});
  const std::int64_t slots = tokens * layer.top_k;
  if (slots == 0) return;
  const double t = static_cast<double>(tokens);
  const auto cap = static_cast<std::int32_t>(std::min<std::int64_t>(tokens, INT32_MAX));
  if (law.tokens != tokens || law.cold.size() != nb) {
    // Each bin's cold experts: n experts of means m_j = T pi_j, independent Poissons. Their pairs P have
    // mean and variance M = sum m_j; touched U = sum 1[X_j > 0] has mean sum (1 - e_j) and variance
    // sum e_j (1 - e_j), e_j = e^-m_j; cov(P, U) = sum m_j e_j.
    law.tokens = tokens;
    law.hot = hot_count(layer, t);
    law.bin_hot.resize(nb);
    law.cold.resize(nb);
    move_split(bins, law.hot, kept_split, kept_for);
    std::copy(kept_split.begin(), kept_split.end(), law.bin_hot.begin());
    law.lambda = 0;
    // The moments from the grid when its points around `tokens` are filled (linear in the count between
    // them), else summed over the cold experts.
    const std::int64_t i = grid_index(tokens) - bins.grid_first;
    const bool grid = i >= 0 && i + 1 < static_cast<std::int64_t>(bins.grid.size()) &&
                      !bins.grid[static_cast<std::size_t>(i)].empty() &&
                      !bins.grid[static_cast<std::size_t>(i + 1)].empty();
    const Bins::Moments* below = grid ? bins.grid[static_cast<std::size_t>(i)].data() : nullptr;
    const Bins::Moments* above = grid ? bins.grid[static_cast<std::size_t>(i + 1)].data() : nullptr;
    double f = 0;
    if (grid) {
      const std::int64_t at = grid_point(i + bins.grid_first);
      f = double(tokens - at) / double(grid_point(i + 1 + bins.grid_first) - at);
    }
    // The variance rounding to integers adds (Sheppard); rounding at random adds about twice as much.
    constexpr double kRounding = 1.0 / 12;
    for (std::size_t k = 0; k < nb; ++k) {
      const auto first = static_cast<std::size_t>(bins.begin[k] + law.bin_hot[k]);
      const auto last = static_cast<std::size_t>(bins.begin[k + 1]);
      ColdMomentSums c;
      if (grid) {
        const auto lerp = [f](float a, float b) { return double(a) + f * (double(b) - double(a)); };
        c = {.e1 = lerp(below[k].e1, above[k].e1),
             .v = lerp(below[k].v, above[k].v),
             .me = lerp(below[k].me, above[k].me)};
      } else {
        c = cold_moment_sums(bins, k, law.bin_hot[k], t);
      }
      const std::size_t base = static_cast<std::size_t>(bins.begin[k]) + k;
      const double lambda = t * (bins.prefix[base + (last - static_cast<std::size_t>(bins.begin[k]))].pi -
                                 bins.prefix[base + static_cast<std::size_t>(law.bin_hot[k])].pi);
      const double slope = lambda > 0 ? c.me / lambda : 0.0;
      law.cold[k] = {
          .experts = static_cast<std::int32_t>(last - first),
          .lambda = static_cast<float>(lambda),
          .sd = static_cast<float>(std::sqrt(std::max(0.0, lambda - kRounding))),
          .touched = static_cast<float>(static_cast<double>(last - first) - c.e1),
          .slope = static_cast<float>(slope),
          .touched_sd = static_cast<float>(std::sqrt(std::max(0.0, c.v - slope * c.me - 2 * kRounding)))};
      law.lambda += lambda;
    }
  }
  const std::size_t hot = law.hot;
  const std::span<const std::int32_t> bin_hot = law.bin_hot;
  const double lambda_all = law.lambda;
  // Pairs: Gaussian with the Poisson's mean and variance; with no hot expert, conditioned (as the hot
  // bins are) on the layer's total, which is then the cold experts' alone.
  std::uint64_t bits = 0;
  double s = 0;
  for (std::size_t k = 0; k < nb; ++k) {
    if ((k & 3) == 0) bits = rng.next_u64();
    z_[k] = law.cold[k].sd * table_normal(bits >> 52);
    bits <<= 16;
    s += z_[k];
  }
  const double gap = hot > 0 ? 0.0 : static_cast<double>(slots) - lambda_all - s;
  std::int64_t cold_total = 0;
  for (std::size_t k = 0; k < nb; ++k) {
    const ColdMoments& c = law.cold[k];
    const double w = lambda_all > 0 ? c.lambda / lambda_all : 0.0;
    const double x = c.lambda + z_[k] + w * gap;
    const double bound = static_cast<double>(c.experts) * cap;
    bin_cold[k].pairs = static_cast<std::int64_t>(std::clamp(x + 0.5, 0.0, bound));
    cold_total += bin_cold[k].pairs;
  }
  std::int64_t residual = slots - cold_total;
  if (hot > 0) residual = draw_hot_bins(layer, bins, t, cap, hot, residual, rng, bin_pairs, bin_hot);
  if (residual != 0) {  // no hot expert, or every hot bin at a bound: +-1 over the cold sums
    const std::size_t start = rng.below(nb);
    residual = spread_over_bins(
        nb, start, residual, [&](std::size_t k) -> std::int64_t& { return bin_cold[k].pairs; },
        [&](std::size_t k) { return static_cast<std::int64_t>(law.cold[k].experts) * cap; });
  }
  MOESIM_CHECK(residual == 0, "routing counts could not be made to sum to tokens x top_k");
  constexpr double kUntouchedPoisson = 1.0;
  // Touched given pairs: the Gaussian's conditional law, rounded at random (floor(x + u), u uniform: the
  // mean is kept even when the law is a point or two, as near every expert touched) into what the pairs
  // allow (at least one expert per cap pairs, at most one per pair and the bin's cold experts).
  for (std::size_t k = 0; k < nb; ++k) {
    if ((k & 1) == 0) bits = rng.next_u64();
    const double z = table_normal(bits >> 52);
    const double v = static_cast<double>((bits >> 32) & 0xfffffU) * 0x1.0p-20;
    bits <<= 32;
    const ColdMoments& c = law.cold[k];
    const std::int64_t pairs = bin_cold[k].pairs;
    if (pairs == 0 || c.experts == 0) continue;
    const double mean = c.touched + c.slope * (static_cast<double>(pairs) - c.lambda);
    const double untouched = static_cast<double>(c.experts) - mean;
    // Nearly every cold expert touched: the untouched ones are a sum of rare Bernoullis, Poisson.
    const double x =
        untouched < kUntouchedPoisson
            ? static_cast<double>(c.experts - kPoissonTables.sample(std::max(0.0, untouched), rng.next_u64()))
            : std::floor(mean + c.touched_sd * z + v);
    const double low = static_cast<double>(pairs <= cap ? 1 : (pairs + cap - 1) / cap);
    const double high = static_cast<double>(std::min<std::int64_t>(pairs, c.experts));
    bin_cold[k].touched = static_cast<std::int32_t>(std::clamp(x, low, high));
  }
}

std::int64_t spread_residual(std::span<const int> cells, std::size_t hot, std::int32_t cap,
                             std::int64_t residual, Rng& rng, std::span<std::int32_t> counts) {
  return spread_residual_with(cells, hot, cap, residual, rng, counts,
                              [](std::size_t, std::int32_t, std::int32_t) {});
}

void sample_routing_counts(std::span<const double> probs, std::int64_t tokens, int top_k, Rng& rng,
                           std::span<std::int32_t> counts) {
  RoutingSampler sampler(static_cast<int>(probs.size()));
  sampler.sample(probs, tokens, top_k, rng, counts);
}

}  // namespace moesim
