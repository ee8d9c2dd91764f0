#include "sim/serving/experts/rerouting.h"

#include <algorithm>
#include <cmath>

#include "sim/engine/check.h"

namespace moesim {
namespace {

// Splits m over items in proportion to weight (whose sum over the items is `total`), each capped at cap(e);
// largest floors first, then the remainder in index order. Returns what was placed (less than m only when
// the caps are reached).
template <class Weight, class Cap>
std::int64_t split(std::span<const int> items, std::int64_t m, Weight weight, Cap cap,
                   std::span<std::int64_t> out, double total) {
  std::int64_t placed = 0;
  for (std::size_t i = 0; i < items.size(); ++i) {
    const int e = items[i];
    // m w / total is in [0, m]: truncation is its floor.
    const auto share = total > 0 ? static_cast<std::int64_t>(static_cast<double>(m) * weight(e) / total) : 0;
    out[i] = std::min(share, cap(e));
    placed += out[i];
  }
  for (std::size_t i = 0; i < items.size() && placed < m; ++i) {
    const std::int64_t add = std::min(cap(items[i]) - out[i], m - placed);
    out[i] += add;
    placed += add;
  }
  return placed;
}

// Each GPU's routed pairs into `load`, in slot order (a single copy's count as is, a replicated expert's
// over its copies); returns how many GPUs have a live slot (a lost GPU's slots are vacant: it takes none).
template <bool kAllSingle>
int gpu_loads(std::span<const int> map, std::span<const int> reps, int per,
              std::span<const std::int32_t> counts, std::span<double> load) {
  int live = 0;
  for (std::size_t g = 0; g < load.size(); ++g) {
    double sum = 0;
    bool any = false;
    for (std::size_t s = g * std::size_t(per); s < (g + 1) * std::size_t(per); ++s) {
      if (!kAllSingle && map[s] == Placement::kVacant) continue;
      any = true;
      const auto e = static_cast<std::size_t>(map[s]);
      const auto c = static_cast<double>(counts[e]);
      sum += kAllSingle || reps[e] == 1 ? c : c / reps[e];
    }
    load[g] = sum;
    live += any ? 1 : 0;
  }
  return live;
}

}  // namespace

Rerouter::Rerouter(int gpus, int slots_per_gpu)
    : load_(static_cast<std::size_t>(gpus)), amount_(2 * static_cast<std::size_t>(slots_per_gpu)) {}

RerouteResult Rerouter::apply(const Placement& placement, int layer, std::span<const double> probs,
                              std::int64_t tokens, double threshold, std::span<std::int32_t> counts) {
  MOESIM_CHECK(threshold >= 1.0, "the re-routing threshold is a multiple of the mean, at least 1");
  MOESIM_CHECK(load_.size() == static_cast<std::size_t>(placement.gpus()) &&
                   amount_.size() == 2 * static_cast<std::size_t>(placement.slots_per_gpu()),
               "rerouter sized for another placement");
  // One slot per expert (no redundant slots): every expert has a single copy, and the replica lookups
  // drop out of the loops.
  if (placement.slots() == placement.experts())
    return apply_with<true>(placement, layer, probs, tokens, threshold, counts);
  return apply_with<false>(placement, layer, probs, tokens, threshold, counts);
}

template <bool kAllSingle>
RerouteResult Rerouter::apply_with(const Placement& placement, int layer, std::span<const double> probs,
                                   std::int64_t tokens, double threshold, std::span<std::int32_t> counts) {
  const auto map = placement.phy2log(layer);
  const auto reps = placement.replicas(layer);
  const int per = placement.slots_per_gpu();
  const auto gpus = static_cast<int>(load_.size());
  const int live = gpu_loads<kAllSingle>(map, reps, per, counts, load_);
  double total = 0;
  for (const double l : load_) total += l;
  const double limit = threshold * total / live;
  auto single = [&](int e) {
    return kAllSingle || (e != Placement::kVacant && reps[static_cast<std::size_t>(e)] == 1);
  };
  RerouteResult result;
  for (int iter = 0; iter < 4 * gpus; ++iter) {
    const auto hi = static_cast<int>(std::max_element(load_.begin(), load_.end()) - load_.begin());
    if (load_[static_cast<std::size_t>(hi)] <= limit + 1e-9) {
      result.within_threshold = true;
      return result;
    }
    // Least loaded GPU that has a single-copy expert with room (the first of equals). Mostly the least loaded
    // GPU has one: it is looked at first.
    const auto has_room = [&](int g) {
      for (int s = g * per; s < (g + 1) * per; ++s) {
        const int e = map[static_cast<std::size_t>(s)];
        if (single(e) && counts[static_cast<std::size_t>(e)] < tokens) return true;
      }
      return false;
    };
    int lo = hi == 0 ? 1 : 0;
    for (int g = lo + 1; g < gpus; ++g) {
      if (g != hi && load_[static_cast<std::size_t>(g)] < load_[static_cast<std::size_t>(lo)]) lo = g;
    }
    if (lo >= gpus || !has_room(lo)) {
      lo = -1;
      for (int g = 0; g < gpus; ++g) {
        if (g == hi || (lo >= 0 && load_[static_cast<std::size_t>(g)] >= load_[static_cast<std::size_t>(lo)]))
          continue;
        if (has_room(g)) lo = g;
      }
    }
    if (lo < 0) break;
    const double excess = load_[static_cast<std::size_t>(hi)] - limit;
    const double room = limit - load_[static_cast<std::size_t>(lo)];
    auto m = static_cast<std::int64_t>(std::ceil(excess - 1e-9));
    m = std::min(m, static_cast<std::int64_t>(std::floor(room + 1e-9)));
    if (m <= 0) break;
    const auto hi_slots = map.subspan(static_cast<std::size_t>(hi * per), static_cast<std::size_t>(per));
    const auto lo_slots = map.subspan(static_cast<std::size_t>(lo * per), static_cast<std::size_t>(per));
    const auto take = std::span<std::int64_t>(amount_).first(static_cast<std::size_t>(per));
    // Donors give in proportion to their counts; receivers take in proportion to their probability.
    auto donor_w = [&](int e) {
      return single(e) ? static_cast<double>(counts[static_cast<std::size_t>(e)]) : 0.0;
    };
    auto donor_cap = [&](int e) {
      return single(e) ? static_cast<std::int64_t>(counts[static_cast<std::size_t>(e)]) : 0;
    };
    // With one copy per expert the donors' weights sum to the GPU's load (integers: exact in any order).
    double donor_total = 0;
    if (kAllSingle) {
      donor_total = load_[static_cast<std::size_t>(hi)];
    } else {
      for (const int e : hi_slots) donor_total += donor_w(e);
    }
    const std::int64_t taken = split(hi_slots, m, donor_w, donor_cap, take, donor_total);
    auto recv_w = [&](int e) { return single(e) ? probs[static_cast<std::size_t>(e)] : 0.0; };
    double recv_total = 0;
    for (const int e : lo_slots) recv_total += recv_w(e);
    auto recv_cap = [&](int e) { return single(e) ? tokens - counts[static_cast<std::size_t>(e)] : 0; };
    const auto give = std::span<std::int64_t>(amount_).subspan(static_cast<std::size_t>(per),
                                                               static_cast<std::size_t>(per));
    const std::int64_t moved = split(lo_slots, taken, recv_w, recv_cap, give, recv_total);
    if (moved <= 0) break;
    // Take back only what the receivers accepted (in slot order), so totals stay conserved.
    std::int64_t back = taken - moved;
    for (std::size_t i = 0; i < take.size() && back > 0; ++i) {
      const std::int64_t r = std::min(take[i], back);
      take[i] -= r;
      back -= r;
    }
    for (std::size_t i = 0; i < hi_slots.size(); ++i) {  // a vacant slot took and gave nothing
      if (take[i] == 0) continue;
      counts[static_cast<std::size_t>(hi_slots[i])] =
          static_cast<std::int32_t>(counts[static_cast<std::size_t>(hi_slots[i])] - take[i]);
    }
    for (std::size_t i = 0; i < lo_slots.size(); ++i) {
      if (give[i] == 0) continue;
      counts[static_cast<std::size_t>(lo_slots[i])] =
          static_cast<std::int32_t>(counts[static_cast<std::size_t>(lo_slots[i])] + give[i]);
    }
    load_[static_cast<std::size_t>(hi)] -= static_cast<double>(moved);
    load_[static_cast<std::size_t>(lo)] += static_cast<double>(moved);
    result.rerouted += moved;
  }
  const double peak = *std::max_element(load_.begin(), load_.end());
  result.within_threshold = peak <= limit + 1e-9;
  return result;
}

}  // namespace moesim
