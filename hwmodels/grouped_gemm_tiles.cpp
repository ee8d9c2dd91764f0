#include "hwmodels/grouped_gemm_tiles.h"

#include <algorithm>
#include <numeric>
#include <vector>

namespace moesim {

namespace {
std::int64_t ceil_div(std::int64_t a, std::int64_t b) { return (a + b - 1) / b; }
}  // namespace

GroupedGemmTiling torch_grouped_mm_tiling(std::int64_t rows, std::int64_t groups, std::int64_t n,
                                          bool sm100) {
  // GroupMM.cu: M = mat_a.size(-2) / group_count (integer division), small = M <= 128 || N <= 128.
  const std::int64_t m = rows / std::max<std::int64_t>(1, groups);
  if (sm100 || m <= 128 || n <= 128) return {.tile_m = 64, .tile_n = 128, .cluster_m = 2};
  return {.tile_m = 128, .tile_n = 256, .cluster_m = 2};
}

GroupedGemmOccupancy grouped_gemm_occupancy(std::span<const std::int64_t> rows_per_group, std::int64_t n,
                                            const GroupedGemmTiling& tiling, std::int64_t sms) {
  GroupedGemmOccupancy o;
  const std::int64_t n_tiles = ceil_div(n, tiling.tile_n);
  for (const std::int64_t r : rows_per_group) {
    if (r <= 0) continue;
    // sm90_tile_scheduler_group.hpp: round_up(ceil_div(M, tile_m), cluster_m) tiles along M.
    o.tiles += ceil_div(ceil_div(r, tiling.tile_m), tiling.cluster_m) * tiling.cluster_m * n_tiles;
  }
  if (o.tiles == 0 || sms <= 0) return o;
  o.waves = ceil_div(o.tiles, sms);
  o.stretch = static_cast<double>(o.waves * sms) / static_cast<double>(o.tiles);
  return o;
}

double grouped_experts_stretch(std::span<const std::int64_t> rows_per_expert, std::int64_t groups,
                               std::int64_t hidden, std::int64_t inter, const GroupedExpertsGpu& gpu) {
  const std::int64_t rows = std::accumulate(rows_per_expert.begin(), rows_per_expert.end(), std::int64_t{0});
  if (rows <= 0) return 1.0;
  auto stretch = [&](std::int64_t n) {
    const GroupedGemmTiling t = torch_grouped_mm_tiling(rows, groups, n, gpu.sm100);
    return grouped_gemm_occupancy(rows_per_expert, n, t, gpu.sms).stretch;
  };
  // Weight bytes: up hidden x 2 inter, down inter x hidden.
  return (2.0 * stretch(2 * inter) + stretch(hidden)) / 3.0;
}

double grouped_experts_stretch_even(std::int64_t experts, std::int64_t pairs, std::int64_t groups,
                                    std::int64_t hidden, std::int64_t inter, const GroupedExpertsGpu& gpu) {
  if (experts <= 0 || pairs <= 0) return 1.0;
  // The pairs spread as evenly as whole rows allow: pairs % experts of them hold one row more.
  std::vector<std::int64_t> rows(static_cast<std::size_t>(experts), pairs / experts);
  for (std::int64_t i = 0; i < pairs % experts; ++i) ++rows[static_cast<std::size_t>(i)];
  return grouped_experts_stretch(rows, groups > 0 ? groups : experts, hidden, inter, gpu);
}

}  // namespace moesim
