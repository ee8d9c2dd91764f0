#include "hwmodels/precision.h"

#include <array>
#include <utility>

namespace moesim {

namespace {
constexpr std::array<std::pair<Precision, std::string_view>, 7> kNames{{
    {Precision::kFP32, "fp32"},
    {Precision::kBF16, "bf16"},
    {Precision::kFP16, "fp16"},
    {Precision::kFP8, "fp8"},
    {Precision::kINT8, "int8"},
    {Precision::kINT4, "int4"},
    {Precision::kFP4, "fp4"},
}};
}  // namespace

std::string_view to_string(Precision p) {
  for (const auto& [value, name] : kNames) {
    if (value == p) return name;
  }
  return "?";
}

std::optional<Precision> parse_precision(std::string_view s) {
  for (const auto& [value, name] : kNames) {
    if (name == s) return value;
  }
  return std::nullopt;
}

}  // namespace moesim
