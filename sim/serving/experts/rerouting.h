// Router post-processing: when a GPU's routed load exceeds threshold x mean, part of its tokens go to
// their next-choice expert on a less loaded GPU. Count-level approximation (tokens are not simulated one by
// one): excess counts move from the hottest GPU's experts (in proportion to their counts) to experts on the
// least loaded GPU (in proportion to their routing probability). Each moved count is one re-routed
// (token, expert) pair, a quality cost the report counts.
#pragma once

#include <cstdint>
#include <span>
#include <vector>

#include "sim/serving/experts/placement.h"

namespace moesim {

struct RerouteResult {
  std::int64_t rerouted = 0;      // (token, expert) pairs moved to another expert
  bool within_threshold = false;  // every GPU ends at or below threshold x mean
};

// Owns per-GPU buffers; apply() does not allocate after construction.
class Rerouter final {
 public:
  Rerouter(int gpus, int slots_per_gpu);

  // counts: per-expert routed pairs of one layer (modified in place; the total is conserved and no count
  // exceeds `tokens`). GPU load = sum over its slots of count / replicas. Only experts with a single copy
  // donate or receive (moving a replicated expert's count changes several GPUs at once). threshold >= 1.
  // Stops when every GPU is within threshold x mean, or when no single-copy expert can give or take.
  // O(iterations x (experts + slots)), iterations <= 4 x GPUs.
  RerouteResult apply(const Placement& placement, int layer, std::span<const double> probs,
                      std::int64_t tokens, double threshold, std::span<std::int32_t> counts);

 private:
  template <bool kAllSingle>
  RerouteResult apply_with(const Placement& placement, int layer, std::span<const double> probs,
                           std::int64_t tokens, double threshold, std::span<std::int32_t> counts);
  std::vector<double> load_;
  std::vector<std::int64_t> amount_;
};

}  // namespace moesim
