#include "workloads/coactivation.h"

#include <algorithm>
#include <cmath>
#include <numeric>

#include "sim/engine/check.h"

namespace moesim {
namespace {

// Multinomial of n trials over probs[idx[i]] (total = their sum), added to out[idx[i]], by conditional
// binomials. O(idx.size()).
void add_multinomial_indexed(std::span<const double> probs, std::span<const int> idx, double total,
                             std::int64_t n, Rng& rng, std::span<std::int32_t> out) {
  double mass_left = total;
  std::int64_t left = n;
  for (std::size_t i = 0; i < idx.size() && left > 0; ++i) {
    const auto e = static_cast<std::size_t>(idx[i]);
    std::int64_t c;
    if (i + 1 == idx.size() || mass_left <= 0) {
      c = left;
    } else {
      c = sample_binomial(rng, left, std::clamp(probs[e] / mass_left, 0.0, 1.0));
    }
    mass_left -= probs[e];
    left -= c;
    out[e] = static_cast<std::int32_t>(out[e] + c);
  }
}

// Same over all experts in index order.
void add_multinomial_all(std::span<const double> probs, std::int64_t n, Rng& rng,
                         std::span<std::int32_t> out) {
  double mass_left = 1.0;
  std::int64_t left = n;
  const std::size_t size = probs.size();
  for (std::size_t e = 0; e < size && left > 0; ++e) {
    std::int64_t c;
    if (e + 1 == size || mass_left <= 0) {
      c = left;
    } else {
      c = sample_binomial(rng, left, std::clamp(probs[e] / mass_left, 0.0, 1.0));
    }
    mass_left -= probs[e];
    left -= c;
    out[e] = static_cast<std::int32_t>(out[e] + c);
  }
}

}  // namespace

CoactivationModel::CoactivationModel(const CoactivationSpec& spec, int layers, int experts, Rng rng)
    : layers_(layers), experts_(experts), group_size_(spec.group_size), rho_(spec.rho) {
  MOESIM_CHECK(group_size_ >= 1 && experts % group_size_ == 0, "group size must divide the expert count");
  MOESIM_CHECK(rho_ >= 0.0 && rho_ <= 1.0, "rho must lie in [0, 1]");
  const auto n = static_cast<std::size_t>(layers) * static_cast<std::size_t>(experts);
  group_of_.resize(n);
  members_.resize(n);
  for (int l = 0; l < layers; ++l) {
    auto* row = members_.data() + index(l, 0);
    std::iota(row, row + experts, 0);
    if (spec.shuffle_groups_per_layer) {
      for (int i = experts - 1; i > 0; --i) {  // Fisher-Yates with our own generator
        std::swap(row[i], row[rng.below(static_cast<std::uint64_t>(i) + 1)]);
      }
    }
    // Members sorted inside each group so that iteration order is canonical.
    for (int g = 0; g < experts / group_size_; ++g) {
      std::sort(row + g * group_size_, row + (g + 1) * group_size_);
      for (int i = 0; i < group_size_; ++i) group_of_[index(l, row[g * group_size_ + i])] = g;
    }
  }
}

void CoactivationModel::sample_counts(int layer, std::span<const double> probs, std::int64_t tokens,
                                      int top_k, Rng& rng, std::span<std::int32_t> counts,
                                      std::span<std::int64_t> group_tokens) const {
  MOESIM_CHECK(static_cast<int>(probs.size()) == experts_ && static_cast<int>(counts.size()) == experts_,
               "probabilities and counts must have one entry per expert");
  MOESIM_CHECK(static_cast<int>(group_tokens.size()) == groups(), "one group count per group");
  std::fill(counts.begin(), counts.end(), 0);
  const int n_groups = groups();
  // 1. Home groups: a multinomial of the tokens over P_g.
  std::int64_t tokens_left = tokens;
  double mass_left = 1.0;
  std::int64_t in_group_slots = 0;
  for (int g = 0; g < n_groups; ++g) {
    const auto mem = members(layer, g);
    double mass = 0;
    for (const int e : mem) mass += probs[static_cast<std::size_t>(e)];
    std::int64_t t;
    if (g + 1 == n_groups || mass_left <= 0) {
      t = tokens_left;
    } else {
      t = sample_binomial(rng, tokens_left, std::clamp(mass / mass_left, 0.0, 1.0));
    }
    mass_left -= mass;
    tokens_left -= t;
    group_tokens[static_cast<std::size_t>(g)] = t;
    // 2. Picks forced inside the home group: Binomial(t k, rho), spread over the group in proportion to p.
    const std::int64_t m = sample_binomial(rng, t * top_k, rho_);
    if (m > 0 && mass > 0) add_multinomial_indexed(probs, mem, mass, m, rng, counts);
    in_group_slots += m;
  }
  // 3. The other picks follow the marginals.
  add_multinomial_all(probs, tokens * top_k - in_group_slots, rng, counts);
  // 4. A token picks an expert at most once: push any excess over `tokens` to experts with room.
  std::int64_t carry = 0;
  for (auto& c : counts) {
    if (c > tokens) {
      carry += c - tokens;
      c = static_cast<std::int32_t>(tokens);
    }
  }
  for (std::size_t e = 0; carry > 0 && e < counts.size(); ++e) {
    const std::int64_t add = std::min<std::int64_t>(tokens - counts[e], carry);
    counts[e] = static_cast<std::int32_t>(counts[e] + add);
    carry -= add;
  }
}

double CoactivationModel::pair_rate(int layer, std::span<const double> probs, int top_k, int a,
                                    int b) const {
  const double k2 = static_cast<double>(top_k) * static_cast<double>(top_k - 1);
  const double pa = probs[static_cast<std::size_t>(a)];
  const double pb = probs[static_cast<std::size_t>(b)];
  double rate = (1.0 - rho_ * rho_) * pa * pb;
  const int g = group_of(layer, a);
  if (g == group_of(layer, b)) {
    double mass = 0;
    for (const int e : members(layer, g)) mass += probs[static_cast<std::size_t>(e)];
    if (mass > 0) rate += rho_ * rho_ * pa * pb / mass;
  }
  return k2 * rate;
}

void touch_fractions_independent(std::span<const double> probs, const SlotMap& map, int top_k,
                                 std::span<double> touch) {
  const int bins = map.bins();
  MOESIM_CHECK(static_cast<int>(touch.size()) == bins, "one touch fraction per bin");
  std::fill(touch.begin(), touch.end(), 0.0);
  for (std::size_t s = 0; s < map.slot_expert.size(); ++s) {
    const auto e = static_cast<std::size_t>(map.slot_expert[s]);
    touch[s / static_cast<std::size_t>(map.slots_per_bin)] += probs[e] / map.replicas[e];
  }
  for (double& t : touch) t = 1.0 - std::pow(std::max(0.0, 1.0 - t), top_k);
}

void touch_fractions_coactivated(const CoactivationModel& model, int layer, std::span<const double> probs,
                                 const SlotMap& map, int top_k, std::span<double> scratch,
                                 std::span<double> touch) {
  const int bins = map.bins();
  const int groups = model.groups();
  const auto nb = static_cast<std::size_t>(bins);
  MOESIM_CHECK(static_cast<int>(touch.size()) == bins, "one touch fraction per bin");
  MOESIM_CHECK(scratch.size() >= static_cast<std::size_t>(groups) * nb, "scratch holds groups x bins");
  const double rho = model.rho();
  const auto group_of = model.group_of_layer(layer);
  // scratch[g][j] = sum over slots of group-g experts in bin j of p_e / replicas_e (mass, not yet / P_g).
  std::fill(scratch.begin(), scratch.begin() + static_cast<std::ptrdiff_t>(groups * nb), 0.0);
  std::fill(touch.begin(), touch.end(), 0.0);  // first R_j, then the touch fractions
  for (std::size_t s = 0; s < map.slot_expert.size(); ++s) {
    const auto e = static_cast<std::size_t>(map.slot_expert[s]);
    const double share = probs[e] / map.replicas[e];
    const std::size_t j = s / static_cast<std::size_t>(map.slots_per_bin);
    scratch[static_cast<std::size_t>(group_of[e]) * nb + j] += share;
    touch[j] += share;
  }
  for (int g = 0; g < groups; ++g) {
    double mass = 0;
    for (const int e : model.members(layer, g)) mass += probs[static_cast<std::size_t>(e)];
    const auto row = scratch.subspan(static_cast<std::size_t>(g) * nb, nb);
    for (std::size_t j = 0; j < nb; ++j) {
      const double q = mass > 0 ? row[j] / mass : 0.0;
      const double pick = rho * q + (1.0 - rho) * touch[j];
      row[j] = mass * (1.0 - std::pow(std::max(0.0, 1.0 - pick), top_k));  // reuse as contribution
    }
  }
  for (std::size_t j = 0; j < nb; ++j) {
    double t = 0;
    for (int g = 0; g < groups; ++g) t += scratch[static_cast<std::size_t>(g) * nb + j];
    touch[j] = t;
  }
}

}  // namespace moesim
