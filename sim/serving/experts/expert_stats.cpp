#include "sim/serving/experts/expert_stats.h"

#include <algorithm>
#include <numeric>

#include "sim/engine/check.h"

namespace moesim {

ExpertStats::ExpertStats(int layers, int experts, int groups, const ExpertStatsSpec& spec)
    : n_(static_cast<std::size_t>(experts)),
      g_(static_cast<std::size_t>(std::max(groups, 1))),
      alpha_(2.0 / (spec.window_batches + 1.0)),
      spec_(spec),
      load_(static_cast<std::size_t>(layers) * n_, 0.0),
      group_load_(static_cast<std::size_t>(layers) * g_, 0.0),
      batches_(static_cast<std::size_t>(layers), 0),
      group_batches_(static_cast<std::size_t>(layers), 0),
      order_(n_) {
  MOESIM_CHECK(spec.window_batches >= 1, "the EWMA window must be at least one batch");
  MOESIM_CHECK(spec.hot_share > 0 && spec.hot_share <= spec.warm_share && spec.warm_share <= 1.0,
               "need 0 < hot_share <= warm_share <= 1");
}

void ExpertStats::observe(int layer, std::span<const std::int32_t> counts) {
  MOESIM_CHECK(counts.size() == n_, "one count per expert");
  double* row = load_.data() + static_cast<std::size_t>(layer) * n_;
  auto& b = batches_[static_cast<std::size_t>(layer)];
  const double a = b == 0 ? 1.0 : alpha_;
  for (std::size_t e = 0; e < n_; ++e) row[e] += a * (counts[e] - row[e]);
  ++b;
}

void ExpertStats::observe_groups(int layer, std::span<const std::int64_t> group_tokens) {
  MOESIM_CHECK(group_tokens.size() == g_, "one count per group");
  double* row = group_load_.data() + static_cast<std::size_t>(layer) * g_;
  auto& b = group_batches_[static_cast<std::size_t>(layer)];
  const double a = b == 0 ? 1.0 : alpha_;
  for (std::size_t g = 0; g < g_; ++g) row[g] += a * (static_cast<double>(group_tokens[g]) - row[g]);
  ++b;
}

void ExpertStats::classify(int layer, std::span<Hotness> out) {
  MOESIM_CHECK(out.size() == n_, "one class per expert");
  const auto l = load(layer);
  std::iota(order_.begin(), order_.end(), 0);
  std::stable_sort(order_.begin(), order_.end(), [&](int a, int b) {
    return l[static_cast<std::size_t>(a)] > l[static_cast<std::size_t>(b)];
  });
  const double total = std::accumulate(l.begin(), l.end(), 0.0);
  double before = 0;  // cumulative share of the experts ranked above this one
  for (const int e : order_) {
    Hotness h = Hotness::kCold;
    if (total <= 0) {
      h = Hotness::kCold;
    } else if (before < spec_.hot_share * total) {
      h = Hotness::kHot;
    } else if (before < spec_.warm_share * total) {
      h = Hotness::kWarm;
    }
    out[static_cast<std::size_t>(e)] = h;
    before += l[static_cast<std::size_t>(e)];
  }
}

void ExpertStats::coactivation(int layer, const CoactivationModel& model, int top_k, bool grouping_only,
                               std::span<double> matrix) const {
  MOESIM_CHECK(matrix.size() == n_ * n_, "matrix is E x E");
  MOESIM_CHECK(
      static_cast<std::size_t>(model.groups()) == g_ && static_cast<std::size_t>(model.experts()) == n_,
      "model shape differs from the statistics");
  const auto l = load(layer);
  const auto gl = group_load(layer);
  const double total = std::accumulate(l.begin(), l.end(), 0.0);
  const double group_total = std::accumulate(gl.begin(), gl.end(), 0.0);
  std::fill(matrix.begin(), matrix.end(), 0.0);
  if (total <= 0) return;
  // p_e (per-pick share), mass of p in each group, home share P_g, in-group share q_e = p_e / mass_g.
  std::vector<double> p(n_);
  std::vector<double> mass(g_, 0.0);
  for (std::size_t e = 0; e < n_; ++e) {
    p[e] = l[e] / total;
    mass[static_cast<std::size_t>(model.group_of(layer, static_cast<int>(e)))] += p[e];
  }
  std::vector<double> home_q(n_);  // P_{g(e)} q_e
  for (std::size_t e = 0; e < n_; ++e) {
    const auto g = static_cast<std::size_t>(model.group_of(layer, static_cast<int>(e)));
    const double home = group_total > 0 ? gl[g] / group_total : mass[g];
    home_q[e] = mass[g] > 0 ? home * p[e] / mass[g] : 0.0;
  }
  const double rho = model.rho();
  const double k2 = static_cast<double>(top_k) * static_cast<double>(top_k - 1);
  for (std::size_t a = 0; a < n_; ++a) {
    const int ga = model.group_of(layer, static_cast<int>(a));
    for (std::size_t b = 0; b < n_; ++b) {
      if (a == b) continue;
      const bool same = ga == model.group_of(layer, static_cast<int>(b));
      // sum_g P_g r_ga r_gb with r_g = rho q_g + (1 - rho) p, expanded.
      double v = grouping_only ? 0.0
                               : (1.0 - rho) * (1.0 - rho) * p[a] * p[b] +
                                     rho * (1.0 - rho) * (p[b] * home_q[a] + p[a] * home_q[b]);
      if (same && home_q[a] > 0) {
        const double home = group_total > 0 ? gl[static_cast<std::size_t>(ga)] / group_total
                                            : mass[static_cast<std::size_t>(ga)];
        v += rho * rho * home_q[a] * home_q[b] / home;
      }
      v *= k2;
      matrix[a * n_ + b] = v;
    }
  }
}

}  // namespace moesim
