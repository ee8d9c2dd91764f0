// Experts in the loop of one replica (docs/architecture.md "One serving step"): the expert placement and
// what moves it (online statistics, rebalances), each expert's hotness class and precision, the per-GPU tier
// caches and the loaders behind them. An entity owned by the replica: the one part of a step that sees the
// clock (expert loads queue on its loaders at the step's times). Its owner runs its step boundary
// (begin_step before the step's routing, end_step after the step), the step planner asks it per MoE layer
// (observe, cost_copies, layer_stall), and it publishes its placement with a version that moves at each
// rebalance, which the planner follows.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <span>
#include <vector>

#include "hwmodels/fabric.h"
#include "sim/engine/time.h"
#include "sim/serving/experts/expert_cache.h"
#include "sim/serving/experts/expert_stats.h"
#include "sim/serving/experts/placement.h"
#include "sim/serving/experts/quantization_policy.h"
#include "sim/serving/experts/rerouting.h"
#include "sim/serving/spec/scenario_spec.h"
#include "sim/serving/step/expert_cost.h"
#include "workloads/coactivation.h"

namespace moesim {

struct StepPlan;

// The placement before any experts-in-the-loop policy: contiguous when the experts divide over the
// expert-parallel ranks; else (redundant slots make the EP size legal, and EPLB fills them) slot s holds
// expert s mod E.
[[nodiscard]] Placement initial_placement(const ScenarioSpec& s);
// Nodes the replica's expert-parallel GPUs span (at least one).
[[nodiscard]] int replica_nodes(const ScenarioSpec& s);

// What the loop did at a step boundary, which the step's plan reports: a rebalance's pause (a part of the
// step) and the bytes it moved; copies evicted by a reclassification or a prefetch; prefetch loads.
struct ExpertLoopEvents {
  Duration rebalance_pause;
  double rebalance_bytes = 0;
  int rebalances = 0;
  std::int64_t evictions = 0;
  std::int64_t prefetches = 0;
  double host_bytes = 0;
  double nvme_bytes = 0;
};

class ExpertLoop final {
 public:
  // `probs(l)`: layer l's popularity now. The placement starts at initial_placement(s), replaced by
  // round-robin, EPLB or co-activation placement as experts.placement says.
  ExpertLoop(const ScenarioSpec& s, const Fabric& fabric, std::function<std::span<const double>(int)> probs,
             const CoactivationModel* coactivation);
  ExpertLoop(const ExpertLoop&) = delete;
  ExpertLoop& operator=(const ExpertLoop&) = delete;

  [[nodiscard]] const Placement& placement() const { return placement_; }
  // Moves at each rebalance (a new placement the planner must follow).
  [[nodiscard]] std::uint64_t placement_version() const { return placement_version_; }
  // Whether a mechanism reads each expert's count (statistics, rerouting): routing cannot be binned.
  [[nodiscard]] bool reads_each_expert() const { return stats_ != nullptr || rerouter_ != nullptr; }
  // Whether copies differ from one another (tier residency, per-expert precision): they are costed one by
  // one.
  [[nodiscard]] bool per_copy() const { return tiers() || s_.experts.quantization; }
  [[nodiscard]] bool tiers() const { return !caches_.empty(); }
  // Bytes of expert e's copy in layer l, at its precision now.
  [[nodiscard]] double copy_bytes(int layer, int expert) const {
    return double(copy_bytes_[static_cast<std::size_t>(layer * experts_ + expert)]);
  }

  // Largest routed-expert HBM bytes of any GPU (at each copy's precision; replicas included; a GPU of an
  // expert-TP rank holds 1/expert_tp of each copy); under tiers the HBM the tiers are given.
  [[nodiscard]] double routed_expert_bytes_per_gpu() const;

  // A failure the copies cover (experts_covered): the ranks flagged in `lost` (one flag per expert-parallel
  // rank, all of them lost so far) hold no copy from now on. The placement without them is published with a
  // new version, and later rebalances place over the surviving ranks only. No flag set (the lost GPUs were
  // replaced): the placement held before the first loss returns. Between steps only.
  void set_lost_ranks(std::span<const char> lost);

  // Once per step before routing: reclassification when due, then a rebalance when due (a new placement and
  // version).
  ExpertLoopEvents begin_step();
  // What the router chose for `layer` (`counts`, `group_tokens` under co-activation) seen by the statistics,
  // then re-routed in place by the router's post-processing.
  void observe(int layer, std::span<std::int32_t> counts, std::span<const std::int64_t> group_tokens,
               std::int64_t tokens, StepPlan& plan);
  // The layer's copies one by one to `cost`, each at its expert's precision and, under tiers, with its
  // residency at `request` (loads queued for the missing ones). `single_gpu`: [layer][expert] the rank of an
  // expert with one copy, else -1; `half_a`: micro-batch A's share. Returns the largest count.
  std::int32_t cost_copies(int layer, std::span<const std::int32_t> counts, std::span<const int> single_gpu,
                           double half_a, Time request, ExpertCost& cost, QualityProxy& quality,
                           StepPlan& plan);
  // How much later than `experts_max` the layer's slowest rank ends because of loads, its experts starting at
  // `experts_start` (a per-expert loop ends at max(compute, last load + that expert's FFN); a grouped engine
  // at max(ready launches, last load) + late launches).
  Duration layer_stall(Time experts_start, Duration experts_max, const ExpertCost& cost);
  // After the step: the imbalance the rebalance threshold watches; under tiers the batch ends and warm copies
  // whose recent count passed the threshold are prefetched from `step_end`.
  ExpertLoopEvents end_step(Time step_end, double gpu_imbalance);

 private:
  void reclassify(ExpertLoopEvents* events);
  void rebalance(ExpertLoopEvents& events);
  // EPLB's placement for the statistics' loads, over the surviving ranks when some are lost.
  [[nodiscard]] Placement eplb_rebalance() const;
  void setup_tiers();
  Time miss_copy(int gpu, int copy, std::int32_t tokens, Time request, StepPlan& plan);
  void wait_for_copy(std::size_t g, Time done, Duration ffn);

  const ScenarioSpec& s_;
  const Fabric& fabric_;
  std::function<std::span<const double>(int)> probs_;
  const CoactivationModel* coact_;
  int layers_;
  int experts_;
  int ranks_;
  int gpus_;
  int etp_;
  int nodes_;
  Placement placement_;
  std::uint64_t placement_version_ = 0;
  std::vector<char> lost_;          // per rank: lost (its slots vacant); empty when none is
  std::optional<Placement> whole_;  // the placement before the first loss, while ranks are lost
  std::unique_ptr<ExpertStats> stats_;
  std::unique_ptr<Rerouter> rerouter_;
  std::vector<Hotness> hotness_;          // [layer][expert], from the last classification
  std::vector<Precision> precision_;      // [layer][expert]
  std::vector<std::int64_t> copy_bytes_;  // [layer][expert] at that precision
  std::int64_t steps_ = 0;
  std::int64_t last_rebalance_ = 0;
  double imbalance_sum_ = 0;
  std::int64_t imbalance_steps_ = 0;
  // Tiers: one cache per GPU of the replica (with when each resident copy is ready), the replica's loaders.
  std::vector<ExpertCache> caches_;
  std::unique_ptr<ExpertLoader> loader_;
  std::vector<int> copy_of_slot_;  // [layer][slot]: the copy id in its GPU's cache
  std::vector<int> single_copy_;   // [layer][expert]: the copy id of an expert with one copy, else -1
  std::vector<ExpertKey> evicted_;
  std::vector<ExpertKey> candidates_;
  std::vector<Time> load_done_;     // per GPU, this layer
  std::vector<Duration> last_ffn_;  // per GPU: FFN time of the copy whose load ends last
  std::vector<char> loaded_;        // per GPU: a load or a not-yet-ready copy in this layer
};

}  // namespace moesim
