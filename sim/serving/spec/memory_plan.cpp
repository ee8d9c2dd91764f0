#include "sim/serving/spec/memory_plan.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <sstream>

#include "sim/engine/check.h"

namespace moesim {

MemoryPlan plan_memory(const ScenarioSpec& s) { return plan_memory(s, -1.0); }

namespace {

// A draft model's weights per GPU. It runs on the target's GPUs with the target's parallelism (the step
// planner scales each step by the draft's share, step_planner.cpp add_draft_work), so its parts are placed
// as the target's are: attention, dense FFNs, shared experts and embeddings per attention group split by
// TP, routers replicated, routed experts spread over the expert-parallel ranks (no redundant slots), a
// pipeline stage holding its share of the layers; at the precisions the scenario gives those parts.
double draft_weight_bytes(const ModelSpec& m, const PrecisionSpec& p, const DeploymentSpec& d) {
  const double tp = d.attention_tp;
  const int ranks = std::max(1, d.expert_ranks());
  const double experts_per_gpu = std::ceil(static_cast<double>(m.routed_experts) / ranks);
  double layers = m.attention_params_per_layer() * m.num_layers * bytes_per_element(p.attention) / tp +
                  m.dense_ffn_params() * m.num_dense_layers * bytes_per_element(p.dense_ffn) / tp +
                  m.shared_expert_params() * m.moe_layers() * bytes_per_element(p.shared_experts) / tp +
                  m.router_params() * m.moe_layers() * bytes_per_element(p.router) +
                  m.expert_params() * experts_per_gpu * m.moe_layers() * bytes_per_element(p.routed_experts) /
                      d.expert_tp;
  if (d.pipeline_stages > 1) {
    layers *= static_cast<double>(d.max_stage_layers(m.num_layers)) / m.num_layers;
    return layers + double(m.vocab) * double(m.hidden) * bytes_per_element(p.embeddings) / tp;
  }
  return layers + m.embedding_params() * bytes_per_element(p.embeddings) / tp;
}

}  // namespace

MemoryPlan plan_memory(const ScenarioSpec& s, double routed_expert_bytes_per_gpu) {
  const ModelSpec& m = s.model;
  const PrecisionSpec& p = s.precision;
  const DeploymentSpec& d = s.deployment;
  const double tp = d.attention_tp;
  MemoryPlan plan;
  WeightBytes& w = plan.weights_per_gpu;
  const auto& speculative = s.production.speculative;
  if (speculative && speculative->draft == DraftKind::kModel)
    w.draft_model = draft_weight_bytes(speculative->draft_model, p, d);
  // Attention, dense FFNs, shared experts and embeddings are replicated per attention group and split
  // by its tensor parallelism; routers are replicated; routed experts are spread over the EP group.
  w.attention = m.attention_params_per_layer() * m.num_layers * bytes_per_element(p.attention) / tp;
  w.dense_ffn = m.dense_ffn_params() * m.num_dense_layers * bytes_per_element(p.dense_ffn) / tp;
  w.shared_experts = m.shared_expert_params() * m.moe_layers() * bytes_per_element(p.shared_experts) / tp;
  w.router = m.router_params() * m.moe_layers() * bytes_per_element(p.router);
  w.embeddings = m.embedding_params() * bytes_per_element(p.embeddings) / tp;
  // Every expert-parallel rank holds (experts + redundant slots) / ranks expert copies per layer (EPLB
  // fills the redundant slots with replicas), each GPU of a rank 1/expert_tp of every copy's matrices;
  // tiered experts take the HBM set aside for them.
  plan.experts_per_gpu = s.experts.slots_per_gpu(m.routed_experts, d.expert_ranks());
  w.routed_experts = m.expert_params() * plan.experts_per_gpu * m.moe_layers() *
                     bytes_per_element(p.routed_experts) / d.expert_tp;
  if (s.experts.tiers.enabled)
    w.routed_experts = s.experts.tiers.hbm_expert_bytes + s.experts.tiers.staging_bytes;
  if (routed_expert_bytes_per_gpu >= 0) w.routed_experts = routed_expert_bytes_per_gpu;

  // Pipeline stages: a GPU holds its stage's layers (the busiest stage sets the memory) and one of the
  // embedding and LM-head matrices.
  if (d.pipeline_stages > 1) {
    const double share = static_cast<double>(d.max_stage_layers(m.num_layers)) / m.num_layers;
    w.attention *= share;
    w.dense_ffn *= std::min(
        1.0, static_cast<double>(d.max_stage_layers(m.num_layers)) / std::max(1, m.num_dense_layers));
    w.shared_experts *= share;
    w.router *= share;
    w.routed_experts *= share;
    w.embeddings = double(m.vocab) * double(m.hidden) * bytes_per_element(p.embeddings) / tp;
  }
  plan.activation_bytes = d.activation_bytes;
  plan.overhead_bytes = d.framework_overhead_bytes;
  plan.usable_bytes = s.cluster.gpu.hbm_bytes * d.kv_cache_memory_fraction;
  plan.kv_pool_bytes_per_gpu = plan.usable_bytes - w.total() - plan.activation_bytes - plan.overhead_bytes;
  plan.kv_bytes_per_token =
      m.kv_bytes_per_token(p.kv_cache) * d.max_stage_layers(m.num_layers) / m.num_layers;
  // GQA shards KV heads over the TP group (a head is never split: ceil); MLA's latent is replicated.
  double shard = 1.0;
  if (m.attention == AttentionKind::kGqa && d.attention_tp > 1) {
    const int heads_per_gpu = (m.num_kv_heads + d.attention_tp - 1) / d.attention_tp;
    shard = static_cast<double>(heads_per_gpu) / m.num_kv_heads;
  }
  if (plan.kv_pool_bytes_per_gpu > 0 && plan.kv_bytes_per_token > 0) {
    const double tokens = plan.kv_pool_bytes_per_gpu / (plan.kv_bytes_per_token * shard);
    plan.kv_blocks_per_group = static_cast<std::int64_t>(tokens / d.kv_block_tokens);
    plan.kv_tokens_per_group = plan.kv_blocks_per_group * d.kv_block_tokens;
  }
  return plan;
}

namespace {

void check_prefix_cache_size(const ScenarioSpec& s, const MemoryPlan& m) {
  const DeploymentSpec& d = s.deployment;
  if (!d.prefix_caching) return;
  const double groups = static_cast<double>(s.replicas()) * d.attention_dp;
  const double blocks = static_cast<double>(m.kv_blocks_per_group) * groups;
  if (m.kv_blocks_per_group <= std::numeric_limits<std::int32_t>::max() &&
      blocks <= static_cast<double>(kMaxPrefixCacheBlocks)) {
    return;
  }
  std::ostringstream o;
  o.precision(3);
  o << "prefix caching indexes every KV block: " << m.kv_blocks_per_group << " blocks of "
    << d.kv_block_tokens << " tokens per attention group x " << groups << " groups = " << blocks
    << " blocks, more than the " << kMaxPrefixCacheBlocks
    << " the simulator holds; raise kv_block_tokens (vLLM uses 16) or lower "
    << "kv_cache_memory_fraction";
  throw InputError("deployment.kv_block_tokens", o.str());
}

}  // namespace

void check_fits(const ScenarioSpec& s, const MemoryPlan& m) {
  const auto gib = [](double b) {
    std::ostringstream o;
    o.precision(1);
    o << std::fixed << b / kGiB << " GiB";
    return o.str();
  };
  const double need = m.weights_per_gpu.total() + m.activation_bytes + m.overhead_bytes;
  if (m.kv_pool_bytes_per_gpu <= 0) {
    std::ostringstream o;
    o << "model " << s.model.name << " does not fit: each of the " << s.deployment.ep_size << " GPUs needs "
      << gib(m.weights_per_gpu.total()) << " of weights (routed experts "
      << gib(m.weights_per_gpu.routed_experts) << ") + " << gib(m.activation_bytes + m.overhead_bytes)
      << " activations and overhead = " << gib(need) << ", but " << s.cluster.gpu.name << " offers "
      << gib(m.usable_bytes) << " (" << gib(s.cluster.gpu.hbm_bytes) << " x kv_cache_memory_fraction "
      << s.deployment.kv_cache_memory_fraction << "); short by " << gib(need - m.usable_bytes)
      << " per GPU. Use more GPUs per replica (deployment.ep_size or deployment.pipeline.stages), "
         "lower-precision weights "
         "(precision.weights), or a GPU with more memory";
    throw InputError("deployment", o.str());
  }
  check_prefix_cache_size(s, m);
  const auto longest = max_length(s.workload.prompt) + max_length(s.workload.output);
  if (m.kv_tokens_per_group < longest) {
    std::ostringstream o;
    o << "the KV cache of one attention group holds " << m.kv_tokens_per_group << " tokens ("
      << gib(m.kv_pool_bytes_per_gpu) << " per GPU) but the longest request needs " << longest
      << " tokens; shorten workload lengths or free memory";
    throw InputError("deployment.kv_cache_memory_fraction", o.str());
  }
}

}  // namespace moesim
