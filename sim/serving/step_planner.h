// The step planner: costs one serving iteration of a replica, layer by layer (see "One serving step" in
// ARCHITECTURE.md). Attention per group, dense and shared FFNs, the gate, routing counts per expert, the
// dispatch and combine All-to-All from those counts, expert FFNs per GPU; a layer waits for its slowest
// GPU. O(layers x (experts + GPUs^2)) per step, no allocation after construction.
#pragma once

#include <array>
#include <atomic>
#include <cmath>
#include <cstdint>
#include <memory>
#include <span>
#include <utility>
#include <vector>

#include "hwmodels/fabric.h"
#include "hwmodels/gpu_cost_model.h"
#include "hwmodels/layer_kernels.h"
#include "sim/engine/random.h"
#include "sim/serving/group_batch.h"
#include "sim/serving/placement.h"
#include "sim/serving/quantization_policy.h"
#include "sim/serving/scenario_spec.h"
#include "sim/serving/step_breakdown.h"
#include "workloads/expert_popularity.h"
#include "workloads/popularity_drift.h"

namespace moesim {

// One step's cost: its duration, the parts it is made of (they add up to `total`; see step_breakdown.h)
// and what the experts in the loop did.
struct StepPlan {
  Duration total;
  StepParts parts;
  // Under two-batch overlap: All-to-All time that ran while the other micro-batch computed (not a part;
  // the exposed rest is in parts[kDispatch] and parts[kCombine]).
  Duration comm_hidden;
  // Of the exposed dispatch and combine under two-batch overlap: the time the other micro-batch's
  // compute lost to the SMs the communication kernels held (beyond max(compute, communication)).
  Duration comm_sm_contention;
  [[nodiscard]] Duration part(StepPart p) const { return parts[p]; }
  double rebalance_bytes = 0;
  int rebalances = 0;
  std::int64_t rerouted = 0;     // (token, expert) pairs re-routed by router post-processing
  std::int64_t expert_uses = 0;  // (GPU, expert copy) uses with tokens, under tiers
  std::int64_t hbm_hits = 0;     // of those, resident and ready in HBM
  std::int64_t host_loads = 0;   // loaded from host DRAM on demand
  std::int64_t nvme_loads = 0;   // loaded from NVMe on demand
  std::int64_t prefetches = 0;   // loads issued ahead by the prefetch policy
  std::int64_t evictions = 0;
  double host_bytes = 0;  // bytes loaded from host DRAM (demand + prefetch)
  double nvme_bytes = 0;
  double dispatch_nvlink_bytes = 0;
  double dispatch_nic_bytes = 0;
  double gpu_imbalance = 1;     // mean over MoE layers of max/mean routed pairs per GPU
  double expert_imbalance = 1;  // mean over MoE layers of max/mean routed pairs per expert
  std::int64_t tokens = 0;
};

// One stage of the two-micro-batch schedule: the compute `work` of one micro-batch beside the
// communication `comm` of the other, whose kernels hold `held_share` of the GPU's SMs while they run.
// The compute runs at (1 - held_share) of its speed while the communication lasts (a kernel's throughput
// follows the SMs it has: SM partitioning), so the stage lasts max(comm, work + comm x held_share).
// Beyond `work` the stage is exposed communication; the rest of `comm` is hidden; `contention` is what
// the held SMs add to the plain overlap max(comm, work).
struct OverlapStage {
  Duration time;
  Duration exposed;
  Duration hidden;
  Duration contention;
};
[[nodiscard]] OverlapStage overlap_stage(Duration work, Duration comm, double held_share);

struct ExpertLoop;  // experts-in-the-loop state (placement policy, statistics, tiers, quantisation)

class StepPlanner {
 public:
  // `coactivation` (optional) samples routing with co-activation groups. `drift` (optional) replaces
  // `popularity` when given: the planner re-prepares its routing tables when its version changes. The caller
  // advances it.
  StepPlanner(const ScenarioSpec& s, const GpuCostModel& gpu, const Fabric& fabric,
              const ExpertPopularity& popularity, Rng routing_rng, const DriftingPopularity* drift = nullptr,
              const CoactivationModel* coactivation = nullptr);
  ~StepPlanner();
  StepPlanner(const StepPlanner&) = delete;
  StepPlanner& operator=(const StepPlanner&) = delete;

  // `groups` has one entry per attention group of the replica (deployment.attention_dp); `now` is the
  // step's start (expert loads are queued on the loaders from it).
  const StepPlan& plan(std::span<const GroupBatch> groups, Time now);
  // The same in two halves, for a caller that runs the second on another thread: begin_plan costs the
  // cheap part and returns a lower bound of the step's time (the plan's total is never below it);
  // finish_plan completes the plan. `groups` must stay unchanged until finish_plan returns. finish_plan
  // touches only this planner's state and state the run never writes (see plan_async_safe).
  Duration begin_plan(std::span<const GroupBatch> groups, Time now);
  const StepPlan& finish_plan();
  [[nodiscard]] const StepPlan& last_plan() const { return plan_; }
  // Binned routing (on where it applies, see bins_): off draws every expert of every layer, for A/B checks.
  void set_binned_routing(bool on);
  [[nodiscard]] bool binned_routing() const { return !tables_->bins.empty(); }
  // Per-layer routing tables (RoutingSampler::prepare of the popularity) and their binning by GPU. While
  // nothing changes them (no experts-in-the-loop mechanism, static popularity) they are the same for every
  // replica of a pool: ServingModels builds them once and shares them, read-only, instead of one copy per
  // replica (at 16 replicas the copies no longer fit the caches).
  struct RoutingTables {
    std::vector<RoutingSampler::Layer> layers;
    std::vector<RoutingSampler::Bins> bins;  // per layer; empty when not binned
  };
  [[nodiscard]] bool routing_shareable() const { return !loop_; }
  // Grouped-launch cost by (experts, tokens): a direct-mapped memo, one row of kRow slots per expert count
  // (up to a GPU's slots), tokens modulo the row. A step asks 2 x ranks x layers times, for a band of token
  // counts; a miss is the roofline's two pow calls. A slot packs the tokens (low 24 bits) and the time in ps
  // (high 40 bits, up to 1.09 s) into one word, so the replicas of a pool share one memo (share_grouped_memo)
  // from any thread: a word is read whole, and what a hit returns is what the cost model gives, whoever
  // stored it. Zero is a valid slot (no tokens cost nothing). 2,048 unshared (tokens, time) slots per row
  // missed 80% of lookups in the EP16 hour's steady state.
  struct GroupedMemo {
    static constexpr std::size_t kRow = 8192;
    explicit GroupedMemo(std::size_t n) : rows(n), slots(n * kRow) {}
    std::size_t rows;
    std::vector<std::atomic<std::uint64_t>> slots;
  };
  [[nodiscard]] std::shared_ptr<GroupedMemo> grouped_memo() const { return grouped_memo_; }
  // Takes the memo of a planner of the same scenario view and cost model.
  void share_grouped_memo(std::shared_ptr<GroupedMemo> memo);
  [[nodiscard]] std::shared_ptr<RoutingTables> routing_tables() const { return tables_; }
  // Takes `tables` from an identical planner (same scenario view, popularity and placement).
  void share_routing(std::shared_ptr<RoutingTables> tables);

  // Of the last plan, per GPU of the replica: time spent computing, FLOPs and HBM bytes.
  [[nodiscard]] std::span<const double> gpu_busy_s() const { return busy_s_; }
  [[nodiscard]] std::span<const double> gpu_flops() const { return flops_; }
  [[nodiscard]] std::span<const double> gpu_bytes() const { return bytes_; }
  [[nodiscard]] int gpus() const { return gpus_; }
  // Other traffic on each GPU's NIC path during the next step (AllToAllTraffic::nic_out_shared); empty
  // spans: none. Call before begin_plan.
  void set_nic_shared(std::span<const double> out, std::span<const double> in);
  [[nodiscard]] const Placement& placement() const { return placement_; }
  // Routed (token, expert) pairs served at each precision since the start (quality proxy).
  [[nodiscard]] const QualityProxy& quality() const { return quality_; }
  // Largest routed-expert HBM bytes of any GPU (at each copy's precision; replicas included; a GPU of an
  // expert-TP rank holds 1/expert_tp of each copy).
  [[nodiscard]] double routed_expert_bytes_per_gpu() const;
  [[nodiscard]] std::uint64_t drift_updates() const { return drift_updates_; }

 private:
  // Replaces the placement; cached touch fractions are recomputed lazily. Under tiers the caller re-registers
  // the caches when slots moved (rebalance() does), which is why this is not public.
  void set_placement(Placement p);
  Duration expert_time(std::int64_t tokens) const;
  // One GPU's routed experts of one layer as one grouped launch (deployment.engine's grouped kernels):
  // `experts` with tokens, `pairs` routed (token, expert) pairs.
  [[nodiscard]] Duration grouped_time(std::int32_t experts, double pairs) const;
  // The all-reduce that sums an expert-TP rank's partial outputs for `rank_tokens` tokens (zero without
  // expert TP, and under pure TP where the attention group's all-reduce does it).
  [[nodiscard]] Duration expert_tp_reduce(double rank_tokens) const;
  struct LayerComm {
    Duration dispatch;
    Duration combine;
    int comm_sms = 0;  // SMs the kernels hold while they run
  };
  [[nodiscard]] LayerComm layer_comm(int layer, std::span<const double> src_tokens, double pairs);
  [[nodiscard]] int comm_sms(AllToAllMode mode) const;
  // Adds one two-batch-overlap stage's exposed and hidden communication to the plan; returns its time.
  Duration add_overlap_stage(Duration work, Duration comm, int comm_sms, StepPart part);
  [[nodiscard]] static std::pair<GroupBatch, GroupBatch> split_batch(const GroupBatch& b);
  // Pairs of `n` that micro-batch A carries (its share of the step's tokens; all of them without overlap).
  [[nodiscard]] std::int32_t first_half(std::int32_t n) const {
    return half_a_ == 1.0 ? n : static_cast<std::int32_t>(round_half_away(double(n) * half_a_));
  }
  // The small kernels of one layer (norms, residual adds, KV write, top-k, sort, permute...) for `tokens`.
  [[nodiscard]] Duration small_kernels(std::int64_t tokens, bool moe) const;
  // An expert's FFN at `tokens` and precision p: the memo's entry inline (per copy, layer and step under
  // quantisation and tiers), else costed once by expert_time_costed().
  Duration expert_time(std::int64_t tokens, Precision p) const {
    const auto& table = ffn_by_precision_[precision_index(p)];
    if (tokens >= 0 && tokens < static_cast<std::int64_t>(table.size())) {
      const Duration d = table[static_cast<std::size_t>(tokens)];
      if (d != kUncosted) return d;
    }
    return expert_time_costed(tokens, p);
  }
  Duration expert_time_costed(std::int64_t tokens, Precision p) const;
  [[nodiscard]] std::span<const double> probs(int layer) const {
    return drift_ != nullptr ? drift_->layer(layer) : popularity_.layer(layer);
  }
  void cost_groups(std::span<const GroupBatch> groups);
  // Decode and prefill attention-core work of one layer for one group's batch.
  [[nodiscard]] std::pair<AttentionWork, AttentionWork> attention_work(const GroupBatch& b) const;
  [[nodiscard]] Duration group_attention(const GroupBatch& b) const;
  [[nodiscard]] Duration group_shared_and_gate(const GroupBatch& b) const;
  // Attention + shared expert + gate (+ TP all-reduces) of one MoE layer for one group's batch.
  [[nodiscard]] Duration group_pre_moe(const GroupBatch& b) const;
  // Experts in the loop, once per step before routing: drift, reclassification, rebalance.
  void begin_step(Time now);
  void setup_loop();
  void sample_layer(int layer, std::int64_t tokens);
  std::int32_t cost_copies(int layer, Time request);
  Duration layer_stall(Time experts_start, Duration experts_max);
  void end_step(Time step_end);
  void reclassify();
  void rebalance();
  void setup_tiers();
  // Per-GPU expert time of one layer with loads (cost_copies decides hits inline): loads a copy that is
  // neither resident nor staged at `request`; a GPU's experts wait for their copies' loads.
  void miss_copy(int gpu, int copy, std::int32_t tokens, Duration ffn, Time request);
  void wait_for_copy(std::size_t g, Time done, Duration ffn);
  // Expected share of tokens that touch each GPU and each node in `layer` (cached per placement).
  void ensure_touch(int layer);

  const ScenarioSpec& s_;
  const GpuCostModel& gpu_;
  const Fabric& fabric_;
  const ExpertPopularity& popularity_;
  const DriftingPopularity* drift_;
  const CoactivationModel* coact_;
  std::uint64_t drift_version_ = 0;
  std::uint64_t drift_updates_ = 0;
  Rng rng_;
  RoutingSampler sampler_;
  int gpus_;
  int groups_;
  int tp_;
  int etp_;    // expert tensor parallelism: GPUs that share every expert of a rank
  int ranks_;  // expert-parallel ranks (gpus_ / etp_); the placement is over ranks
  Placement placement_;
  int nodes_;
  std::vector<double> touch_gpu_;          // [layer][rank]
  std::vector<double> touch_node_;         // [layer][node]
  std::vector<char> touch_valid_;          // [layer]
  std::vector<TouchMemo> touch_memo_;      // [layer]
  std::shared_ptr<RoutingTables> tables_;  // copy-on-write: shared by the replicas of a pool (share_routing)
  RoutingTables& own_tables();
  // Under co-activation: its sampler and per-layer tables, from the popularity.
  std::unique_ptr<CoactivationSampler> coact_sampler_;
  std::vector<CoactivationSampler::Layer> coact_routing_;
  std::vector<int> single_gpu_;  // [layer][expert]: its GPU when it has one copy, else -1
  // Binned routing (RoutingSampler::sample_binned, tables_->bins): with grouped launches, one copy per expert
  // and no experts-in-the-loop mechanism, a layer's cost reads only per-GPU sums of its hot experts, so most
  // layers draw those sums; one layer per step, in turn, draws every expert for the expert-load statistics.
  std::vector<std::vector<int>>
      replicated_;  // [layer]: experts with several copies, bins ranks_, ranks_ + 1...
  std::vector<std::int64_t> bin_pairs_;
  std::vector<std::int32_t> bin_hot_;     // [layer][bin]: each layer's last split of hot experts
  std::vector<std::size_t> bin_hot_for_;  // [layer]: the count of hot experts it was split for
  // What a cold expert with count c adds to its GPU (cold_tally()): pairs and micro-batch A's pairs in .a
  // (32 bits each); touched, touched in A, touched in B in .b (21 bits each). Rebuilt when half_a_ moves.
  std::vector<RoutingSampler::Tally> tally_;
  double tally_half_a_ = -1;
  std::vector<RoutingSampler::Tally> bin_cold_;
  // Without two-batch overlap: sample_bin_sums(), its laws kept per layer for the last kLawSlots token
  // counts of decode-only steps (by tokens modulo kLawSlots: a decode batch moves by a few sequences per
  // step); a step with prefill, whose count seldom recurs, derives its laws in step_law_.
  std::vector<RoutingSampler::ColdSums> bin_sums_;
  static constexpr std::size_t kLawSlots = 16;
  std::vector<RoutingSampler::BinLaw> bin_laws_;  // [layer][slot]
  RoutingSampler::BinLaw step_law_;
  const std::vector<RoutingSampler::Tally>& cold_tally();
  std::int64_t plans_done_ = 0;
  bool binned_allowed_ = true;
  // Expert FFN time by token count (kUncosted until first asked), at precision.routed_experts and, under
  // quantisation, at each tier's precision.
  static constexpr Duration kUncosted = Duration::from_ps(-1);
  mutable std::vector<Duration> ffn_table_;
  mutable std::array<std::vector<Duration>, kPrecisionCount> ffn_by_precision_;
  std::shared_ptr<GroupedMemo> grouped_memo_;
  std::unique_ptr<ExpertLoop> loop_;  // null when every mechanism is off
  QualityProxy quality_;
  int inter_;  // expert intermediate columns per GPU (expert_inter / expert_tp)
  double expert_flops_per_token_;
  double expert_bytes_;

  // Scratch, reused every step.
  StepPlan plan_;
  struct PendingPlan {                   // what begin_plan hands to finish_plan
    std::span<const GroupBatch> full{};  // the step's batches
    Time now{};
    std::int64_t total_tokens = 0;
    std::int64_t prefill_tokens = 0;
    std::int64_t sampled_max = 0;
    Duration pre_moe_max{}, dense_max{}, small_max{}, small_dense_max{};
    Duration pre_a{}, pre_b{};  // two-batch overlap: each micro-batch's attention and small kernels
  };
  PendingPlan pending_;
  std::vector<std::int32_t> counts_;
  // Per expert-parallel rank (a GPU unless expert_tp > 1): routed pairs, expert time, weight bytes read.
  std::vector<double> gpu_pairs_;
  std::vector<Duration> gpu_expert_time_;
  std::vector<double> rank_bytes_;
  std::vector<double> gpu_tokens_;
  std::vector<Duration> pre_moe_;          // per group: attention + shared + gate (+ all-reduce), one layer
  std::vector<Duration> small_moe_;        // per group: small kernels of one MoE layer
  std::vector<Duration> small_dense_;      // per group: small kernels of one dense layer
  std::vector<std::int32_t> gpu_touched_;  // [rank][half]: experts with tokens (grouped launches)
  std::vector<double> gpu_half_pairs_;     // [rank][half]: routed pairs (half 1 only under two-batch overlap)
  std::vector<Duration> half_time_;        // [rank][half]: expert time of each micro-batch
  std::vector<double> half_tokens_;        // [half][gpu]: tokens each GPU dispatches per micro-batch
  double half_a_ = 1.0;                    // micro-batch A's share of the step's tokens
  LayerKernelShape kernel_shape_;
  bool grouped_ = true;
  std::vector<Duration> dense_layer_;      // per group: attention + dense FFN (+ all-reduce), one layer
  std::vector<Duration> dense_attention_;  // per group: the attention of a dense layer
  std::vector<double> busy_s_;
  std::vector<double> flops_;
  std::vector<double> bytes_;
  std::vector<double> group_flops_moe_;
  std::vector<double> group_bytes_moe_;
  AllToAllTraffic traffic_;
  AllToAllScratch a2a_scratch_;       // this planner's: plans of several replicas may run at once
  std::vector<Duration> layer_time_;  // per layer of the last plan (pipeline stages)
  std::vector<GroupBatch> micro_;     // one micro-batch per group (pipeline parallelism)
  std::vector<Duration> stage_time_;  // per pipeline stage, one micro-batch
  void add_draft_work();
  void finish_pipeline(std::span<const GroupBatch> groups);
};

}  // namespace moesim
