// Online expert statistics: per layer, an EWMA of routed tokens per expert and of home-group tokens, the
// hot/warm/cold classification that tiering and quantisation act on, and a co-activation estimate for the
// placement partitioner. Fed once per batch by the step planner; O(experts + groups) per layer and batch.
#pragma once

#include <cstdint>
#include <span>
#include <vector>

#include "workloads/coactivation.h"

namespace moesim {

enum class Hotness : std::uint8_t { kHot, kWarm, kCold };

struct ExpertStatsSpec {
  // EWMA over a window of W batches: alpha = 2 / (W + 1) (the usual span convention: the centre of mass of
  // the weights is (W - 1) / 2 batches back). The seed measures hotness over 1000-5000 batches.
  int window_batches = 1000;
  // Hot = the smallest set of most loaded experts holding >= hot_share of the EWMA load; warm = the next
  // ones until the cumulative share reaches warm_share; the rest are cold. Seed section 4: hot experts take
  // 70-80% of tokens, warm 15-25%, cold 5-10%.
  double hot_share = 0.80;
  double warm_share = 0.95;
};

class ExpertStats final {
 public:
  ExpertStats(int layers, int experts, int groups, const ExpertStatsSpec& spec);

  // One batch of one layer: routed (token, expert) pairs per expert. The first batch initialises the EWMA.
  void observe(int layer, std::span<const std::int32_t> counts);
  // One batch of one layer: tokens per home group (CoactivationModel::sample_counts).
  void observe_groups(int layer, std::span<const std::int64_t> group_tokens);

  // EWMA of routed pairs per batch, per expert.
  [[nodiscard]] std::span<const double> load(int layer) const {
    return {load_.data() + static_cast<std::size_t>(layer) * n_, n_};
  }
  [[nodiscard]] std::span<const double> group_load(int layer) const {
    return {group_load_.data() + static_cast<std::size_t>(layer) * g_, g_};
  }
  [[nodiscard]] std::int64_t batches(int layer) const { return batches_[static_cast<std::size_t>(layer)]; }
  [[nodiscard]] double alpha() const { return alpha_; }

  // Hot/warm/cold per expert by cumulative share of EWMA load (ties: lower id first). O(E log E) on an
  // internal buffer (no allocation); call it when tiers are reconsidered, not necessarily every batch.
  void classify(int layer, std::span<Hotness> out);

  // Co-activation estimate, E x E (row-major): expected ordered co-selections per token of (a, b),
  // k(k-1) sum_g P_g r_{g,a} r_{g,b}, with the model's groups and rho and the measured loads
  // (p from the expert EWMA, P_g from the home-group EWMA). Tokens are not simulated one by one, so pairs are
  // never counted directly: this is the model's pair rate evaluated at the measured loads. With
  // `grouping_only`, only the same-group term k(k-1) rho^2 P_g q_a q_b is kept: the part that depends on
  // which experts share a GPU (the rest is a product p_a p_b, nearly constant under a load-balanced
  // partition), i.e. the affinity that partition_layer expects. O(E^2); a rebalance-time call.
  void coactivation(int layer, const CoactivationModel& model, int top_k, bool grouping_only,
                    std::span<double> matrix) const;

 private:
  std::size_t n_;
  std::size_t g_;
  double alpha_;
  ExpertStatsSpec spec_;
  std::vector<double> load_;        // [layer][expert]
  std::vector<double> group_load_;  // [layer][group]
  std::vector<std::int64_t> batches_;
  std::vector<std::int64_t> group_batches_;
  std::vector<int> order_;  // classify() scratch
};

}  // namespace moesim
