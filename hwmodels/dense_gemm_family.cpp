#include "hwmodels/dense_gemm_family.h"

#include <array>

namespace moesim {

namespace {
struct DenseRow {
  std::int64_t n;
  std::int64_t k;
  double tflops;
};
// github:deepseek-ai/DeepGEMM README.md at commit 55ab91f (Feb 2025; the tables left the README in
// fea9309), "Normal GEMMs for dense models", H800 SXM5, NVCC 12.8, M = 4096 rows:
// "| 4096 | 2112 | 7168 | 1009 TFLOPS |", "| 4096 | 24576 | 1536 | 1125 TFLOPS |",
// "| 4096 | 32768 | 512 | 751 TFLOPS |", "| 4096 | 7168 | 16384 | 1426 TFLOPS |",
// "| 4096 | 4096 | 7168 | 1265 TFLOPS |", "| 4096 | 7168 | 2048 | 1168 TFLOPS |".
// DeepSeek-V3's fused q_a + kv_a, q_b, kv_b and o projections, and its expert up and down shapes.
constexpr std::array<DenseRow, 6> kRows{{
    {2112, 7168, 1009},
    {24576, 1536, 1125},
    {32768, 512, 751},
    {7168, 16384, 1426},
    {4096, 7168, 1265},
    {7168, 2048, 1168},
}};
}  // namespace

std::optional<double> deepgemm_dense_flops_per_s(std::int64_t n, std::int64_t k) {
  for (const DenseRow& r : kRows) {
    if (r.n == n && r.k == k) return r.tflops * 1e12;
  }
  return std::nullopt;
}

Duration deepgemm_dense_gemm(const GpuCostModel& gpu, const GemmWork& w, double fp8_flops_per_s) {
  const Duration fit = gpu.gemm(w);
  const std::optional<double> rate = deepgemm_dense_flops_per_s(w.n, w.k);
  if (!rate || w.weights != Precision::kFP8 || w.m < kDeepGemmDenseRows) return fit;
  GemmWork at = w;
  at.m = kDeepGemmDenseRows;
  const double published_s = gemm_flops(at) / (*rate * fp8_flops_per_s / kH800Fp8FlopsPerS);
  return fit.scaled(published_s / gpu.gemm(at).seconds());
}

}  // namespace moesim
