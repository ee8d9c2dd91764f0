#include "sim/serving/step/cuda_graph_step.h"

#include <algorithm>

namespace moesim {

bool runs_eagerly(std::span<const GroupBatch> batches, const EngineProfile& e,
                  const std::vector<int>& sizes) {
  if (!e.eager_mixed_steps) return false;
  for (const GroupBatch& b : batches) {
    if (b.prefill_tokens > 0) return true;
  }
  if (sizes.empty() || batches.empty()) return false;
  const std::int64_t first = batches.front().decode_seqs;
  for (const GroupBatch& b : batches) {
    if (b.decode_seqs != first) return true;
    if (!std::binary_search(sizes.begin(), sizes.end(), static_cast<int>(b.decode_seqs))) return true;
  }
  return false;
}

}  // namespace moesim
