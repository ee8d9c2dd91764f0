// Co-activation structure of routing: experts of a layer fall into groups whose members tend to be picked
// by the same token. The model keeps the per-expert marginals of the popularity model and adds a per-token
// "home group"; it samples per-expert and per-group counts for one layer and step in O(experts + groups),
// and gives analytic touch fractions (share of tokens that reach each GPU) for dispatch byte accounting.
#pragma once

#include <cstdint>
#include <span>
#include <vector>

#include "sim/engine/random.h"
#include "workloads/expert_popularity.h"

namespace moesim {

// Generative model (per token, per layer): the token draws a home group g with probability
// P_g = sum_{e in g} p_e; each of its top_k picks is, with probability rho, drawn inside g in proportion to
// p (q_{g,e} = p_e / P_g), and otherwise drawn from the whole layer in proportion to p. Marginals stay p
// exactly: sum_g P_g (rho q_{g,e} + (1 - rho) p_e) = p_e. The expected share of a token's picks that fall in
// its home group is rho + (1 - rho) P_g, i.e. rho plus the independent baseline.
// Approximation: picks are drawn with replacement (a real top-k never repeats an expert); the count sampler
// only enforces count_e <= tokens.
struct CoactivationSpec {
  int group_size = 8;                    // experts per group; must divide the expert count
  double rho = 0.0;                      // in [0, 1]; 0 is independent routing
  bool shuffle_groups_per_layer = true;  // groups are random sets of experts (else contiguous ids)
};

class CoactivationModel final {
 public:
  CoactivationModel(const CoactivationSpec& spec, int layers, int experts, Rng rng);

  [[nodiscard]] int layers() const { return layers_; }
  [[nodiscard]] int experts() const { return experts_; }
  [[nodiscard]] int groups() const { return experts_ / group_size_; }
  [[nodiscard]] int group_size() const { return group_size_; }
  [[nodiscard]] double rho() const { return rho_; }
  [[nodiscard]] int group_of(int layer, int expert) const { return group_of_[index(layer, expert)]; }
  // Members of group g in layer l (group_size entries).
  [[nodiscard]] std::span<const int> members(int layer, int group) const {
    return {members_.data() + index(layer, group * group_size_), static_cast<std::size_t>(group_size_)};
  }
  [[nodiscard]] std::span<const int> group_of_layer(int layer) const {
    return {group_of_.data() + index(layer, 0), static_cast<std::size_t>(experts_)};
  }

  // One layer and step: per-expert counts (sum = tokens * top_k, each <= tokens) and per-group counts of
  // tokens whose home group it is (sum = tokens). Convenience for tests and one-off use: prepares a
  // CoactivationSampler on every call.
  void sample_counts(int layer, std::span<const double> probs, std::int64_t tokens, int top_k, Rng& rng,
                     std::span<std::int32_t> counts, std::span<std::int64_t> group_tokens) const;

  // Expected (ordered-pair) co-selections per token of experts a != b under the model:
  // k(k-1) * sum_g P_g r_{g,a} r_{g,b} = k(k-1) p_a p_b (1 - rho^2 + rho^2 [same group] / P_g).
  [[nodiscard]] double pair_rate(int layer, std::span<const double> probs, int top_k, int a, int b) const;

 private:
  [[nodiscard]] std::size_t index(int layer, int i) const {
    return static_cast<std::size_t>(layer) * static_cast<std::size_t>(experts_) + static_cast<std::size_t>(i);
  }
  int layers_;
  int experts_;
  int group_size_;
  double rho_;
  std::vector<int> group_of_;  // [layer][expert]
  std::vector<int> members_;   // [layer][group * group_size + i]
};

// Draws CoactivationModel counts for one layer and step in O(experts + groups) without a per-expert
// transcendental call, from tables prepared once per popularity (rebuild them when it changes):
// 1. home groups: a multinomial of the tokens over P_g;
// 2. picks forced into the home group: Binomial(T_g k, rho) per group;
// 3. the other picks follow the marginals: a multinomial over all experts, i.e. one over groups by P_g and
//    then over each group's members by q_{g,e} = p_e / P_g. Forced picks are spread by the same q, and two
//    independent multinomials with the same cells add up to one over the summed trials: each group's
//    members share (forced + other) picks in one draw.
// Each multinomial is drawn as RoutingSampler draws one: exact categorical draws up to 32 trials, else
// Poisson for cold cells (mean < 8 and q < 0.1) and, for the others, Gaussians with the multinomial's
// variances conditioned on the total the cold cells leave, rounded, the residual spread by +-1.
// 4. A token picks an expert at most once: counts above `tokens` are cut and the excess goes to the experts
//    that still have room in proportion to p, by systematic sampling (one uniform and one sweep; each
//    expert gets the floor or the ceiling of its expected share; a sweep that fills an expert passes what
//    it cannot take to the next sweep).
class CoactivationSampler final {
 public:
  struct Layer {
    RoutingSampler::Layer groups;  // multinomial over home groups by P_g
    // Per group (group_size entries each, by descending q): member experts, q_{g,e}, sqrt(q), and the
    // running sums of q (group_size + 1 entries each).
    std::vector<int> member;
    std::vector<double> q;
    std::vector<double> sd;
    std::vector<double> q_prefix;
  };
  static Layer prepare(const CoactivationModel& model, int layer, std::span<const double> probs);

  explicit CoactivationSampler(const CoactivationModel& model);
  // `probs` must be the ones `prepared` was built from.
  void sample(int layer, const Layer& prepared, std::span<const double> probs, std::int64_t tokens, int top_k,
              Rng& rng, std::span<std::int32_t> counts, std::span<std::int64_t> group_tokens);

 private:
  // Spreads n picks over group g's members (added to counts, which hold zero there).
  void spread(const Layer& prepared, int g, std::int64_t n, Rng& rng, std::span<std::int32_t> counts);

  const CoactivationModel& model_;
  RoutingSampler groups_;
  std::vector<std::int32_t> home_;   // per group: tokens whose home it is
  std::vector<std::int32_t> other_;  // per group: unforced picks
  std::vector<double> z_;            // one group's scaled normals
};

// Where a layer's expert copies live: slot s holds logical expert slot_expert[s] and belongs to bin
// (GPU) s / slots_per_bin; replicas[e] is the number of slots holding e (tokens of e split evenly over
// them). A negative slot_expert is a vacant slot (no expert, no mass: a lost GPU's). The placement module
// builds one of these per layer.
struct SlotMap {
  std::span<const int> slot_expert;
  int slots_per_bin = 1;
  std::span<const int> replicas;
  [[nodiscard]] int bins() const { return static_cast<int>(slot_expert.size()) / slots_per_bin; }
};

// Touch fractions: for each bin j, the share of tokens that send at least one of their top_k picks to j
// (a token is dispatched once per bin it touches). A token's k distinct picks are successive sampling by
// weight, which is the same as drawing with replacement and skipping repeats until k distinct items are
// drawn. Approximation: a fixed number n of draws with replacement, n chosen so that the expected number of
// distinct items is k: sum_items (1 - (1 - r_i)^n) = k; then P(j untouched) = (1 - R_j)^n with R_j the pick
// mass in bin j. Items are slots, of mass p_e / replicas_e. Uniform 256 experts over 8 bins, top-8:
// 0.6617 here vs exact 1 - C(224,8)/C(256,8) = 0.6620. Against a token-level Monte Carlo (Zipf 1.0 over 64
// experts, top-8, 8 bins with replicas; tests/workloads/coactivation_test.cpp) the total copies per token
// are within 1.5% for rho 0..0.9 and single bins within 6% (rho 0), 8% (0.5), 12% (0.9).

// Several granularities of the same slots can be computed at once (e.g. GPUs and nodes): the draw counts n
// depend on the slots only and are solved once. Bin j of a granularity holds slots [j s, (j + 1) s) for
// s = slots_per_bin; `touch` gets one fraction per bin.
struct TouchBins {
  int slots_per_bin = 1;
  std::span<double> touch;
};

// What touch fractions take from the multiset of a layer's slot masses p_e / replicas_e alone: the draw
// count n of independent routing, the out-of-group table of co-activation. Drift permutes the experts'
// probabilities and a rebalance moves experts between bins; neither changes that multiset, so a caller that
// keeps one memo per layer recomputes those sums only when it changes (a sort and a comparison instead).
// The sums run over the masses in descending order: a result does not depend on whether it was memoised,
// except that co-activation's per-group draw counts start from the memo's last ones (the same roots to
// 1e-13).
struct TouchMemo {
  std::vector<double> masses;  // descending, as the sums were computed from
  std::vector<double> sums;
  std::vector<double> next;     // scratch
  std::vector<double> group_y;  // co-activation: each group's last log2(n_g / k), where its next solve starts
  int top_k = 0;
  double rho = -1;
};

// Independent routing. O(slots x ~5) transcendental calls (safeguarded Newton on n) when the memo misses,
// O(slots log slots) when it holds, plus one per bin.
void touch_fractions_independent(std::span<const double> probs, const SlotMap& map, int top_k,
                                 std::span<double> touch);
// `known_masses`: the slot masses in descending order when the caller has them (drift's sorted
// probabilities with one copy per expert): the memo is checked against them without a sort.
void touch_fractions_independent(std::span<const double> probs, const SlotMap& map, int top_k,
                                 std::span<const TouchBins> bins, TouchMemo& memo,
                                 std::span<const double> known_masses = {});

// Co-activation: a token of home group g draws from r_{g,e} = rho q_{g,e} + (1 - rho) p_e with its own n_g,
// and touch_j = sum_g P_g (1 - (1 - R_{g,j})^{n_g}). The part of sum_items that does not depend on g is
// tabulated once on a grid of n (kept in the memo), so the cost is O(groups x bins + experts x 8 + group
// members x ~5); `scratch` must hold touch_scratch_size(groups, bins) doubles (bins: the most of any
// granularity).
inline constexpr int kTouchGridPoints = 48;
[[nodiscard]] constexpr std::size_t touch_scratch_size(int groups, int bins) {
  return static_cast<std::size_t>(groups) * static_cast<std::size_t>(bins) +
         2 * static_cast<std::size_t>(groups) + static_cast<std::size_t>(bins);
}
void touch_fractions_coactivated(const CoactivationModel& model, int layer, std::span<const double> probs,
                                 const SlotMap& map, int top_k, std::span<double> scratch,
                                 std::span<double> touch);
void touch_fractions_coactivated(const CoactivationModel& model, int layer, std::span<const double> probs,
                                 const SlotMap& map, int top_k, std::span<double> scratch,
                                 std::span<const TouchBins> bins, TouchMemo& memo,
                                 std::span<const double> known_masses = {});

}  // namespace moesim
