// How an engine splits one attention group's batch into the two micro-batches of two-batch overlap, and
// what each micro-batch then attends to (VALIDATION_CLUSTER.md "Micro-batch split (2026-12-03)").
#pragma once

#include <cstdint>
#include <span>
#include <utility>

#include "hwmodels/engine_profile.h"
#include "sim/serving/step/group_batch.h"

namespace moesim {

// SGLang's tbo_token_distribution_threshold (server_args.py default 0.48): a split at a sequence boundary
// that leaves micro-batch A under 48% or over 52% of the tokens gives way to a split at half the tokens.
inline constexpr double kSglangTokenDistributionThreshold = 0.48;

// The prefill tokens micro-batch A takes, under `engine`'s rule, of the chunks in the batch's order:
// - SGLang (python/sglang/srt/batch_overlap/two_batch_overlap.py, sgl-project/sglang 2b4ed1b3,
//   compute_split_seq_index / compute_split_token_index): at the sequence boundary that best balances the
//   tokens (_split_array_by_balanced_sum, the first local minimum of |left - right|), unless that leaves A
//   outside [0.48, 0.52] of the tokens (_is_two_chunk_split_enabled, always so for one sequence); then at
//   half the tokens (sum // 2), splitting the sequence there ("two-chunk" split).
// - vLLM (vllm/v1/worker/ubatch_utils.py, vllm-project/vllm 5ccf3b8c, maybe_create_ubatch_slices): at half
//   the tokens (num_tokens // 2), inside a request where it falls.
// - Other engines: vLLM's rule (TensorRT-LLM's wide-EP path has no micro-batch split of its own that this
//   model knows of; the PyTorch profiles run no overlap).
[[nodiscard]] std::int64_t prefill_split_tokens(std::span<const PrefillChunk> chunks, EngineKind engine);

// One batch as micro-batches A and B. Decode sequences by halves (A takes the odd one), their contexts in
// proportion. Prefill, where the batch gives its chunks: A takes the first prefill_split_tokens() tokens in
// order and B the rest, each part of a chunk costed causally: a part of x tokens after p in the KV cache
// attends to x p + x (x + 1) / 2 (query, key) pairs and reads p + x tokens of KV, so B's part of a split
// chunk attends over all of A's part too. Without chunks the prefill tokens are halved (A the larger) with
// their pairs and KV in proportion.
[[nodiscard]] std::pair<GroupBatch, GroupBatch> split_micro_batch(const GroupBatch& b, EngineKind engine);

}  // namespace moesim
