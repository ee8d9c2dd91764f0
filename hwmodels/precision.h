// Numeric formats of weights, KV cache and activations, with their storage size.
#pragma once

#include <cstdint>
#include <optional>
#include <string_view>

namespace moesim {

enum class Precision : std::uint8_t { kFP32, kBF16, kFP16, kFP8, kINT8, kINT4, kFP4 };

// Bytes per element: BF16/FP16 2, FP8/INT8 1, INT4/FP4 0.5 (the seed's capacity-planning table).
constexpr double bytes_per_element(Precision p) {
  switch (p) {
    case Precision::kFP32:
      return 4.0;
    case Precision::kBF16:
    case Precision::kFP16:
      return 2.0;
    case Precision::kFP8:
    case Precision::kINT8:
      return 1.0;
    case Precision::kINT4:
    case Precision::kFP4:
      return 0.5;
  }
  return 2.0;
}

// Bytes per element of an activation sent in `p` (All-to-All dispatch), block scales included: 8-bit
// formats carry one byte of scale per 32 elements (DeepEP's FP8 dispatch, one FP32 scale per 128 channels;
// MXFP8, one E8M0 per 32: 7,392 B per 7,168-channel token either way), NVFP4 one FP8 scale per 16
// (4,032 B per token); TensorRT-LLM blog18 and DeepEP's tests (shared/reference/COMPONENT_FIGURES.md 1.1,
// 1.6). Unscaled formats as bytes_per_element.
constexpr double activation_bytes_per_element(Precision p) {
  switch (p) {
    case Precision::kFP8:
    case Precision::kINT8:
      return 1.0 + 1.0 / 32.0;
    case Precision::kFP4:
    case Precision::kINT4:
      return 0.5 + 1.0 / 16.0;
    default:
      return bytes_per_element(p);
  }
}

std::string_view to_string(Precision p);
std::optional<Precision> parse_precision(std::string_view s);

}  // namespace moesim
