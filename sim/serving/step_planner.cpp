#include "sim/serving/step_planner.h"

#include <algorithm>
#include <cmath>

#include "sim/engine/check.h"

namespace moesim {

StepPlanner::StepPlanner(const ScenarioSpec& s, const GpuCostModel& gpu, const Fabric& fabric,
                         const ExpertPopularity& popularity, Rng routing_rng)
    : s_(s),
      gpu_(gpu),
      fabric_(fabric),
      popularity_(popularity),
      rng_(routing_rng),
      sampler_(s.model.routed_experts),
      gpus_(s.deployment.ep_size),
      groups_(s.deployment.attention_dp),
      tp_(s.deployment.attention_tp),
      placement_(contiguous_placement(s.model.moe_layers(), s.model.routed_experts, s.deployment.ep_size)),
      nodes_(std::max(1, s.deployment.ep_size / std::min(s.deployment.ep_size, s.cluster.gpus_per_node))) {
  const ModelSpec& m = s.model;
  MOESIM_CHECK(groups_ * tp_ == gpus_, "attention_dp x attention_tp must equal ep_size");

  // Expert cost by token count, precomputed up to the most tokens one expert can see in a step.
  const auto max_tokens = s.deployment.max_batched_tokens * groups_;
  ffn_table_.resize(static_cast<std::size_t>(max_tokens + 1));
  for (std::int64_t t = 0; t <= max_tokens; ++t) {
    ffn_table_[static_cast<std::size_t>(t)] = gpu_.expert_ffn(ExpertFfnWork{
        .tokens = t, .hidden = m.hidden, .inter = m.expert_inter, .weights = s.precision.routed_experts});
  }
  expert_flops_per_token_ = 6.0 * double(m.hidden) * double(m.expert_inter);
  expert_bytes_ = m.expert_params() * bytes_per_element(s.precision.routed_experts);

  const auto g = static_cast<std::size_t>(gpus_);
  counts_.resize(static_cast<std::size_t>(m.routed_experts));
  gpu_pairs_.resize(g);
  gpu_expert_time_.resize(g);
  gpu_tokens_.resize(g);
  busy_s_.resize(g);
  flops_.resize(g);
  bytes_.resize(g);
  pre_moe_.resize(static_cast<std::size_t>(groups_));
  dense_layer_.resize(static_cast<std::size_t>(groups_));
  group_flops_moe_.resize(static_cast<std::size_t>(groups_));
  group_bytes_moe_.resize(static_cast<std::size_t>(groups_));
  traffic_.ranks = gpus_;
  traffic_.ranks_per_node = std::min(gpus_, s.cluster.gpus_per_node);
  traffic_.tokens_to_rank.assign(g * g, 0.0);
  traffic_.pairs_to_rank.assign(g * g, 0.0);
  traffic_.tokens_to_node.assign(g * static_cast<std::size_t>(nodes_), 0.0);
  const auto layers = static_cast<std::size_t>(m.moe_layers());
  touch_gpu_.assign(layers * g, 0.0);
  touch_node_.assign(layers * static_cast<std::size_t>(nodes_), 0.0);
  touch_valid_.assign(layers, 0);
  for (int l = 0; l < m.moe_layers(); ++l) routing_.push_back(RoutingSampler::prepare(popularity.layer(l), m.top_k));
  set_placement(placement_);
  traffic_.dispatch_bytes_per_token = double(m.hidden) * bytes_per_element(s.precision.dispatch);
  traffic_.combine_bytes_per_token = double(m.hidden) * bytes_per_element(s.precision.combine);
}

void StepPlanner::set_placement(Placement p) {
  MOESIM_CHECK(p.gpus() == gpus_ && p.experts() == s_.model.routed_experts, "placement does not match the replica");
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

void StepPlanner::ensure_touch(int layer) {
  const auto l = static_cast<std::size_t>(layer);
  if (touch_valid_[l] != 0) return;
  const auto probs = popularity_.layer(layer);
  const int k = s_.model.top_k;
  const auto g = static_cast<std::size_t>(gpus_);
  const auto n = static_cast<std::size_t>(nodes_);
  SlotMap map = placement_.slot_map(layer);
  touch_fractions_independent(probs, map, k, std::span<double>(touch_gpu_).subspan(l * g, g));
  map.slots_per_bin = placement_.slots_per_gpu() * (gpus_ / nodes_);
  touch_fractions_independent(probs, map, k, std::span<double>(touch_node_).subspan(l * n, n));
  touch_valid_[l] = 1;
}

Duration StepPlanner::expert_time(std::int64_t tokens) const {
  if (tokens < static_cast<std::int64_t>(ffn_table_.size())) return ffn_table_[static_cast<std::size_t>(tokens)];
  const ModelSpec& m = s_.model;
  return gpu_.expert_ffn(ExpertFfnWork{
      .tokens = tokens, .hidden = m.hidden, .inter = m.expert_inter, .weights = s_.precision.routed_experts});
}

// Per-group costs that are the same for every layer: attention (projections + core), shared experts,
// gate and TP all-reduces for MoE layers; attention and dense FFN for dense layers.
void StepPlanner::cost_groups(std::span<const GroupBatch> groups) {
  const ModelSpec& m = s_.model;
  const PrecisionSpec& p = s_.precision;
  const double tp = tp_;
  const double kv_elem = m.kv_elements_per_token_per_layer() * bytes_per_element(p.kv_cache);
  const double shard = m.attention == AttentionKind::kGqa ? 1.0 / tp : 1.0;
  const std::int64_t attn_n = static_cast<std::int64_t>(m.attention_params_per_layer() / double(m.hidden) / tp);
  const bool tp_intra = tp_ <= s_.cluster.gpus_per_node;
  for (int r = 0; r < groups_; ++r) {
    const GroupBatch& b = groups[static_cast<std::size_t>(r)];
    const auto ri = static_cast<std::size_t>(r);
    const std::int64_t t = b.tokens();
    if (t == 0) {
      pre_moe_[ri] = dense_layer_[ri] = Duration::zero();
      group_flops_moe_[ri] = group_bytes_moe_[ri] = 0;
      continue;
    }
    const Duration proj = gpu_.gemm(GemmWork{.m = t, .n = attn_n, .k = m.hidden, .weights = p.attention});
    const double qo = 2.0 / tp;  // BF16 Q in and O out, heads split over TP
    const AttentionWork dec{.bytes = b.decode_context_tokens * kv_elem * shard +
                                     double(b.decode_seqs) * m.attention_qo_elements_per_token(false) * qo,
                            .flops = b.decode_context_tokens * m.attention_flops_per_pair(false) / tp,
                            .is_prefill = false};
    const AttentionWork pre{.bytes = b.prefill_kv_tokens * kv_elem * shard +
                                     double(b.prefill_tokens) * m.attention_qo_elements_per_token(true) * qo,
                            .flops = b.prefill_pairs * m.attention_flops_per_pair(true) / tp,
                            .is_prefill = true};
    const Duration attn = proj + gpu_.attention(dec) + gpu_.attention(pre);
    // Two all-reduces per layer under TP (after attention and after the FFN), BF16 activations.
    const Duration ar = fabric_.all_reduce(double(t) * double(m.hidden) * 2.0, tp_, tp_intra) * 2;
    Duration shared = Duration::zero();
    if (m.shared_experts > 0) {
      shared = gpu_.expert_ffn(ExpertFfnWork{.tokens = t,
                                             .hidden = m.hidden,
                                             .inter = m.shared_expert_inter * m.shared_experts / tp_,
                                             .weights = p.shared_experts});
    }
    const Duration gate =
        gpu_.gemm(GemmWork{.m = t, .n = m.routed_experts, .k = m.hidden, .weights = p.router});
    pre_moe_[ri] = attn + shared + gate + ar;
    const Duration dense = m.num_dense_layers > 0
                               ? gpu_.expert_ffn(ExpertFfnWork{.tokens = t,
                                                               .hidden = m.hidden,
                                                               .inter = m.dense_inter / tp_,
                                                               .weights = p.dense_ffn})
                               : Duration::zero();
    dense_layer_[ri] = attn + dense + ar;
    const double attn_flops = 2.0 * double(t) * m.attention_params_per_layer() / tp + dec.flops + pre.flops;
    const double attn_bytes = m.attention_params_per_layer() / tp * bytes_per_element(p.attention) + dec.bytes + pre.bytes;
    group_flops_moe_[ri] = attn_flops + 2.0 * double(t) * m.shared_expert_params() / tp;
    group_bytes_moe_[ri] = attn_bytes + m.shared_expert_params() / tp * bytes_per_element(p.shared_experts);
    // Dense layers: counted once per step for every GPU of the group.
    for (int k = 0; k < tp_; ++k) {
      const auto gi = static_cast<std::size_t>(r * tp_ + k);
      busy_s_[gi] += dense_layer_[ri].seconds() * m.num_dense_layers;
      flops_[gi] += (attn_flops + 2.0 * double(t) * m.dense_ffn_params() / tp) * m.num_dense_layers;
      bytes_[gi] += (attn_bytes + m.dense_ffn_params() / tp * bytes_per_element(p.dense_ffn)) * m.num_dense_layers;
    }
  }
}

const StepPlan& StepPlanner::plan(std::span<const GroupBatch> groups) {
  MOESIM_CHECK(static_cast<int>(groups.size()) == groups_, "one batch per attention group expected");
  const ModelSpec& m = s_.model;
  plan_ = StepPlan{};
  std::fill(busy_s_.begin(), busy_s_.end(), 0.0);
  std::fill(flops_.begin(), flops_.end(), 0.0);
  std::fill(bytes_.begin(), bytes_.end(), 0.0);
  cost_groups(groups);

  std::int64_t total_tokens = 0;
  std::int64_t sampled_max = 0;
  Duration pre_moe_max = Duration::zero();
  Duration dense_max = Duration::zero();
  for (int r = 0; r < groups_; ++r) {
    const GroupBatch& b = groups[static_cast<std::size_t>(r)];
    total_tokens += b.tokens();
    sampled_max = std::max(sampled_max, b.sampled_seqs);
    pre_moe_max = max(pre_moe_max, pre_moe_[static_cast<std::size_t>(r)]);
    dense_max = max(dense_max, dense_layer_[static_cast<std::size_t>(r)]);
    // Under TP the group's tokens are split over its GPUs for dispatch (sequence parallel).
    for (int k = 0; k < tp_; ++k) gpu_tokens_[static_cast<std::size_t>(r * tp_ + k)] = double(b.tokens()) / tp_;
  }
  plan_.tokens = total_tokens;
  plan_.dense_ffn = dense_max * m.num_dense_layers;
  plan_.attention = pre_moe_max * m.moe_layers();
  if (total_tokens == 0) return plan_;

  const int k = m.top_k;
  const double slots = double(total_tokens) * k;
  double gpu_imb_sum = 0;
  double expert_imb_sum = 0;
  const double mean_pairs_gpu = slots / gpus_;
  const double mean_pairs_expert = slots / m.routed_experts;
  for (int layer = 0; layer < m.moe_layers(); ++layer) {
    sampler_.sample(routing_[static_cast<std::size_t>(layer)], total_tokens, rng_, counts_);
    std::fill(gpu_pairs_.begin(), gpu_pairs_.end(), 0.0);
    std::fill(gpu_expert_time_.begin(), gpu_expert_time_.end(), Duration::zero());
    std::int32_t max_count = 0;
    const auto replicas = placement_.replicas(layer);
    const int* single = single_gpu_.data() + static_cast<std::size_t>(layer) * static_cast<std::size_t>(m.routed_experts);
    for (int e = 0; e < m.routed_experts; ++e) {
      const std::int32_t c = counts_[static_cast<std::size_t>(e)];
      if (c == 0) continue;
      max_count = std::max(max_count, c);
      if (single[e] >= 0) {
        const auto g = static_cast<std::size_t>(single[e]);
        gpu_pairs_[g] += c;
        gpu_expert_time_[g] += expert_time(c);
        bytes_[g] += expert_bytes_;
        continue;
      }
      // An expert with several copies has its tokens split evenly over them (EPLB).
      const auto copies = placement_.slots_of(layer, e);
      const int reps = replicas[static_cast<std::size_t>(e)];
      for (std::size_t r = 0; r < copies.size(); ++r) {
        const std::int32_t share = replica_share(c, reps, static_cast<int>(r));
        if (share == 0) continue;
        const auto g = static_cast<std::size_t>(placement_.gpu_of_slot(copies[r]));
        gpu_pairs_[g] += share;
        gpu_expert_time_[g] += expert_time(share);
        bytes_[g] += expert_bytes_;
      }
    }
    Duration experts_max = Duration::zero();
    double max_pairs = 0;
    for (int g = 0; g < gpus_; ++g) {
      const auto gi = static_cast<std::size_t>(g);
      experts_max = max(experts_max, gpu_expert_time_[gi]);
      max_pairs = std::max(max_pairs, gpu_pairs_[gi]);
      busy_s_[gi] += gpu_expert_time_[gi].seconds();
      flops_[gi] += gpu_pairs_[gi] * expert_flops_per_token_;
    }
    gpu_imb_sum += max_pairs / mean_pairs_gpu;
    expert_imb_sum += max_count / mean_pairs_expert;

    Duration dispatch = Duration::zero();
    Duration combine = Duration::zero();
    if (gpus_ > 1) {
      // Dedup'd dispatch: a token is sent once to each GPU (node) holding at least one of its k
      // experts, with the expected touch fractions of this layer's popularity and placement; the
      // per-pair traffic of low-latency kernels follows this step's sampled counts.
      ensure_touch(layer);
      const double* touch_gpu = touch_gpu_.data() + static_cast<std::size_t>(layer) * static_cast<std::size_t>(gpus_);
      const double* touch_node = touch_node_.data() + static_cast<std::size_t>(layer) * static_cast<std::size_t>(nodes_);
      for (int src = 0; src < gpus_; ++src) {
        const double t = gpu_tokens_[static_cast<std::size_t>(src)];
        for (int node = 0; node < nodes_; ++node) {
          traffic_.tokens_to_node[static_cast<std::size_t>(src * nodes_ + node)] = t * touch_node[node];
        }
        for (int d = 0; d < gpus_; ++d) {
          const auto i = static_cast<std::size_t>(src * gpus_ + d);
          traffic_.tokens_to_rank[i] = t * touch_gpu[d];
          traffic_.pairs_to_rank[i] = t * k * gpu_pairs_[static_cast<std::size_t>(d)] / slots;
        }
      }
      const AllToAllCost c = fabric_.all_to_all(traffic_, s_.deployment.all_to_all_mode);
      dispatch = c.dispatch;
      combine = c.combine;
      plan_.dispatch_nvlink_bytes += c.nvlink_bytes;
      plan_.dispatch_nic_bytes += c.nic_bytes;
    }
    plan_.dispatch += dispatch;
    plan_.combine += combine;
    plan_.experts += experts_max;
  }
  for (int g = 0; g < gpus_; ++g) {
    const auto gi = static_cast<std::size_t>(g);
    const auto ri = static_cast<std::size_t>(g / tp_);
    busy_s_[gi] += pre_moe_[ri].seconds() * m.moe_layers();
    flops_[gi] += group_flops_moe_[ri] * m.moe_layers();
    bytes_[gi] += group_bytes_moe_[ri] * m.moe_layers();
  }
  plan_.gpu_imbalance = m.moe_layers() > 0 ? gpu_imb_sum / m.moe_layers() : 1.0;
  plan_.expert_imbalance = m.moe_layers() > 0 ? expert_imb_sum / m.moe_layers() : 1.0;
  if (sampled_max > 0) {
    plan_.lm_head = gpu_.gemm(GemmWork{.m = sampled_max,
                                       .n = m.vocab / tp_,
                                       .k = m.hidden,
                                       .weights = s_.precision.embeddings});
  }
  plan_.total = plan_.attention + plan_.dense_ffn + plan_.experts + plan_.dispatch + plan_.combine + plan_.lm_head;
  return plan_;
}

}  // namespace moesim
