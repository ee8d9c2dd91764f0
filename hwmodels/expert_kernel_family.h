// The grouped expert kernel an engine launches (CUTLASS grouped GEMM, Triton fused_moe, DeepGEMM), and its
// time relative to the measured grouped fit (hwmodels/profiles/h200-sxm.json, fitted on torch._grouped_mm,
// itself a CUTLASS grouped GEMM on Hopper) as a function of rows per expert. Pure data: every band's figure
// and its public source are in docs/validation/engine_kernel_sources.md.
#pragma once

#include <cstdint>
#include <optional>
#include <span>
#include <string_view>

namespace moesim {

enum class ExpertKernelFamily : std::uint8_t {
  kCutlassGrouped,  // torch._grouped_mm, TensorRT-LLM's CUTLASS MoE GEMM: the fit's own kernel
  kTritonFusedMoe,  // vLLM's (and SGLang's default) fused_moe Triton kernel
  kDeepGemm,        // DeepGEMM FP8 grouped GEMM (masked for decode, contiguous for prefill)
};

// Rows per expert (pairs / experts of one grouped launch) below `rows_below`: the launch takes `time_factor`
// times the fit's time.
struct KernelBand {
  double rows_below;
  double time_factor;
};

// The bands of `f`, by rising rows_below; the last one's rows_below is infinite.
[[nodiscard]] std::span<const KernelBand> kernel_bands(ExpertKernelFamily f);
// The factor on the fit's time of one grouped launch of `f` with `rows_per_expert` rows per expert.
[[nodiscard]] double kernel_time_factor(ExpertKernelFamily f, double rows_per_expert);

[[nodiscard]] std::optional<ExpertKernelFamily> parse_expert_kernel(std::string_view s);
[[nodiscard]] std::string_view to_string(ExpertKernelFamily f);

}  // namespace moesim
