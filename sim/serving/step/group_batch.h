// One attention group's work in a step, as the batch policy forms it and the step planner costs it.
#pragma once

#include <cstdint>
#include <span>

namespace moesim {

// One request's prefill chunk in a step: `tokens` prompt tokens after the `prefix` tokens already in its KV
// cache (its (query, key) pairs: tokens x prefix + tokens (tokens + 1) / 2).
struct PrefillChunk {
  std::int64_t tokens = 0;
  std::int64_t prefix = 0;
};

// One attention group's work in a step.
struct GroupBatch {
  std::int64_t decode_seqs = 0;
  // Of decode_seqs: dummy generation requests that pad the batch to a captured CUDA graph's size
  // (deployment.cuda_graph_batch_sizes); costed as any sequence, they produce no token.
  std::int64_t padding_seqs = 0;
  double decode_context_tokens = 0;  // sum over decode sequences of the tokens they attend to
  std::int64_t prefill_tokens = 0;
  double prefill_pairs = 0;       // sum over chunks of c*p + c(c+1)/2 (query, key) pairs
  double prefill_kv_tokens = 0;   // sum over chunks of p + c (KV read and written)
  std::int64_t sampled_seqs = 0;  // LM head rows (sequences that produce a token; k + 1 when verifying)
  // Speculative decoding: the draft positions each decode sequence verifies beyond its own token (k per
  // sequence) and their attention pairs beyond one per context token (sum_{i=1..k} (context + i)).
  std::int64_t decode_draft_tokens = 0;
  double decode_draft_pairs = 0;
  // Sum over the batch's requests of t (t - 1), t the tokens a request routes this step (its prefill chunk,
  // or 1 + k decode tokens): the ordered pairs of tokens that share a request, which carry the per-request
  // expert affinity (workloads/request_affinity.h).
  double request_token_pairs = 0;
  // The prefill chunks above one by one, in the batch's order (two-batch overlap splits the batch by them,
  // micro_batch_split.h); empty where the caller gives only the sums (offline planners, pipeline micro-
  // batches): the split then halves the prefill tokens and their pairs. Not owned: the caller keeps them
  // unchanged until the plan's begin_plan returns.
  std::span<const PrefillChunk> prefill_chunks{};
  [[nodiscard]] std::int64_t tokens() const { return decode_seqs + decode_draft_tokens + prefill_tokens; }
};

}  // namespace moesim
