// Expert popularity: for each MoE layer, the probability that a routed (token, expert) slot picks each
// expert. Zipf laws (p_i ~ i^-s) express "the top 20% of experts take 80% of tokens"; which experts are
// hot differs per layer (a per-layer permutation); uniform is the null model.
#pragma once

#include <array>
#include <cstdint>
#include <span>
#include <vector>

#include "sim/engine/random.h"

namespace moesim {

struct PopularitySpec {
  enum class Kind { kUniform, kZipf };
  Kind kind = Kind::kUniform;
  double zipf_exponent = 0;  // used when kind == kZipf
  bool shuffle_per_layer = true;
};

// p_i proportional to (i+1)^-s, i = 0..n-1, normalised.
std::vector<double> zipf_probabilities(int n, double s);

// Caps probabilities so that top_k * p_i <= 1 (a token picks an expert at most once), moving the excess
// to the other experts in proportion (water-filling). Keeps the order and the sum of 1.
void cap_for_top_k(std::vector<double>& p, int top_k);

// Share of the probability mass held by the most popular round(fraction * n) experts.
double top_share(std::span<const double> p, double fraction);

// Zipf exponent whose capped distribution gives the top `fraction` of n experts `share` of the slots
// (bisection; share must lie in (fraction, 1)).
double zipf_exponent_for_top_share(int n, int top_k, double fraction, double share);

class ExpertPopularity {
 public:
  ExpertPopularity(const PopularitySpec& spec, int moe_layers, int experts, int top_k, Rng rng);
  [[nodiscard]] std::span<const double> layer(int l) const {
    return {probs_.data() + static_cast<std::size_t>(l) * static_cast<std::size_t>(experts_),
            static_cast<std::size_t>(experts_)};
  }
  [[nodiscard]] int layers() const { return layers_; }
  [[nodiscard]] int experts() const { return experts_; }
  [[nodiscard]] std::span<double> mutable_layer(int l) {
    return {probs_.data() + static_cast<std::size_t>(l) * static_cast<std::size_t>(experts_),
            static_cast<std::size_t>(experts_)};
  }

 private:
  int layers_;
  int experts_;
  std::vector<double> probs_;  // [layer][expert]
};

// Draws how many tokens go to each expert in one layer and step, in O(experts) with no per-expert
// transcendental call. A token includes expert e with probability pi_e = top_k p_e, so a count is a sum
// of `tokens` Bernoulli trials (mean T pi, variance T pi (1 - pi)): rare experts (mean < kColdMean and
// pi < 0.1) get independent Poisson counts; the others a Gaussian with those variances conditioned on
// the total the rare ones leave, rounded, with the residual spread by +-1. Each count is at most
// `tokens` and the counts sum to exactly tokens * top_k. Experts with pi = 1 get exactly T.
class RoutingSampler {
 public:
  static constexpr double kColdMean = 8.0;
  // sample_binned() spreads a Poisson total over a bin's cold experts (a draw per pair from the bin's alias
  // table, drawn again when it picks a hot expert) when that takes under kSplitMean draws per cold expert on
  // average, and draws each expert otherwise.
  static constexpr double kSplitMean = 1.0;
  // What the sampler derives from one layer's probabilities; rebuild when they change.
  struct Layer {
    int top_k = 1;
    std::vector<int> order;          // experts by descending inclusion probability
    std::vector<double> pi;          // inclusion probability k p, in `order`
    std::vector<double> sd;          // per-token sd before conditioning on the total, in `order`
    std::vector<double> pi_prefix;   // sum of pi over order[0..i)
    std::vector<double> var_prefix;  // sum of sd^2 over order[0..i)
  };
  static Layer prepare(std::span<const double> probs, int top_k);
  // A multinomial of n trials over cells of probability `probs` (summing to about 1) is the same sampler
  // with top_k = 1 and `tokens` = n, except for the Gaussian part's variances: sd^2 = p, so that
  // conditioning on the total gives exactly the multinomial's n p (1 - p) and -n p_a p_b.
  static Layer prepare_multinomial(std::span<const double> probs);

  // A layer's experts grouped into bins (the GPUs of a placement where every expert has one copy).
  struct Bins {
    int count = 0;
    std::vector<int> begin;  // [bin]: its first entry in `at` (count + 1 entries)
    std::vector<int> at;     // each bin's experts as positions in Layer::order, ascending
    std::vector<double> pi;  // Layer::pi of each entry of `at`
    std::vector<int> entry;  // [position in Layer::order]: its entry in `at`
    std::vector<int> of;     // [position in Layer::order]: its bin
    struct Sums {
      double pi = 0;   // sum of pi over the bin's first j positions
      double var = 0;  // the same for sd^2
      double sd = 0;   // sqrt(var), for the hot bins' normals
    };
    std::vector<Sums> prefix;  // [begin[b] + b + j]
    // Each bin's entries as an alias table (Walker's method, Vose's construction): one 64-bit draw picks
    // entry j of bin b (0-based) with probability pi / (the bin's sum of pi), to 2^-32: the high 32 bits
    // choose a column c, which stays when the low 32 bits fall below alias_cut[begin[b] + c] and else is
    // alias[begin[b] + c].
    std::vector<std::uint32_t> alias_cut;
    std::vector<std::int32_t> alias;
    // sample_bin_sums()'s cold moments of each bin at the token counts of a grid (grid_point()), over the
    // counts where sums may be used; a point is filled by fill_moment_grid() and empty until then.
    struct Moments {
      float e1 = 0;  // sum over the bin's cold experts of e^-m (m = tokens x pi)
      float v = 0;   // sum of e^-m (1 - e^-m)
      float me = 0;  // sum of m e^-m
    };
    std::int64_t grid_first = 0;             // grid index of grid[0]
    std::vector<std::vector<Moments>> grid;  // [index - grid_first][bin]
  };
  static Bins bin(const Layer& layer, std::span<const int> bin_of_expert, int bins);
  // A grid of token counts, kGridPerOctave points per octave (every count below kGridPerOctave): point i is
  // i below kGridPerOctave, else (kGridPerOctave + i % kGridPerOctave) << (i / kGridPerOctave - 1); counts
  // between neighbours differ by at most 1/kGridPerOctave. grid_index(t): the last point at or below t.
  static constexpr int kGridPerOctave = 32;
  [[nodiscard]] static std::int64_t grid_point(std::int64_t index);
  [[nodiscard]] static std::int64_t grid_index(std::int64_t tokens);
  // Fills the two grid points that bracket `tokens` (when inside the bins' grid and not yet filled), so
  // that sample_bin_sums() derives its law at `tokens` in O(bins) by interpolating between them instead of
  // summing over the cold experts. Writes only points not filled before: one thread may fill while others
  // read points filled earlier (the planner fills in begin_plan, on the event loop's thread).
  static void fill_moment_grid(const Layer& layer, Bins& bins, std::int64_t tokens);

  explicit RoutingSampler(int experts);
  void sample(const Layer& layer, std::int64_t tokens, Rng& rng, std::span<std::int32_t> counts);
  // What a cost that reads only per-bin sums needs, without a draw per hot expert. The cold experts (mean
  // below kColdMean, as in sample()) are drawn one by one, Poisson, into `cold` at their entries of
  // bins.at: bin b's are [bins.begin[b] + bin_hot[b], bins.begin[b + 1]) (a bin's hot experts come first).
  // The hot ones are summed per bin into `bin_pairs` (their number into `bin_hot`) from the same Gaussian
  // conditioned on the same total, whose per-bin sums are Gaussian with the summed means and variances:
  // the law of sample()'s per-bin sums, up to rounding per bin instead of per expert. O(bins + cold).
  // The caller's sums of its cold experts come with the draw: `tally[c]` is what an expert with count c
  // adds (two words of packed fields, each non-decreasing in c so that sums never borrow), `bin_cold[b]`
  // receives bin b's sum over its cold experts (residual included). A count never reaches kTallyCounts.
  struct Tally {
    std::uint64_t a = 0;
    std::uint64_t b = 0;
  };
  static constexpr std::int32_t kMaxDrawn = 95;     // a drawn cold count is capped here (see sample_binned)
  static constexpr std::size_t kTallyCounts = 256;  // > 95 drawn + 2 passes x 64 residual sweeps of +1
  void sample_binned(const Layer& layer, const Bins& bins, std::int64_t tokens, Rng& rng,
                     std::span<std::int32_t> cold, std::span<std::int64_t> bin_pairs,
                     std::span<std::int32_t> bin_hot, std::span<const Tally> tally,
                     std::span<Tally> bin_cold) {
    std::size_t split_for = kNoSplit;
    sample_binned(layer, bins, tokens, rng, cold, bin_pairs, bin_hot, tally, bin_cold, split_for);
  }
  // The same with `bin_hot` kept by the caller between calls on one layer: it holds the split of
  // `split_for` hot experts (kNoSplit: none), redone only when this call's count of hot experts differs.
  static constexpr std::size_t kNoSplit = ~std::size_t{0};
  void sample_binned(const Layer& layer, const Bins& bins, std::int64_t tokens, Rng& rng,
                     std::span<std::int32_t> cold, std::span<std::int64_t> bin_pairs,
                     std::span<std::int32_t> bin_hot, std::span<const Tally> tally, std::span<Tally> bin_cold,
                     std::size_t& split_for);
  // The same law of each bin's hot sums, with each bin's cold experts reduced to their pairs and touched
  // experts (all a grouped launch's cost reads) without a random draw per expert: a Gaussian with the exact
  // means, variances and covariance of those two sums under sample_binned()'s independent Poissons. Pairs
  // first (conditioned on the layer's total when no expert is hot, as the hot bins are), then touched given
  // pairs, rounded at random (which keeps the mean) into [ceil(pairs / tokens), min(pairs, cold experts)];
  // when under one cold expert is expected untouched, the untouched count is Poisson instead (a sum of rare
  // Bernoullis, which a Gaussian fits badly). O(bins) per call once `law` holds this token count; deriving
  // `law` is O(bins) when fill_moment_grid() has filled the grid points around `tokens` (the moments
  // interpolated linearly between counts 1/32 apart: e^-m's curvature leaves under 1e-4 per expert), else
  // O(cold experts).
  // An approximation, used from kSumsMinMean pairs per expert on average (tokens x top_k / experts): there
  // the slowest bin's grouped cost has sample_binned()'s mean to 0.2% and its 99th percentile to 1.3% (256
  // experts top-8 in 8 or 16 bins, Pareto 80/20 or uniform, 128 to 1,024 tokens; the tests hold 0.5% and
  // 2%). Below it counts are too few for a Gaussian: at 16 tokens of DeepSeek-V3 the mean is 1% low.
  static constexpr double kSumsMinMean = 4.0;
  // Whether to use sample_bin_sums() for this layer at `tokens`: from kSumsMinMean pairs per expert, and
  // with at least kSumsMinCold cold experts per bin on average (with fewer, drawing them one by one is
  // exact and costs about what the Gaussian's fixed work per bin does).
  static constexpr int kSumsMinCold = 4;
  [[nodiscard]] static bool use_bin_sums(const Layer& layer, const Bins& bins, std::int64_t tokens);
  struct ColdSums {
    std::int64_t pairs = 0;
    std::int32_t touched = 0;
  };
  struct ColdMoments {  // a bin's cold experts (single precision: a law is kept per layer and token count)
    std::int32_t experts = 0;
    float lambda = 0;      // mean (and variance) of their pairs
    float sd = 0;          // sqrt(lambda - 1/12): the Gaussian's, before rounding adds 1/12
    float touched = 0;     // mean of their touched count
    float slope = 0;       // cov(pairs, touched) / var(pairs): touched's regression on pairs
    float touched_sd = 0;  // touched's sd given pairs
  };
  // What sample_bin_sums() derives from a layer's bins at one token count (O(experts) to build), kept by
  // the caller and rebuilt when `tokens` differs or the layer's tables change.
  struct BinLaw {
    std::int64_t tokens = -1;
    std::size_t hot = 0;
    double lambda = 0;                  // sum over the bins
    std::vector<std::int32_t> bin_hot;  // [bin]: its hot experts
    std::vector<ColdMoments> cold;      // [bin]
  };
  void sample_bin_sums(const Layer& layer, const Bins& bins, std::int64_t tokens, Rng& rng, BinLaw& law,
                       std::span<std::int64_t> bin_pairs, std::span<ColdSums> bin_cold) {
    std::vector<std::int32_t> kept(static_cast<std::size_t>(bins.count));
    std::size_t kept_for = kNoSplit;
    sample_bin_sums(layer, bins, tokens, rng, law, bin_pairs, bin_cold, kept, kept_for);
  }
  // The same with the layer's split of hot experts kept by the caller between calls, as for sample_binned()
  // (the two may share it): a law derived afresh takes its split from there, moved to the law's hot count.
  void sample_bin_sums(const Layer& layer, const Bins& bins, std::int64_t tokens, Rng& rng, BinLaw& law,
                       std::span<std::int64_t> bin_pairs, std::span<ColdSums> bin_cold,
                       std::span<std::int32_t> kept_split, std::size_t& kept_for);
  // n trials of a layer from prepare_multinomial: up to kDirectTrials one categorical draw per trial (exact,
  // scanning cells by descending probability), beyond that sample().
  static constexpr std::int64_t kDirectTrials = 32;
  void sample_multinomial(const Layer& layer, std::int64_t trials, Rng& rng, std::span<std::int32_t> counts);
  // `probs` must satisfy top_k * p <= 1 (see cap_for_top_k) and sum to 1. Prepares on every call.
  void sample(std::span<const double> probs, std::int64_t tokens, int top_k, Rng& rng,
              std::span<std::int32_t> counts) {
    sample(prepare(probs, top_k), tokens, rng, counts);
  }

 private:
  static void split_hot(const Bins& bins, std::size_t hot, std::span<std::int32_t> bin_hot);
  // Moves `bin_hot`, the split of `split_for` hot experts (kNoSplit: none yet), to `hot`: by the positions
  // that changed side, or split_hot() when there was none.
  static void move_split(const Bins& bins, std::size_t hot, std::span<std::int32_t> bin_hot,
                         std::size_t& split_for);
  // sample_binned()'s hot bins given the residual the cold experts leave; returns what stays unassigned.
  std::int64_t draw_hot_bins(const Layer& layer, const Bins& bins, double t, std::int32_t cap,
                             std::size_t hot, std::int64_t residual, Rng& rng,
                             std::span<std::int64_t> bin_pairs, std::span<const std::int32_t> bin_hot);
  std::vector<double> z_;   // scaled normals of the hot experts
  std::vector<int> cells_;  // the cold entries of sample_binned when they absorb a residual
};

// Spreads a residual of rounding and clamping (counts must gain `residual`, or lose it when negative) by +-1
// over counts[cells[i]], each kept in [0, cap]: first over the first `hot` cells, then over all, each pass
// sweeping from a random cell. Returns what could not be spread (0 unless every cell is at its bound).
std::int64_t spread_residual(std::span<const int> cells, std::size_t hot, std::int32_t cap,
                             std::int64_t residual, Rng& rng, std::span<std::int32_t> counts);

// Convenience wrapper (allocates a sampler per call; for tests and one-off use).
void sample_routing_counts(std::span<const double> probs, std::int64_t tokens, int top_k, Rng& rng,
                           std::span<std::int32_t> counts);

// Poisson(mean) for 0 <= mean < RoutingSampler::kColdMean from one 64-bit random draw (tabulated CDF on a
// grid of means plus an exact correction; no transcendental call).
// Walker's alias table over `weights` (Vose's construction; all zero: uniform): column c is kept when a
// uniform 32-bit fraction falls below cut[c], else alias[c] is taken, so that entry j comes out with
// probability weight_j / (sum of weights), to 2^-32.
void build_alias_table(std::span<const double> weights, std::span<std::uint32_t> cut,
                       std::span<std::int32_t> alias);
std::int32_t poisson_cold(double mean, std::uint64_t bits);

// Inverse standard normal CDF at the 4096 bin midpoints (built once at start-up): table_normal's table.
struct NormalTable {
  std::array<double, 4096> z{};
  NormalTable();
};
extern const NormalTable kNormalTable;

// A standard normal from 12 random bits (inverse-CDF table at bin midpoints): cheap, |z| <= 3.4. Inline:
// the samplers call it per hot expert and layer.
inline double table_normal(std::uint64_t bits12) { return kNormalTable.z[bits12 & 4095]; }

}  // namespace moesim
