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

std::string_view to_string(Precision p);
std::optional<Precision> parse_precision(std::string_view s);

}  // namespace moesim
