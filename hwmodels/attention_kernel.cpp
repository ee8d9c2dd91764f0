#include "hwmodels/attention_kernel.h"

#include <array>
#include <utility>

namespace moesim {

namespace {

constexpr std::array<std::pair<DecodeAttentionKernel, std::string_view>, 2> kNames{{
    {DecodeAttentionKernel::kFitted, "fitted"},
    {DecodeAttentionKernel::kTrtllmGen, "trtllm_gen"},
}};

}  // namespace

std::optional<DecodeAttentionKernel> parse_decode_attention_kernel(std::string_view s) {
  for (const auto& [k, n] : kNames) {
    if (n == s) return k;
  }
  return std::nullopt;
}

std::string_view to_string(DecodeAttentionKernel k) {
  for (const auto& [kk, n] : kNames) {
    if (kk == k) return n;
  }
  return "?";
}

}  // namespace moesim
