// A MoE transformer as the simulator sees it: shapes from the public config, parameter counts and the
// per-token sizes that memory accounting and the step planner derive from them.
#pragma once

#include <array>
#include <cstdint>
#include <span>
#include <string>

#include "hwmodels/precision.h"

namespace moesim {

enum class AttentionKind { kGqa, kMla };

// One projection GEMM of an attention layer, y[T, n] = x[T, k] @ W[k, n], and the dimension attention TP
// divides: column-parallel n, row-parallel k, or neither (a replicated projection).
struct ProjectionGemm {
  enum class Split : std::uint8_t { kColumns, kRows, kReplicated };
  std::int64_t n = 0;
  std::int64_t k = 0;
  Split split = Split::kColumns;
};
struct ProjectionGemms {
  std::array<ProjectionGemm, 4> gemms{};
  std::size_t count = 0;
  // A view into this object: not on a temporary (a range-for over attention_projections().list() would
  // read the GEMMs after the temporary is gone), so bind the result to a name first.
  [[nodiscard]] std::span<const ProjectionGemm> list() const& { return {gemms.data(), count}; }
  std::span<const ProjectionGemm> list() const&& = delete;
};

struct ModelSpec {
  std::string name;
  int num_layers = 0;
  int num_dense_layers = 0;  // the first layers use a dense FFN instead of experts
  std::int64_t hidden = 0;
  std::int64_t vocab = 0;
  bool tied_embeddings = false;

  AttentionKind attention = AttentionKind::kGqa;
  int num_heads = 0;
  int num_kv_heads = 0;  // GQA
  int head_dim = 0;      // GQA
  int q_lora_rank = 0;   // MLA (0: no low-rank query projection)
  int kv_lora_rank = 0;  // MLA
  int qk_nope_head_dim = 0;
  int qk_rope_head_dim = 0;
  int v_head_dim = 0;

  int routed_experts = 0;
  int shared_experts = 0;
  int top_k = 0;
  std::int64_t expert_inter = 0;
  std::int64_t shared_expert_inter = 0;  // per shared expert
  std::int64_t dense_inter = 0;

  // Published totals (billions), for checks and for models whose architecture is not public.
  double published_total_params_b = 0;
  double published_active_params_b = 0;
  bool architecture_known = true;

  [[nodiscard]] int moe_layers() const { return num_layers - num_dense_layers; }
  [[nodiscard]] double attention_params_per_layer() const;
  // The projection GEMMs of one attention layer as engines launch them (their n x k sum to
  // attention_params_per_layer()). GQA: fused QKV, O. MLA (SGLang DeepseekV2AttentionMLA,
  // python/sglang/srt/models/deepseek_v2.py): q_a and kv_a fused in one replicated GEMM
  // (fused_qkv_a_proj_with_mqa; DeepGEMM's README times this N = 2112, K = 7168 shape), q_b and kv_b
  // column-parallel, o row-parallel; without q_lora a column-parallel q and a replicated kv_a.
  [[nodiscard]] ProjectionGemms attention_projections() const;
  [[nodiscard]] double expert_params() const { return 3.0 * double(hidden) * double(expert_inter); }
  [[nodiscard]] double shared_expert_params() const {
    return shared_experts * 3.0 * double(hidden) * double(shared_expert_inter);
  }
  [[nodiscard]] double router_params() const { return double(hidden) * routed_experts; }
  [[nodiscard]] double dense_ffn_params() const { return 3.0 * double(hidden) * double(dense_inter); }
  [[nodiscard]] double embedding_params() const {
    return double(vocab) * double(hidden) * (tied_embeddings ? 1.0 : 2.0);
  }
  [[nodiscard]] double routed_params_total() const { return expert_params() * routed_experts * moe_layers(); }
  // Everything that is not a routed expert: attention, dense FFNs, shared experts, routers, embeddings.
  [[nodiscard]] double non_routed_params() const;
  [[nodiscard]] double total_params() const { return non_routed_params() + routed_params_total(); }
  [[nodiscard]] double active_params() const {
    return non_routed_params() + expert_params() * top_k * moe_layers();
  }
  // KV-cache elements per token per layer: 2 x kv_heads x head_dim (GQA), kv_lora + rope (MLA).
  [[nodiscard]] double kv_elements_per_token_per_layer() const;
  [[nodiscard]] double kv_bytes_per_token(Precision kv) const {
    return kv_elements_per_token_per_layer() * num_layers * bytes_per_element(kv);
  }
  // Attention-core FLOPs per (query token, cached token) pair in one layer: QK^T and PV.
  // MLA decode uses the absorbed form (scores over the latent), prefill the expanded one
  // (DeepSeek-V2 paper, section 2.1.2 and appendix C).
  [[nodiscard]] double attention_flops_per_pair(bool prefill) const;
  // Query in and output out of the attention core per query token (elements): heads x (q + o) widths;
  // MLA decode works in the latent (absorbed) space.
  [[nodiscard]] double attention_qo_elements_per_token(bool prefill) const {
    if (attention == AttentionKind::kGqa) return 2.0 * num_heads * head_dim;
    if (prefill) return double(num_heads) * double(qk_nope_head_dim + qk_rope_head_dim + v_head_dim);
    return double(num_heads) * double(2 * kv_lora_rank + qk_rope_head_dim);
  }
  // Projection GEMM shapes of one layer's attention: sum over the projections of K x N (weights).
  [[nodiscard]] double attention_projection_flops_per_token() const {
    return 2.0 * attention_params_per_layer();
  }
};

}  // namespace moesim
