#include "hwmodels/layer_kernels.h"

#include <algorithm>
#include <cmath>

#include "hwmodels/profile_cost_model.h"

namespace moesim {

double gather_bytes(double tokens, double top_k, double row_bytes, double l2_bytes) {
  const double source = tokens * row_bytes;
  const double copies = tokens * top_k * row_bytes;
  return copies + (source <= l2_bytes ? source : copies);
}

namespace {

void push(SmallKernelList& out, std::size_t& n, const SmallKernel& k) {
  if (k.launches > 0) out[n++] = k;
}

// Norms, KV-cache write, rotary, quantisation of the FP8 GEMMs' inputs, routing: before dispatch.
void attention_side(const LayerKernelShape& s, double t, const EngineProfile& e, SmallKernelList& out,
                    std::size_t& n) {
  constexpr auto kE = MemoryKernel::kElementwise;
  const double act = t * static_cast<double>(s.hidden) * 2.0;  // one BF16 activation matrix [T, H]
  if (e.fused_add_norm) {
    push(out, n, {"add_rms_norm", kE, 2, 2 * 4 * act});  // reads x and residual, writes both
  } else {
    push(out, n, {"rms_norm", kE, 2, 2 * 2 * act});
    push(out, n, {"residual_add", kE, 2, 2 * 3 * act});
  }
  push(out, n, {"inner_rms_norm", kE, s.inner_norm_launches, 2 * 2.0 * t * s.inner_norm_elements});
  push(out, n, {"kv_cache_write", kE, e.fused_add_norm ? 1 : 2, 2 * t * s.kv_bytes_per_token});
  if (e.rotary) push(out, n, {"rotary", kE, 1, 2 * 2.0 * t * s.rotary_elements});
  push(out, n, {"fp8_act_quant", kE, s.quant_launches, kFp8QuantBytesPerElement * t * s.quant_elements});
  if (!s.moe) return;
  // Routing: top-k (the measured step draws Gumbel noise: uniform, two logs, add, top-k) and softmax.
  const double logits = t * s.experts * 4.0;
  const double rows = t * s.top_k;
  if (e.fused_topk_softmax) {
    push(out, n, {"topk_softmax", kE, 1, logits + rows * 8.0});
  } else {
    push(out, n, {"router_topk", kE, 5, 6 * logits});
    push(out, n, {"routing_softmax", kE, 2, rows * 12.0});
  }
  // Sort the (token, expert) pairs by expert, count per expert, offsets (a radix argsort is 3 launches).
  push(out, n, {"sort_by_expert", kE, e.fused_align ? 1 : 6, rows * 16.0});
}

// Permute into the expert kernel's layout, expert-side quantisation, weighting and unpermute.
void expert_side(const LayerKernelShape& s, double t, const EngineProfile& e, SmallKernelList& out,
                 std::size_t& n) {
  constexpr auto kE = MemoryKernel::kElementwise;
  const double act = t * static_cast<double>(s.hidden) * 2.0;
  const double rows = t * s.top_k;
  const double row_bytes = static_cast<double>(s.hidden) * 2.0;
  const std::size_t first = n;
  if (s.permute_row_bytes > 0) {
    push(out, n,
         {"permute_contiguous", MemoryKernel::kGather, 1,
          gather_bytes(t, s.top_k, s.permute_row_bytes, s.l2_bytes)});
  } else if (!e.gather_in_gemm) {
    push(out, n,
         {"permute_gather", MemoryKernel::kGather, 1, gather_bytes(t, s.top_k, row_bytes, s.l2_bytes)});
  }
  push(out, n,
       {"fp8_expert_quant", kE, s.expert_quant_launches,
        kFp8QuantBytesPerElement * rows * s.expert_quant_elements});
  if (!e.weight_mul_in_gemm) push(out, n, {"routing_weight_mul", kE, 1, 2 * rows * row_bytes});
  if (e.reduce_unpermute) {
    push(out, n, {"unpermute_sum", kE, 1, rows * row_bytes + act});
  } else {
    push(out, n, {"unpermute_zero", kE, 1, act});
    push(out, n, {"unpermute_scatter_add", MemoryKernel::kScatterAdd, 1, 2 * rows * row_bytes});
  }
  for (std::size_t i = first; i < n; ++i) out[i].expert_side = true;
}

}  // namespace

std::size_t layer_small_kernels(const LayerKernelShape& s, std::int64_t tokens, const EngineProfile& e,
                                SmallKernelList& out) {
  std::size_t n = 0;
  const double t = static_cast<double>(tokens);
  attention_side(s, t, e, out, n);
  if (s.moe) expert_side(s, t, e, out, n);
  return n;
}

SmallKernelTimes layer_small_kernel_times(const GpuCostModel& gpu, const LayerKernelShape& s,
                                          std::int64_t tokens, const EngineProfile& e) {
  SmallKernelTimes out;
  if (tokens <= 0) return out;
  SmallKernelList list{};
  const std::size_t n = layer_small_kernels(s, tokens, e, list);
  for (std::size_t i = 0; i < n; ++i) {
    const SmallKernel& k = list[i];
    const Duration d = gpu.memory_kernel(k.kind, k.bytes / k.launches) * k.launches;
    (k.expert_side ? out.expert_side : out.attention_side) += d;
  }
  return out;
}

Duration layer_small_kernels_time(const GpuCostModel& gpu, const LayerKernelShape& s, std::int64_t tokens,
                                  const EngineProfile& e) {
  return layer_small_kernel_times(gpu, s, tokens, e).sum();
}

double mla_key_build_bytes(const MlaKeyShape& s, double prefill_tokens) {
  const double read = double(s.heads) * s.qk_nope + s.qk_rope;
  const double written = double(s.heads) * (s.qk_nope + s.qk_rope);
  return prefill_tokens * 2.0 * (read + written);
}

Duration step_layer_experts(const GpuCostModel& gpu, const GqaMoeShape& m, const EngineProfile& e,
                            const StepCase& c) {
  const std::int64_t t = c.is_prefill ? c.tokens : c.batch;
  const std::int64_t pairs = t * m.top_k;
  if (e.experts == ExpertKernel::kGrouped) {
    // The mean touched count may be fractional: interpolate between the neighbouring integers.
    const auto lo = static_cast<std::int64_t>(std::floor(c.experts_touched));
    const double f = c.experts_touched - double(lo);
    auto grouped = [&](std::int64_t n) {
      const Duration d = gpu.grouped_experts({.experts = n,
                                              .tokens = pairs,
                                              .hidden = m.hidden,
                                              .inter = m.expert_inter,
                                              .groups = m.experts,
                                              .family = e.expert_family});
      const double k = n > 0 ? kernel_time_factor(e.expert_family, double(pairs) / double(n)) : 1.0;
      return k == 1.0 ? d : d.scaled(k);
    };
    return grouped(lo).scaled(1 - f) + (f > 0 ? grouped(lo + 1).scaled(f) : Duration::zero());
  }
  // Pairs spread evenly over the touched experts (the file gives no per-layer counts).
  const double n = std::max(1.0, c.experts_touched);
  const auto per = static_cast<std::int64_t>(std::ceil(double(pairs) / n));
  return gpu.expert_ffn({.tokens = per, .hidden = m.hidden, .inter = m.expert_inter, .in_loop = true})
      .scaled(n);
}

LayerKernelShape gqa_moe_layer_shape(const GqaMoeShape& m, double l2_bytes) {
  return {.hidden = m.hidden,
          .kv_bytes_per_token = 2.0 * m.kv_heads * m.head_dim * 2.0,
          .top_k = m.top_k,
          .experts = m.experts,
          .moe = true,
          .l2_bytes = l2_bytes,
          .rotary_elements = double(m.q_heads + m.kv_heads) * m.head_dim};
}

ComposedStep compose_step_by_part(const GpuCostModel& gpu, const GqaMoeShape& m, const EngineProfile& e,
                                  const StepCase& c, double l2_bytes) {
  const std::int64_t t = c.is_prefill ? c.tokens : c.batch;
  const std::int64_t qkv_n = static_cast<std::int64_t>(m.q_heads + 2 * m.kv_heads) * m.head_dim;
  const std::int64_t o_k = static_cast<std::int64_t>(m.q_heads) * m.head_dim;
  const LayerKernelShape shape = gqa_moe_layer_shape(m, l2_bytes);
  // Decode attends over the cached tokens plus the new one.
  const AttentionWork attn =
      c.is_prefill
          ? prefill_attention_work(double(t), m.q_heads, m.kv_heads, m.head_dim)
          : decode_attention_work(double(t), double(c.context + 1), m.q_heads, m.kv_heads, m.head_dim);
  return {.gemms = gpu.gemm({.m = t, .n = qkv_n, .k = m.hidden}) +
                   gpu.gemm({.m = t, .n = m.hidden, .k = o_k}) +
                   gpu.gemm({.m = t, .n = m.experts, .k = m.hidden}),
          .attention = gpu.attention(attn),
          .experts = step_layer_experts(gpu, m, e, c),
          .small = layer_small_kernel_times(gpu, shape, t, e),
          .head = gpu.memory_kernel(MemoryKernel::kElementwise, 4.0 * double(t) * double(m.hidden)) +
                  gpu.gemm({.m = t, .n = m.vocab, .k = m.hidden}),
          .layers = m.layers};
}

Duration compose_step(const GpuCostModel& gpu, const GqaMoeShape& m, const EngineProfile& e,
                      const StepCase& c, double l2_bytes) {
  return compose_step_by_part(gpu, m, e, c, l2_bytes).total();
}

}  // namespace moesim
