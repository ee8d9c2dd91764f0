// The grouped expert kernel families and their time relative to the measured grouped fit. The expected
// factors are worked out by hand from the published times quoted in docs/validation/engine_kernel_sources.md.
#include "hwmodels/expert_kernel_family.h"

#include <catch2/catch.hpp>

#include "hwmodels/engine_profile.h"

using namespace moesim;

TEST_CASE("the factor at a given rows per expert is the published ratio of its band") {
  // CUTLASS grouped GEMM is the fit's own kernel (torch._grouped_mm): 1 at every size.
  for (const double rows : {0.5, 1.0, 64.0, 256.0, 1e5}) {
    CHECK(kernel_time_factor(ExpertKernelFamily::kCutlassGrouped, rows) == 1.0);
  }
  // Triton: one row per expert, vLLM PR 13972 (M=1, CUDA graphs): 2.6 / 3.3 = 0.787879.
  CHECK(kernel_time_factor(ExpertKernelFamily::kTritonFusedMoe, 1.0) == Approx(0.787879).epsilon(1e-6));
  CHECK(kernel_time_factor(ExpertKernelFamily::kTritonFusedMoe, 1.99) == Approx(0.787879).epsilon(1e-6));
  // From 2 rows, vLLM PR 19983 at m=64: 6.90 / 7 = 0.985714.
  CHECK(kernel_time_factor(ExpertKernelFamily::kTritonFusedMoe, 2.0) == Approx(0.985714).epsilon(1e-6));
  CHECK(kernel_time_factor(ExpertKernelFamily::kTritonFusedMoe, 48.0) == Approx(0.985714).epsilon(1e-6));
  // From 256 rows, VeOmni PR 460: 11.502 / 10.218 = 1.125660.
  CHECK(kernel_time_factor(ExpertKernelFamily::kTritonFusedMoe, 256.0) == Approx(1.125660).epsilon(1e-6));
  CHECK(kernel_time_factor(ExpertKernelFamily::kTritonFusedMoe, 2048.0) == Approx(1.125660).epsilon(1e-6));
  // DeepGEMM: no published comparison below 256 rows; then 1 / mean(1.1, 1.2, 1.2, 1.2, 1.2, 1.1) = 6/7.0,
  // and from 4096 rows 1 / mean(1.3, 1.3, 1.3, 1.2) = 4/5.1.
  CHECK(kernel_time_factor(ExpertKernelFamily::kDeepGemm, 100.0) == 1.0);
  CHECK(kernel_time_factor(ExpertKernelFamily::kDeepGemm, 512.0) == Approx(0.857143).epsilon(1e-6));
  CHECK(kernel_time_factor(ExpertKernelFamily::kDeepGemm, 4095.0) == Approx(0.857143).epsilon(1e-6));
  CHECK(kernel_time_factor(ExpertKernelFamily::kDeepGemm, 8192.0) == Approx(0.784314).epsilon(1e-6));
}

TEST_CASE("each engine names its expert kernel and the calibration engine runs the fit kernel") {
  CHECK(engine_profile(EngineKind::kPytorchGraph).expert_family == ExpertKernelFamily::kCutlassGrouped);
  CHECK(engine_profile(EngineKind::kTrtllm).expert_family == ExpertKernelFamily::kCutlassGrouped);
  CHECK(engine_profile(EngineKind::kVllm).expert_family == ExpertKernelFamily::kTritonFusedMoe);
  CHECK(engine_profile(EngineKind::kSglang).expert_family == ExpertKernelFamily::kDeepGemm);
  for (const auto f : {ExpertKernelFamily::kCutlassGrouped, ExpertKernelFamily::kTritonFusedMoe,
                       ExpertKernelFamily::kDeepGemm}) {
    CHECK(parse_expert_kernel(to_string(f)) == f);
  }
  CHECK_FALSE(parse_expert_kernel("marlin").has_value());
}
