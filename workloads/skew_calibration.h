// Calibrating routing skew to a measured imbalance: the Zipf exponent whose expected per-expert (or
// per-rank) imbalance ratio (max - mean) / mean of routed counts, at a given number of tokens per
// iteration, matches a target such as the TensorRT-LLM DeepSeek-R1 EP32 measurement
// (shared/reference/COMPONENT_FIGURES.md section 4).
#pragma once

#include <cstdint>

namespace moesim {

struct SkewSetting {
  int experts = 256;
  int top_k = 8;
  std::int64_t tokens = 4096;  // tokens per iteration
  int ranks = 0;               // 0: imbalance by expert; else by rank, experts / ranks contiguous slots each
  int iterations = 100;        // Monte-Carlo iterations (each a fresh routing draw and, by rank, a fresh
                               // random expert-to-rank permutation, as different layers have different hot
                               // experts)
  std::uint64_t seed = 1;      // fixed: the same draws for every exponent (common random numbers), so the
                               // estimate is smooth in the exponent and bisection is stable
};

// Mean over iterations of (max - mean) / mean of counts (per expert, or per rank), for Zipf(s) capped
// for top-k (cap_for_top_k) and sampled with sample_routing_counts. O(iterations x experts).
[[nodiscard]] double expected_imbalance_ratio(double zipf_exponent, const SkewSetting& setting);

// Zipf exponent in [0, 4] whose expected imbalance ratio equals `target` (bisection, 40 steps). Returns 0
// when even uniform routing exceeds the target, 4 when Zipf(4) stays below it.
[[nodiscard]] double calibrate_zipf_exponent(double target, const SkewSetting& setting);

}  // namespace moesim
