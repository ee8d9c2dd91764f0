// Per-expert quantisation policy: the precision of each expert copy by hotness class and by type (shared
// expert and router stay high precision), the bytes of a copy, the dequantisation overhead, and a quality
// PROXY (not a measured quality): the token-weighted sum of per-precision penalties set by the scenario.
#pragma once

#include <array>
#include <cstdint>

#include "hwmodels/precision.h"
#include "sim/serving/experts/expert_stats.h"

namespace moesim {

inline constexpr std::size_t kPrecisionCount = 7;  // entries of Precision
constexpr std::size_t precision_index(Precision p) { return static_cast<std::size_t>(p); }

enum class ExpertKind : std::uint8_t { kRouted, kShared, kRouter };

struct QuantizationSpec {
  // Seed section 5: hot BF16 (or INT8/FP8), warm INT8 (or INT4), cold INT4; shared expert BF16/INT8;
  // the router always BF16.
  Precision hot = Precision::kBF16;
  Precision warm = Precision::kINT8;
  Precision cold = Precision::kINT4;
  Precision shared_expert = Precision::kBF16;
  Precision router = Precision::kBF16;
  // Group-wise scales of integer / FP4 formats: one scale of scale_bytes per scale_group_size weights
  // (the common g128 FP16 layout of GPTQ/AWQ-style checkpoints).
  int scale_group_size = 128;
  double scale_bytes = 2.0;
  // Multiplier on an expert GEMM's time at each precision, for the dequantisation work of weight-only
  // formats. Default 1.0 everywhere: in the memory-bound decode regime fused dequant kernels hide it; the
  // scenario sets it for compute-bound regimes (for scale: shared/calibration/h200/platform.json measures a
  // plain INT8 GEMM at 122 TOPS vs BF16 658 TFLOPS, i.e. a non-fused integer path can cost ~5x).
  std::array<double, kPrecisionCount> dequant_factor = {1, 1, 1, 1, 1, 1, 1};
  // Quality proxy penalty per routed token at each precision (scenario-set; 0 = no loss). The seed
  // reports <1% quality loss for hotness-tiered INT8/INT4; it is a proxy, not a model of accuracy.
  std::array<double, kPrecisionCount> quality_penalty = {0, 0, 0, 0, 0, 0, 0};
};

// Precision of a copy: by kind first (shared expert, router), then by hotness for routed experts.
[[nodiscard]] Precision expert_precision(const QuantizationSpec& spec, ExpertKind kind, Hotness hotness);

// Bytes of one copy of `params` weights at precision p, including group-wise scales for INT8/INT4/FP4.
[[nodiscard]] std::int64_t expert_copy_bytes(const QuantizationSpec& spec, std::int64_t params, Precision p);

[[nodiscard]] inline double dequant_factor(const QuantizationSpec& spec, Precision p) {
  return spec.dequant_factor[precision_index(p)];
}

// Accumulates routed tokens per precision and gives the quality proxy:
// sum_p share_p x penalty_p, share_p = tokens served at p / all routed tokens. Labelled a proxy in reports.
class QualityProxy final {
 public:
  void add(Precision p, std::int64_t routed_tokens) { tokens_[precision_index(p)] += routed_tokens; }
  [[nodiscard]] double share(Precision p) const;
  [[nodiscard]] double value(const QuantizationSpec& spec) const;
  [[nodiscard]] std::int64_t total() const;

 private:
  std::array<std::int64_t, kPrecisionCount> tokens_{};
};

}  // namespace moesim
