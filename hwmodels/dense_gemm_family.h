// DeepGEMM's FP8 dense GEMM (1x128 activation tiles, 128x128 weight blocks, CUDA-core promotion of the
// accumulators) on the DeepSeek-V3 projection shapes its README times, against the calibrated fit (cuBLAS
// per-tensor FP8 via the BF16 fit and the measured FP8 rate). Used for the attention projections of an
// engine that runs DeepGEMM on Hopper.
#pragma once

#include <cstdint>
#include <optional>

#include "hwmodels/gpu_cost_model.h"

namespace moesim {

// The published rate (FLOP/s) of DeepGEMM's FP8 GEMM of shape N x K at M = 4096 rows on H800 SXM5, or
// nullopt for a shape the README does not time.
[[nodiscard]] std::optional<double> deepgemm_dense_flops_per_s(std::int64_t n, std::int64_t k);

// The rows of the README's largest measured M: at and above it a GEMM of a timed shape takes the fit's
// time scaled by published / fit at this M (equal to the published time there); below it, or for other
// shapes, the fit.
inline constexpr std::int64_t kDeepGemmDenseRows = 4096;

// H800 SXM5's dense FP8 tensor-core peak (NVIDIA H800 datasheet: 3,958 TFLOPS with sparsity), the GPU
// of the published rates.
inline constexpr double kH800Fp8FlopsPerS = 1979e12;

// `w` (FP8 weights) as DeepGEMM runs it on a Hopper GPU of dense FP8 peak `fp8_flops_per_s`, by the rule
// above, the published rate scaled by that peak over H800's.
[[nodiscard]] Duration deepgemm_dense_gemm(const GpuCostModel& gpu, const GemmWork& w,
                                           double fp8_flops_per_s);

}  // namespace moesim
