#include "sim/serving/step/step_planner.h"

#include <algorithm>
#include <array>
#include <cmath>
#include <tuple>

#include "hwmodels/dense_gemm_family.h"
#include "hwmodels/eager_launch.h"
#include "sim/engine/check.h"
#include "sim/serving/experts/expert_loop.h"
#include "sim/serving/step/cuda_graph_step.h"
#include "sim/serving/step/micro_batch_split.h"
#include "sim/serving/step/routing_draw.h"
#include "workloads/request_affinity.h"

namespace moesim {

OverlapStage overlap_stage(Duration work, Duration comm, double held_share) {
  const double held = std::clamp(held_share, 0.0, 1.0);
  OverlapStage o;
  o.time = max(comm, work + comm.scaled(held));
  o.exposed = o.time - work;
  o.hidden = comm - o.exposed;
  o.contention = o.time - max(comm, work);
  return o;
}

OverlapStage partitioned_stage(Duration work, Duration mem, Duration comm, double held_share) {
  const double held = std::clamp(held_share, 0.0, 1.0);
  OverlapStage o;
  // Every SM held: the compute waits for the communication's SMs (no overlap).
  o.time = held < 1.0 ? max(comm, work.scaled(1.0 / (1.0 - held)) + mem) : comm + work + mem;
  o.exposed = o.time - (work + mem);
  o.hidden = comm > o.exposed ? comm - o.exposed : Duration::zero();
  o.contention = o.time - max(comm, work + mem);
  return o;
}

SignalledCombine signalled_combine(Duration down, Duration combine, double held_share, int experts) {
  const double held = std::clamp(held_share, 0.0, 1.0);
  MOESIM_CHECK(held < 1.0 && experts > 0, "a signalled combine needs SMs left to the GEMM and an expert");
  SignalledCombine out;
  out.down = down.scaled(1.0 / (1.0 - held));
  const Duration end = max(out.down, combine) + min(out.down, combine) / experts;
  out.rest = end - out.down;
  return out;
}

StepPlanner::StepPlanner(const ScenarioSpec& s, const GpuCostModel& gpu, const Fabric& fabric,
                         const ExpertPopularity& popularity, Rng routing_rng, const DriftingPopularity* drift,
                         const CoactivationModel* coactivation, ExpertLoop* loop,
                         std::shared_ptr<RoutingDraw::Tables> routing)
    : s_(s),
      gpu_(gpu),
      fabric_(fabric),
      popularity_(popularity),
      drift_(drift),
      coact_(coactivation),
      gpus_(s.deployment.ep_size),
      groups_(s.deployment.attention_dp),
      tp_(s.deployment.attention_tp),
      etp_(s.deployment.expert_tp),
      ranks_(s.deployment.expert_ranks()),
      placement_(loop != nullptr ? loop->placement() : initial_placement(s)),
      nodes_(replica_nodes(s)),
      loop_(loop),
      layer_rng_(splitmix64(Rng(routing_rng).next_u64() ^ 0x6c61796572ULL)),
      affinity_sd_(s.workload.request_affinity_sd),
      affinity_rng_(splitmix64(Rng(routing_rng).next_u64() ^ 0x616666696e697479ULL)) {
  const ModelSpec& m = s.model;
  MOESIM_CHECK(groups_ * tp_ == gpus_, "attention_dp x attention_tp must equal ep_size");
  MOESIM_CHECK(s.run.moe_layer_sample == 0 || (loop == nullptr && s.deployment.pipeline_stages == 1),
               "MoE layer sampling needs a planner without an expert loop or pipeline stages");

  // Expert cost by token count, memoised up to the most tokens one expert can see in a step (capped:
  // larger counts are costed directly). Filled on first use: grouped engines cost the loop rarely, and a
  // cluster builds one planner per replica (65,537 profile evaluations each were 19% of a 1,024-GPU run).
  const auto max_tokens = std::min<std::int64_t>(s.deployment.max_batched_tokens * groups_, 1 << 16);
  // Under expert TP each GPU runs every local expert with inter / expert_tp columns (Megatron-LM's split:
  // gate/up by columns, down by rows), so its FLOPs and weight bytes are 1/expert_tp of the expert's.
  inter_ = static_cast<int>(m.expert_inter / etp_);
  expert_flops_per_token_ = 6.0 * double(m.hidden) * double(inter_);
  expert_bytes_ = m.expert_params() * bytes_per_element(s.precision.routed_experts);

  size_scratch();
  if (drift_ != nullptr) drift_version_ = drift_->version();
  draw_ =
      std::make_unique<RoutingDraw>(m.moe_layers(), m.routed_experts, m.top_k, ranks_, routing_rng, coact_);
  if (!routing) {
    for (int l = 0; l < m.moe_layers(); ++l) draw_->prepare(l, probs(l));
  }
  traffic_.dispatch_bytes_per_token = double(m.hidden) * activation_bytes_per_element(s.precision.dispatch);
  traffic_.combine_bytes_per_token = double(m.hidden) * bytes_per_element(s.precision.combine);
  if (loop_ != nullptr) placement_version_ = loop_->placement_version();
  if (coact_ != nullptr)
    touch_scratch_.resize(touch_scratch_size(coact_->groups(), std::max(ranks_, nodes_)));
  cost_ = make_expert_cost(max_tokens);
  if (s.deployment.moe_dp_padding) draw_pad_experts();
  if (!routing) {
    set_placement(placement_);
    return;
  }
  MOESIM_CHECK(routing_shareable(), "routing tables shared by a planner that changes its own");
  map_placement(placement_);
  draw_->share_tables(std::move(routing), placement_, single_gpu_);
}

StepPlanner::~StepPlanner() = default;

// deployment.moe_dp_padding: a padded row is a zero hidden state, to which DeepSeek's sigmoid gate gives
// every expert the same score (0.5), so the gate's e_score_correction_bias alone picks its top_k experts, the
// same for every padded row of a layer (TensorRT-LLM modeling_deepseekv3.py, DeepseekV3Gate and its
// noaux_tc routing). The biases are not in our model data. Assumption: top_k distinct experts per MoE layer,
// drawn uniformly (independent of the popularity law) once for the run from the run's seed, one stream for
// every replica (they hold the same weights).
void StepPlanner::draw_pad_experts() {
  MOESIM_CHECK(!s_.deployment.two_batch_overlap,
               "attention-DP padding is not modelled with two-batch overlap");
  const int experts = s_.model.routed_experts;
  const int k = s_.model.top_k;
  Rng rng = RandomStreams(s_.run.seed).stream("moe_dp_padding");
  std::vector<int> order(static_cast<std::size_t>(experts));
  pad_experts_.clear();
  for (int l = 0; l < s_.model.moe_layers(); ++l) {
    for (int e = 0; e < experts; ++e) order[static_cast<std::size_t>(e)] = e;
    for (int i = 0; i < k; ++i) {  // the first k of a Fisher-Yates shuffle
      const auto j = static_cast<std::size_t>(i) + rng.below(static_cast<std::uint64_t>(experts - i));
      std::swap(order[static_cast<std::size_t>(i)], order[j]);
      pad_experts_.push_back(order[static_cast<std::size_t>(i)]);
    }
  }
  const auto layers = static_cast<std::size_t>(s_.model.moe_layers());
  pad_touch_gpu_.assign(layers * static_cast<std::size_t>(ranks_), 0.0);
  pad_touch_node_.assign(layers * static_cast<std::size_t>(nodes_), 0.0);
  pad_mix_.assign(static_cast<std::size_t>(ranks_), 0.0);
}

// The share of a layer's padded rows that touches each rank and each node: a row goes to each of its k
// experts, to one of an expert's copies in turn (replica_share), so it misses a rank with probability the
// product over its experts of (1 - the expert's copies there / its copies).
void StepPlanner::pad_touch(int layer) {
  const int k = s_.model.top_k;
  const auto l = static_cast<std::size_t>(layer);
  const std::span<double> gpu =
      std::span<double>(pad_touch_gpu_)
          .subspan(l * static_cast<std::size_t>(ranks_), static_cast<std::size_t>(ranks_));
  const std::span<double> node =
      std::span<double>(pad_touch_node_)
          .subspan(l * static_cast<std::size_t>(nodes_), static_cast<std::size_t>(nodes_));
  std::vector<double> miss_gpu(gpu.size(), 1.0);
  std::vector<double> miss_node(node.size(), 1.0);
  std::vector<double> share_gpu(gpu.size());
  std::vector<double> share_node(node.size());
  const int ranks_per_node = ranks_ / nodes_;
  for (int i = 0; i < k; ++i) {
    const auto copies = placement_.slots_of(
        layer, pad_experts_[l * static_cast<std::size_t>(k) + static_cast<std::size_t>(i)]);
    if (copies.empty()) continue;
    std::fill(share_gpu.begin(), share_gpu.end(), 0.0);
    std::fill(share_node.begin(), share_node.end(), 0.0);
    for (const int slot : copies) {
      const int r = placement_.gpu_of_slot(slot);
      share_gpu[static_cast<std::size_t>(r)] += 1.0 / double(copies.size());
      share_node[static_cast<std::size_t>(r / ranks_per_node)] += 1.0 / double(copies.size());
    }
    for (std::size_t r = 0; r < gpu.size(); ++r) miss_gpu[r] *= 1.0 - share_gpu[r];
    for (std::size_t n = 0; n < node.size(); ++n) miss_node[n] *= 1.0 - share_node[n];
  }
  for (std::size_t r = 0; r < gpu.size(); ++r) gpu[r] = 1.0 - miss_gpu[r];
  for (std::size_t n = 0; n < node.size(); ++n) node[n] = 1.0 - miss_node[n];
}

// The per-step scratch, sized once: per GPU, rank, attention group and MoE layer.
void StepPlanner::size_scratch() {
  const ModelSpec& m = s_.model;
  const auto g = static_cast<std::size_t>(gpus_);
  const auto ranks = static_cast<std::size_t>(ranks_);
  rank_bytes_.resize(ranks);
  rank_pairs_.resize(ranks);
  layer_imbalance_.resize(static_cast<std::size_t>(m.moe_layers()));
  if (gpus_ > 1) {
    layer_a2a_s_.resize(2 * static_cast<std::size_t>(m.moe_layers()));
    gpu_a2a_s_.resize(2 * g);
    gpu_slowest_.resize(g);
    gpu_dispatch_.resize(g);
    gpu_combine_.resize(g);
  }
  gpu_tokens_.resize(g);
  busy_s_.resize(g);
  flops_.resize(g);
  bytes_.resize(g);
  pre_moe_.resize(static_cast<std::size_t>(groups_));
  small_moe_.resize(static_cast<std::size_t>(groups_));
  small_dense_.resize(static_cast<std::size_t>(groups_));
  half_tokens_.resize(2 * g);
  // Under attention TP the KV heads (GQA) are split over the group's GPUs; activations are whole.
  kernel_shape_ = LayerKernelShape{.hidden = m.hidden,
                                   .kv_bytes_per_token = m.kv_elements_per_token_per_layer() *
                                                         bytes_per_element(s_.precision.kv_cache) /
                                                         (m.attention == AttentionKind::kGqa ? tp_ : 1),
                                   .top_k = m.top_k,
                                   .experts = m.routed_experts,
                                   .moe = true,
                                   .l2_bytes = s_.cluster.gpu.l2_bytes};
  set_kernel_shape_quantisation();
  dense_layer_.resize(static_cast<std::size_t>(groups_));
  dense_attention_.resize(static_cast<std::size_t>(groups_));
  group_flops_moe_.resize(static_cast<std::size_t>(groups_));
  group_bytes_moe_.resize(static_cast<std::size_t>(groups_));
  traffic_.ranks = gpus_;
  traffic_.ranks_per_node = std::min(gpus_, s_.cluster.gpus_per_node);
  traffic_.separable = true;  // expected shares: every source sends alike (O(ranks x nodes) costing)
  traffic_.src_tokens.assign(g, 0.0);
  traffic_.rank_share.assign(g, 0.0);
  traffic_.pair_share.assign(g, 0.0);
  traffic_.node_share.assign(static_cast<std::size_t>(nodes_), 0.0);
  const auto layers = static_cast<std::size_t>(m.moe_layers());
  touch_gpu_.assign(layers * ranks, 0.0);
  touch_node_.assign(layers * static_cast<std::size_t>(nodes_), 0.0);
  touch_valid_.assign(layers, 0);
  touch_memo_.resize(layers);
}

// What the small kernels of a layer move beyond norms and routing: rotary and inner-norm widths, the FP8
// quantisation of every FP8 GEMM's input (on a GPU with FP8 tensor cores; elsewhere FP8 weights are
// dequantised and activations stay BF16), and DeepGEMM's contiguous layout after DeepEP's normal dispatch
// (DeepGEMM README: the contiguous layout for prefill, the masked one for low-latency decode; SGLang
// ep_moe/layer.py forward_deepgemm_contiguous: ep_scatter, grouped GEMM, silu_and_mul, quantisation,
// grouped GEMM, ep_gather).
void StepPlanner::set_kernel_shape_quantisation() {
  const ModelSpec& m = s_.model;
  const PrecisionSpec& p = s_.precision;
  LayerKernelShape& k = kernel_shape_;
  const bool mla = m.attention == AttentionKind::kMla;
  k.rotary_elements = mla ? double(m.num_heads) / tp_ * m.qk_rope_head_dim + m.qk_rope_head_dim
                          : double(m.num_heads + m.num_kv_heads) / tp_ * m.head_dim;
  k.inner_norm_elements = mla ? double(m.q_lora_rank + m.kv_lora_rank) : 0.0;
  k.inner_norm_launches = mla ? (m.q_lora_rank > 0 ? 2 : 1) : 0;
  const bool fp8_cores = s_.cluster.gpu.fp8_flops_per_s > 0;
  auto fp8 = [&](Precision q) { return fp8_cores && q == Precision::kFP8; };
  std::tie(k.quant_elements, k.quant_launches) = attention_quant();
  const AllToAllMode mode = s_.deployment.all_to_all_mode;
  const bool normal_dispatch = ranks_ > 1 && mode == AllToAllMode::kHighThroughput;
  const bool deepgemm = s_.deployment.engine.expert_family == ExpertKernelFamily::kDeepGemm;
  if (fp8(p.routed_experts)) {
    // The up GEMM's input: quantised before a normal dispatch (SGLang _DeepEPDispatcherImplNormal.dispatch_a:
    // sglang_per_token_group_quant_fp8) or before a local fused MoE kernel; the low-latency dispatch kernel
    // quantises inside itself. The down GEMM's input after SiLU*mul, on the expert side, except in
    // DeepGEMM's masked path, whose silu_and_mul_masked_post_quant_fwd writes FP8 itself.
    if (ranks_ == 1 || normal_dispatch) {
      k.quant_elements += double(m.hidden);
      ++k.quant_launches;
    }
    if (!(deepgemm && ranks_ > 1 && mode == AllToAllMode::kLowLatency)) {
      k.expert_quant_elements = double(inter_);
      k.expert_quant_launches = 1;
    }
  }
  const bool contiguous = deepgemm && normal_dispatch;
  k.permute_row_bytes =
      contiguous ? double(m.hidden) * activation_bytes_per_element(fp8(p.routed_experts) ? Precision::kFP8
                                                                                         : Precision::kBF16)
                 : 0.0;
}

// Inputs of a layer's FP8 attention projections (per token, each quantised first).
std::pair<double, int> StepPlanner::attention_quant() const {
  if (s_.cluster.gpu.fp8_flops_per_s <= 0 || s_.precision.attention != Precision::kFP8) return {0.0, 0};
  double elements = 0;
  int launches = 0;
  const ProjectionGemms projections = s_.model.attention_projections();
  for (const ProjectionGemm& g : projections.list()) {
    elements += double(g.k) / (g.split == ProjectionGemm::Split::kRows ? tp_ : 1);
    ++launches;
  }
  return {elements, launches};
}

// Inputs of a layer's FP8 FFN GEMMs that are not routed experts (shared experts or a dense FFN): up and
// down, each quantised first.
std::pair<double, int> StepPlanner::ffn_quant(Precision p, std::int64_t inter) const {
  if (s_.cluster.gpu.fp8_flops_per_s <= 0 || p != Precision::kFP8 || inter <= 0) return {0.0, 0};
  return {double(s_.model.hidden) + double(inter) / tp_, 2};
}

// The one expert cost, for every precision a copy can have.
std::unique_ptr<ExpertCost> StepPlanner::make_expert_cost(std::int64_t max_tokens) const {
  const ModelSpec& m = s_.model;
  // Every precision a copy can have: the routed experts' and, under quantisation, each class's. Sized by the
  // loop's placement (EPLB's redundant slots add experts per GPU; rebalancing keeps the slots per GPU).
  std::vector<Precision> precisions{s_.precision.routed_experts};
  std::array<double, kPrecisionCount> dequant;
  dequant.fill(1.0);
  if (s_.experts.quantization) {
    precisions.insert(precisions.end(), {s_.experts.quant.hot, s_.experts.quant.warm, s_.experts.quant.cold});
    dequant = s_.experts.quant.dequant_factor;
  }
  return std::make_unique<ExpertCost>(
      gpu_,
      ExpertCostShape{.grouped = s_.deployment.engine.experts == ExpertKernel::kGrouped,
                      .hidden = m.hidden,
                      .inter = inter_,
                      .max_tokens = max_tokens,
                      .family = s_.deployment.engine.expert_family},
      ranks_, placement_.slots_per_gpu(), precisions, dequant);
}

void StepPlanner::set_binned_routing(bool on) {
  binned_allowed_ = on;
  set_placement(placement_);
}

void StepPlanner::set_placement(Placement p) {
  map_placement(std::move(p));
  draw_->bin(placement_, single_gpu_, binning_allowed());
}

void StepPlanner::map_placement(Placement p) {
  MOESIM_CHECK(p.gpus() == ranks_ && p.experts() == s_.model.routed_experts,
               "placement does not match the replica");
  placement_ = std::move(p);
  std::fill(touch_valid_.begin(), touch_valid_.end(), 0);
  const int experts = s_.model.routed_experts;
  single_gpu_.assign(static_cast<std::size_t>(placement_.layers()) * static_cast<std::size_t>(experts), -1);
  for (int l = 0; l < placement_.layers(); ++l) {
    for (int e = 0; e < experts; ++e) {
      const auto copies = placement_.slots_of(l, e);
      if (copies.size() == 1) {
        single_gpu_[static_cast<std::size_t>(l * experts + e)] = placement_.gpu_of_slot(copies[0]);
      }
    }
  }
}

// Binned routing needs only per-rank sums: not with a mechanism that reads each expert's count (statistics,
// rerouting, co-activation groups, per-copy tiers or precisions), nor with a per-expert engine.
bool StepPlanner::binning_allowed() const {
  const bool per_expert =
      coact_ != nullptr ||
      (loop_ && (loop_->reads_each_expert() || s_.experts.tiers.enabled || s_.experts.quantization));
  return binned_allowed_ && s_.deployment.engine.experts == ExpertKernel::kGrouped && !per_expert;
}

void StepPlanner::ensure_touch(int layer) {
  const auto l = static_cast<std::size_t>(layer);
  if (touch_valid_[l] != 0) return;
  const auto layer_probs = probs(layer);
  const int k = s_.model.top_k;
  const auto g = static_cast<std::size_t>(ranks_);
  const auto n = static_cast<std::size_t>(nodes_);
  const SlotMap map = placement_.slot_map(layer);
  // GPUs and nodes at once (the draw counts are solved once for both).
  const TouchBins bins[] = {
      {.slots_per_bin = map.slots_per_bin, .touch = std::span<double>(touch_gpu_).subspan(l * g, g)},
      {.slots_per_bin = placement_.slots_per_gpu() * (ranks_ / nodes_),
       .touch = std::span<double>(touch_node_).subspan(l * n, n)}};
  // Drift's layers are permutations of a sorted vector: with one copy per expert, those are the slot
  // masses in descending order, and the memo is checked without sorting them.
  const std::span<const double> known = drift_ != nullptr && placement_.slots() == s_.model.routed_experts
                                            ? drift_->sorted(layer)
                                            : std::span<const double>{};
  if (coact_ != nullptr) {
    touch_fractions_coactivated(*coact_, layer, layer_probs, map, k, touch_scratch_, bins, touch_memo_[l],
                                known);
  } else {
    touch_fractions_independent(layer_probs, map, k, bins, touch_memo_[l], known);
  }
  if (!pad_experts_.empty()) pad_touch(layer);
  touch_valid_[l] = 1;
}

// The sum of an expert-TP rank's partial expert outputs: the ring all-reduce (a reduce-scatter and an
// all-gather, NCCL's algorithm; Fabric::all_reduce) of the rank's received tokens x hidden at the combine
// precision over its expert_tp GPUs; the all-gather half stands for gathering the dispatched tokens onto
// every GPU of the rank. Under pure TP (one rank whose GPUs are the attention TP group) the tokens are
// already on every GPU and the sum is the attention group's post-FFN all-reduce (group_attention).
Duration StepPlanner::expert_tp_reduce(double rank_tokens) const {
  if (etp_ == 1 || (ranks_ == 1 && tp_ == etp_) || rank_tokens <= 0) return Duration::zero();
  const double bytes = rank_tokens * double(s_.model.hidden) * bytes_per_element(s_.precision.combine);
  return fabric_.all_reduce(bytes, etp_, true, all_reduce_kernel(s_.deployment.engine, bytes, etp_, true));
}

Duration StepPlanner::add_overlap_stage(Duration work, Duration mem, Duration comm, const LayerComm& c,
                                        StepPart part) {
  const OverlapStage o = c.partition ? partitioned_stage(work, mem, comm, c.held_share)
                                     : moesim::overlap_stage(work + mem, comm, c.held_share);
  plan_.parts[part] += o.exposed;
  plan_.comm_hidden += o.hidden;
  plan_.comm_sm_contention += o.contention;
  return o.time;
}

void StepPlanner::set_nic_shared(std::span<const double> out, std::span<const double> in) {
  traffic_.nic_out_shared.assign(out.begin(), out.end());
  traffic_.nic_in_shared.assign(in.begin(), in.end());
}

// Dispatch and combine of one layer for `src_tokens` tokens on each GPU (the whole batch or one
// micro-batch; `pairs` routed (token, expert) pairs of the whole batch), with the expert-TP sum of
// partial outputs added to the combine.
StepPlanner::LayerComm StepPlanner::layer_comm(int layer, std::span<const double> src_tokens, double pairs) {
  LayerComm out;
  double sent = 0;
  for (const double t : src_tokens) sent += t;
  double rank_tokens_max = sent;  // one rank: every token
  if (ranks_ > 1 && sent > 0) {
    // Dedup'd dispatch: a token is sent once to each rank (node) holding at least one of its k
    // experts, with the expected touch fractions of this layer's popularity and placement; the
    // per-pair traffic of low-latency kernels follows this step's sampled counts. Under expert TP a
    // rank's GPUs each receive 1/expert_tp of its tokens (then all-gathered inside the rank).
    ensure_touch(layer);
    const int k = s_.model.top_k;
    const double* touch_gpu =
        touch_gpu_.data() + static_cast<std::size_t>(layer) * static_cast<std::size_t>(ranks_);
    const double* touch_node =
        touch_node_.data() + static_cast<std::size_t>(layer) * static_cast<std::size_t>(nodes_);
    // The traffic is an outer product: source GPU s sends src_tokens[s] x (a GPU's or node's share).
    const AllToAllMode mode = s_.deployment.all_to_all_mode;
    std::copy(src_tokens.begin(), src_tokens.end(), traffic_.src_tokens.begin());
    std::copy(touch_node, touch_node + nodes_, traffic_.node_share.begin());
    // deployment.moe_dp_padding: of the rows sent, the padded ones touch their layer's padded experts' ranks
    // (pad_touch). The shares are the mix of real and padded rows over all sources, so the bytes sent in
    // total are exact; each source is taken to send the mix (the padded rows are the short ranks').
    const double w = pending_.pad_share;
    if (w > 0) {
      const double* pad_gpu =
          pad_touch_gpu_.data() + static_cast<std::size_t>(layer) * static_cast<std::size_t>(ranks_);
      for (int r = 0; r < ranks_; ++r) {
        pad_mix_[static_cast<std::size_t>(r)] = (1 - w) * touch_gpu[r] + w * pad_gpu[r];
      }
      touch_gpu = pad_mix_.data();
      const double* pad_node =
          pad_touch_node_.data() + static_cast<std::size_t>(layer) * static_cast<std::size_t>(nodes_);
      for (int n = 0; n < nodes_; ++n) {
        traffic_.node_share[static_cast<std::size_t>(n)] = (1 - w) * touch_node[n] + w * pad_node[n];
      }
    }
    if (etp_ == 1) {  // a GPU is a rank (a division by one is exact: left out)
      for (int d = 0; d < gpus_; ++d) {
        traffic_.rank_share[static_cast<std::size_t>(d)] = touch_gpu[d];
        traffic_.pair_share[static_cast<std::size_t>(d)] = k * cost_->pairs(d) / pairs;
      }
    } else {
      for (int d = 0; d < gpus_; ++d) {
        const auto r = static_cast<std::size_t>(d / etp_);
        traffic_.rank_share[static_cast<std::size_t>(d)] = touch_gpu[r] / etp_;
        traffic_.pair_share[static_cast<std::size_t>(d)] =
            k * cost_->pairs(static_cast<int>(r)) / pairs / etp_;
      }
    }
    // Each GPU's own times on one MoE layer a step, in turn (sample_layer_), scaled to the step's layers:
    // asking every collective for them cost 6% of a run's instructions.
    const bool sample = layer == sample_layer_ && !gpu_a2a_s_.empty();
    const AllToAllCost c = sample
                               ? fabric_.all_to_all(traffic_, mode, gpu_dispatch_, gpu_combine_, a2a_scratch_)
                               : fabric_.all_to_all(traffic_, mode, {}, {}, a2a_scratch_);
    out.dispatch = c.dispatch;
    out.combine = c.combine;
    if (sample) sample_gpus();
    out.held_share = comm_held_share(c.mode);
    out.partition = comm_partitions_sms(c.mode);
    plan_.dispatch_nvlink_bytes += c.nvlink_bytes;
    plan_.dispatch_nic_bytes += c.nic_bytes;
    rank_tokens_max = 0;  // read by the expert-TP sum only
    if (etp_ > 1) {
      for (int r = 0; r < ranks_; ++r) rank_tokens_max = std::max(rank_tokens_max, sent * touch_gpu[r]);
    }
  }
  out.combine += expert_tp_reduce(rank_tokens_max);
  if (!layer_a2a_s_.empty()) {
    layer_a2a_s_[2 * static_cast<std::size_t>(layer)] += out.dispatch.seconds();
    layer_a2a_s_[2 * static_cast<std::size_t>(layer) + 1] += out.combine.seconds();
  }
  return out;
}

// The sampled layer's per-GPU times into gpu_a2a_s_ (x the MoE layers: an estimate of the step's) and the
// slowest GPUs, those whose own dispatch + combine is the collective's (floors make ties; tied GPUs share
// the collective evenly), into gpu_slowest_.
void StepPlanner::sample_gpus() {
  const double layers = s_.model.moe_layers();
  Duration slowest = Duration::zero();
  int tied = 0;
  for (std::size_t d = 0; d < gpu_dispatch_.size(); ++d) {
    gpu_a2a_s_[2 * d] += gpu_dispatch_[d].seconds() * layers;
    gpu_a2a_s_[2 * d + 1] += gpu_combine_[d].seconds() * layers;
    const Duration own = gpu_dispatch_[d] + gpu_combine_[d];
    if (own > slowest) {
      slowest = own;
      tied = 0;
    }
    tied += own == slowest ? 1 : 0;
  }
  for (std::size_t d = 0; d < gpu_dispatch_.size() && tied > 0; ++d) {
    if (gpu_dispatch_[d] + gpu_combine_[d] == slowest) gpu_slowest_[d] += 1.0 / tied;
  }
}

// Whether the engine holds the communication's SMs for the whole overlapped schedule. Normal (high-
// throughput, NVLink-domain) kernels: yes. DeepSeek's prefill profile runs computation on 108 SMs and
// communication on 24 throughout (deepseek-ai/profile-data README, prefill figure); SGLang's prefill
// strategy runs every DeepGEMM kernel on the SMs DeepEP leaves (python/sglang/srt/operations_strategy.py,
// _compute_moe_deepseek_blog_prefill: deep_gemm_num_sms = SMs - DeepEPConfig num_sms), vLLM's dual-batch
// overlap the same with DeepEP high-throughput kernels (vllm-project/vllm PR #24845, "SM control for
// DeepGEMM and DeepEP"). Low-latency kernels: no (SGLang's decode strategy leaves DeepGEMM every SM; the
// kernels hold SMs only while they send and receive, DeepSeek's profile-data README on decoding).
bool StepPlanner::comm_partitions_sms(AllToAllMode mode) { return mode != AllToAllMode::kLowLatency; }

// The share of the GPU's SM time the All-to-All kernels take from compute while they run, as the
// overlapped stage's `held_share` (overlap_stage: a stage takes max(comm, work + comm x share); under a
// partition, comm_partitions_sms, partitioned_stage: max(comm, work / (1 - share) + small kernels)).
// - DeepEP V1 normal kernels hold 24 SMs throughout, as configured in its usage example,
//   Buffer.set_num_sms(24) (docs/legacy.md); NVLink-domain kernels the 24 SMs of DeepEP V2's minimum-SM
//   NVLink row (README, SM100 EP8: 643/675 GB/s with 24 SMs).
// - Low-latency kernels with the receive hook hold every SM while they send and receive and none while the
//   data is in flight (SGLang, "Deploying DeepSeek with PD Disaggregation and Large-scale Expert
//   Parallelism", lmsys.org 2025-05-05, decode TBO breakdown). On one stream the other micro-batch's
//   compute waits for those phases: of the 0.17 ms a layer's dispatch takes at 128 tokens per GPU (EP72,
//   H100), DeepEP's unit test spends 0.06 ms occupying SMs (same source, decode detail breakdown), so a
//   share of 0.06 / 0.17 of the kernel's time. The same share is taken for the combine (no separate
//   figure is published); both send and receive scale with the routed pairs, as the in-flight time does.
// deployment.comm_sms overrides: that many SMs held throughout.
double StepPlanner::comm_held_share(AllToAllMode mode) const {
  const double sms = s_.cluster.gpu.sms;
  if (s_.deployment.comm_sms >= 0) return s_.deployment.comm_sms / sms;
  constexpr double kLowLatencySmPhases = 0.06 / 0.17;
  constexpr double kHeldSms = 24;
  switch (mode) {
    case AllToAllMode::kLowLatency:
      return kLowLatencySmPhases;
    case AllToAllMode::kHighThroughput:
    case AllToAllMode::kNvlinkDomain:
    case AllToAllMode::kAuto:
      return kHeldSms / sms;
  }
  return kHeldSms / sms;
}

LayerKernelShape StepPlanner::small_shape(bool moe) const {
  const ModelSpec& m = s_.model;
  LayerKernelShape shape = kernel_shape_;
  shape.moe = moe;
  const auto [elements, launches] =
      moe ? ffn_quant(s_.precision.shared_experts, m.shared_expert_inter * m.shared_experts)
          : ffn_quant(s_.precision.dense_ffn, m.dense_inter);
  if (!moe) std::tie(shape.quant_elements, shape.quant_launches) = attention_quant();  // nothing dispatched
  shape.quant_elements += elements;
  shape.quant_launches += launches;
  return shape;
}

SmallKernelTimes StepPlanner::small_kernels(std::int64_t tokens, bool moe) const {
  return layer_small_kernel_times(gpu_, small_shape(moe), tokens, s_.deployment.engine);
}

// Without a loop every GPU holds its slots of every layer at the routed experts' precision.
double StepPlanner::routed_expert_bytes_per_gpu() const {
  if (loop_ != nullptr) return loop_->routed_expert_bytes_per_gpu();
  double sum = 0;
  for (int l = 0; l < placement_.layers(); ++l) {
    for (int i = 0; i < placement_.slots_per_gpu(); ++i) sum += expert_bytes_;
  }
  return sum / etp_;
}

// The exact per-expert draw of one layer, seen by the expert loop's statistics (what the router chose) and
// then re-routed by its post-processing.
std::span<std::int32_t> StepPlanner::sample_layer(int layer, std::int64_t tokens, double affinity_sd) {
  std::span<std::int32_t> counts;
  if (affinity_sd > 0) {
    perturb_popularity(probs(layer), affinity_sd, s_.model.top_k, affinity_rng_, step_law_);
    counts = draw_->draw_counts_from(step_law_, tokens);
  } else {
    counts = draw_->draw_counts(layer, probs(layer), tokens);
  }
  // deployment.moe_dp_padding: the padded rows, routed like real ones (draw_pad_experts).
  const std::int64_t pad = pending_.padded_rows;
  if (pad > 0) {
    const auto k = static_cast<std::size_t>(s_.model.top_k);
    for (std::size_t i = 0; i < k; ++i) {
      counts[static_cast<std::size_t>(pad_experts_[static_cast<std::size_t>(layer) * k + i])] +=
          static_cast<std::int32_t>(pad);
    }
  }
  if (loop_) loop_->observe(layer, counts, draw_->group_tokens(), tokens + pad, plan_);
  return counts;
}

// Once per step, before routing: a drift update re-prepares the routing tables (and their bins); a placement
// the expert loop published since the last step (a rebalance at its step boundary) is followed at once.
void StepPlanner::begin_step() {
  if (drift_ != nullptr && drift_->version() != drift_version_) {
    drift_version_ = drift_->version();
    ++drift_updates_;
    for (int l = 0; l < s_.model.moe_layers(); ++l) draw_->prepare(l, probs(l));
    std::fill(touch_valid_.begin(), touch_valid_.end(), 0);
    if (draw_->binned()) set_placement(placement_);  // bins and laws follow the new tables
  }
  if (loop_ != nullptr && loop_->placement_version() != placement_version_) {
    placement_version_ = loop_->placement_version();
    set_placement(loop_->placement());
  }
}

void StepPlanner::add_loop_events(const ExpertLoopEvents& e) {
  plan_.parts[StepPart::kRebalance] += e.rebalance_pause;
  plan_.rebalance_bytes += e.rebalance_bytes;
  plan_.rebalances += e.rebalances;
  plan_.evictions += e.evictions;
  plan_.prefetches += e.prefetches;
  plan_.host_bytes += e.host_bytes;
  plan_.nvme_bytes += e.nvme_bytes;
}

// Per-group costs that are the same for every layer: attention (projections + core), shared experts,
// gate and TP all-reduces for MoE layers; attention and dense FFN for dense layers.
std::pair<AttentionWork, AttentionWork> StepPlanner::attention_work(const GroupBatch& b) const {
  const ModelSpec& m = s_.model;
  const double tp = tp_;
  const double kv_elem = m.kv_elements_per_token_per_layer() * bytes_per_element(s_.precision.kv_cache);
  const double shard = m.attention == AttentionKind::kGqa ? 1.0 / tp : 1.0;  // GQA heads split over TP
  const double qo = 2.0 / tp;  // BF16 Q in and O out, heads split over TP
  // Verified draft positions read their sequence's KV once with the sequence's own token (one kernel over
  // k + 1 queries, as FlashMLA and FlashInfer run speculative decoding) and add their Q/O and pairs.
  const double dec_queries = double(b.decode_seqs + b.decode_draft_tokens);
  const AttentionWork dec{
      .bytes = b.decode_context_tokens * kv_elem * shard +
               dec_queries * m.attention_qo_elements_per_token(false) * qo,
      .flops = (b.decode_context_tokens + b.decode_draft_pairs) * m.attention_flops_per_pair(false) / tp,
      .is_prefill = false,
      .kv = s_.precision.kv_cache,
      .kernel = s_.deployment.engine.decode_attention};
  const AttentionWork pre{.bytes = b.prefill_kv_tokens * kv_elem * shard +
                                   double(b.prefill_tokens) * m.attention_qo_elements_per_token(true) * qo,
                          .flops = b.prefill_pairs * m.attention_flops_per_pair(true) / tp,
                          .is_prefill = true};
  return {dec, pre};
}

// Projections, attention core and the two TP all-reduces of one layer (after attention, after the FFN).
Duration StepPlanner::group_attention(const GroupBatch& b) const {
  const std::int64_t t = b.tokens();
  if (t == 0) return Duration::zero();
  const auto [dec, pre] = attention_work(b);
  return token_costs(t).projections + gpu_.attention(dec) + gpu_.attention(pre) +
         prefill_key_build(b.prefill_tokens);
}

Duration StepPlanner::prefill_key_build(std::int64_t prefill_tokens) const {
  const ModelSpec& m = s_.model;
  if (m.attention != AttentionKind::kMla || prefill_tokens <= 0) return Duration::zero();
  const MlaKeyShape k{
      .heads = m.num_heads / tp_, .qk_nope = m.qk_nope_head_dim, .qk_rope = m.qk_rope_head_dim};
  return gpu_.memory_kernel(MemoryKernel::kElementwise, mla_key_build_bytes(k, double(prefill_tokens)));
}

Duration StepPlanner::group_shared_and_gate(const GroupBatch& b) const {
  const std::int64_t t = b.tokens();
  return t == 0 ? Duration::zero() : token_costs(t).shared_and_gate;
}

const StepPlanner::TokenCosts& StepPlanner::token_costs(std::int64_t tokens) const {
  const auto t = static_cast<std::size_t>(tokens);
  TokenMemo& memo = *token_memo_;
  if (t >= memo.costs.size()) {
    const std::int64_t cap = std::min<std::int64_t>(s_.deployment.max_batched_tokens, 1 << 16);
    if (tokens > cap) {  // beyond the memo (a draft's tokens on top of a full batch): costed directly
      thread_local TokenCosts direct;
      direct = compute_token_costs(tokens);
      return direct;
    }
    memo.costs.resize(static_cast<std::size_t>(cap) + 1);
    memo.set.resize(static_cast<std::size_t>(cap) + 1, 0);
  }
  if (memo.set[t] == 0) {
    memo.costs[t] = compute_token_costs(tokens);
    memo.set[t] = 1;
  }
  return memo.costs[t];
}

StepPlanner::TokenCosts StepPlanner::compute_token_costs(std::int64_t t) const {
  const ModelSpec& m = s_.model;
  const PrecisionSpec& p = s_.precision;
  TokenCosts c;
  const SmallKernelTimes moe_kernels = small_kernels(t, true);
  c.small_moe = moe_kernels.sum();
  c.small_moe_experts = moe_kernels.expert_side;
  c.small_dense = m.num_dense_layers > 0 ? small_kernels(t, false).sum() : Duration::zero();
  if (t == 0) return c;
  const double ar_bytes = double(t) * double(m.hidden) * 2.0;
  const bool one_node = tp_ <= s_.cluster.gpus_per_node;
  const Duration ar = fabric_.all_reduce(ar_bytes, tp_, one_node,
                                         all_reduce_kernel(s_.deployment.engine, ar_bytes, tp_, one_node)) *
                      2;
  // Each projection at its own shape (its own fit where the profile measured that shape, its own bytes);
  // an engine running DeepGEMM on Hopper at the published rate of the shapes DeepGEMM's README times.
  const GpuSpec& gpu = s_.cluster.gpu;
  const bool deepgemm =
      s_.deployment.engine.expert_family == ExpertKernelFamily::kDeepGemm && gpu.arch == "hopper";
  c.projections = ar;
  const ProjectionGemms projections = m.attention_projections();
  for (const ProjectionGemm& g : projections.list()) {
    const std::int64_t n = g.split == ProjectionGemm::Split::kColumns ? g.n / tp_ : g.n;
    const std::int64_t k = g.split == ProjectionGemm::Split::kRows ? g.k / tp_ : g.k;
    const GemmWork w{.m = t, .n = n, .k = k, .weights = p.attention};
    c.projections += deepgemm ? deepgemm_dense_gemm(gpu_, w, gpu.fp8_flops_per_s) : gpu_.gemm(w);
  }
  const Duration shared =
      m.shared_experts > 0
          ? gpu_.expert_ffn(ExpertFfnWork{.tokens = t,
                                          .hidden = m.hidden,
                                          .inter = m.shared_expert_inter * m.shared_experts / tp_,
                                          .weights = p.shared_experts})
          : Duration::zero();
  c.shared = shared;
  c.shared_and_gate =
      shared + gpu_.gemm(GemmWork{.m = t, .n = m.routed_experts, .k = m.hidden, .weights = p.router});
  c.dense_ffn =
      m.num_dense_layers > 0
          ? gpu_.expert_ffn(ExpertFfnWork{
                .tokens = t, .hidden = m.hidden, .inter = m.dense_inter / tp_, .weights = p.dense_ffn})
          : Duration::zero();
  return c;
}

Duration StepPlanner::group_pre_moe(const GroupBatch& b) const {
  return group_attention(b) + group_shared_and_gate(b);
}

void StepPlanner::cost_groups(std::span<const GroupBatch> groups) {
  const ModelSpec& m = s_.model;
  const PrecisionSpec& p = s_.precision;
  const double tp = tp_;
  for (int r = 0; r < groups_; ++r) {
    const GroupBatch& b = groups[static_cast<std::size_t>(r)];
    const auto ri = static_cast<std::size_t>(r);
    const std::int64_t t = b.tokens();
    const TokenCosts& tc = token_costs(t);
    small_moe_[ri] = tc.small_moe;
    small_dense_[ri] = tc.small_dense;
    if (t == 0) {
      pre_moe_[ri] = dense_layer_[ri] = dense_attention_[ri] = Duration::zero();
      group_flops_moe_[ri] = group_bytes_moe_[ri] = 0;
      continue;
    }
    const Duration attn = group_attention(b);
    pre_moe_[ri] = attn + group_shared_and_gate(b);
    const Duration dense = tc.dense_ffn;
    dense_layer_[ri] = m.num_dense_layers > 0 ? attn + dense : Duration::zero();
    dense_attention_[ri] = m.num_dense_layers > 0 ? attn : Duration::zero();
    const auto [dec, pre] = attention_work(b);
    const double attn_flops = 2.0 * double(t) * m.attention_params_per_layer() / tp + dec.flops + pre.flops;
    const double attn_bytes =
        m.attention_params_per_layer() / tp * bytes_per_element(p.attention) + dec.bytes + pre.bytes;
    group_flops_moe_[ri] = attn_flops + 2.0 * double(t) * m.shared_expert_params() / tp;
    group_bytes_moe_[ri] = attn_bytes + m.shared_expert_params() / tp * bytes_per_element(p.shared_experts);
    // Dense layers: counted once per step for every GPU of the group.
    for (int k = 0; k < tp_; ++k) {
      const auto gi = static_cast<std::size_t>(r * tp_ + k);
      busy_s_[gi] += (dense_layer_[ri] + small_dense_[ri]).seconds() * m.num_dense_layers;
      flops_[gi] += (attn_flops + 2.0 * double(t) * m.dense_ffn_params() / tp) * m.num_dense_layers;
      bytes_[gi] +=
          (attn_bytes + m.dense_ffn_params() / tp * bytes_per_element(p.dense_ffn)) * m.num_dense_layers;
    }
  }
}

const StepPlan& StepPlanner::plan(std::span<const GroupBatch> groups, Time now) {
  MOESIM_CHECK(loop_ == nullptr, "a planner with an expert loop plans through the loop's owner");
  (void)begin_plan(groups, now);
  return finish_plan();
}

// Pipeline parallelism: one micro-batch (1/M of every group's work, its requests among them: their token
// pairs scale by 1/M) goes through all layers.
std::span<const GroupBatch> StepPlanner::pipeline_micro_batches(std::span<const GroupBatch> groups) {
  const std::int64_t mb = s_.deployment.pipeline_microbatches;
  const double f = 1.0 / static_cast<double>(mb);
  micro_.resize(groups.size());
  for (std::size_t r = 0; r < groups.size(); ++r) {
    const GroupBatch& b = groups[r];
    micro_[r] = GroupBatch{.decode_seqs = (b.decode_seqs + mb - 1) / mb,
                           .decode_context_tokens = b.decode_context_tokens * f,
                           .prefill_tokens = (b.prefill_tokens + mb - 1) / mb,
                           .prefill_pairs = b.prefill_pairs * f,
                           .prefill_kv_tokens = b.prefill_kv_tokens * f,
                           .sampled_seqs = (b.sampled_seqs + mb - 1) / mb,
                           .request_token_pairs = b.request_token_pairs * f};
  }
  return micro_;
}

// The step's cheap part: every group's attention, dense layers and small kernels (and the two-batch
// split). What it sets is never lowered by finish_plan(), so the sum of the parts so far is a lower bound
// of the step's time (zero under pipeline parallelism, whose total is assembled differently).
// Two-batch overlap: every group's batch split into its two micro-batches, each costed at its own size (its
// own launches, GEMMs, All-to-All): pre_a / pre_b, the small kernels beside each one's experts, the tokens
// each GPU dispatches per micro-batch and A's share; the attention and small-kernel parts of the step.
void StepPlanner::split_micro_batches(std::span<const GroupBatch> groups, Duration dense_attention) {
  const ModelSpec& m = s_.model;
  PendingPlan& p = pending_;
  double tokens_a = 0;
  // Per micro-batch, the most small-kernel time any group runs before its dispatch.
  std::array<Duration, 2> small_att{Duration::zero(), Duration::zero()};
  for (int r = 0; r < groups_; ++r) {
    const auto [a, b] = split_micro_batch(groups[static_cast<std::size_t>(r)], s_.deployment.engine.kind);
    // Each micro-batch's small kernels: the attention side before its dispatch, the rest beside its
    // experts (costed at the GPU's own tokens, as the micro-batch's mean routed pairs).
    for (const auto& [half, pre, exp, att] : {std::tuple{a, &p.pre_a, &p.small_exp_a, &small_att[0]},
                                              std::tuple{b, &p.pre_b, &p.small_exp_b, &small_att[1]}}) {
      if (half.tokens() == 0) continue;
      const TokenCosts& tc = token_costs(half.tokens());
      *pre = max(*pre, group_pre_moe(half) + tc.small_moe - tc.small_moe_experts);
      *exp = max(*exp, tc.small_moe_experts);
      *att = max(*att, tc.small_moe - tc.small_moe_experts);
    }
    tokens_a += double(a.tokens());
    for (int t = 0; t < tp_; ++t) {
      const auto gi = static_cast<std::size_t>(r * tp_ + t);
      half_tokens_[gi] = double(a.tokens()) / tp_;
      half_tokens_[static_cast<std::size_t>(gpus_) + gi] = double(b.tokens()) / tp_;
    }
  }
  half_a_ = tokens_a / double(p.total_tokens);
  p.small_att_a = small_att[0];
  p.small_att_b = small_att[1];
  // Under two-batch overlap each micro-batch runs the layer's small kernels: part of its compute.
  p.small_max = Duration::zero();
  plan_.parts[StepPart::kAttention] = (p.pre_a + p.pre_b - small_att[0] - small_att[1]) * m.moe_layers() +
                                      dense_attention * m.num_dense_layers;
  plan_.parts[StepPart::kLayerKernels] =
      p.small_dense_max * m.num_dense_layers +
      (small_att[0] + small_att[1] + p.small_exp_a + p.small_exp_b) * m.moe_layers();
}

Duration StepPlanner::begin_plan(std::span<const GroupBatch> groups, Time now) {
  MOESIM_CHECK(static_cast<int>(groups.size()) == groups_, "one batch per attention group expected");
  const ModelSpec& m = s_.model;
  plan_ = StepPlan{};
  PendingPlan& p = pending_;
  p = PendingPlan{};
  p.full = groups;
  p.now = now;
  if (s_.deployment.pipeline_stages > 1) groups = pipeline_micro_batches(groups);
  layer_time_.assign(static_cast<std::size_t>(m.num_layers), Duration::zero());
  std::fill(busy_s_.begin(), busy_s_.end(), 0.0);
  std::fill(flops_.begin(), flops_.end(), 0.0);
  std::fill(bytes_.begin(), bytes_.end(), 0.0);
  std::fill(rank_bytes_.begin(), rank_bytes_.end(), 0.0);
  std::fill(rank_pairs_.begin(), rank_pairs_.end(), 0.0);
  std::fill(layer_imbalance_.begin(), layer_imbalance_.end(), 0.0);
  std::fill(layer_a2a_s_.begin(), layer_a2a_s_.end(), 0.0);
  std::fill(gpu_a2a_s_.begin(), gpu_a2a_s_.end(), 0.0);
  std::fill(gpu_slowest_.begin(), gpu_slowest_.end(), 0.0);
  cost_groups(groups);

  std::int64_t& total_tokens = p.total_tokens;
  Duration& pre_moe_max = p.pre_moe_max;
  Duration& dense_max = p.dense_max;
  Duration& small_max = p.small_max;
  Duration& small_dense_max = p.small_dense_max;
  Duration dense_attention = Duration::zero();  // of the slowest group's dense layer
  for (int r = 0; r < groups_; ++r) {
    const GroupBatch& b = groups[static_cast<std::size_t>(r)];
    total_tokens += b.tokens();
    p.prefill_tokens += b.prefill_tokens;
    p.sampled_max = std::max(p.sampled_max, b.sampled_seqs);
    if (pre_moe_[static_cast<std::size_t>(r)] > pre_moe_max) {
      pre_moe_max = pre_moe_[static_cast<std::size_t>(r)];
      p.shared_at_max = token_costs(b.tokens()).shared;
    }
    if (dense_layer_[static_cast<std::size_t>(r)] > dense_max) {
      dense_max = dense_layer_[static_cast<std::size_t>(r)];
      dense_attention = dense_attention_[static_cast<std::size_t>(r)];
    }
    small_max = max(small_max, small_moe_[static_cast<std::size_t>(r)]);
    small_dense_max = max(small_dense_max, small_dense_[static_cast<std::size_t>(r)]);
    // Under TP the group's tokens are split over its GPUs for dispatch (sequence parallel).
    for (int k = 0; k < tp_; ++k)
      gpu_tokens_[static_cast<std::size_t>(r * tp_ + k)] = double(b.tokens()) / tp_;
  }
  plan_.tokens = total_tokens;
  // deployment.moe_dp_padding: TensorRT-LLM pads every rank's hidden states to max(all_rank_num_tokens)
  // before the gate, and its MoE runs all_rank_max_num_tokens rows on every rank (allgather and
  // reducescatter without sizes, the MNNVL all-to-all dispatching every row: CutlassFusedMoE/WideEPMoE
  // forward_impl). Attention, dense layers and the LM head keep each rank's own tokens.
  if (s_.deployment.moe_dp_padding) {
    std::int64_t most = 0;
    for (const GroupBatch& b : groups) most = std::max(most, b.tokens());
    p.padded_rows = most * groups_ - total_tokens;
    if (p.padded_rows > 0) {
      std::fill(gpu_tokens_.begin(), gpu_tokens_.end(), double(most) / tp_);
      p.pad_share = double(p.padded_rows) / double(total_tokens + p.padded_rows);
    }
    plan_.padded_rows = p.padded_rows;
  }
  // Dense layers: their attention is attention, the rest their FFN (and all-reduces).
  plan_.parts[StepPart::kDenseFfn] = (dense_max - dense_attention) * m.num_dense_layers;
  for (int l = 0; l < m.num_dense_layers; ++l)
    layer_time_[static_cast<std::size_t>(l)] = dense_max + small_dense_max;
  plan_.parts[StepPart::kAttention] = pre_moe_max * m.moe_layers() + dense_attention * m.num_dense_layers;
  plan_.parts[StepPart::kLayerKernels] = small_max * m.moe_layers() + small_dense_max * m.num_dense_layers;
  if (total_tokens == 0) return plan_.parts.sum();
  // Two-batch overlap: every group's batch is split into two micro-batches by the engine's rule
  // (split_micro_batch), each costed at its own size (its own launches, GEMMs, attention, All-to-All).
  const bool tbo = s_.deployment.two_batch_overlap && ranks_ > 1;
  half_a_ = 1.0;
  if (tbo) split_micro_batches(groups, dense_attention);
  const int full = draw_->begin_step(total_tokens, tbo, half_a_, m.moe_layers());
  choose_layers();
  double request_token_pairs = 0;
  for (const GroupBatch& b : groups) request_token_pairs += b.request_token_pairs;
  p.affinity_sd = step_affinity_sd(affinity_sd_, request_token_pairs, double(total_tokens));
  // A step law of its own: the binned tables (of the population law) do not apply, every layer is exact.
  // Padded rows (deployment.moe_dp_padding) land on their layer's padded experts: every layer is exact, so
  // that a padded expert that real tokens also touch is read once.
  p.binned = full >= 0 && p.affinity_sd == 0 && p.padded_rows == 0;
  p.full_layer = p.binned ? full : -1;
  if (p.binned && layer_weight_ != 1.0) {
    // One layer drawn expert by expert per layers / sample steps: as often per layer costed as when every
    // layer is costed (one in L a step); the others only draw per-rank sums.
    const int sample = static_cast<int>(costed_.size());
    const int stride = (m.moe_layers() + sample - 1) / sample;
    p.full_layer = full % stride == 0 ? costed_[static_cast<std::size_t>(full / stride % sample)] : -1;
  }
  return s_.deployment.pipeline_stages > 1 ? Duration::zero() : plan_.parts.sum();
}

// Exact routing's counts onto the copies that serve them, at the routed experts' precision: an expert with
// several copies has its tokens split evenly over them (EPLB). Returns the largest count.
std::int32_t StepPlanner::place_counts(int layer, std::span<const std::int32_t> counts) {
  const int experts = s_.model.routed_experts;
  const auto replicas = placement_.replicas(layer);
  const int* single =
      single_gpu_.data() + static_cast<std::size_t>(layer) * static_cast<std::size_t>(experts);
  const Precision p = s_.precision.routed_experts;
  const double bytes = expert_bytes_ / etp_;
  std::int32_t max_count = 0;
  for (int e = 0; e < experts; ++e) {
    const std::int32_t c = counts[static_cast<std::size_t>(e)];
    if (c == 0) continue;
    max_count = std::max(max_count, c);
    if (single[e] >= 0) {
      const std::int32_t a = micro_batch_a(c, half_a_);
      cost_->add_copy(single[e], p, a, c - a, bytes);
      continue;
    }
    const auto copies = placement_.slots_of(layer, e);
    const int reps = replicas[static_cast<std::size_t>(e)];
    for (std::size_t r = 0; r < copies.size(); ++r) {
      const std::int32_t share = replica_share(c, reps, static_cast<int>(r));
      if (share == 0) continue;
      const std::int32_t a = micro_batch_a(share, half_a_);
      cost_->add_copy(placement_.gpu_of_slot(copies[r]), p, a, share - a, bytes);
    }
  }
  return max_count;
}

// One MoE layer's communication and the layer's time: dispatch, experts and combine back to back, or DeepEP's
// two-micro-batch schedule (docs/legacy.md, its overlap figure): four stages per layer, each one
// micro-batch's communication beside the other's compute (overlap_stage()). `stall`: the wait for expert
// loads.
Duration StepPlanner::layer_schedule(int layer, const PendingPlan& p, Time request, Duration experts_max,
                                     bool tbo, bool tiers) {
  const double slots = double(p.total_tokens + p.padded_rows) * s_.model.top_k;
  const auto g = static_cast<std::size_t>(gpus_);
  Duration stall = Duration::zero();
  Duration time;
  if (!tbo) {
    const LayerComm c = layer_comm(layer, gpu_tokens_, slots);
    if (tiers) stall = loop_->layer_stall(request + c.dispatch, experts_max, *cost_);
    plan_.parts[StepPart::kExperts] += experts_max;
    // The first GPU (attention group 0, expert-parallel rank 0) idles in the collectives for the slowest.
    if (ranks_ > 1) {
      plan_.first_gpu_dispatch_wait += p.pre_moe_max + p.small_max - pre_moe_[0] - small_moe_[0];
      plan_.first_gpu_combine_wait += experts_max - cost_->time(0);
    }
    time = p.pre_moe_max + p.small_max;
    if (s_.deployment.single_batch_overlap && ranks_ > 1) {
      time += single_batch_overlap(c, p, experts_max);
    } else {
      plan_.parts[StepPart::kDispatch] += c.dispatch;
      plan_.parts[StepPart::kCombine] += c.combine;
      time += c.dispatch + experts_max + c.combine;
    }
  } else {
    // Each micro-batch's experts wait for its slowest rank.
    Duration experts_a = Duration::zero();
    Duration experts_b = Duration::zero();
    for (int r = 0; r < ranks_; ++r) {
      experts_a = max(experts_a, cost_->half_time(r, 0));
      experts_b = max(experts_b, cost_->half_time(r, 1));
    }
    const LayerComm a = layer_comm(layer, std::span<const double>(half_tokens_).first(g), slots);
    const LayerComm b = layer_comm(layer, std::span<const double>(half_tokens_).subspan(g, g), slots);
    if (tiers) stall = loop_->layer_stall(request + a.dispatch, experts_max, *cost_);
    time = add_overlap_stage(p.pre_b - p.small_att_b, p.small_att_b, a.dispatch, a, StepPart::kDispatch) +
           add_overlap_stage(experts_a, p.small_exp_a, b.dispatch, b, StepPart::kDispatch) +
           add_overlap_stage(experts_b, p.small_exp_b, a.combine, a, StepPart::kCombine) +
           add_overlap_stage(p.pre_a - p.small_att_a, p.small_att_a, b.combine, b, StepPart::kCombine);
    plan_.parts[StepPart::kExperts] += experts_a + experts_b;
  }
  plan_.parts[StepPart::kExpertStall] += stall;
  return time + stall;
}

// SGLang's single-batch overlap of one MoE layer (python/sglang/srt/batch_overlap/single_batch_overlap.py,
// SboFlags and compute_overlap_args; lmsys.org 2025-09-25, GB200 part II: "we overlap the combine
// communication with both the down GEMM and the shared experts"). The shared experts leave the attention
// side (they are in p.pre_moe_max) and run where SGLang runs them:
// - Blackwell: after the down GEMM, on the main stream, while the combine (on a second stream, holding
//   sbo_combine_held_share() of the SMs) goes on: overlap_stage(shared, rest of the combine, share).
// - Hopper: between the dispatch's send and its receive hook (one stream), beside the dispatch in flight:
//   overlap_stage(shared, dispatch, comm_held_share).
// The combine starts with the down GEMM and waits on its per-expert signals (signalled_combine) where
// SGLang's expert kernel signals: FlashInfer's CuTe DSL NVFP4 grouped GEMM on Blackwell
// (--moe-runner-backend flashinfer_cutedsl; routed experts fp4 here), DeepGEMM on Hopper. Otherwise it
// starts after the down GEMM. The down GEMM is a third of the grouped launch: a SwiGLU expert's gate, up
// and down matrices are equal (ModelSpec::expert_params), and so are their FLOPs and weight bytes.
Duration StepPlanner::single_batch_overlap(const LayerComm& c, const PendingPlan& p, Duration experts_max) {
  const bool blackwell = s_.cluster.gpu.arch == "blackwell";
  const bool signals = blackwell ? s_.precision.routed_experts == Precision::kFP4
                                 : s_.deployment.engine.expert_family == ExpertKernelFamily::kDeepGemm;
  const double held = sbo_combine_held_share();
  const Duration shared = p.shared_at_max;
  const Duration down = experts_max.scaled(1.0 / 3.0);
  const SignalledCombine sc = signals ? signalled_combine(down, c.combine, held, placement_.slots_per_gpu())
                                      : SignalledCombine{down, c.combine};
  Duration time = experts_max - down + sc.down - shared;  // shared experts are in p.pre_moe_max
  Duration combine_exposed = sc.down - down;              // the down GEMM slowed by the combine's SMs
  Duration contention = sc.down - down;
  if (blackwell) {
    const OverlapStage o = overlap_stage(shared, sc.rest, held);
    time += c.dispatch + o.time;
    combine_exposed += o.exposed;
    contention += o.contention;
    plan_.parts[StepPart::kDispatch] += c.dispatch;
  } else {
    const OverlapStage o = overlap_stage(shared, c.dispatch, comm_held_share(s_.deployment.all_to_all_mode));
    time += o.time + sc.rest;
    combine_exposed += sc.rest;
    contention += o.contention;
    plan_.parts[StepPart::kDispatch] += o.exposed;
    plan_.comm_hidden += o.hidden;
  }
  plan_.parts[StepPart::kCombine] += combine_exposed;
  plan_.comm_hidden += c.combine - min(c.combine, combine_exposed);
  plan_.comm_sm_contention += contention;
  return time;
}

// SGLang's combine-send SMs under single-batch overlap (compute_overlap_args: 32 on Blackwell, 3 otherwise,
// SGLANG_DEEPEP_LL_COMBINE_SEND_NUM_SMS overriding; deployment.comm_sms here).
double StepPlanner::sbo_combine_held_share() const {
  const double sms = s_.cluster.gpu.sms;
  if (s_.deployment.comm_sms >= 0) return s_.deployment.comm_sms / sms;
  return (s_.cluster.gpu.arch == "blackwell" ? 32.0 : 3.0) / sms;
}

// The layer's expert cost into the step's per-rank and per-GPU sums; returns the slowest rank's expert time
// and sets `max_pairs` to the most routed pairs of a rank.
Duration StepPlanner::add_layer_experts(double& max_pairs) {
  Duration experts_max = Duration::zero();
  for (int g = 0; g < ranks_; ++g) {
    const Duration t = cost_->time(g);
    experts_max = max(experts_max, t);
    max_pairs = std::max(max_pairs, cost_->pairs(g));
    rank_bytes_[static_cast<std::size_t>(g)] += cost_->weight_bytes(g);
    rank_pairs_[static_cast<std::size_t>(g)] += cost_->pairs(g);
    if (etp_ == 1) {
      busy_s_[static_cast<std::size_t>(g)] += t.seconds();
      flops_[static_cast<std::size_t>(g)] += cost_->pairs(g) * expert_flops_per_token_;
      continue;
    }
    for (int i = g * etp_; i < (g + 1) * etp_; ++i) {  // every GPU of the rank runs its shard
      busy_s_[static_cast<std::size_t>(i)] += t.seconds();
      flops_[static_cast<std::size_t>(i)] += cost_->pairs(g) * expert_flops_per_token_;
    }
  }
  return experts_max;
}

// The step's MoE layers: routing drawn per layer, the copies that serve it costed as the engine launches them
// (ExpertCost), All-to-All and loads; then the LM head, the draft and the pipeline schedule. Touches only
// this planner and what it reads (see plan_async_safe).
const StepPlan& StepPlanner::finish_plan() {
  const ModelSpec& m = s_.model;
  const PendingPlan& p = pending_;
  begin_step();
  if (p.total_tokens == 0) {
    plan_.total = plan_.parts.sum();
    return plan_;
  }
  const bool tbo = s_.deployment.two_batch_overlap && ranks_ > 1;
  const bool tiers = loop_ && loop_->tiers();
  const bool per_copy = loop_ && loop_->per_copy();
  // Start of the layer being costed (loads are queued from it).
  Time cursor =
      p.now + plan_.parts[StepPart::kRebalance] + (p.dense_max + p.small_dense_max) * m.num_dense_layers;
  const double slots = double(p.total_tokens + p.padded_rows) * m.top_k;
  const double mean_pairs_gpu = slots / ranks_;
  const double mean_pairs_expert = slots / m.routed_experts;
  double gpu_imb_sum = 0;
  double expert_imb_sum = 0;
  // Binned routing: the layer that draws every expert this step (the others draw per-rank sums).
  const int full_layer = p.full_layer;
  if (m.moe_layers() > 0)
    sample_layer_ = costed_[static_cast<std::size_t>(plans_++ % static_cast<std::uint64_t>(m.moe_layers())) %
                            costed_.size()];
  double full_layer_imbalance = 1.0;
  if (layer_weight_ != 1.0) {
    busy_base_.assign(busy_s_.begin(), busy_s_.end());
    flops_base_.assign(flops_.begin(), flops_.end());
  }
  for (const int layer : costed_) {
    const Time request = cursor + p.pre_moe_max + p.small_max;  // routing is known after the gate
    cost_->begin_layer();
    std::int32_t max_count = 0;
    if (p.binned && layer != full_layer) {
      draw_->draw_sums(layer, p.total_tokens, p.prefill_tokens > 0, placement_, *cost_,
                       s_.precision.routed_experts, expert_bytes_ / etp_);
    } else {
      const std::span<const std::int32_t> counts = sample_layer(layer, p.total_tokens, p.affinity_sd);
      max_count =
          per_copy ? loop_->cost_copies(layer, counts, single_gpu_, half_a_, request, *cost_, quality_, plan_)
                   : place_counts(layer, counts);
    }
    cost_->finish_layer();
    if (layer == full_layer) full_layer_imbalance = max_count / mean_pairs_expert;
    double max_pairs = 0;
    const Duration experts_max = add_layer_experts(max_pairs);
    gpu_imb_sum += max_pairs / mean_pairs_gpu;
    layer_imbalance_[static_cast<std::size_t>(layer)] = max_pairs / mean_pairs_gpu;
    expert_imb_sum += max_count / mean_pairs_expert;
    const auto li = static_cast<std::size_t>(m.num_dense_layers + layer);
    layer_time_[li] = layer_schedule(layer, p, request, experts_max, tbo, tiers);
    // The next layer starts when this one ends on the critical path (under two-batch overlap the halves
    // overlap), so loads are queued in time order and never after the step's end.
    cursor += layer_time_[li];
  }
  weight_sampled_layers();
  for (int g = 0; g < gpus_; ++g) {
    const auto gi = static_cast<std::size_t>(g);
    const auto ri = static_cast<std::size_t>(g / tp_);
    bytes_[gi] += rank_bytes_[static_cast<std::size_t>(g / etp_)];
    busy_s_[gi] += (pre_moe_[ri] + small_moe_[ri]).seconds() * m.moe_layers();
    flops_[gi] += group_flops_moe_[ri] * m.moe_layers();
    bytes_[gi] += group_bytes_moe_[ri] * m.moe_layers();
  }
  const auto costed = static_cast<double>(costed_.size());
  plan_.gpu_imbalance = m.moe_layers() > 0 ? gpu_imb_sum / costed : 1.0;
  plan_.expert_imbalance = full_layer >= 0      ? full_layer_imbalance
                           : p.binned           ? 0.0
                           : m.moe_layers() > 0 ? expert_imb_sum / costed
                                                : 1.0;
  plan_.expert_imbalance_measured = full_layer >= 0 || !p.binned;
  if (p.sampled_max > 0) {
    plan_.parts[StepPart::kLmHead] = gpu_.gemm(
        GemmWork{.m = p.sampled_max, .n = m.vocab / tp_, .k = m.hidden, .weights = s_.precision.embeddings});
  }
  if (s_.production.speculative) add_draft_work();
  plan_.total = plan_.parts.sum();
  if (s_.deployment.pipeline_stages > 1) finish_pipeline(p.full);
  add_host_time();
  return plan_;
}

// The engine's host work of the iteration (EngineProfile::host_us_per_sequence; exposed_host_s): each
// attention group's executor handles its own sequences and the step waits for the busiest. A sequence is
// one that produces a token this step (its sampled rows less the draft positions it verifies).
// An eager step (runs_eagerly) is the launch pipeline's end instead of the GPU step; its host also issues
// every kernel before the sampler's work of the iteration, on the same thread: under the overlap scheduler
// the step lasts max(pipeline end, launches + sampler), without it pipeline end + sampler. What the step
// lasts beyond its GPU work is host time, exposed.
void StepPlanner::add_host_time() {
  const EngineProfile& e = s_.deployment.engine;
  plan_.eager = s_.deployment.pipeline_stages == 1 &&
                runs_eagerly(pending_.full, e, s_.deployment.cuda_graph_batch_sizes);
  if (e.host_us_per_sequence == 0 && !plan_.eager) return;
  std::int64_t seqs = 0;
  for (const GroupBatch& b : pending_.full) seqs = std::max(seqs, b.sampled_seqs - b.decode_draft_tokens);
  if (!plan_.eager) {
    const double exposed = exposed_host_s(e, static_cast<double>(seqs), plan_.total.seconds());
    plan_.parts[StepPart::kHost] = Duration::from_seconds(exposed);
    plan_.total = plan_.parts.sum();
    return;
  }
  EagerPipeline pipe(Duration::from_us(e.eager_launch_us));
  issue_step_kernels(pipe);
  const Duration end = plan_.parts[StepPart::kRebalance] + pipe.gpu_end();
  const Duration sampler = Duration::from_seconds(e.host_us_per_sequence * 1e-6 * static_cast<double>(seqs));
  const Duration step = e.overlap_scheduler ? max(end, pipe.host_end() + sampler) : end + sampler;
  plan_.parts[StepPart::kHost] = max(Duration::zero(), step - plan_.total);
  plan_.total = plan_.parts.sum();
}

// The step's kernels in issue order, layer by layer, at the granularity the plan has them: each part's
// time spread evenly over the layers that run it (attention and small kernels over every layer, the dense
// FFN over the dense layers, dispatch, experts and combine over the MoE layers) and over that part's
// kernels in a layer; then the LM head. Counts (per layer): the attention projections, one attention core
// for decode and one for prefill (and MLA prefill's key build), the two TP all-reduces when TP > 1, the
// shared experts' up GEMM, activation and down GEMM and the router GEMM (MoE layers), the dense FFN's
// three (dense layers), the small kernels' launches (layer_small_kernels at the largest group's tokens),
// one dispatch and one combine, three for the routed experts (grouped up GEMM, activation, grouped down
// GEMM). A speculative draft's kernels are not counted (its time is, in the parts), nor two-batch overlap's
// second micro-batch's.
void StepPlanner::issue_step_kernels(EagerPipeline& pipe) const {
  const ModelSpec& m = s_.model;
  std::int64_t tokens = 0;
  bool decode = false;
  bool prefill = false;
  for (const GroupBatch& b : pending_.full) {
    tokens = std::max(tokens, b.tokens());
    decode = decode || b.decode_seqs > 0;
    prefill = prefill || b.prefill_tokens > 0;
  }
  const ProjectionGemms projections = m.attention_projections();
  const auto attention_kernels = static_cast<std::int64_t>(projections.list().size()) + int{decode} +
                                 int{prefill} * (m.attention == AttentionKind::kMla ? 2 : 1) +
                                 (tp_ > 1 ? 2 : 0);
  const std::int64_t pre_moe_kernels = attention_kernels + (m.shared_experts > 0 ? 3 : 0) + 1;
  const auto per_layer = [&](StepPart part, int layers) {
    return layers > 0 ? plan_.parts[part] / layers : Duration::zero();
  };
  const Duration attention = per_layer(StepPart::kAttention, m.num_layers);
  const Duration small = per_layer(StepPart::kLayerKernels, m.num_layers);
  const Duration dense_ffn = per_layer(StepPart::kDenseFfn, m.num_dense_layers);
  const Duration dispatch = per_layer(StepPart::kDispatch, m.moe_layers());
  const Duration experts =
      per_layer(StepPart::kExperts, m.moe_layers()) + per_layer(StepPart::kExpertStall, m.moe_layers());
  const Duration combine = per_layer(StepPart::kCombine, m.moe_layers());
  const std::array<std::int64_t, 2> small_kernels{small_launches(tokens, false),
                                                  small_launches(tokens, true)};
  for (int l = 0; l < m.num_layers; ++l) {
    const bool moe = l >= m.num_dense_layers;
    const std::int64_t n_attention = moe ? pre_moe_kernels : attention_kernels;
    pipe.issue(n_attention, attention / n_attention);
    const std::int64_t n_small = small_kernels[moe ? 1 : 0];
    if (n_small > 0) pipe.issue(n_small, small / n_small);
    if (!moe) {
      pipe.issue(3, dense_ffn / 3);
      continue;
    }
    if (dispatch > Duration::zero()) pipe.issue(1, dispatch);
    pipe.issue(3, experts / 3);
    if (combine > Duration::zero()) pipe.issue(1, combine);
  }
  if (plan_.parts[StepPart::kLmHead] > Duration::zero()) pipe.issue(1, plan_.parts[StepPart::kLmHead]);
}

std::int64_t StepPlanner::small_launches(std::int64_t tokens, bool moe) const {
  SmallKernelList list{};
  const std::size_t n = layer_small_kernels(small_shape(moe), tokens, s_.deployment.engine, list);
  std::int64_t launches = 0;
  for (std::size_t i = 0; i < n; ++i) launches += list[i].launches;
  return launches;
}

// The MoE layers this step costs: every one, or run.moe_layer_sample of them by systematic sampling with a
// random start (Cochran, Sampling Techniques, 3rd ed., ch. 8): with interval L / n and start u uniform in
// [0, L / n), layers floor(u + i L / n) for i < n. Each layer is taken with probability n / L, so each cost
// it adds, weighted by L / n (weight_sampled_layers), gives the step's sum over all layers in expectation;
// the sample spreads over the depth, where a layer's popularity and so its imbalance differ.
void StepPlanner::choose_layers() {
  const int layers = s_.model.moe_layers();
  const int n = s_.run.moe_layer_sample;
  if (n == 0 || n >= layers) {
    if (static_cast<int>(costed_.size()) != layers) {
      costed_.resize(static_cast<std::size_t>(layers));
      for (int l = 0; l < layers; ++l) costed_[static_cast<std::size_t>(l)] = l;
    }
    layer_weight_ = 1.0;
    return;
  }
  const double interval = double(layers) / n;
  const double start = layer_rng_.uniform() * interval;
  costed_.resize(static_cast<std::size_t>(n));
  for (int i = 0; i < n; ++i)
    costed_[static_cast<std::size_t>(i)] = std::min(layers - 1, static_cast<int>(start + i * interval));
  layer_weight_ = interval;
}

// The sampled layers' sums (parts, hidden and contended communication, bytes, per-rank and per-GPU work, the
// per-layer All-to-All) weighted up to the step's layers; ratios (imbalance) are means over the sample.
void StepPlanner::weight_sampled_layers() {
  if (layer_weight_ == 1.0) return;
  const double w = layer_weight_;
  for (const StepPart p :
       {StepPart::kDispatch, StepPart::kCombine, StepPart::kExperts, StepPart::kExpertStall})
    plan_.parts[p] = plan_.parts[p].scaled(w);
  plan_.comm_hidden = plan_.comm_hidden.scaled(w);
  plan_.comm_sm_contention = plan_.comm_sm_contention.scaled(w);
  plan_.first_gpu_dispatch_wait = plan_.first_gpu_dispatch_wait.scaled(w);
  plan_.first_gpu_combine_wait = plan_.first_gpu_combine_wait.scaled(w);
  plan_.dispatch_nvlink_bytes *= w;
  plan_.dispatch_nic_bytes *= w;
  for (std::vector<double>* v : {&rank_bytes_, &rank_pairs_})
    for (double& x : *v) x *= w;
  for (std::size_t g = 0; g < busy_s_.size(); ++g) {
    busy_s_[g] = busy_base_[g] + (busy_s_[g] - busy_base_[g]) * w;
    flops_[g] = flops_base_[g] + (flops_[g] - flops_base_[g]) * w;
  }
  for (const int l : costed_) {
    if (layer_a2a_s_.empty()) break;
    layer_a2a_s_[2 * static_cast<std::size_t>(l)] *= w;
    layer_a2a_s_[2 * static_cast<std::size_t>(l) + 1] *= w;
  }
}

// The draft's own work, k sequential passes per step (deployment.speculative). MTP (DeepSeek-V3 technical
// report, section 2.2): each pass is one more transformer block of the target's shape plus the shared
// output head, costed as one average layer of this step and one LM head. A draft model: each pass is this
// step scaled by the draft's over the target's active parameters per token (layers and LM head alike).
// Both cost every pass on the step's whole batch, as vLLM's MTP/EAGLE proposer runs its first pass over
// every scheduled token; later passes (one token per sequence) are overestimated when prefill is mixed in.
void StepPlanner::add_draft_work() {
  const SpeculativeSpec& sp = *s_.production.speculative;
  const ModelSpec& m = s_.model;
  const double k = sp.draft_tokens;
  auto active = [](const ModelSpec& x) { return x.active_params() - x.embedding_params(); };
  const double layer_share =
      sp.draft == DraftKind::kMtp ? k / double(m.num_layers) : k * active(sp.draft_model) / active(m);
  const double head_share = sp.draft == DraftKind::kMtp ? k : layer_share;
  for (const StepPart p : {StepPart::kAttention, StepPart::kLayerKernels, StepPart::kDenseFfn,
                           StepPart::kExperts, StepPart::kDispatch, StepPart::kCombine}) {
    plan_.parts[p] += plan_.parts[p].scaled(layer_share);
  }
  plan_.first_gpu_dispatch_wait += plan_.first_gpu_dispatch_wait.scaled(layer_share);
  plan_.first_gpu_combine_wait += plan_.first_gpu_combine_wait.scaled(layer_share);
  plan_.parts[StepPart::kLmHead] += plan_.parts[StepPart::kLmHead].scaled(head_share);
  for (std::size_t g = 0; g < busy_s_.size(); ++g) {
    busy_s_[g] *= 1.0 + layer_share;
    flops_[g] *= 1.0 + layer_share;
    bytes_[g] *= 1.0 + layer_share;
  }
}

// M micro-batches through S stages (GPipe-style schedule, Huang et al., NeurIPS 2019): the first
// micro-batch crosses every stage and link, then the slowest stage paces the other M - 1:
// total = sum_s t_s + (S - 1) t_send + (M - 1) max_s t_s. The parts of the plan become the work of an
// average stage (M micro-batches x its share of the layers); what is left is the pipeline bubble.
void StepPlanner::finish_pipeline(std::span<const GroupBatch> full) {
  const ModelSpec& m = s_.model;
  const int stages = s_.deployment.pipeline_stages;
  const auto mb = s_.deployment.pipeline_microbatches;
  std::vector<Duration>& t = stage_time_;
  t.assign(static_cast<std::size_t>(stages), Duration::zero());
  for (int l = 0; l < m.num_layers; ++l) {
    t[static_cast<std::size_t>(static_cast<std::int64_t>(l) * stages / m.num_layers)] +=
        layer_time_[static_cast<std::size_t>(l)];
  }
  t.back() += plan_.parts[StepPart::kLmHead];
  std::int64_t tokens = 0;
  for (const GroupBatch& b : full) tokens += b.tokens();
  // Activations of one micro-batch (BF16 hidden states of every token) from each stage to the next,
  // over NVLink when the whole replica sits in one node, else over the NICs.
  const double bytes = static_cast<double>(tokens) / static_cast<double>(mb) * double(m.hidden) * 2.0;
  const bool intra = s_.gpus_per_replica() <= s_.cluster.gpus_per_node;
  const Duration send = fabric_.send_recv(bytes / gpus_, intra);
  Duration sum = Duration::zero();
  Duration slowest = Duration::zero();
  for (const Duration x : t) {
    sum += x;
    slowest = max(slowest, x);
  }
  const Duration total = sum + send * (stages - 1) + slowest * (mb - 1);
  const double work = static_cast<double>(mb) / stages;
  for (const StepPart p :
       {StepPart::kAttention, StepPart::kLayerKernels, StepPart::kDenseFfn, StepPart::kExperts,
        StepPart::kDispatch, StepPart::kCombine, StepPart::kLmHead, StepPart::kExpertStall}) {
    plan_.parts[p] = plan_.parts[p].scaled(work);
  }
  plan_.comm_hidden = plan_.comm_hidden.scaled(work);
  plan_.comm_sm_contention = plan_.comm_sm_contention.scaled(work);
  plan_.first_gpu_dispatch_wait = plan_.first_gpu_dispatch_wait.scaled(work);
  plan_.first_gpu_combine_wait = plan_.first_gpu_combine_wait.scaled(work);
  plan_.parts[StepPart::kPipelineSend] = send * (stages - 1);
  const Duration parts = plan_.parts.sum();
  // The bubble is what the schedule adds to the stages' average work; it cannot be negative because
  // the schedule's total is at least the average stage's work times M (see above).
  plan_.parts[StepPart::kPipelineBubble] =
      max(Duration::zero(), total + plan_.parts[StepPart::kRebalance] - parts);
  plan_.total = plan_.parts.sum();
  for (std::size_t g = 0; g < busy_s_.size(); ++g) {
    busy_s_[g] *= work;
    flops_[g] *= work;
    bytes_[g] *= work;
  }
}

}  // namespace moesim
