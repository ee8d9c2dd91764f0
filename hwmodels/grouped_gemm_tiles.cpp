#include "hwmodels/grouped_gemm_tiles.h"

#include <algorithm>
#include <numeric>

namespace moesim {

namespace {

std::int64_t ceil_div(std::int64_t a, std::int64_t b) { return (a + b - 1) / b; }

// sm90_tile_scheduler_group.hpp: round_up(ceil_div(M, tile_m), cluster_m) tiles along M, for a group with
// rows.
std::int64_t group_tiles(std::int64_t rows, std::int64_t n_tiles, const GroupedGemmTiling& t) {
  return rows <= 0 ? 0 : ceil_div(ceil_div(rows, t.tile_m), t.cluster_m) * t.cluster_m * n_tiles;
}

GroupedGemmOccupancy occupancy_of(std::int64_t tiles, std::int64_t sms) {
  GroupedGemmOccupancy o{.tiles = tiles};
  if (tiles == 0 || sms <= 0) return o;
  o.waves = ceil_div(tiles, sms);
  o.stretch = static_cast<double>(o.waves * sms) / static_cast<double>(tiles);
  return o;
}

// The SwiGLU experts' two GEMMs (up N = 2 inter, down N = hidden) weighted by their weight bytes (2:1), each
// GEMM's tiles from `tiles(n_tiles, tiling)` over all its groups.
template <class Tiles>
double swiglu_stretch(std::int64_t rows, std::int64_t groups, std::int64_t hidden, std::int64_t inter,
                      const GroupedExpertsGpu& gpu, Tiles tiles) {
  auto stretch = [&](std::int64_t n) {
    const GroupedGemmTiling t = torch_grouped_mm_tiling(rows, groups, n, gpu.sm100);
    return occupancy_of(tiles(ceil_div(n, t.tile_n), t), gpu.sms).stretch;
  };
  return (2.0 * stretch(2 * inter) + stretch(hidden)) / 3.0;
}

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
  const std::int64_t n_tiles = ceil_div(n, tiling.tile_n);
  std::int64_t tiles = 0;
  for (const std::int64_t r : rows_per_group) tiles += group_tiles(r, n_tiles, tiling);
  return occupancy_of(tiles, sms);
}

double grouped_experts_stretch(std::span<const std::int64_t> rows_per_expert, std::int64_t groups,
                               std::int64_t hidden, std::int64_t inter, const GroupedExpertsGpu& gpu) {
  const std::int64_t rows = std::accumulate(rows_per_expert.begin(), rows_per_expert.end(), std::int64_t{0});
  if (rows <= 0) return 1.0;
  return swiglu_stretch(rows, groups, hidden, inter, gpu,
                        [&](std::int64_t n_tiles, const GroupedGemmTiling& t) {
                          std::int64_t tiles = 0;
                          for (const std::int64_t r : rows_per_expert) tiles += group_tiles(r, n_tiles, t);
                          return tiles;
                        });
}

double grouped_experts_stretch_even(std::int64_t experts, std::int64_t pairs, std::int64_t groups,
                                    std::int64_t hidden, std::int64_t inter, const GroupedExpertsGpu& gpu) {
  if (experts <= 0 || pairs <= 0) return 1.0;
  // The pairs spread as evenly as whole rows allow: pairs % experts of them hold one row more. Counted in
  // closed form: this runs for every grouped launch the cost model prices.
  const std::int64_t rows = pairs / experts;
  const std::int64_t more = pairs % experts;
  return swiglu_stretch(pairs, groups > 0 ? groups : experts, hidden, inter, gpu,
                        [&](std::int64_t n_tiles, const GroupedGemmTiling& t) {
                          return more * group_tiles(rows + 1, n_tiles, t) +
                                 (experts - more) * group_tiles(rows, n_tiles, t);
                        });
}

}  // namespace moesim
