// Routing of one step (docs/architecture.md "The step as parts"): how many (token, expert) pairs each expert
// of a MoE layer receives, drawn from the layer's popularity, and what that gives each expert-parallel rank
// per micro-batch. The exact per-expert draw (RoutingSampler::sample, or the co-activation sampler) is the
// reference; the binned fast paths (per-GPU sums of hot experts with tallied cold ones, or Gaussian bin sums)
// draw the same law of what a grouped launch reads, and tests/serving/step/routing_fast_paths_test.cpp holds
// them to it. The draw owns its random stream, tables and laws; the planner asks it per layer.
#pragma once

#include <cstdint>
#include <memory>
#include <span>
#include <vector>

#include "sim/engine/random.h"
#include "sim/serving/experts/placement.h"
#include "sim/serving/step/expert_cost.h"
#include "workloads/coactivation.h"
#include "workloads/expert_popularity.h"

namespace moesim {

class RoutingDraw final {
 public:
  // Per-layer routing tables (RoutingSampler::prepare of the popularity) and their binning by rank. While
  // nothing changes them (static popularity, no experts-in-the-loop mechanism) they are the same for every
  // replica of a pool, which share them read-only (share_tables) instead of one copy each.
  struct Tables {
    std::vector<RoutingSampler::Layer> layers;
    std::vector<RoutingSampler::Bins> bins;  // per layer; empty when not binned
  };

  // `coactivation` (optional): counts are drawn with co-activation groups, never binned.
  RoutingDraw(int layers, int experts, int top_k, int ranks, Rng rng, const CoactivationModel* coactivation);

  // (Re)prepares layer l's tables from its probabilities (at construction and after a drift update). The
  // caller rebins afterwards (bin()) when binned() was true.
  void prepare(int layer, std::span<const double> probs);
  // Bins by rank for `placement` (`single_gpu`: [layer][expert] the rank of an expert with one copy, else -1)
  // when `allowed` and the placement lends itself (several ranks, at most one rank per expert); else the draw
  // is exact. Laws derived for the old bins are dropped.
  void bin(const Placement& placement, std::span<const int> single_gpu, bool allowed);
  [[nodiscard]] bool binned() const { return !tables_->bins.empty(); }
  [[nodiscard]] std::shared_ptr<Tables> tables() const { return tables_; }
  // Takes `tables` (prepared and binned) from an identical draw, instead of prepare() and bin(): the same
  // popularity, `placement` and `single_gpu` as bin() takes.
  void share_tables(std::shared_ptr<Tables> tables, const Placement& placement,
                    std::span<const int> single_gpu);

  // Starts a step of `tokens` tokens (`tbo`: two micro-batches, micro-batch A taking `half_a` of each count):
  // fills the moment grid the bin sums read (on the caller's thread: the tables may be shared) and returns
  // the layer that draws every expert this step (the others draw sums), -1 when not binned.
  int begin_step(std::int64_t tokens, bool tbo, double half_a, int moe_layers);
  // The exact per-expert counts of `layer` for `tokens` tokens (`probs`: its probabilities, for
  // co-activation).
  std::span<std::int32_t> draw_counts(int layer, std::span<const double> probs, std::int64_t tokens);
  // The exact per-expert counts for `tokens` tokens from a law of this step alone (`probs`, capped for
  // top-k: the per-request affinity's step law), prepared afresh; not under co-activation.
  std::span<std::int32_t> draw_counts_from(std::span<const double> probs, std::int64_t tokens);
  // Under co-activation, the tokens of each home group in the last draw_counts.
  [[nodiscard]] std::span<const std::int64_t> group_tokens() const { return group_tokens_; }
  // A binned layer: each rank's routed pairs and touched experts per micro-batch, handed to `cost` at
  // precision p with `bytes` of weights per copy (`prefill`: the step's token count seldom recurs).
  void draw_sums(int layer, std::int64_t tokens, bool prefill, const Placement& placement, ExpertCost& cost,
                 Precision p, double bytes);

 private:
  [[nodiscard]] std::int32_t first_half(std::int32_t n) const {
    return half_a_ == 1.0 ? n : static_cast<std::int32_t>(round_half_away(double(n) * half_a_));
  }
  Tables& own_tables();
  // The experts of each layer with several copies (replicated_), and the binned draw's scratch sized for
  // them; false (nothing sized) when the bins outnumber the experts.
  bool size_bins(const Placement& placement, std::span<const int> single_gpu);
  const std::vector<RoutingSampler::Tally>& cold_tally();

  int layers_;
  int experts_;
  int top_k_;
  int ranks_;
  Rng rng_;
  RoutingSampler sampler_;
  std::shared_ptr<Tables> tables_;  // copy-on-write: shared by the replicas of a pool
  const CoactivationModel* coact_;
  std::unique_ptr<CoactivationSampler> coact_sampler_;
  std::vector<CoactivationSampler::Layer> coact_routing_;
  std::vector<std::int64_t> group_tokens_;
  std::vector<std::int32_t> counts_;
  double half_a_ = 1.0;
  bool tbo_ = false;
  std::int64_t steps_ = 0;
  // Binned routing: an expert with several copies (EPLB's redundant slots) is a bin of its own after the
  // ranks'.
  std::vector<std::vector<int>>
      replicated_;  // [layer]: experts with several copies, bins ranks_, ranks_ + 1...
  std::vector<std::int64_t> bin_pairs_;
  std::vector<std::int32_t> bin_hot_;     // [layer][bin]: each layer's last split of hot experts
  std::vector<std::size_t> bin_hot_for_;  // [layer]: the count of hot experts it was split for
  // What a cold expert with count c adds to its rank (cold_tally()): pairs and micro-batch A's pairs in .a
  // (32 bits each); touched, touched in A, touched in B in .b (21 bits each). Rebuilt when half_a_ moves.
  std::vector<RoutingSampler::Tally> tally_;
  double tally_half_a_ = -1;
  std::vector<RoutingSampler::Tally> bin_cold_;
  // Without two-batch overlap: sample_bin_sums(), its laws kept per layer for the last kLawSlots token counts
  // of decode-only steps (by tokens modulo kLawSlots: a decode batch moves by a few sequences per step); a
  // step with prefill, whose count seldom recurs, derives its laws in step_law_.
  std::vector<RoutingSampler::ColdSums> bin_sums_;
  static constexpr std::size_t kLawSlots = 16;
  std::vector<RoutingSampler::BinLaw> bin_laws_;  // [layer][slot]
  RoutingSampler::BinLaw step_law_;
};

}  // namespace moesim
