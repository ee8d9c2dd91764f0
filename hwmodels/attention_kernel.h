// The decode-attention kernel an engine launches. The profile's decode fit is FlashMLA on H200 (the measured
// profile) and, on Blackwell, that fit solved to take sgl-kernel's CUTLASS MLA run
// (docs/validation/blackwell_sources.md B8). TensorRT-LLM's trtllm-gen MLA generation kernels (run by
// TensorRT-LLM on SM100 and by SGLang's `trtllm_mla` backend through FlashInfer) are costed from their own
// measured rate where the catalog has one (`measured.attention_decode_trtllm_gen_eff_fp8`, B11); elsewhere,
// and on Hopper, where they do not run, by the fit.
#pragma once

#include <cstdint>
#include <optional>
#include <string_view>

namespace moesim {

enum class DecodeAttentionKernel : std::uint8_t {
  kFitted,     // the profile's decode fit
  kTrtllmGen,  // TensorRT-LLM's trtllm-gen MLA generation kernel (fmhaSm100f...KeepsAbForGen)
};

[[nodiscard]] std::optional<DecodeAttentionKernel> parse_decode_attention_kernel(std::string_view s);
[[nodiscard]] std::string_view to_string(DecodeAttentionKernel k);

}  // namespace moesim
