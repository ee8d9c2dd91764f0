// DeepGEMM's dense FP8 GEMM on the shapes its README times: the published time at M = 4096, the fit's
// growth above it, the fit below it and for other shapes or formats.
#include "hwmodels/dense_gemm_family.h"

#include <catch2/catch.hpp>

#include "hwmodels/roofline_cost_model.h"

using namespace moesim;

namespace {
RooflineCostModel h100_roofline() {
  GpuSpec g;
  g.name = "test";
  g.hbm_bytes_per_s = 3.35e12;
  g.bf16_flops_per_s = 989e12;
  g.fp8_flops_per_s = 1979e12;
  return RooflineCostModel(g);
}
}  // namespace

TEST_CASE("DeepGEMM's README rates of DeepSeek-V3's projection shapes at 4096 rows") {
  CHECK(*deepgemm_dense_flops_per_s(2112, 7168) == 1009e12);
  CHECK(*deepgemm_dense_flops_per_s(32768, 512) == 751e12);
  CHECK_FALSE(deepgemm_dense_flops_per_s(7168, 2112).has_value());
}

TEST_CASE("a DeepGEMM projection takes the published time at 4096 rows and grows with the fit above") {
  const RooflineCostModel gpu = h100_roofline();
  // kv_b, 4096 x 32768 x 512 at 751 TFLOP/s on H800's FP8 peak: 2 x 4096 x 32768 x 512 / 751e12 s.
  const GemmWork at{.m = 4096, .n = 32768, .k = 512, .weights = Precision::kFP8};
  const double published = 2.0 * 4096 * 32768 * 512 / 751e12;
  CHECK(deepgemm_dense_gemm(gpu, at, 1979e12).seconds() == Approx(published).epsilon(1e-6));
  // At twice the rows: the fit's time at 8192 rows times published / fit at 4096.
  GemmWork big = at;
  big.m = 8192;
  CHECK(deepgemm_dense_gemm(gpu, big, 1979e12).seconds() ==
        Approx(gpu.gemm(big).seconds() * published / gpu.gemm(at).seconds()).epsilon(1e-6));
  // A Hopper of half H800's FP8 peak runs it at half the published rate.
  CHECK(deepgemm_dense_gemm(gpu, at, 1979e12 / 2).seconds() == Approx(2 * published).epsilon(1e-6));
  // Below the measured rows, in BF16, or at an untimed shape: the fit.
  GemmWork small = at;
  small.m = 2048;
  CHECK(deepgemm_dense_gemm(gpu, small, 1979e12) == gpu.gemm(small));
  GemmWork bf16 = at;
  bf16.weights = Precision::kBF16;
  CHECK(deepgemm_dense_gemm(gpu, bf16, 1979e12) == gpu.gemm(bf16));
  GemmWork other = at;
  other.n = 4096;
  other.k = 4096;
  CHECK(deepgemm_dense_gemm(gpu, other, 1979e12) == gpu.gemm(other));
}
