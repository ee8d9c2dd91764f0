#include "sim/serving/offline/prefix_hit_analysis.h"

#include <algorithm>
#include <unordered_set>

#include "sim/engine/check.h"
#include "sim/serving/runtime/prefix_cache.h"

namespace moesim {

namespace {

std::span<const std::uint64_t> keys_of(const RequestSpec& r, const TraceBlockKeys& keys) {
  return std::span<const std::uint64_t>(keys.keys).subspan(r.prefix_ref, r.prefix_blocks);
}

// Tokens of the first `n` blocks of a prompt of `prompt` tokens (the last block may be partial).
std::int64_t tokens_of_blocks(std::int64_t n, std::int64_t prompt, std::int64_t block_tokens) {
  return std::min(prompt, n * block_tokens);
}

}  // namespace

PrefixHitResult ideal_prefix_hits(std::span<const RequestSpec> rows, const TraceBlockKeys& keys) {
  MOESIM_CHECK(keys.block_tokens > 0, "prefix-hit analysis needs keyed blocks");
  PrefixHitResult out;
  std::unordered_set<BlockHash> seen;
  std::vector<BlockHash> h;
  for (const RequestSpec& r : rows) {
    chain_block_hashes(keys_of(r, keys), h);
    std::int64_t hit = 0;
    while (hit < static_cast<std::int64_t>(h.size()) && seen.count(h[static_cast<std::size_t>(hit)]) != 0)
      ++hit;
    seen.insert(h.begin(), h.end());
    ++out.requests;
    out.blocks += static_cast<std::int64_t>(h.size());
    out.hit_blocks += hit;
    out.tokens += r.prompt_tokens;
    out.hit_tokens += tokens_of_blocks(hit, r.prompt_tokens, keys.block_tokens);
  }
  out.distinct_blocks = static_cast<std::int64_t>(seen.size());
  return out;
}

PrefixHitResult lru_prefix_hits(std::span<const RequestSpec> rows, const TraceBlockKeys& keys,
                                std::int32_t capacity_blocks) {
  MOESIM_CHECK(keys.block_tokens > 0, "prefix-hit analysis needs keyed blocks");
  MOESIM_CHECK(capacity_blocks >= 1, "an LRU prefix cache needs at least one block");
  PrefixCache cache(capacity_blocks, keys.block_tokens);
  std::vector<BlockHash> h;
  std::vector<BlockId> blocks;
  for (const RequestSpec& r : rows) {
    chain_block_hashes(keys_of(r, keys), h);
    (void)cache.match(h, r.prompt_tokens, blocks);
    cache.acquire(blocks);
    // The missed blocks are computed and cached as far as the pool allows (a prompt longer than the
    // pool keeps only its head).
    for (std::size_t i = blocks.size(); i < h.size(); ++i) {
      const BlockId b = cache.allocate();
      if (b == kNoBlock) break;
      cache.insert(b, h[i]);
      blocks.push_back(b);
    }
    cache.release(blocks);
  }
  const PrefixCacheCounters& k = cache.counters();
  PrefixHitResult out;
  out.capacity_blocks = capacity_blocks;
  out.requests = k.lookups;
  out.blocks = k.lookup_blocks;
  out.hit_blocks = k.hit_blocks;
  out.tokens = k.lookup_tokens;
  out.hit_tokens = k.hit_tokens;
  return out;
}

}  // namespace moesim
