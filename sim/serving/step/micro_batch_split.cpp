#include "sim/serving/step/micro_batch_split.h"

#include <algorithm>
#include <cstdlib>
#include <limits>

#include "sim/engine/check.h"

namespace moesim {

namespace {

// SGLang's split index and token index of an extend batch (see the header).
std::int64_t sglang_split_tokens(std::span<const PrefillChunk> chunks, std::int64_t total) {
  std::int64_t left = 0;
  std::int64_t best_left = 0;
  std::int64_t min_diff = std::numeric_limits<std::int64_t>::max();
  for (std::size_t i = 1; i < chunks.size(); ++i) {
    left += chunks[i - 1].tokens;
    const std::int64_t diff = std::llabs(left - (total - left));
    if (diff > min_diff) break;
    min_diff = diff;
    best_left = left;
  }
  const double t = static_cast<double>(total);
  const auto l = static_cast<double>(best_left);
  const bool two_chunk =
      l < t * kSglangTokenDistributionThreshold || l > t * (1 - kSglangTokenDistributionThreshold);
  return two_chunk ? total / 2 : best_left;
}

// A prefill part of `x` tokens after `p` in the KV cache, into `b`.
void add_prefill_part(GroupBatch& b, double x, double p) {
  b.prefill_tokens += static_cast<std::int64_t>(x);
  b.prefill_pairs += x * p + x * (x + 1.0) / 2.0;
  b.prefill_kv_tokens += p + x;
}

void split_prefill_chunks(const GroupBatch& b, EngineKind engine, GroupBatch& a, GroupBatch& c) {
  const std::int64_t to_a = prefill_split_tokens(b.prefill_chunks, engine);
  std::int64_t start = 0;
  for (const PrefillChunk& k : b.prefill_chunks) {
    const std::int64_t x = std::clamp<std::int64_t>(to_a - start, 0, k.tokens);  // A's part
    if (x > 0) add_prefill_part(a, double(x), double(k.prefix));
    if (k.tokens > x) add_prefill_part(c, double(k.tokens - x), double(k.prefix + x));
    start += k.tokens;
  }
  MOESIM_CHECK(start == b.prefill_tokens, "a batch's prefill chunks do not add up to its prefill tokens");
}

}  // namespace

std::int64_t prefill_split_tokens(std::span<const PrefillChunk> chunks, EngineKind engine) {
  std::int64_t total = 0;
  for (const PrefillChunk& k : chunks) total += k.tokens;
  return engine == EngineKind::kSglang ? sglang_split_tokens(chunks, total) : total / 2;
}

std::pair<GroupBatch, GroupBatch> split_micro_batch(const GroupBatch& b, EngineKind engine) {
  GroupBatch a;
  GroupBatch c;
  a.decode_seqs = (b.decode_seqs + 1) / 2;
  c.decode_seqs = b.decode_seqs - a.decode_seqs;
  const double da = b.decode_seqs > 0 ? double(a.decode_seqs) / double(b.decode_seqs) : 0.0;
  a.decode_context_tokens = b.decode_context_tokens * da;
  c.decode_context_tokens = b.decode_context_tokens - a.decode_context_tokens;
  a.decode_draft_tokens = b.decode_seqs > 0 ? b.decode_draft_tokens / b.decode_seqs * a.decode_seqs : 0;
  c.decode_draft_tokens = b.decode_draft_tokens - a.decode_draft_tokens;
  a.decode_draft_pairs = b.decode_draft_pairs * da;
  c.decode_draft_pairs = b.decode_draft_pairs - a.decode_draft_pairs;
  if (!b.prefill_chunks.empty()) {
    split_prefill_chunks(b, engine, a, c);
    return {a, c};
  }
  a.prefill_tokens = (b.prefill_tokens + 1) / 2;
  c.prefill_tokens = b.prefill_tokens - a.prefill_tokens;
  const double pa = b.prefill_tokens > 0 ? double(a.prefill_tokens) / double(b.prefill_tokens) : 0.0;
  a.prefill_pairs = b.prefill_pairs * pa;
  c.prefill_pairs = b.prefill_pairs - a.prefill_pairs;
  a.prefill_kv_tokens = b.prefill_kv_tokens * pa;
  c.prefill_kv_tokens = b.prefill_kv_tokens - a.prefill_kv_tokens;
  return {a, c};
}

}  // namespace moesim
