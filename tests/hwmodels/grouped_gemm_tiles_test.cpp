// The grouped kernel's SM occupancy against hand counts of its tiles (GroupMM.cu tiling, CUTLASS group
// scheduler).
#include "hwmodels/grouped_gemm_tiles.h"

#include <array>
#include <catch2/catch.hpp>

#include "hwmodels/gpu_spec.h"
#include "hwmodels/profile_cost_model.h"

using namespace moesim;

namespace {
constexpr GroupedExpertsGpu kH200{.sms = 132, .sm100 = false};
}  // namespace

TEST_CASE("torch._grouped_mm on SM90 takes 64x128 tiles at <= 128 rows per group, 128x256 above") {
  // GroupMM.cu: M = rows / groups; small when M <= 128 or N <= 128; cluster 2x1x1 either way.
  const GroupedGemmTiling few = torch_grouped_mm_tiling(2, 8, 4096, false);
  CHECK(few.tile_m == 64);
  CHECK(few.tile_n == 128);
  CHECK(few.cluster_m == 2);
  CHECK(torch_grouped_mm_tiling(8 * 128, 8, 4096, false).tile_m == 64);
  const GroupedGemmTiling many = torch_grouped_mm_tiling(8 * 129, 8, 4096, false);
  CHECK(many.tile_m == 128);
  CHECK(many.tile_n == 256);
  CHECK(torch_grouped_mm_tiling(8 * 129, 8, 128, false).tile_m == 64);   // N <= 128
  CHECK(torch_grouped_mm_tiling(8 * 129, 8, 4096, true).tile_n == 128);  // SM100: one tiling
}

TEST_CASE("Mixtral-8x7B at batch 1: 2 experts of 1 row fill 128 of 132 SMs in the down GEMM") {
  // Top-2 of 8 experts, one row each. Each expert: ceil(1/64) = 1 M tile, rounded up to the cluster's 2.
  const std::array<std::int64_t, 8> rows{1, 1, 0, 0, 0, 0, 0, 0};
  const GroupedGemmTiling t = torch_grouped_mm_tiling(2, 8, 4096, false);
  // Down: N = 4096 -> 32 N tiles; 2 experts x 2 x 32 = 128 CTA tiles, one wave, 132 / 128 of full time.
  const GroupedGemmOccupancy down = grouped_gemm_occupancy(rows, 4096, t, 132);
  CHECK(down.tiles == 128);
  CHECK(down.waves == 1);
  CHECK(down.stretch == Approx(132.0 / 128.0));
  // Up: N = 2 x 14336 = 28672 -> 224 N tiles; 2 x 2 x 224 = 896 tiles, 7 waves (6 x 132 = 792 < 896).
  const GroupedGemmOccupancy up = grouped_gemm_occupancy(rows, 28672, t, 132);
  CHECK(up.tiles == 896);
  CHECK(up.waves == 7);
  CHECK(up.stretch == Approx(7.0 * 132.0 / 896.0));
  // Weighted 2:1 by weight bytes (up hidden x 2 inter, down inter x hidden).
  const double both = (2.0 * 924.0 / 896.0 + 132.0 / 128.0) / 3.0;
  CHECK(grouped_experts_stretch(rows, 8, 4096, 14336, kH200) == Approx(both));
  CHECK(grouped_experts_stretch_even(2, 2, 8, 4096, 14336, kH200) == Approx(both));
}

TEST_CASE("DeepSeek-V3 EP8 at 64 tokens: 30 experts take 15 and 26 waves, under-fill stays in the last one") {
  // 77 pairs over 30 of 32 local experts (moe_layer_deepseek_v3_ep8.json, uniform T=64): 2 or 3 rows each,
  // M = 77 / 32 = 2 -> 64x128 tiles, 2 M tiles per expert (cluster-rounded).
  // Up: N = 4096 -> 32 N tiles: 30 x 2 x 32 = 1920 tiles, ceil(1920 / 132) = 15 waves (1980 slots).
  // Down: N = 7168 -> 56 N tiles: 30 x 2 x 56 = 3360 tiles, ceil(3360 / 132) = 26 waves (3432 slots).
  const double both = (2.0 * 1980.0 / 1920.0 + 3432.0 / 3360.0) / 3.0;
  CHECK(grouped_experts_stretch_even(30, 77, 32, 7168, 2048, kH200) == Approx(both));
  CHECK(both < 1.0 + 1.0 / 15.0);  // at most one partial wave of 15
}

TEST_CASE("the profile model stretches only the fit's own kernel, BF16, on a GPU whose tiling has a source") {
  GroupedExpertsWork w{.experts = 2, .tokens = 2, .hidden = 4096, .inter = 14336, .groups = 8};
  GpuSpec hopper;
  hopper.arch = "hopper";
  CHECK(grouped_occupancy_stretch(w, hopper) ==
        Approx(grouped_experts_stretch_even(2, 2, 8, 4096, 14336, kH200)));
  GpuSpec ampere;
  ampere.arch = "ampere";
  CHECK(grouped_occupancy_stretch(w, ampere) == 1.0);
  w.family = ExpertKernelFamily::kTritonFusedMoe;
  CHECK(grouped_occupancy_stretch(w, hopper) == 1.0);
  w.family = ExpertKernelFamily::kCutlassGrouped;
  w.weights = Precision::kFP8;
  CHECK(grouped_occupancy_stretch(w, hopper) == 1.0);
  // The stretch multiplies the weight bytes only: (s - 1) x 2 experts x 3 x H x I x 2 bytes more.
  w.weights = Precision::kBF16;
  const double extra = grouped_stream_bytes_flops(w, 1.5).bytes - work_bytes_flops(w).bytes;
  CHECK(extra == Approx(0.5 * 2 * 3.0 * 4096 * 14336 * 2));
}
