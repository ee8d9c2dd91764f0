// Memory accounting per GPU: weights by component at their precision (from TOTAL parameters: every expert
// is resident somewhere), activations, framework overhead, and the KV-cache pool that is left.
#pragma once

#include <cstdint>
#include <string>

#include "sim/serving/spec/scenario_spec.h"

namespace moesim {

struct WeightBytes {
  double attention = 0;
  double dense_ffn = 0;
  double shared_experts = 0;
  double router = 0;
  double embeddings = 0;
  double routed_experts = 0;
  double draft_model = 0;  // deployment.speculative's draft model (all its components), when it has one
  [[nodiscard]] double total() const {
    return attention + dense_ffn + shared_experts + router + embeddings + routed_experts + draft_model;
  }
};

struct MemoryPlan {
  WeightBytes weights_per_gpu;
  double activation_bytes = 0;
  double overhead_bytes = 0;
  double usable_bytes = 0;               // HBM x kv_cache_memory_fraction
  double kv_pool_bytes_per_gpu = 0;      // what is left for the KV cache (may be negative: does not fit)
  double kv_bytes_per_token = 0;         // whole model, all layers
  std::int64_t kv_tokens_per_group = 0;  // KV capacity of one attention group
  std::int64_t kv_blocks_per_group = 0;
  int experts_per_gpu = 0;

  [[nodiscard]] bool fits() const { return kv_pool_bytes_per_gpu > 0 && kv_blocks_per_group > 0; }
};

// Per-GPU plan for the scenario's deployment. Pure arithmetic; never throws.
MemoryPlan plan_memory(const ScenarioSpec& s);
// Same, with the routed-expert weights per GPU given (per-expert precisions, measured on the placement).
MemoryPlan plan_memory(const ScenarioSpec& s, double routed_expert_bytes_per_gpu);

// Prefix-cache pools index every KV block up front (about 64 bytes of simulator memory each, flat arrays):
// at most 2^26 blocks over a deployment's attention groups (4 GiB), so a tiny kv_block_tokens on a large
// pool is refused rather than allocated.
constexpr std::int64_t kMaxPrefixCacheBlocks = std::int64_t{1} << 26;

// Throws InputError naming what does not fit and by how much (weights over HBM, or no room for the
// longest request's KV cache), or a prefix cache of more than kMaxPrefixCacheBlocks blocks.
void check_fits(const ScenarioSpec& s, const MemoryPlan& m);

constexpr double kGiB = 1024.0 * 1024.0 * 1024.0;

}  // namespace moesim
