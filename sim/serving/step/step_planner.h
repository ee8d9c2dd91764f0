// The step planner: costs one serving iteration of a replica (docs/architecture.md, "One serving step") as a
// composition of parts: attention, dense and shared FFNs and small kernels per attention group; per MoE layer
// the routing draw (RoutingDraw), the expert loop's copies (ExpertLoop, when a mechanism is on), the expert
// cost (ExpertCost), dispatch and combine All-to-All, and the overlap schedule; a layer waits for its slowest
// rank. O(layers x (experts + GPUs x nodes)) per step, no allocation after construction.
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
#include "sim/serving/experts/placement.h"
#include "sim/serving/experts/quantization_policy.h"
#include "sim/serving/spec/scenario_spec.h"
#include "sim/serving/step/expert_cost.h"
#include "sim/serving/step/group_batch.h"
#include "sim/serving/step/routing_draw.h"
#include "sim/serving/step/step_breakdown.h"
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
  // The step as a profiler on the replica's first GPU shows it (NVIDIA's profile traces of SGLang are its
  // rank 0's). The parts are the critical path: a layer waits for its slowest attention group before the
  // dispatch and for its slowest expert-parallel rank before the combine completes. On another GPU that wait
  // is idle time inside the All-to-All kernels: DeepEP's low-latency receive phase waits for every
  // sender's tokens before it unpacks or reduces them (deepseek-ai/DeepEP csrc/kernels/internode_ll.cu;
  // SGLang launches send and receive as two kernels per collective, both in NVIDIA's trace), so a profiler
  // counts it as dispatch and combine. Of parts[kAttention] + parts[kLayerKernels] (dispatch) and of
  // parts[kExperts] (combine), the first GPU's wait; it moves time between parts, never adds to the total.
  // Zero under two-batch overlap (not costed there) and for one expert-parallel rank.
  Duration first_gpu_dispatch_wait;
  Duration first_gpu_combine_wait;
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
  // Whether the step measured expert_imbalance (a layer drawn expert by expert); under layer sampling most
  // steps do not (StepPlanner::choose_layers), and expert_imbalance is then 0.
  bool expert_imbalance_measured = true;
  std::int64_t tokens = 0;
  // Rows deployment.moe_dp_padding adds to the MoE input (each layer's): the sum over attention-DP ranks of
  // the largest rank's tokens less the rank's own. Not in `tokens`.
  std::int64_t padded_rows = 0;
  // The step ran without a CUDA graph (runs_eagerly): its kernel launches are in parts[kHost].
  bool eager = false;
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
// The same stage where the engine gives the communication kernels `held_share` of the SMs for the whole
// overlapped schedule (DeepEP normal kernels: DeepSeek's prefill profile runs its computation on 108 SMs
// and its communication on 24, profile-data README figure; SGLang's prefill strategy limits DeepGEMM to
// the SMs DeepEP leaves, operations_strategy.py `deep_gemm_num_sms`): the SM-bound `work` runs at
// (1 - held_share) of its speed for its whole length, whether or not communication runs beside it, and the
// memory-bound `mem` (small kernels: HBM, not SMs, bounds them) at its own. The stage lasts
// max(comm, work / (1 - held_share) + mem). Exposed is the stage beyond work + mem, which can exceed `comm`
// when the communication is short; hidden is what is left of `comm` (never below zero).
[[nodiscard]] OverlapStage partitioned_stage(Duration work, Duration mem, Duration comm, double held_share);

// Single-batch overlap's signalled combine (SGLang --enable-single-batch-overlap; DeepEP PR #483, its
// combine send waits on the down GEMM's per-expert signals): the combine kernel is launched beside the down
// GEMM and holds `held_share` of the SMs from the GEMM's start, so the GEMM, launched on the other SMs,
// takes `down` / (1 - held_share). The GEMM finishes its `experts` local experts one after another at an
// even rate, and the combine sends each expert's tokens as soon as they are ready, at `combine` / experts
// per expert: it ends at max(GEMM, combine) + min(GEMM, combine) / experts after the GEMM's start (the
// first expert's compute or the last expert's send is never overlapped). `down`: the GEMM so slowed;
// `rest`: the combine left after it.
struct SignalledCombine {
  Duration down;
  Duration rest;
};
[[nodiscard]] SignalledCombine signalled_combine(Duration down, Duration combine, double held_share,
                                                 int experts);

class EagerPipeline;      // an eagerly launched step (hwmodels/eager_launch.h)
class ExpertLoop;         // experts in the loop (sim/serving/experts/expert_loop.h)
struct ExpertLoopEvents;  // what the loop did at a step boundary (the same file)

class StepPlanner {
 public:
  // `coactivation` (optional) samples routing with co-activation groups. `drift` (optional) replaces
  // `popularity` when given: the planner re-prepares its routing tables when its version changes. The caller
  // advances it. `loop` (optional; null when every experts-in-the-loop mechanism is off) is the replica's
  // expert loop, which outlives the planner: the planner follows the placement it publishes and asks it per
  // MoE layer; its owner runs its step boundary (see plan()). `routing` (optional): the routing tables of an
  // identical planner (same scenario view and popularity, routing_shareable()), shared read-only instead of
  // preparing and binning its own (routing_tables()).
  StepPlanner(const ScenarioSpec& s, const GpuCostModel& gpu, const Fabric& fabric,
              const ExpertPopularity& popularity, Rng routing_rng, const DriftingPopularity* drift = nullptr,
              const CoactivationModel* coactivation = nullptr, ExpertLoop* loop = nullptr,
              std::shared_ptr<RoutingDraw::Tables> routing = nullptr);
  ~StepPlanner();
  StepPlanner(const StepPlanner&) = delete;
  StepPlanner& operator=(const StepPlanner&) = delete;

  // `groups` has one entry per attention group of the replica (deployment.attention_dp); `now` is the
  // step's start (expert loads are queued on the loaders from it). For a planner without an expert loop;
  // with one, its owner plans in halves around the loop's step boundary (Replica::on_decide, on_planned;
  // StandalonePlanner::plan in serving_models.h).
  const StepPlan& plan(std::span<const GroupBatch> groups, Time now);
  // The same in two halves, for a caller that runs the second on another thread: begin_plan costs the
  // cheap part and returns a lower bound of the step's time (the plan's total is never below it);
  // finish_plan completes the plan. `groups` must stay unchanged until finish_plan returns. finish_plan
  // touches only this planner's state, the expert loop's (which nothing else touches meanwhile) and state
  // the run never writes (see plan_async_safe).
  Duration begin_plan(std::span<const GroupBatch> groups, Time now);
  const StepPlan& finish_plan();
  // What the expert loop did at its step boundary, into the step's plan: ExpertLoop::begin_step's between
  // begin_plan and finish_plan (a rebalance's pause is a part of the step, after the lower bound),
  // ExpertLoop::end_step's after finish_plan.
  void add_loop_events(const ExpertLoopEvents& e);
  [[nodiscard]] const StepPlan& last_plan() const { return plan_; }
  // Binned routing (on where it applies, see bins_): off draws every expert of every layer, for A/B checks.
  void set_binned_routing(bool on);
  [[nodiscard]] bool binned_routing() const { return draw_->binned(); }
  // Per-layer routing tables and their binning (RoutingDraw::Tables), shared read-only by the replicas of a
  // pool while nothing changes them (ServingModels builds them once).
  using RoutingTables = RoutingDraw::Tables;
  [[nodiscard]] bool routing_shareable() const {
    return loop_ == nullptr && drift_ == nullptr && coact_ == nullptr;
  }
  // The grouped-launch memo of the expert cost (ExpertCost::GroupedMemo), shared by the replicas of a pool.
  using GroupedMemo = ExpertCost::GroupedMemo;
  [[nodiscard]] std::shared_ptr<GroupedMemo> grouped_memo() const { return cost_->memo(); }
  // Takes the memo of a planner of the same scenario view and cost model.
  void share_grouped_memo(std::shared_ptr<GroupedMemo> memo) { cost_->share_memo(std::move(memo)); }
  [[nodiscard]] std::shared_ptr<RoutingTables> routing_tables() const { return draw_->tables(); }

  // Of the last plan, per GPU of the replica: time spent computing, FLOPs and HBM bytes.
  [[nodiscard]] std::span<const double> gpu_busy_s() const { return busy_s_; }
  [[nodiscard]] std::span<const double> gpu_flops() const { return flops_; }
  [[nodiscard]] std::span<const double> gpu_bytes() const { return bytes_; }
  // The last plan's routed (token, expert) pairs per expert-parallel rank, summed over the MoE layers, and
  // per MoE layer the largest rank's pairs over the mean (all zero for an empty step).
  [[nodiscard]] std::span<const double> rank_pairs() const { return rank_pairs_; }
  [[nodiscard]] std::span<const double> layer_imbalance() const { return layer_imbalance_; }
  // The MoE layer the last plan sampled for per-GPU figures (one a step, in turn: gpu_all_to_all_s).
  [[nodiscard]] int sampled_layer() const { return sample_layer_; }
  // The MoE layers the last plan costed (every layer unless run.moe_layer_sample; choose_layers).
  [[nodiscard]] std::span<const int> costed_layers() const { return costed_; }
  // The last plan's All-to-All as each part of the replica ran it, before two-batch overlap hides any:
  // per MoE layer its dispatch and combine seconds (pairs: [2 x layer] dispatch, [2 x layer + 1] combine;
  // both micro-batches' under overlap); per GPU its own dispatch and combine seconds on one MoE layer,
  // taken in turn step by step, times the MoE layers (the same pairs; an estimate of its step's sum: a
  // collective ends with its slowest GPU, so a GPU's own time shows how far it is from that); and per GPU
  // its share of that layer's collectives as the slowest. Empty for one rank.
  [[nodiscard]] std::span<const double> layer_all_to_all_s() const { return layer_a2a_s_; }
  [[nodiscard]] std::span<const double> gpu_all_to_all_s() const { return gpu_a2a_s_; }
  [[nodiscard]] std::span<const double> gpu_slowest() const { return gpu_slowest_; }
  [[nodiscard]] int gpus() const { return gpus_; }
  // Other traffic on each GPU's NIC path during the next step (AllToAllTraffic::nic_out_shared); empty
  // spans: none. Call before begin_plan.
  void set_nic_shared(std::span<const double> out, std::span<const double> in);
  [[nodiscard]] const Placement& placement() const { return placement_; }
  // deployment.moe_dp_padding: the top_k experts every padded row of MoE layer `layer` routes to (empty
  // when off).
  [[nodiscard]] std::span<const int> padded_experts(int layer) const {
    if (pad_experts_.empty()) return {};
    const auto k = static_cast<std::size_t>(s_.model.top_k);
    return std::span<const int>(pad_experts_).subspan(static_cast<std::size_t>(layer) * k, k);
  }
  // Routed (token, expert) pairs served at each precision since the start (quality proxy).
  [[nodiscard]] const QualityProxy& quality() const { return quality_; }
  // Largest routed-expert HBM bytes of any GPU (at each copy's precision; replicas included; a GPU of an
  // expert-TP rank holds 1/expert_tp of each copy).
  [[nodiscard]] double routed_expert_bytes_per_gpu() const;
  [[nodiscard]] std::uint64_t drift_updates() const { return drift_updates_; }
  // The expert cost as the last plan's last MoE layer left it (its per-rank pairs, touched experts and
  // times).
  [[nodiscard]] const ExpertCost& expert_cost() const { return *cost_; }

 private:
  // Follows a placement (the first, or the expert loop's after a rebalance): the single-copy map, the routing
  // bins and, lazily, the touch fractions.
  void set_placement(Placement p);
  // set_placement's map of single copies and dropped touch fractions (without the bins).
  void map_placement(Placement p);
  // Binned routing where it applies (see bins_).
  [[nodiscard]] bool binning_allowed() const;
  // The all-reduce that sums an expert-TP rank's partial outputs for `rank_tokens` tokens (zero without
  // expert TP, and under pure TP where the attention group's all-reduce does it).
  [[nodiscard]] Duration expert_tp_reduce(double rank_tokens) const;
  struct LayerComm {
    Duration dispatch;
    Duration combine;
    double held_share = 0;   // share of the GPU's SM time the kernels hold over their run (comm_held_share)
    bool partition = false;  // the SMs are held for the whole overlapped schedule (comm_partitions_sms)
  };
  [[nodiscard]] LayerComm layer_comm(int layer, std::span<const double> src_tokens, double pairs);
  [[nodiscard]] double comm_held_share(AllToAllMode mode) const;
  [[nodiscard]] static bool comm_partitions_sms(AllToAllMode mode);
  // Adds one two-batch-overlap stage's exposed and hidden communication to the plan; returns its time.
  // `work` is SM-bound compute, `mem` the memory-bound small kernels beside it; `c` the communicating
  // micro-batch's kernels (their SM share and whether they partition the SMs).
  Duration add_overlap_stage(Duration work, Duration mem, Duration comm, const LayerComm& c, StepPart part);
  // The SMs SGLang's combine-send kernel holds beside the down GEMM and shared experts, as a share.
  [[nodiscard]] double sbo_combine_held_share() const;
  // The small kernels of one layer (norms, residual adds, KV write, top-k, sort, permute...) for `tokens`.
  [[nodiscard]] SmallKernelTimes small_kernels(std::int64_t tokens, bool moe) const;
  [[nodiscard]] LayerKernelShape small_shape(bool moe) const;
  // Their launches in one layer (an eager step issues each).
  [[nodiscard]] std::int64_t small_launches(std::int64_t tokens, bool moe) const;
  // An eager step's kernels, in order, into `pipe` (add_host_time).
  void issue_step_kernels(EagerPipeline& pipe) const;
  void set_kernel_shape_quantisation();
  void split_micro_batches(std::span<const GroupBatch> groups, Duration dense_attention);
  // Per token: elements and launches of the FP8 quantisation of a layer's attention-projection inputs,
  // and of an FFN's (shared experts, dense FFN) of intermediate width `inter`.
  [[nodiscard]] std::pair<double, int> attention_quant() const;
  [[nodiscard]] std::pair<double, int> ffn_quant(Precision p, std::int64_t inter) const;
  // MLA prefill's expanded-key build for `prefill_tokens` (mla_key_build_bytes); zero for GQA.
  [[nodiscard]] Duration prefill_key_build(std::int64_t prefill_tokens) const;
  [[nodiscard]] std::span<const double> probs(int layer) const {
    return drift_ != nullptr ? drift_->layer(layer) : popularity_.layer(layer);
  }
  void cost_groups(std::span<const GroupBatch> groups);
  // Decode and prefill attention-core work of one layer for one group's batch.
  [[nodiscard]] std::pair<AttentionWork, AttentionWork> attention_work(const GroupBatch& b) const;
  [[nodiscard]] Duration group_attention(const GroupBatch& b) const;
  [[nodiscard]] Duration group_shared_and_gate(const GroupBatch& b) const;
  // A group's costs that depend on its token count alone (every GEMM of a layer but the expert ones, the TP
  // all-reduces, the small kernels), memoised by that count: it recurs step after step.
  struct TokenCosts {
    Duration projections;      // attention projections and the two TP all-reduces of a layer
    Duration shared_and_gate;  // shared experts and the router
    Duration shared;           // the shared experts alone
    Duration small_moe, small_dense;
    Duration small_moe_experts;  // the part of small_moe between dispatch and combine
    Duration dense_ffn;
  };
  [[nodiscard]] const TokenCosts& token_costs(std::int64_t tokens) const;
  [[nodiscard]] TokenCosts compute_token_costs(std::int64_t tokens) const;

 public:
  // The memo of token_costs, shared by the replicas of a pool (same scenario view and cost model) like the
  // grouped-launch memo; written and read only by begin_plan, on the event loop's thread.
  struct TokenMemo {
    std::vector<TokenCosts> costs;  // [tokens]
    std::vector<char> set;
  };
  [[nodiscard]] std::shared_ptr<TokenMemo> token_memo() const { return token_memo_; }
  void share_token_memo(std::shared_ptr<TokenMemo> memo) { token_memo_ = std::move(memo); }

 private:
  std::shared_ptr<TokenMemo> token_memo_ = std::make_shared<TokenMemo>();
  // Attention + shared expert + gate (+ TP all-reduces) of one MoE layer for one group's batch.
  [[nodiscard]] Duration group_pre_moe(const GroupBatch& b) const;
  void begin_step();
  // The exact per-expert draw of `layer`: from the population law, or from this step's law at log-sd
  // `affinity_sd` > 0 (per-request affinity, workloads/request_affinity.h).
  std::span<std::int32_t> sample_layer(int layer, std::int64_t tokens, double affinity_sd);
  std::int32_t place_counts(int layer, std::span<const std::int32_t> counts);
  struct PendingPlan;
  // Single-batch overlap (deployment.single_batch_overlap): SGLang's schedule of one MoE layer's dispatch,
  // experts, shared experts and combine for the whole batch; adds its parts and returns the layer's time.
  Duration single_batch_overlap(const LayerComm& c, const PendingPlan& p, Duration experts_max);
  Duration layer_schedule(int layer, const PendingPlan& p, Time request, Duration experts_max, bool tbo,
                          bool tiers);
  // Expected share of tokens that touch each GPU and each node in `layer` (cached per placement); under
  // deployment.moe_dp_padding also the share of its padded rows (pad_touch).
  void ensure_touch(int layer);
  void pad_touch(int layer);
  Duration add_layer_experts(double& max_pairs);
  void add_host_time();
  void size_scratch();
  [[nodiscard]] std::unique_ptr<ExpertCost> make_expert_cost(std::int64_t max_tokens) const;
  std::span<const GroupBatch> pipeline_micro_batches(std::span<const GroupBatch> groups);

  const ScenarioSpec& s_;
  const GpuCostModel& gpu_;
  const Fabric& fabric_;
  const ExpertPopularity& popularity_;
  const DriftingPopularity* drift_;
  const CoactivationModel* coact_;
  std::uint64_t drift_version_ = 0;
  std::uint64_t drift_updates_ = 0;
  int gpus_;
  int groups_;
  int tp_;
  int etp_;    // expert tensor parallelism: GPUs that share every expert of a rank
  int ranks_;  // expert-parallel ranks (gpus_ / etp_); the placement is over ranks
  Placement placement_;
  int nodes_;
  ExpertLoop* loop_;  // the replica's; null when every experts-in-the-loop mechanism is off
  std::uint64_t placement_version_ = 0;  // of the loop's placement that placement_ follows
  std::vector<double> touch_gpu_;        // [layer][rank]
  std::vector<double> touch_node_;       // [layer][node]
  std::vector<char> touch_valid_;        // [layer]
  std::vector<TouchMemo> touch_memo_;    // [layer]
  std::vector<int> single_gpu_;          // [layer][expert]: its rank when it has one copy, else -1
  // deployment.moe_dp_padding: the top_k experts every padded row of a layer routes to ([layer][k]), and
  // the share of a padded row that touches each rank and each node ([layer][rank], [layer][node]).
  std::vector<int> pad_experts_;
  std::vector<double> pad_touch_gpu_;
  std::vector<double> pad_touch_node_;
  std::vector<double> pad_mix_;  // [rank]: a step's share of its rows that touches each rank
  void draw_pad_experts();
  // Routing: the exact per-expert draw and, with grouped launches, one copy per expert and no mechanism that
  // reads each expert's count, the binned fast paths (per-rank sums) for all layers but one per step.
  std::unique_ptr<RoutingDraw> draw_;
  bool binned_allowed_ = true;
  std::unique_ptr<ExpertCost> cost_;   // the one expert-cost function (sim/serving/expert_cost.h)
  std::vector<double> touch_scratch_;  // co-activated touch fractions' scratch
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
    Duration shared_at_max{};   // the shared experts of the group whose pre_moe is pre_moe_max
    Duration pre_a{}, pre_b{};  // two-batch overlap: each micro-batch's attention and small kernels
    Duration small_exp_a{}, small_exp_b{};  // and its small kernels between dispatch and combine
    Duration small_att_a{}, small_att_b{};  // of pre_a / pre_b, the small kernels (memory-bound)
    double affinity_sd = 0;  // the step law's log-sd (per-request affinity); > 0: every layer exact
    // deployment.moe_dp_padding: rows added to the MoE input (StepPlan::padded_rows), and their share of
    // every row it dispatches.
    std::int64_t padded_rows = 0;
    double pad_share = 0;
    bool binned = false;  // binned routing: per-rank sums for every layer but full_layer
    int full_layer = -1;  // binned routing: the layer drawn expert by expert this step (-1: none)
  };
  // run.moe_layer_sample: the MoE layers this step costs (all, or a systematic sample) and the weight of
  // each.
  void choose_layers();
  void weight_sampled_layers();
  std::vector<int> costed_;
  double layer_weight_ = 1.0;
  std::vector<double> busy_base_, flops_base_;  // busy_s_ and flops_ before the MoE layers (dense layers')
  Rng layer_rng_;
  // Per-request affinity: its log-sd, the stream of its normals and the scratch of a step's law of a layer.
  double affinity_sd_;
  Rng affinity_rng_;
  std::vector<double> step_law_;
  PendingPlan pending_;
  std::vector<double> rank_bytes_;       // per expert-parallel rank: expert weight bytes read this step
  std::vector<double> rank_pairs_;       // per expert-parallel rank: routed pairs this step (all layers)
  std::vector<double> layer_imbalance_;  // per MoE layer: max over mean routed pairs per rank this step
  std::vector<double> layer_a2a_s_;      // layer_all_to_all_s()
  std::vector<double> gpu_a2a_s_;        // gpu_all_to_all_s()
  std::vector<double> gpu_slowest_;      // gpu_slowest()
  std::vector<Duration> gpu_dispatch_, gpu_combine_;  // one collective's per-GPU times (Fabric::all_to_all)
  std::uint64_t plans_ = 0;                           // plans finished: the sampled layer turns with them
  int sample_layer_ = 0;  // the MoE layer whose collectives give each GPU's own times this step
  void sample_gpus();
  std::vector<double> gpu_tokens_;
  std::vector<Duration> pre_moe_;      // per group: attention + shared + gate (+ all-reduce), one layer
  std::vector<Duration> small_moe_;    // per group: small kernels of one MoE layer
  std::vector<Duration> small_dense_;  // per group: small kernels of one dense layer
  std::vector<double> half_tokens_;    // [half][gpu]: tokens each GPU dispatches per micro-batch
  double half_a_ = 1.0;                // micro-batch A's share of the step's tokens
  LayerKernelShape kernel_shape_;
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
