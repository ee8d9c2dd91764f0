// The step planner: costs one serving iteration of a replica, layer by layer (see "One serving step" in
// ARCHITECTURE.md). Attention per group, dense and shared FFNs, the gate, routing counts per expert, the
// dispatch and combine All-to-All from those counts, expert FFNs per GPU; a layer waits for its slowest
// GPU. O(layers x (experts + GPUs^2)) per step, no allocation after construction.
#pragma once

#include <cstdint>
#include <span>
#include <vector>

#include "hwmodels/fabric.h"
#include "hwmodels/gpu_cost_model.h"
#include "sim/engine/random.h"
#include "sim/serving/placement.h"
#include "sim/serving/scenario_spec.h"
#include "workloads/expert_popularity.h"

namespace moesim {

// One attention group's work in a step.
struct GroupBatch {
  std::int64_t decode_seqs = 0;
  double decode_context_tokens = 0;  // sum over decode sequences of the tokens they attend to
  std::int64_t prefill_tokens = 0;
  double prefill_pairs = 0;      // sum over chunks of c*p + c(c+1)/2 (query, key) pairs
  double prefill_kv_tokens = 0;  // sum over chunks of p + c (KV read and written)
  std::int64_t sampled_seqs = 0;  // sequences that produce a token (LM head rows)
  [[nodiscard]] std::int64_t tokens() const { return decode_seqs + prefill_tokens; }
};

// Per-step totals; every Duration is on the critical path, summed over layers.
struct StepPlan {
  Duration total;
  Duration attention;   // attention, shared experts, gate, TP all-reduce (max over groups)
  Duration dense_ffn;   // dense layers' FFNs (max over groups)
  Duration experts;     // routed expert FFNs (max over GPUs)
  Duration dispatch;
  Duration combine;
  Duration lm_head;
  double dispatch_nvlink_bytes = 0;
  double dispatch_nic_bytes = 0;
  double gpu_imbalance = 1;     // mean over MoE layers of max/mean routed pairs per GPU
  double expert_imbalance = 1;  // mean over MoE layers of max/mean routed pairs per expert
  std::int64_t tokens = 0;
};

class StepPlanner {
 public:
  StepPlanner(const ScenarioSpec& s, const GpuCostModel& gpu, const Fabric& fabric,
              const ExpertPopularity& popularity, Rng routing_rng);

  // `groups` has one entry per attention group of the replica (deployment.attention_dp).
  const StepPlan& plan(std::span<const GroupBatch> groups);

  // Of the last plan, per GPU of the replica: time spent computing, FLOPs and HBM bytes.
  [[nodiscard]] std::span<const double> gpu_busy_s() const { return busy_s_; }
  [[nodiscard]] std::span<const double> gpu_flops() const { return flops_; }
  [[nodiscard]] std::span<const double> gpu_bytes() const { return bytes_; }
  [[nodiscard]] int gpus() const { return gpus_; }
  [[nodiscard]] const Placement& placement() const { return placement_; }
  // Replaces the placement (a rebalance); cached touch fractions are recomputed lazily.
  void set_placement(Placement p);

 private:
  Duration expert_time(std::int64_t tokens) const;
  void cost_groups(std::span<const GroupBatch> groups);
  // Expected share of tokens that touch each GPU and each node in `layer` (cached per placement).
  void ensure_touch(int layer);

  const ScenarioSpec& s_;
  const GpuCostModel& gpu_;
  const Fabric& fabric_;
  const ExpertPopularity& popularity_;
  Rng rng_;
  RoutingSampler sampler_;
  int gpus_;
  int groups_;
  int tp_;
  Placement placement_;
  int nodes_;
  std::vector<double> touch_gpu_;   // [layer][gpu]
  std::vector<double> touch_node_;  // [layer][node]
  std::vector<char> touch_valid_;   // [layer]
  std::vector<RoutingSampler::Layer> routing_;  // per layer, from the popularity
  std::vector<int> single_gpu_;  // [layer][expert]: its GPU when it has one copy, else -1
  std::vector<Duration> ffn_table_;  // expert FFN time by token count
  double expert_flops_per_token_;
  double expert_bytes_;

  // Scratch, reused every step.
  StepPlan plan_;
  std::vector<std::int32_t> counts_;
  std::vector<double> gpu_pairs_;
  std::vector<Duration> gpu_expert_time_;
  std::vector<double> gpu_tokens_;
  std::vector<Duration> pre_moe_;    // per group: attention + shared + gate (+ all-reduce), one layer
  std::vector<Duration> dense_layer_;  // per group: attention + dense FFN (+ all-reduce), one layer
  std::vector<double> busy_s_;
  std::vector<double> flops_;
  std::vector<double> bytes_;
  std::vector<double> group_flops_moe_;
  std::vector<double> group_bytes_moe_;
  AllToAllTraffic traffic_;
};

}  // namespace moesim
