// KV-cache transfer sizing for prefill/decode disaggregation: the bytes a request's KV cache occupies
// (ModelSpec::kv_bytes_per_token: MLA keeps kv_lora_rank + qk_rope_head_dim per layer, GQA 2 x kv_heads x
// head_dim) and how they spread over the decode instance's attention tensor-parallel GPUs.
#pragma once

#include <cstdint>

#include "hwmodels/precision.h"
#include "sim/serving/model_spec.h"

namespace moesim {

struct KvTransferSize {
  double bytes = 0;               // the request's KV cache, all layers, once
  double bytes_per_dest_gpu = 0;  // what each GPU of the decode attention group receives
  double wire_bytes = 0;          // bytes_per_dest_gpu x dest TP: what crosses the fabric
};

// `tokens` of KV at `kv` precision moving to an attention group of `dest_tp` GPUs. GQA shards KV heads over
// the group (ceil(kv_heads / tp) heads per GPU, a head never split; heads replicate when tp > kv_heads);
// MLA's latent is replicated on every TP rank (DeepSeek-V2, section 2.1.2: one compressed KV per token).
[[nodiscard]] KvTransferSize kv_transfer_size(const ModelSpec& m, Precision kv, std::int64_t tokens,
                                              int dest_tp);

}  // namespace moesim
