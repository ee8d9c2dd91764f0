// The GPU cost-model plug point: pure const functions from a unit of work to its duration on one GPU.
// Implementations: RooflineCostModel (datasheet) and the calibrated profile model.
#pragma once

#include <cstdint>
#include <string>

#include "hwmodels/attention_kernel.h"
#include "hwmodels/expert_kernel_family.h"
#include "hwmodels/precision.h"
#include "sim/engine/time.h"

namespace moesim {

// y[m,n] = x[m,k] @ W[k,n] with W stored at `weights`.
struct GemmWork {
  std::int64_t m = 0;
  std::int64_t n = 0;
  std::int64_t k = 0;
  Precision weights = Precision::kBF16;
};

// One SwiGLU expert: x[T,H] @ W13[H,2I] -> silu(a)*b -> @ W2[I,H], weights read once.
// `in_loop`: one of a loop of such kernels back to back in a CUDA graph (a naive MoE layer), whose
// launches overlap a little (shared/calibration/h200/moe_layer_deepseek_v3_ep8.json, loop_ms).
struct ExpertFfnWork {
  std::int64_t tokens = 0;
  std::int64_t hidden = 0;
  std::int64_t inter = 0;
  Precision weights = Precision::kBF16;
  bool in_loop = false;
};

// One grouped expert launch on one GPU for one MoE layer, as serving engines run it (vLLM fused-MoE,
// SGLang/DeepGEMM, TensorRT-LLM CUTLASS): one grouped up GEMM over every local expert, SwiGLU, one grouped
// down GEMM. `experts` of them have tokens (their weights are read once each, at `weights`); `tokens` is
// the GPU's routed (token, expert) pairs. Engines launch one such pair per weight format. `groups`: the
// experts in the launch's weight tensor (the GPU's local experts; 0: the touched ones), which set the
// kernel's tile shape; `family`: the kernel, whose SM occupancy (hwmodels/grouped_gemm_tiles.h) the profile
// model costs where its tiling has a source.
struct GroupedExpertsWork {
  std::int64_t experts = 0;
  std::int64_t tokens = 0;
  std::int64_t hidden = 0;
  std::int64_t inter = 0;
  Precision weights = Precision::kBF16;
  std::int64_t groups = 0;
  ExpertKernelFamily family = ExpertKernelFamily::kCutlassGrouped;
};

// The small memory-bound kernels of a layer (hwmodels/layer_kernels.h names them): an elementwise or
// copy kernel, the row gather that permutes tokens into expert order, and the scatter-add back.
enum class MemoryKernel : std::uint8_t { kElementwise, kGather, kScatterAdd };

// The attention core (softmax(QK^T)V, without projections), described by what it moves and computes.
struct AttentionWork {
  double bytes = 0;  // KV cache read plus Q/O traffic
  double flops = 0;
  bool is_prefill = false;
  // The KV cache's format: a profile with an attention fit of that format (a measured FP8 kernel whose
  // QK^T and PV run on FP8 tensor cores) costs it there; else the BF16 fit (bytes already counted).
  Precision kv = Precision::kBF16;
  // The decode kernel the engine runs (hwmodels/attention_kernel.h); prefill ignores it.
  DecodeAttentionKernel kernel = DecodeAttentionKernel::kFitted;
};

class GpuCostModel {
 public:
  virtual ~GpuCostModel() = default;
  [[nodiscard]] virtual Duration gemm(const GemmWork& w) const = 0;
  [[nodiscard]] virtual Duration expert_ffn(const ExpertFfnWork& w) const = 0;
  [[nodiscard]] virtual Duration attention(const AttentionWork& w) const = 0;
  [[nodiscard]] virtual Duration grouped_experts(const GroupedExpertsWork& w) const = 0;
  // One launch of a small kernel moving `bytes` (read + written).
  [[nodiscard]] virtual Duration memory_kernel(MemoryKernel k, double bytes) const = 0;
  // Where the costs come from, for the report: "roofline (datasheet)" or "profile <file>".
  [[nodiscard]] virtual std::string source() const = 0;
};

[[nodiscard]] inline double gemm_flops(const GemmWork& w) {
  return 2.0 * static_cast<double>(w.m) * static_cast<double>(w.n) * static_cast<double>(w.k);
}
[[nodiscard]] inline double expert_ffn_flops(const ExpertFfnWork& w) {
  return 6.0 * static_cast<double>(w.tokens) * static_cast<double>(w.hidden) * static_cast<double>(w.inter);
}
[[nodiscard]] inline double expert_ffn_weight_bytes(const ExpertFfnWork& w) {
  return 3.0 * static_cast<double>(w.hidden) * static_cast<double>(w.inter) * bytes_per_element(w.weights);
}

[[nodiscard]] inline double grouped_experts_flops(const GroupedExpertsWork& w) {
  return 6.0 * static_cast<double>(w.tokens) * static_cast<double>(w.hidden) * static_cast<double>(w.inter);
}

}  // namespace moesim
