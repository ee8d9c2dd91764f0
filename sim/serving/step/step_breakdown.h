// The parts of one serving step, defined once: every output (summary, report.json, steps.csv, the
// Chrome trace) loops over this enumeration, and the parts of a step add up to its duration.
#pragma once

#include <array>
#include <cstddef>
#include <string_view>

#include "sim/engine/time.h"

namespace moesim {

// In the order a step runs them (the trace lays them out in this order). Every part is critical-path
// time in seconds (a Duration): communication hidden behind the other micro-batch under two-batch overlap
// is not a part (StepPlan::comm_hidden), only what stays exposed is.
enum class StepPart : std::size_t {
  kRebalance,       // pause before the step for a placement rebalance
  kDenseFfn,        // dense layers' FFNs (their attention is in kAttention)
  kAttention,       // attention of every layer; in MoE layers also shared experts, gate, TP all-reduces
  kLayerKernels,    // every layer's small kernels: norms, residual adds, KV write, top-k, sort, permute
  kDispatch,        // All-to-All dispatch, exposed
  kExperts,         // routed expert FFNs (slowest GPU)
  kExpertStall,     // waiting for expert loads beyond the FFN compute (tiers)
  kCombine,         // All-to-All combine (and the expert-TP all-reduce of partial outputs), exposed
  kLmHead,          // LM head of the sampled sequences
  kPipelineSend,    // activations between pipeline stages
  kPipelineBubble,  // pipeline stages idle during fill and drain
  kHost,            // the engine's host work per iteration beyond what the GPU step hides (exposed_host_s)
  kCount
};
inline constexpr std::size_t kStepParts = static_cast<std::size_t>(StepPart::kCount);

struct StepPartInfo {
  std::string_view key;    // snake_case: report.json, CSV columns (`<key>_s`)
  std::string_view label;  // for people: summary, trace
};

inline constexpr std::array<StepPartInfo, kStepParts> kStepPartInfo = {{
    {"rebalance", "rebalance"},
    {"dense_ffn", "dense FFN"},
    {"attention", "attention"},
    {"layer_kernels", "small kernels"},
    {"dispatch", "dispatch"},
    {"experts", "experts"},
    {"expert_stall", "expert loads"},
    {"combine", "combine"},
    {"lm_head", "LM head"},
    {"pipeline_send", "pipeline send"},
    {"pipeline_bubble", "pipeline bubble"},
    {"host", "host, exposed"},
}};

[[nodiscard]] constexpr const StepPartInfo& info(StepPart p) {
  return kStepPartInfo[static_cast<std::size_t>(p)];
}

// Durations by part.
struct StepParts {
  std::array<Duration, kStepParts> d{};
  [[nodiscard]] Duration& operator[](StepPart p) { return d[static_cast<std::size_t>(p)]; }
  [[nodiscard]] Duration operator[](StepPart p) const { return d[static_cast<std::size_t>(p)]; }
  [[nodiscard]] Duration sum() const {
    Duration s = Duration::zero();
    for (const Duration x : d) s += x;
    return s;
  }
};

// Seconds by part, for accumulating over steps.
struct StepSeconds {
  std::array<double, kStepParts> s{};
  void add(const StepParts& p) {
    for (std::size_t i = 0; i < kStepParts; ++i) s[i] += p.d[i].seconds();
  }
  [[nodiscard]] double operator[](StepPart p) const { return s[static_cast<std::size_t>(p)]; }
};

}  // namespace moesim
