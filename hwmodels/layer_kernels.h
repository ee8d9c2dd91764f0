// The small kernels of one transformer layer on one GPU (norms, residual adds, KV-cache write, router
// top-k, sort by expert, permute, unpermute, ...), named with their launches and bytes for an engine
// profile, and their time; plus the composition of a whole step of a GQA MoE model from the kernel
// costs (checked against shared/calibration/h200/model_step_mixtral_8x7b.json).
#pragma once

#include <array>
#include <cstdint>
#include <span>
#include <string_view>

#include "hwmodels/engine_profile.h"
#include "hwmodels/gpu_cost_model.h"

namespace moesim {

// What the small kernels of a layer depend on. `kv_bytes_per_token`: K and V of one token in this layer
// as stored (what the KV-cache write writes); `moe`: the layer has a router and routed experts.
struct LayerKernelShape {
  std::int64_t hidden = 0;
  double kv_bytes_per_token = 0;
  int top_k = 0;
  int experts = 0;
  bool moe = true;
  double l2_bytes = 0;  // the GPU's L2 cache (0: count every read from HBM)
  // Per token, elements the rotary embedding reads and writes in place: the rotated query and key columns
  // (GQA: (q_heads + kv_heads) x head_dim; MLA: heads x rope_dim of the query plus the shared rope key).
  double rotary_elements = 0;
  // Per token, elements of the extra RMSNorms inside attention (MLA: q_a and kv_a layernorms over q_lora
  // and kv_lora columns, one launch each; without a query LoRA kv_a's alone; GQA: 0).
  double inner_norm_elements = 0;
  int inner_norm_launches = 0;
  // Per token, the BF16 inputs of the FP8 GEMMs on the attention side (attention projections, shared
  // experts) that a per-token-group quantisation kernel casts to FP8 first; 0 without FP8 GEMMs.
  double quant_elements = 0;
  int quant_launches = 0;  // one per quantised input
  // Per routed pair, the inputs of the FP8 routed-expert GEMMs quantised on the receiving GPU (the down
  // GEMM's inter columns after SiLU*mul; the up GEMM's hidden ones when dispatch did not send FP8).
  double expert_quant_elements = 0;
  int expert_quant_launches = 0;
  // Bytes of one row the grouped kernel reads from a contiguous per-expert layout that a permute kernel
  // builds from the received tokens (DeepGEMM's contiguous layout after DeepEP's normal dispatch); 0 when
  // the engine's expert kernel reads token rows by index or the dispatch writes the layout itself.
  double permute_row_bytes = 0;
};

// Bytes a per-token-group FP8 quantisation moves per element: BF16 in, FP8 out with one FP32 scale per
// 128 elements (DeepSeek-V3 technical report 3.3.2, 1x128 activation tiles; SGLang/vLLM
// per_token_group_quant_fp8 with group_size 128).
inline constexpr double kFp8QuantBytesPerElement = 2.0 + 1.0 + 4.0 / 128.0;

// HBM bytes of the row gather that permutes `tokens` rows of `row_bytes` into top_k copies: the copies
// written, and the source read once when it fits in L2 (its k reads then hit the cache), else k times.
// The measured gather (shared/calibration/h200/permute_bf16.json) runs at one bandwidth on this count.
[[nodiscard]] double gather_bytes(double tokens, double top_k, double row_bytes, double l2_bytes);

struct SmallKernel {
  std::string_view name;
  MemoryKernel kind = MemoryKernel::kElementwise;
  int launches = 0;
  double bytes = 0;          // over all launches, read + written
  bool expert_side = false;  // runs between dispatch and combine, beside the expert GEMMs
};

inline constexpr std::size_t kMaxSmallKernels = 16;
using SmallKernelList = std::array<SmallKernel, kMaxSmallKernels>;

// The small kernels of one layer over `tokens` tokens; returns how many entries of `out` it filled.
// Sources of the kernel set: shared/calibration/h200/README.md (pytorch_graph) and docs/engines.md.
std::size_t layer_small_kernels(const LayerKernelShape& s, std::int64_t tokens, const EngineProfile& e,
                                SmallKernelList& out);
// Their time on `gpu`: every launch pays the fixed cost of its kind, the bytes its bandwidth. O(16).
[[nodiscard]] Duration layer_small_kernels_time(const GpuCostModel& gpu, const LayerKernelShape& s,
                                                std::int64_t tokens, const EngineProfile& e);
// The same time split by where the kernels run: before dispatch (norms, rotary, quantisation, routing)
// and between dispatch and combine (permute, expert-side quantisation, unpermute).
struct SmallKernelTimes {
  Duration attention_side;
  Duration expert_side;
  [[nodiscard]] Duration sum() const { return attention_side + expert_side; }
};
[[nodiscard]] SmallKernelTimes layer_small_kernel_times(const GpuCostModel& gpu, const LayerKernelShape& s,
                                                        std::int64_t tokens, const EngineProfile& e);

// MLA prefill builds the expanded key of every head before the attention core: per token it reads heads x
// qk_nope columns of kv_b's output and the shared rope key, and writes heads x (qk_nope + qk_rope) BF16
// (SGLang python/sglang/srt/models/deepseek_v2.py forward_normal: k[..., :nope] = k_nope,
// k[..., nope:] = k_pe; vLLM's MLA prefill: torch.cat((k_nope, k_pe.expand(...)), dim=-1)).
struct MlaKeyShape {
  int heads = 0;
  int qk_nope = 0;
  int qk_rope = 0;
};
[[nodiscard]] double mla_key_build_bytes(const MlaKeyShape& s, double prefill_tokens);

// A GQA MoE model with every layer MoE (Mixtral-style), for the whole-step composition.
struct GqaMoeShape {
  std::int64_t hidden = 0;
  int layers = 0;
  int q_heads = 0;
  int kv_heads = 0;
  int head_dim = 0;
  int experts = 0;
  int top_k = 0;
  std::int64_t expert_inter = 0;
  std::int64_t vocab = 0;
};

// One measured step: decode of `batch` sequences over `context` cached tokens, or prefill of one
// sequence of `tokens` tokens; `experts_touched` is the mean number of experts with tokens per layer.
struct StepCase {
  bool is_prefill = false;
  std::int64_t batch = 0;
  std::int64_t context = 0;
  std::int64_t tokens = 0;
  double experts_touched = 0;
};

// One layer's expert computation of step `c`: grouped launches at the mean touched count (interpolated
// between the neighbouring integers) under `e`'s kernel family, or the loop of expert FFNs.
[[nodiscard]] Duration step_layer_experts(const GpuCostModel& gpu, const GqaMoeShape& m,
                                          const EngineProfile& e, const StepCase& c);

// The small-kernel shape of one layer of `m` (GQA, every layer MoE, BF16 KV cache) on a GPU with
// `l2_bytes` of L2.
[[nodiscard]] LayerKernelShape gqa_moe_layer_shape(const GqaMoeShape& m, double l2_bytes);

// One step's composition by part: each per-layer part once (the step runs `layers` of them), then the
// final RMSNorm and LM head once.
struct ComposedStep {
  Duration gemms;          // per layer: QKV, O and router GEMMs
  Duration attention;      // per layer
  Duration experts;        // per layer: the grouped launches (or the loop of expert FFNs)
  SmallKernelTimes small;  // per layer
  Duration head;           // once per step
  int layers = 0;
  [[nodiscard]] Duration layer() const { return gemms + attention + experts + small.sum(); }
  [[nodiscard]] Duration total() const { return layer() * layers + head; }
};

// Per layer: RMSNorm, QKV GEMM, KV write, attention, O GEMM, residual, RMSNorm, router GEMM, top-k,
// sort, permute, experts (grouped or looped), unpermute, residual; then RMSNorm and the LM head over
// every row (shared/calibration/h200/README.md). BF16 weights.
[[nodiscard]] ComposedStep compose_step_by_part(const GpuCostModel& gpu, const GqaMoeShape& m,
                                                const EngineProfile& e, const StepCase& c, double l2_bytes);
[[nodiscard]] Duration compose_step(const GpuCostModel& gpu, const GqaMoeShape& m, const EngineProfile& e,
                                    const StepCase& c, double l2_bytes);

}  // namespace moesim
