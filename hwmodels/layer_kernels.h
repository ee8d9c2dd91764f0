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
};

// HBM bytes of the row gather that permutes `tokens` rows of `row_bytes` into top_k copies: the copies
// written, and the source read once when it fits in L2 (its k reads then hit the cache), else k times.
// The measured gather (shared/calibration/h200/permute_bf16.json) runs at one bandwidth on this count.
[[nodiscard]] double gather_bytes(double tokens, double top_k, double row_bytes, double l2_bytes);

struct SmallKernel {
  std::string_view name;
  MemoryKernel kind = MemoryKernel::kElementwise;
  int launches = 0;
  double bytes = 0;  // over all launches, read + written
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

// Per layer: RMSNorm, QKV GEMM, KV write, attention, O GEMM, residual, RMSNorm, router GEMM, top-k,
// sort, permute, experts (grouped or looped), unpermute, residual; then RMSNorm and the LM head over
// every row (shared/calibration/h200/README.md). BF16 weights.
[[nodiscard]] Duration compose_step(const GpuCostModel& gpu, const GqaMoeShape& m, const EngineProfile& e,
                                    const StepCase& c, double l2_bytes);

}  // namespace moesim
