// The KV-cache manager of one attention group: a pool of fixed-size blocks (vLLM's PagedAttention
// blocks), allocation as requests compute tokens, release when they finish or are preempted. Which request
// to preempt is the batch policy's decision. Without prefix caching the manager only counts blocks; with it
// the pool is a PrefixCache: a request's cached leading prompt blocks are pinned on admission (their prefill
// is skipped), its full prompt blocks are named once scheduled, and released blocks stay cached until LRU
// eviction needs them (vLLM V1 kv_cache_manager.py: get_computed_blocks, allocate_slots, free).
#pragma once

#include <algorithm>
#include <cstdint>
#include <optional>
#include <vector>

#include "sim/serving/runtime/prefix_cache.h"
#include "sim/serving/runtime/request.h"

namespace moesim {

// Prefix-cache figures of one pool, summed over the run. Lookups and hits count first admissions only (a
// preempted request finds its own blocks again when readmitted), so the hit rate compares with a trace's
// ideal; the prefill saved counts every admission.
struct PrefixCacheStats {
  std::int64_t lookups = 0;        // first admissions, each looking its prompt up
  std::int64_t lookup_blocks = 0;  // prompt blocks asked for (the last may be partial)
  std::int64_t lookup_tokens = 0;  // prompt tokens asked for
  std::int64_t hit_blocks = 0;     // leading blocks found cached
  std::int64_t hit_tokens = 0;     // tokens of those blocks
  std::int64_t saved_tokens = 0;   // prefill tokens skipped, readmissions included
  std::int64_t evicted_blocks = 0;
  PrefixCacheStats& operator+=(const PrefixCacheStats& o) {
    lookups += o.lookups;
    lookup_blocks += o.lookup_blocks;
    lookup_tokens += o.lookup_tokens;
    hit_blocks += o.hit_blocks;
    hit_tokens += o.hit_tokens;
    saved_tokens += o.saved_tokens;
    evicted_blocks += o.evicted_blocks;
    return *this;
  }
};

class KvCacheManager {
 public:
  // `prefix_caching`: keep computed prompt blocks for reuse (requests then carry prompt_hashes).
  KvCacheManager(std::int64_t blocks, std::int64_t block_tokens, bool prefix_caching = false);

  // Blocks `r` must add to hold `computed` tokens (0 when it already holds enough).
  [[nodiscard]] std::int64_t blocks_needed(const Request& r, std::int64_t computed) const {
    return std::max<std::int64_t>(0, (computed + block_tokens_ - 1) / block_tokens_ - r.blocks);
  }
  [[nodiscard]] bool can_hold(const Request& r, std::int64_t computed) const {
    return blocks_needed(r, computed) <= free_blocks();
  }
  // Grows `r` to `computed` tokens. Precondition: can_hold(r, computed).
  void grow(Request& r, std::int64_t computed) { grow(r, computed, computed); }
  // Grows `r` to hold `reserve` >= `computed` tokens, of which `computed` are scheduled (their full prompt
  // blocks are named in the prefix cache; the rest stay anonymous until computed). Precondition:
  // can_hold(r, reserve).
  void grow(Request& r, std::int64_t computed, std::int64_t reserve);
  // Returns every block of `r` to the pool (cached prompt blocks stay cached, unpinned).
  void release(Request& r);

  // Admission of a waiting request (r.blocks == 0), in three calls: lookup_prefix gives the prompt tokens
  // found cached (0 without prefix caching; at most target - 1, a whole number of blocks: the last token
  // is always computed, as in vLLM); can_admit says whether the blocks to reach `computed` tokens fit once
  // the hit blocks are pinned, leaving `keep_free` blocks free (an admission watermark); admit pins them,
  // counts the lookup, sets r.computed past the hit and grows `r` to `computed`, holding blocks for
  // `reserve` tokens when that is more (an engine that allocates a whole prompt at admission). `computed`
  // and `reserve` count the hit tokens too.
  [[nodiscard]] std::int64_t lookup_prefix(const Request& r);
  [[nodiscard]] bool can_admit(const Request& r, std::int64_t computed, std::int64_t keep_free = 0) const;
  void admit(Request& r, std::int64_t computed, std::int64_t reserve = 0);

  // Leading prompt blocks of `hashes` cached here (a router's probe; counts nothing).
  [[nodiscard]] int cached_prefix_blocks(const std::vector<BlockHash>& hashes) const {
    return cache_ ? cache_->cached_prefix_blocks(hashes) : 0;
  }
  [[nodiscard]] bool prefix_caching() const { return cache_.has_value(); }
  [[nodiscard]] std::int64_t cached_blocks() const { return cache_ ? cache_->cached_blocks() : 0; }
  [[nodiscard]] PrefixCacheStats prefix_stats() const;

  // Blocks a request can get: free, plus cached blocks nobody holds (evicted on demand).
  [[nodiscard]] std::int64_t free_blocks() const { return cache_ ? cache_->available_blocks() : free_; }
  [[nodiscard]] std::int64_t total_blocks() const { return total_; }
  [[nodiscard]] std::int64_t used_blocks() const { return total_ - free_blocks(); }
  [[nodiscard]] std::int64_t peak_used_blocks() const { return peak_used_; }
  [[nodiscard]] std::int64_t block_tokens() const { return block_tokens_; }
  void note_peak() { peak_used_ = std::max(peak_used_, used_blocks()); }

 private:
  std::int64_t total_;
  std::int64_t free_;
  std::int64_t block_tokens_;
  std::int64_t peak_used_ = 0;
  std::optional<PrefixCache> cache_;
  std::vector<BlockId> hit_;        // the blocks of the last lookup_prefix
  std::int64_t hit_evictable_ = 0;  // of those, unpinned (pinning takes them out of free_blocks())
  PrefixCacheStats stats_;
};

}  // namespace moesim
