#include "hwmodels/engine_profile.h"

#include <array>
#include <utility>

namespace moesim {

namespace {
constexpr std::array<std::pair<EngineKind, std::string_view>, 5> kNames{{
    {EngineKind::kPytorchGraph, "pytorch_graph"},
    {EngineKind::kPytorchLoop, "pytorch_loop"},
    {EngineKind::kVllm, "vllm"},
    {EngineKind::kSglang, "sglang"},
    {EngineKind::kTrtllm, "trtllm"},
}};
}  // namespace

std::string_view to_string(EngineKind kind) {
  for (const auto& [k, n] : kNames) {
    if (k == kind) return n;
  }
  return "?";
}

std::optional<EngineKind> parse_engine(std::string_view s) {
  for (const auto& [k, n] : kNames) {
    if (n == s) return k;
  }
  return std::nullopt;
}

// Each choice and its source is in docs/engines.md.
EngineProfile engine_profile(EngineKind kind) {
  EngineProfile e{.kind = kind, .name = to_string(kind)};
  switch (kind) {
    case EngineKind::kPytorchGraph:  // shared/calibration/h200/README.md, "Whole-model steps"
      e.rotary = false;
      break;
    case EngineKind::kPytorchLoop:  // the same step with loop_ms's expert loop
      e.experts = ExpertKernel::kPerExpert;
      e.rotary = false;
      break;
    case EngineKind::kVllm:    // fused_moe (Triton), fused_add_rms_norm, topk_softmax, moe_align_block_size
    case EngineKind::kSglang:  // the same kernel set in sgl-kernel (fused_moe Triton / DeepGEMM)
      e.fused_add_norm = true;
      e.fused_topk_softmax = true;
      e.fused_align = true;
      e.gather_in_gemm = true;
      e.weight_mul_in_gemm = true;
      e.reduce_unpermute = true;
      break;
    case EngineKind::kTrtllm:  // CUTLASS MoE: expandInputRows permute, finalizeMoeRouting unpermute
      e.fused_add_norm = true;
      e.fused_topk_softmax = true;
      e.fused_align = true;
      e.weight_mul_in_gemm = true;
      e.reduce_unpermute = true;
      break;
  }
  return e;
}

}  // namespace moesim
