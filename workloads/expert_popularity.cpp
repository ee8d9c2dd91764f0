#include "workloads/expert_popularity.h"

#include <algorithm>
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

void sample_routing_counts(std::span<const double> probs, std::int64_t tokens, int top_k, Rng& rng,
                           std::span<std::int32_t> counts) {
  MOESIM_CHECK(counts.size() == probs.size(), "counts and probabilities differ in size");
  std::int64_t left = tokens * top_k;
  double mass_left = 1.0;
  std::int64_t carry = 0;  // slots pushed on because an expert was already chosen by every token
  const std::size_t n = probs.size();
  for (std::size_t e = 0; e < n; ++e) {
    std::int64_t c;
    if (e + 1 == n || mass_left <= 0) {
      c = left;
    } else {
      const double p = std::clamp(probs[e] / mass_left, 0.0, 1.0);
      c = sample_binomial(rng, left, p);
    }
    mass_left -= probs[e];
    left -= c;
    c += carry;
    carry = std::max<std::int64_t>(0, c - tokens);
    c -= carry;
    counts[e] = static_cast<std::int32_t>(c);
  }
  // Any carry left at the end goes to experts with room, from the first one.
  for (std::size_t e = 0; carry > 0 && e < n; ++e) {
    const std::int64_t room = tokens - counts[e];
    const std::int64_t add = std::min(room, carry);
    counts[e] = static_cast<std::int32_t>(counts[e] + add);
    carry -= add;
  }
}

}  // namespace moesim
