// Offline prefix-cache analysis of a keyed trace (Mooncake hash_ids): the ideal hit rate of an infinite
// cache and the hit rate of an LRU PrefixCache of a given size, in blocks and in tokens. Requests are
// replayed in arrival order one at a time: a request's blocks are pinned only while it is served, so the
// figures bound what a serving cache of that size can reuse (concurrency only lowers them).
#pragma once

#include <cstdint>
#include <span>
#include <vector>

#include "workloads/request_source.h"

namespace moesim {

struct PrefixHitResult {
  std::int64_t capacity_blocks = 0;  // 0 for the ideal (infinite) cache
  std::int64_t requests = 0;
  std::int64_t blocks = 0;  // prompt blocks looked up
  std::int64_t hit_blocks = 0;
  std::int64_t tokens = 0;  // prompt tokens
  std::int64_t hit_tokens = 0;
  std::int64_t distinct_blocks = 0;  // distinct block hashes in the trace (ideal only)
  [[nodiscard]] double block_hit_rate() const { return blocks > 0 ? double(hit_blocks) / double(blocks) : 0; }
  [[nodiscard]] double token_hit_rate() const { return tokens > 0 ? double(hit_tokens) / double(tokens) : 0; }
};

// Infinite cache: a prompt's leading blocks whose chained hash was seen in an earlier request hit.
PrefixHitResult ideal_prefix_hits(std::span<const RequestSpec> rows, const TraceBlockKeys& keys);
// An LRU PrefixCache of `capacity_blocks` blocks of keys.block_tokens tokens (capacity >= 1).
PrefixHitResult lru_prefix_hits(std::span<const RequestSpec> rows, const TraceBlockKeys& keys,
                                std::int32_t capacity_blocks);

}  // namespace moesim
