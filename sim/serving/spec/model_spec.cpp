#include "sim/serving/spec/model_spec.h"

namespace moesim {

double ModelSpec::attention_params_per_layer() const {
  const double h = double(hidden);
  const double heads = num_heads;
  if (attention == AttentionKind::kGqa) {
    const double d = head_dim;
    return h * heads * d + 2.0 * h * num_kv_heads * d + heads * d * h;
  }
  // MLA (DeepSeek-V2/V3): q_a, q_b (or a full q), kv_a with the shared rope key, kv_b, o.
  const double qk = double(qk_nope_head_dim + qk_rope_head_dim);
  const double q = q_lora_rank > 0 ? h * q_lora_rank + double(q_lora_rank) * heads * qk : h * heads * qk;
  const double kv_a = h * double(kv_lora_rank + qk_rope_head_dim);
  const double kv_b = double(kv_lora_rank) * heads * double(qk_nope_head_dim + v_head_dim);
  const double o = heads * v_head_dim * h;
  return q + kv_a + kv_b + o;
}

ProjectionGemms ModelSpec::attention_projections() const {
  using S = ProjectionGemm::Split;
  ProjectionGemms p;
  auto add = [&](std::int64_t n, std::int64_t k, S split) {
    p.gemms[p.count++] = {.n = n, .k = k, .split = split};
  };
  const std::int64_t heads = num_heads;
  if (attention == AttentionKind::kGqa) {
    add((heads + 2 * std::int64_t{num_kv_heads}) * head_dim, hidden, S::kColumns);
    add(hidden, heads * head_dim, S::kRows);
    return p;
  }
  const std::int64_t qk = qk_nope_head_dim + qk_rope_head_dim;
  const std::int64_t kv_a = kv_lora_rank + qk_rope_head_dim;
  if (q_lora_rank > 0) {
    add(q_lora_rank + kv_a, hidden, S::kReplicated);
    add(heads * qk, q_lora_rank, S::kColumns);
  } else {
    add(heads * qk, hidden, S::kColumns);
    add(kv_a, hidden, S::kReplicated);
  }
  add(heads * (qk_nope_head_dim + v_head_dim), kv_lora_rank, S::kColumns);
  add(hidden, heads * v_head_dim, S::kRows);
  return p;
}

double ModelSpec::non_routed_params() const {
  const int moe = moe_layers();
  return attention_params_per_layer() * num_layers + dense_ffn_params() * num_dense_layers +
         (shared_expert_params() + router_params()) * moe + embedding_params();
}

double ModelSpec::kv_elements_per_token_per_layer() const {
  if (attention == AttentionKind::kGqa) return 2.0 * num_kv_heads * head_dim;
  return double(kv_lora_rank + qk_rope_head_dim);
}

double ModelSpec::attention_flops_per_pair(bool prefill) const {
  const double heads = num_heads;
  if (attention == AttentionKind::kGqa) return 4.0 * heads * head_dim;
  if (prefill) return 2.0 * heads * double(qk_nope_head_dim + qk_rope_head_dim) + 2.0 * heads * v_head_dim;
  return 2.0 * heads * double(kv_lora_rank + qk_rope_head_dim) + 2.0 * heads * kv_lora_rank;
}

}  // namespace moesim
