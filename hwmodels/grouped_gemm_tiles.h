// How many SMs a grouped GEMM keeps streaming weights, for the kernel the H200 grouped fit is of:
// torch._grouped_mm in BF16 on SM90 (hwmodels/profiles/h200-sxm.json, moe_layer_deepseek_v3_ep8.json).
//
// Sources, read at these commits:
// - PyTorch aten/src/ATen/native/cuda/GroupMM.cu (commit 06c0cf0112c2cf4759382fda2171e826207e139c),
//   dispatch_bf16_grouped_kernel_on_tile_size: for a 2-D activation and 3-D weights, M is the activation's
//   rows divided by the group count (the experts in the weight tensor); when M <= 128 or N <= 128 the kernel
//   is the Pingpong one with 64x128x128 tiles, else the Cooperative one with 128x256x64 tiles; both with a
//   2x1x1 cluster, launched persistent on the device's SM count.
// - CUTLASS include/cutlass/gemm/kernel/sm90_tile_scheduler_group.hpp (commit
//   0046e366c97636a787225cfc4078f221c26bf8ae), PersistentTileSchedulerSm90Group: each group's tiles along M
//   are rounded up to the cluster's M size, so a group with rows at all takes at least 2 x ceil(N / tile_n)
//   tiles; the SMs take the tiles in turn (static schedule), a wave per SM count.
//
// The mechanism: a CTA streams the weight columns of its tile (the two CTAs of a cluster share the B tile by
// multicast, so each reads half). Costed here at the SM's share of the bandwidth: a last, partial wave takes
// as long as a full one. That is the bound of the effect (a CTA of a partial wave may stream faster when HBM
// has headroom; no measurement here separates how much), so the stretch is at most what under-fill can cost.
#pragma once

#include <cstdint>
#include <span>

namespace moesim {

struct GroupedGemmTiling {
  std::int64_t tile_m = 0;
  std::int64_t tile_n = 0;
  std::int64_t cluster_m = 0;
};

// The tiling GroupMM.cu picks for `rows` activation rows over `groups` weight groups and output width `n`:
// on SM90 by M and N as above; on SM100 (`sm100`) always 64x128x128 with the 2x1x1 cluster.
[[nodiscard]] GroupedGemmTiling torch_grouped_mm_tiling(std::int64_t rows, std::int64_t groups,
                                                        std::int64_t n, bool sm100);

struct GroupedGemmOccupancy {
  std::int64_t tiles = 0;  // CTA tiles over all groups (cluster-rounded)
  std::int64_t waves = 0;  // ceil(tiles / sms)
  double stretch = 1.0;    // waves * sms / tiles: the weight-streaming time over that of a full GPU
};

// One grouped GEMM of output width `n` whose groups hold `rows_per_group` rows each (zero rows: no tiles),
// under `tiling`, on `sms` SMs.
[[nodiscard]] GroupedGemmOccupancy grouped_gemm_occupancy(std::span<const std::int64_t> rows_per_group,
                                                          std::int64_t n, const GroupedGemmTiling& tiling,
                                                          std::int64_t sms);

// The grouped SwiGLU experts (up: N = 2 * inter over K = hidden; down: N = hidden over K = inter) with the
// given per-expert rows out of `groups` experts in the weight tensor: the stretch of their weight streaming,
// the two GEMMs weighted by their weight bytes (2:1).
struct GroupedExpertsGpu {
  std::int64_t sms = 0;
  bool sm100 = false;
};
[[nodiscard]] double grouped_experts_stretch(std::span<const std::int64_t> rows_per_expert,
                                             std::int64_t groups, std::int64_t hidden, std::int64_t inter,
                                             const GroupedExpertsGpu& gpu);

// The same with `pairs` rows spread evenly over `experts` touched experts (the cost model's view: it has no
// per-expert counts); `groups` 0 takes the touched experts as the weight tensor's.
[[nodiscard]] double grouped_experts_stretch_even(std::int64_t experts, std::int64_t pairs,
                                                  std::int64_t groups, std::int64_t hidden,
                                                  std::int64_t inter, const GroupedExpertsGpu& gpu);

}  // namespace moesim
