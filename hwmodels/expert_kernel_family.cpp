#include "hwmodels/expert_kernel_family.h"

#include <array>
#include <limits>
#include <utility>

namespace moesim {

namespace {
constexpr double kAll = std::numeric_limits<double>::infinity();

// Each figure is a ratio of published kernel times, quoted with its URL in
// docs/validation/engine_kernel_sources.md; the band edges are the rows per expert of those measurements.

// The fit's kernel: torch._grouped_mm is a CUTLASS grouped GEMM on Hopper (VeOmni PR 460: "cutlass
// torch._grouped_mm"), as is TensorRT-LLM's MoE GEMM.
constexpr std::array<KernelBand, 1> kCutlass{{{kAll, 1.0}}};

// Triton fused_moe time / CUTLASS time.
//  < 2 rows: vLLM PR 13972 (SM90 CUTLASS grouped FP8 MoE), DeepSeek-V2-Lite (E=64, top 6), M=1 under CUDA
//    graphs: Triton 2.6 vs CUTLASS 3.3 (25 runs). SGLang PR 5694's 1.37x the other way is on Blackwell.
//  < 256 rows: vLLM PR 19983, m=64 (8 to 64 rows per expert), CUTLASS speed relative to Triton
//    1.00, 0.98, 0.97, 1.04, 1.00, 0.96, 0.95 (Triton time / CUTLASS time is that speed).
//  >= 256 rows: VeOmni PR 460, H100 BF16, E=128 top 8, 32,768 tokens (2,048 rows per expert):
//    Triton 11.502 ms vs torch._grouped_mm 10.218 ms.
constexpr std::array<KernelBand, 3> kTriton{{
    {2, 2.6 / 3.3},
    {256, (1.00 + 0.98 + 0.97 + 1.04 + 1.00 + 0.96 + 0.95) / 7},
    {kAll, 11.502 / 10.218},
}};

// DeepGEMM time / CUTLASS time (DeepGEMM README, H800, speedup over DeepSeek's CUTLASS 3.6 implementation).
//  < 256 rows: no published comparison: the fit.
//  < 4096 rows: masked layout at 256, 512 and 1024 rows per group: speedups 1.1, 1.2, 1.2, 1.2, 1.2, 1.1.
//  >= 4096 rows: contiguous layout at 4096 and 8192 rows per group: 1.3, 1.3, 1.3, 1.2.
constexpr std::array<KernelBand, 3> kDeepGemm{{
    {256, 1.0},
    {4096, 6 / (1.1 + 1.2 + 1.2 + 1.2 + 1.2 + 1.1)},
    {kAll, 4 / (1.3 + 1.3 + 1.3 + 1.2)},
}};

constexpr std::array<std::pair<ExpertKernelFamily, std::string_view>, 3> kNames{{
    {ExpertKernelFamily::kCutlassGrouped, "cutlass_grouped"},
    {ExpertKernelFamily::kTritonFusedMoe, "triton_fused_moe"},
    {ExpertKernelFamily::kDeepGemm, "deepgemm"},
}};
}  // namespace

std::span<const KernelBand> kernel_bands(ExpertKernelFamily f) {
  switch (f) {
    case ExpertKernelFamily::kTritonFusedMoe:
      return kTriton;
    case ExpertKernelFamily::kDeepGemm:
      return kDeepGemm;
    case ExpertKernelFamily::kCutlassGrouped:
      break;
  }
  return kCutlass;
}

double kernel_time_factor(ExpertKernelFamily f, double rows_per_expert) {
  const std::span<const KernelBand> bands = kernel_bands(f);
  for (const KernelBand& b : bands) {
    if (rows_per_expert < b.rows_below) return b.time_factor;
  }
  return bands.back().time_factor;
}

std::optional<ExpertKernelFamily> parse_expert_kernel(std::string_view s) {
  for (const auto& [f, n] : kNames) {
    if (n == s) return f;
  }
  return std::nullopt;
}

std::string_view to_string(ExpertKernelFamily f) {
  for (const auto& [k, n] : kNames) {
    if (k == f) return n;
  }
  return "?";
}

}  // namespace moesim
