#include "workloads/coactivation.h"

#include <algorithm>
#include <array>
#include <cmath>
#include <numbers>
#include <numeric>

#include "sim/engine/check.h"
#include "workloads/expert_popularity.h"

namespace moesim {
namespace {

// Random bits handed out 12 at a time (five standard normals per 64-bit draw through table_normal).
class NormalBits {
 public:
  explicit NormalBits(Rng& rng) : rng_(rng) {}
  double normal() {
    if (left_ == 0) {
      bits_ = rng_.next_u64();
      left_ = 5;
    }
    --left_;
    const double z = table_normal(bits_ >> 52);
    bits_ <<= 12;
    return z;
  }
  Rng& rng() { return rng_; }

 private:
  Rng& rng_;
  std::uint64_t bits_ = 0;
  int left_ = 0;
};

// Binomial(n, p) by sample_binomial's rules (sim/engine/random.h), its normals from the 4096-quantile table.
std::int64_t binomial(NormalBits& bits, std::int64_t n, double p) {
  return sample_binomial_with(bits.rng(), n, p, [&bits] { return bits.normal(); });
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
  CoactivationSampler sampler(*this);
  sampler.sample(layer, CoactivationSampler::prepare(*this, layer, probs), probs, tokens, top_k, rng, counts,
                 group_tokens);
}

CoactivationSampler::Layer CoactivationSampler::prepare(const CoactivationModel& model, int layer,
                                                        std::span<const double> probs) {
  MOESIM_CHECK(static_cast<int>(probs.size()) == model.experts(), "one probability per expert");
  Layer l;
  const auto groups = static_cast<std::size_t>(model.groups());
  const auto size = static_cast<std::size_t>(model.group_size());
  std::vector<double> mass(groups, 0.0);
  l.member.resize(groups * size);
  l.q.resize(groups * size);
  l.sd.resize(groups * size);
  l.q_prefix.assign(groups * (size + 1), 0.0);
  for (std::size_t g = 0; g < groups; ++g) {
    const auto mem = model.members(layer, static_cast<int>(g));
    for (const int e : mem) mass[g] += probs[static_cast<std::size_t>(e)];
    auto* ids = l.member.data() + g * size;
    std::copy(mem.begin(), mem.end(), ids);
    // By descending probability, ties in member order: an insertion sort (stable, as std::stable_sort, and
    // without its buffer allocation per group; groups are small and redone on every drift update).
    for (std::size_t i = 1; i < size; ++i) {
      const int x = ids[i];
      const double px = probs[static_cast<std::size_t>(x)];
      std::size_t j = i;
      for (; j > 0 && probs[static_cast<std::size_t>(ids[j - 1])] < px; --j) ids[j] = ids[j - 1];
      ids[j] = x;
    }
    for (std::size_t i = 0; i < size; ++i) {
      const double q = mass[g] > 0 ? probs[static_cast<std::size_t>(ids[i])] / mass[g] : 0.0;
      l.q[g * size + i] = q;
      l.sd[g * size + i] = std::sqrt(q);
      l.q_prefix[g * (size + 1) + i + 1] = l.q_prefix[g * (size + 1) + i] + q;
    }
  }
  l.groups = RoutingSampler::prepare_multinomial(mass);
  return l;
}

CoactivationSampler::CoactivationSampler(const CoactivationModel& model)
    : model_(model),
      groups_(model.groups()),
      home_(static_cast<std::size_t>(model.groups())),
      other_(static_cast<std::size_t>(model.groups())),
      z_(static_cast<std::size_t>(model.group_size())) {}

void CoactivationSampler::spread(const Layer& prepared, int g, std::int64_t n, Rng& rng,
                                 std::span<std::int32_t> counts) {
  const auto size = static_cast<std::size_t>(model_.group_size());
  const int* ids = prepared.member.data() + static_cast<std::size_t>(g) * size;
  const double* q = prepared.q.data() + static_cast<std::size_t>(g) * size;
  const double* prefix = prepared.q_prefix.data() + static_cast<std::size_t>(g) * (size + 1);
  if (n <= 0) return;
  if (n <= RoutingSampler::kDirectTrials) {  // one categorical draw per pick, two per 64 random bits
    const double scale = prefix[size] * 0x1.0p-32;
    std::uint64_t bits = 0;
    for (std::int64_t t = 0; t < n; ++t) {
      if ((t & 1) == 0) bits = rng.next_u64();
      const double u = static_cast<double>(bits >> 32) * scale;
      bits <<= 32;
      // The first member whose prefix passes u: the count of prefixes at or below u (they ascend), without
      // a branch per member.
      std::size_t i = 0;
      for (std::size_t j = 1; j < size; ++j) i += u >= prefix[j] ? 1 : 0;
      ++counts[static_cast<std::size_t>(ids[i])];
    }
    return;
  }
  const double nd = static_cast<double>(n);
  const double cold_q = std::min(0.1, RoutingSampler::kColdMean / nd);
  std::size_t hot = 0;
  while (hot < size && q[hot] >= cold_q) ++hot;
  std::int64_t left = n;
  for (std::size_t i = hot; i < size; ++i) {
    const std::int32_t c =
        std::min<std::int32_t>(poisson_cold(nd * q[i], rng.next_u64()), static_cast<std::int32_t>(n));
    counts[static_cast<std::size_t>(ids[i])] = c;
    left -= c;
  }
  if (hot > 0) {
    // Gaussians of variance n q conditioned on summing to what the cold members left (as in
    // RoutingSampler::sample, with weights q / Q over the hot members).
    const double* sd = prepared.sd.data() + static_cast<std::size_t>(g) * size;
    const double sqrt_n = std::sqrt(nd);
    double s = 0;
    std::uint64_t bits = 0;
    for (std::size_t i = 0; i < hot; ++i) {
      if ((i & 3) == 0) bits = rng.next_u64();
      z_[i] = sqrt_n * sd[i] * table_normal(bits >> 52);
      bits <<= 16;
      s += z_[i];
    }
    const double hot_q = prefix[hot];
    const double w = hot_q > 0 ? (static_cast<double>(left) - nd * hot_q - s) / hot_q : 0.0;
    for (std::size_t i = 0; i < hot; ++i) {
      const double x = nd * q[i] + z_[i] + q[i] * w;
      const auto c = static_cast<std::int32_t>(std::clamp(x + 0.5, 0.0, nd));
      counts[static_cast<std::size_t>(ids[i])] = c;
      left -= c;
    }
  }
  // The residual of rounding and clamping by +-1, from a random member (hot ones first).
  left = spread_residual({ids, size}, hot, static_cast<std::int32_t>(n), left, rng, counts);
  MOESIM_CHECK(left == 0, "a group's picks could not be spread over its members");
}

void CoactivationSampler::sample(int layer, const Layer& prepared, std::span<const double> probs,
                                 std::int64_t tokens, int top_k, Rng& rng, std::span<std::int32_t> counts,
                                 std::span<std::int64_t> group_tokens) {
  const int n_groups = model_.groups();
  MOESIM_CHECK(static_cast<int>(probs.size()) == model_.experts() &&
                   static_cast<int>(counts.size()) == model_.experts(),
               "probabilities and counts must have one entry per expert");
  MOESIM_CHECK(static_cast<int>(group_tokens.size()) == n_groups, "one group count per group");
  MOESIM_CHECK(prepared.member.size() == counts.size(), "sampler tables of another model");
  MOESIM_CHECK(tokens >= 0 && tokens <= INT32_MAX, "token count out of range");
  (void)layer;  // the tables carry the layer's groups
  std::fill(counts.begin(), counts.end(), 0);
  // 1-2. Home groups and the picks forced into them.
  groups_.sample_multinomial(prepared.groups, tokens, rng, home_);
  NormalBits bits(rng);
  std::int64_t forced = 0;
  for (std::size_t g = 0; g < home_.size(); ++g) {
    group_tokens[g] = home_[g];
    home_[g] = static_cast<std::int32_t>(binomial(bits, std::int64_t{home_[g]} * top_k, model_.rho()));
    forced += home_[g];  // home_ now holds the forced picks
  }
  // 3. The other picks by group, then (forced + other) over each group's members.
  groups_.sample_multinomial(prepared.groups, tokens * top_k - forced, rng, other_);
  for (std::size_t g = 0; g < other_.size(); ++g)
    spread(prepared, static_cast<int>(g), std::int64_t{home_[g]} + other_[g], rng, counts);
  // 4. At most one pick per token and expert.
  std::int64_t carry = 0;
  double full_mass = 0;  // of the experts at the cap
  for (std::size_t e = 0; e < counts.size(); ++e) {
    if (counts[e] >= tokens) {
      carry += counts[e] - tokens;
      counts[e] = static_cast<std::int32_t>(tokens);
      full_mass += probs[e];
    }
  }
  for (int sweep = 0; carry > 0 && sweep < 16; ++sweep) {
    double room_mass = prepared.groups.pi_prefix.back() - full_mass;
    if (sweep > 0) {  // experts filled by the last sweep have no room either
      room_mass = 0;
      for (std::size_t e = 0; e < counts.size(); ++e) {
        if (counts[e] < tokens) room_mass += probs[e];
      }
    }
    if (room_mass <= 0) break;
    // Points at (u + i) * step, i = 0..carry-1; expert e takes those in its interval of the running sum.
    const double step = room_mass / static_cast<double>(carry);
    const std::int64_t points = carry;
    double next = rng.uniform() * step;
    std::int64_t placed = 0;
    double below = 0;
    for (std::size_t e = 0; e < counts.size() && placed < points; ++e) {
      if (counts[e] >= tokens) continue;
      below += probs[e];
      std::int64_t want = 0;
      while (placed < points && next < below) {
        ++want;
        ++placed;
        next += step;
      }
      const std::int64_t add = std::min<std::int64_t>(want, tokens - counts[e]);
      counts[e] = static_cast<std::int32_t>(counts[e] + add);
      carry -= add;
    }
  }
  for (std::size_t e = 0; carry > 0 && e < counts.size(); ++e) {  // last resort, in index order
    const std::int64_t add = std::min<std::int64_t>(tokens - counts[e], carry);
    counts[e] = static_cast<std::int32_t>(counts[e] + add);
    carry -= add;
  }
}

double CoactivationModel::pair_rate(int layer, std::span<const double> probs, int top_k, int a, int b) const {
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

namespace {

// Expected distinct items among n draws with replacement: 1 - (1 - x)^n per item of mass x, and its
// derivative in n, -log(1 - x) (1 - x)^n; `log1m` is log(1 - x).
struct Distinct {
  double value = 0;
  double slope = 0;
};
Distinct distinct(double x, double log1m, double n) {
  if (x <= 0) return {};
  if (x >= 1) return {.value = 1.0, .slope = 0.0};
  const double left = std::exp(n * log1m);
  return {.value = 1.0 - left, .slope = -log1m * left};
}
Distinct distinct(double x, double n) { return distinct(x, x > 0 && x < 1 ? std::log1p(-x) : 0.0, n); }

// Grid of draw counts n_i = k * 2^(i / 8): from k (all picks distinct) to k * 2^5.9.
double grid_draws(int top_k, int i) { return top_k * std::exp2(i / 8.0); }
constexpr double kMaxLog2Draws = (kTouchGridPoints - 1) / 8.0;

// Solves f(n) = k for n in [k, k 2^5.9] (f increasing; f(n) returns the value and df/dn), clamped to that
// range: Newton in y = log2(n / k), kept inside a bisection bracket (Numerical Recipes' rtsafe). About six
// evaluations instead of the forty of plain bisection, to the same root. `y_start` in (0, 5.9), the root of
// a nearby problem (the same group before a drift update), starts Newton there: three or four evaluations.
template <class F>
double solve_draws(F f, int top_k, double y_start = 0.0) {
  const double k = top_k;
  const double n_hi = k * std::exp2(kMaxLog2Draws);
  bool hi_checked = false;  // f(n_hi) is evaluated only if Newton heads past it
  double lo = 0.0;
  double hi = kMaxLog2Draws;
  double y = 0.0;
  Distinct fy;
  if (y_start > 0 && y_start < kMaxLog2Draws) {
    y = y_start;
    fy = f(k * std::exp2(y));
    (fy.value < k ? lo : hi) = y;
  } else {
    fy = f(k);
    if (fy.value >= k) return k;
  }
  for (int it = 0; it < 100; ++it) {
    if (fy.value == k) return k * std::exp2(y);
    const double dy = fy.slope * k * std::exp2(y) * std::numbers::ln2;
    double next = dy > 0 ? y - (fy.value - k) / dy : lo - 1;
    if (!hi_checked && !(next < hi)) {
      if (f(n_hi).value <= k) return n_hi;
      hi_checked = true;
    }
    // A Newton step that has converged may land on the bracket end it just set: accept it there.
    if (std::abs(next - y) <= 1e-13 * (1.0 + y)) return k * std::exp2(next);
    if (!(next > lo && next < hi)) next = 0.5 * (lo + hi);
    y = next;
    fy = f(k * std::exp2(y));
    (fy.value < k ? lo : hi) = y;
    if (hi - lo <= 1e-13) break;
  }
  return k * std::exp2(y);
}

}  // namespace

namespace {

// Per-bin sums of the slot masses p_e / replicas_e at one granularity.
void bin_masses(std::span<const double> probs, const SlotMap& map, int slots_per_bin,
                std::span<double> touch) {
  MOESIM_CHECK(slots_per_bin >= 1 && map.slot_expert.size() == touch.size() * std::size_t(slots_per_bin),
               "bins must split the slots evenly, one touch fraction per bin");
  std::fill(touch.begin(), touch.end(), 0.0);
  for (std::size_t s = 0; s < map.slot_expert.size(); ++s) {
    if (map.slot_expert[s] < 0) continue;  // vacant
    const auto e = static_cast<std::size_t>(map.slot_expert[s]);
    touch[s / static_cast<std::size_t>(slots_per_bin)] += probs[e] / map.replicas[e];
  }
}

// The slot masses p_e / replicas_e, descending (`known` when the caller has them, else sorted into
// memo.next); true when they (and the parameters) are those memo.sums were computed from. Otherwise they
// become memo.masses and the caller recomputes the sums.
bool memo_holds(std::span<const double> probs, const SlotMap& map, int top_k, double rho, TouchMemo& memo,
                std::span<const double> known) {
  const bool same_params = memo.top_k == top_k && memo.rho == rho;
  if (!known.empty()) {
    MOESIM_CHECK(known.size() == map.slot_expert.size(), "one known mass per slot");
    if (same_params && std::equal(known.begin(), known.end(), memo.masses.begin(), memo.masses.end()))
      return true;
    memo.masses.assign(known.begin(), known.end());
  } else {
    memo.next.resize(map.slot_expert.size());
    for (std::size_t s = 0; s < map.slot_expert.size(); ++s) {  // a vacant slot has no mass
      const auto e = static_cast<std::size_t>(map.slot_expert[s]);
      memo.next[s] = map.slot_expert[s] < 0 ? 0.0 : probs[e] / map.replicas[e];
    }
    std::sort(memo.next.begin(), memo.next.end(), std::greater<>());
    if (same_params && memo.next == memo.masses) return true;
    std::swap(memo.masses, memo.next);
  }
  if (!same_params) memo.group_y.clear();
  memo.top_k = top_k;
  memo.rho = rho;
  return false;
}

}  // namespace

void touch_fractions_independent(std::span<const double> probs, const SlotMap& map, int top_k,
                                 std::span<const TouchBins> bins, TouchMemo& memo,
                                 std::span<const double> known_masses) {
  if (!memo_holds(probs, map, top_k, 0.0, memo, known_masses)) {
    // log(1 - m_s) once per slot; the draw count depends on the masses only.
    const std::vector<double>& m = memo.masses;
    memo.next.resize(m.size());
    for (std::size_t s = 0; s < m.size(); ++s) memo.next[s] = m[s] > 0 && m[s] < 1 ? std::log1p(-m[s]) : 0.0;
    const double n = solve_draws(
        [&](double draws) {
          Distinct d;
          for (std::size_t s = 0; s < m.size(); ++s) {
            const Distinct one = distinct(m[s], memo.next[s], draws);
            d.value += one.value;
            d.slope += one.slope;
          }
          return d;
        },
        top_k);
    memo.sums.assign(1, n);
  }
  const double n = memo.sums[0];
  for (const TouchBins& b : bins) {
    bin_masses(probs, map, b.slots_per_bin, b.touch);
    for (double& t : b.touch) t = distinct(t, n).value;
  }
}

void touch_fractions_independent(std::span<const double> probs, const SlotMap& map, int top_k,
                                 std::span<double> touch) {
  const TouchBins bins[] = {{.slots_per_bin = map.slots_per_bin, .touch = touch}};
  TouchMemo memo;
  touch_fractions_independent(probs, map, top_k, bins, memo);
}

void touch_fractions_coactivated(const CoactivationModel& model, int layer, std::span<const double> probs,
                                 const SlotMap& map, int top_k, std::span<double> scratch,
                                 std::span<const TouchBins> bins, TouchMemo& memo,
                                 std::span<const double> known_masses) {
  const int groups = model.groups();
  const auto ng = static_cast<std::size_t>(groups);
  std::size_t max_bins = 0;
  for (const TouchBins& b : bins) max_bins = std::max(max_bins, b.touch.size());
  MOESIM_CHECK(scratch.size() >= touch_scratch_size(groups, static_cast<int>(max_bins)), "scratch too small");
  const double rho = model.rho();
  const auto group_of = model.group_of_layer(layer);
  // Layout: P_g, the draw count n_g of a token of group g, then per granularity q[g][j] (share of group g's
  // mass held by bin j) and log(1 - r) per bin. The tabulated g-independent sum lives in the memo.
  const auto mass = scratch.subspan(0, ng);
  const auto draws_of = scratch.subspan(ng, ng);
  const auto q_all = scratch.subspan(2 * ng, ng * max_bins);
  const auto log1m_bin = scratch.subspan(2 * ng + ng * max_bins, max_bins);
  std::fill(scratch.begin(), scratch.begin() + static_cast<std::ptrdiff_t>(2 * ng), 0.0);
  for (std::size_t e = 0; e < probs.size(); ++e) mass[static_cast<std::size_t>(group_of[e])] += probs[e];
  // table[i] = sum over slots of distinct((1 - rho) m_s, n_i): every slot as seen by a token of another
  // group. n_{i+8} = 2 n_i, so (1 - x)^{n_{i+8}} is the square of (1 - x)^{n_i}: eight exponentials per slot.
  // It depends on the multiset of slot masses only (memo).
  if (!memo_holds(probs, map, top_k, rho, memo, known_masses)) {
    memo.sums.assign(kTouchGridPoints, 0.0);
    std::array<double, 8> grid{};
    for (int i = 0; i < 8; ++i) grid[static_cast<std::size_t>(i)] = grid_draws(top_k, i);
    for (const double m : memo.masses) {
      const double x = (1.0 - rho) * m;
      if (x <= 0) continue;
      if (x >= 1) {
        for (double& v : memo.sums) v += 1.0;
        continue;
      }
      const double log1m = std::log1p(-x);
      for (int i = 0; i < 8; ++i) {
        double left = std::exp(grid[static_cast<std::size_t>(i)] * log1m);
        for (int j = i; j < kTouchGridPoints; j += 8) {
          memo.sums[static_cast<std::size_t>(j)] += 1.0 - left;
          left *= left;
        }
      }
    }
  }
  const std::vector<double>& table = memo.sums;
  auto table_at = [&](double draws) {  // linear in log2(n / k); slope in n
    const double x = std::clamp(8.0 * std::log2(draws / top_k), 0.0, kTouchGridPoints - 1.0);
    const auto i = std::min(static_cast<std::size_t>(x), static_cast<std::size_t>(kTouchGridPoints - 2));
    const double f = x - static_cast<double>(i);
    return Distinct{.value = (1.0 - f) * table[i] + f * table[i + 1],
                    .slope = (table[i + 1] - table[i]) * 8.0 / (draws * std::numbers::ln2)};
  };
  memo.group_y.resize(ng, 0.0);
  for (std::size_t g = 0; g < ng; ++g) {
    if (mass[g] <= 0) continue;
    const auto mem = model.members(layer, static_cast<int>(g));
    // A member's copies as seen by a token of this group (in) and of another group (out), with
    // log(1 - mass) computed once per solve (on the stack for groups of up to 64).
    struct Member {
      double copies, in, log1m_in, out, log1m_out;
    };
    auto member = [&](int e) {
      const auto u = static_cast<std::size_t>(e);
      const double c = map.replicas[u];
      const double in = (rho * probs[u] / mass[g] + (1.0 - rho) * probs[u]) / c;
      const double out = (1.0 - rho) * probs[u] / c;
      auto log1m = [](double x) { return x > 0 && x < 1 ? std::log1p(-x) : 0.0; };
      return Member{.copies = c, .in = in, .log1m_in = log1m(in), .out = out, .log1m_out = log1m(out)};
    };
    std::array<Member, 64> cache;
    const bool cached = mem.size() <= cache.size();
    for (std::size_t i = 0; cached && i < mem.size(); ++i) cache[i] = member(mem[i]);
    draws_of[g] = solve_draws(
        [&](double draws) {
          Distinct d = table_at(draws);
          for (std::size_t i = 0; i < mem.size(); ++i) {
            const Member m = cached ? cache[i] : member(mem[i]);
            const Distinct in = distinct(m.in, m.log1m_in, draws);
            const Distinct out = distinct(m.out, m.log1m_out, draws);
            d.value += m.copies * (in.value - out.value);
            d.slope += m.copies * (in.slope - out.slope);
          }
          return d;
        },
        top_k, memo.group_y[g]);
    memo.group_y[g] = std::log2(draws_of[g] / top_k);
  }
  for (const TouchBins& b : bins) {
    const std::size_t nb = b.touch.size();
    const auto q = q_all.subspan(0, ng * nb);
    std::fill(q.begin(), q.end(), 0.0);
    bin_masses(probs, map, b.slots_per_bin, b.touch);  // R_j first
    for (std::size_t s = 0; s < map.slot_expert.size(); ++s) {
      if (map.slot_expert[s] < 0) continue;  // vacant
      const auto e = static_cast<std::size_t>(map.slot_expert[s]);
      const auto g = static_cast<std::size_t>(group_of[e]);
      if (mass[g] > 0)
        q[g * nb + s / static_cast<std::size_t>(b.slots_per_bin)] += probs[e] / map.replicas[e] / mass[g];
    }
    // A bin that holds none of group g's members (most bins when the placement keeps groups together) is
    // seen by g's tokens at r = (1 - rho) R_j, whose log(1 - r) is the same for every such group.
    for (std::size_t j = 0; j < nb; ++j) {
      const double out = (1.0 - rho) * b.touch[j];
      log1m_bin[j] = out > 0 && out < 1 ? std::log1p(-out) : 0.0;
    }
    for (std::size_t g = 0; g < ng; ++g) {
      if (mass[g] <= 0) continue;
      for (std::size_t j = 0; j < nb; ++j) {
        const double q_gj = q[g * nb + j];
        const double r_j = rho * q_gj + (1.0 - rho) * b.touch[j];
        const Distinct d = q_gj == 0 ? distinct(r_j, log1m_bin[j], draws_of[g]) : distinct(r_j, draws_of[g]);
        q[g * nb + j] = mass[g] * d.value;  // reuse q as contribution
      }
    }
    for (std::size_t j = 0; j < nb; ++j) {
      double t = 0;
      for (std::size_t g = 0; g < ng; ++g) t += mass[g] > 0 ? q[g * nb + j] : 0.0;
      b.touch[j] = t;
    }
  }
}

void touch_fractions_coactivated(const CoactivationModel& model, int layer, std::span<const double> probs,
                                 const SlotMap& map, int top_k, std::span<double> scratch,
                                 std::span<double> touch) {
  const TouchBins bins[] = {{.slots_per_bin = map.slots_per_bin, .touch = touch}};
  TouchMemo memo;
  touch_fractions_coactivated(model, layer, probs, map, top_k, scratch, bins, memo);
}

}  // namespace moesim
