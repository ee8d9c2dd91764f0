// One attention group's work in a step, as the batch policy forms it and the step planner costs it.
#pragma once

#include <cstdint>

namespace moesim {

// One attention group's work in a step.
struct GroupBatch {
  std::int64_t decode_seqs = 0;
  double decode_context_tokens = 0;  // sum over decode sequences of the tokens they attend to
  std::int64_t prefill_tokens = 0;
  double prefill_pairs = 0;       // sum over chunks of c*p + c(c+1)/2 (query, key) pairs
  double prefill_kv_tokens = 0;   // sum over chunks of p + c (KV read and written)
  std::int64_t sampled_seqs = 0;  // sequences that produce a token (LM head rows)
  [[nodiscard]] std::int64_t tokens() const { return decode_seqs + prefill_tokens; }
};

}  // namespace moesim
