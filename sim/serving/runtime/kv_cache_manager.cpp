#include "sim/serving/runtime/kv_cache_manager.h"

#include <climits>

#include "sim/engine/check.h"

namespace moesim {

KvCacheManager::KvCacheManager(std::int64_t blocks, std::int64_t block_tokens, bool prefix_caching)
    : total_(blocks), free_(blocks), block_tokens_(block_tokens) {
  if (prefix_caching) {
    MOESIM_CHECK(blocks <= INT_MAX, "prefix cache pools hold at most 2^31 - 1 blocks");
    cache_.emplace(static_cast<std::int32_t>(blocks), block_tokens);
  }
}

void KvCacheManager::grow(Request& r, std::int64_t computed, std::int64_t reserve) {
  const std::int64_t need = blocks_needed(r, std::max(computed, reserve));
  MOESIM_CHECK(need <= free_blocks(), "KV blocks allocated beyond the pool");
  r.blocks += need;
  if (!cache_) {
    free_ -= need;
    return;
  }
  for (std::int64_t i = 0; i < need; ++i) r.block_ids.push_back(cache_->allocate());
  // Full prompt blocks are named as soon as their tokens are scheduled (vLLM V1 caches them in
  // allocate_slots), so a request admitted in the same step can already share them.
  const auto full =
      std::min<std::int64_t>(static_cast<std::int64_t>(r.prompt_hashes.size()), computed / block_tokens_);
  for (; r.named_blocks < full; ++r.named_blocks) {
    const auto i = static_cast<std::size_t>(r.named_blocks);
    (void)cache_->insert(r.block_ids[i], r.prompt_hashes[i]);
  }
}

void KvCacheManager::release(Request& r) {
  if (cache_) {
    cache_->release(r.block_ids);
    r.block_ids.clear();
    r.named_blocks = 0;
  } else {
    free_ += r.blocks;
  }
  r.blocks = 0;
}

std::int64_t KvCacheManager::lookup_prefix(const Request& r) {
  hit_.clear();
  hit_evictable_ = 0;
  // A request that arrives with its KV (a PD hand-off, a migration) has its computed tokens already: a hit
  // would count them twice (and leave it more computed than its target, never to finish).
  if (!cache_ || r.prompt_hashes.empty() || r.computed > 0) return 0;
  const auto usable = std::min<std::int64_t>(static_cast<std::int64_t>(r.prompt_hashes.size()),
                                             (r.target - 1) / block_tokens_);
  cache_->find_prefix(std::span<const BlockHash>(r.prompt_hashes.data(), static_cast<std::size_t>(usable)),
                      hit_);
  for (const BlockId b : hit_) hit_evictable_ += cache_->ref_count(b) == 0 ? 1 : 0;
  return static_cast<std::int64_t>(hit_.size()) * block_tokens_;
}

bool KvCacheManager::can_admit(const Request& r, std::int64_t computed, std::int64_t keep_free) const {
  if (!cache_) return blocks_needed(r, computed) + keep_free <= free_blocks();
  const std::int64_t need = std::max<std::int64_t>(
      0, (computed + block_tokens_ - 1) / block_tokens_ - static_cast<std::int64_t>(hit_.size()));
  return need + keep_free <= free_blocks() - hit_evictable_;
}

void KvCacheManager::admit(Request& r, std::int64_t computed, std::int64_t reserve) {
  if (cache_) {
    MOESIM_CHECK(r.blocks == 0 && r.block_ids.empty(), "admission of a request that holds KV blocks");
    cache_->acquire(hit_);
    r.block_ids.assign(hit_.begin(), hit_.end());
    r.blocks = static_cast<std::int64_t>(hit_.size());
    r.named_blocks = r.blocks;
    const std::int64_t hit_tokens = r.blocks * block_tokens_;
    r.computed += hit_tokens;
    stats_.saved_tokens += hit_tokens;
    if (r.preemptions == 0) {
      ++stats_.lookups;
      stats_.lookup_blocks += (r.prompt + block_tokens_ - 1) / block_tokens_;
      stats_.lookup_tokens += r.prompt;
      stats_.hit_blocks += r.blocks;
      stats_.hit_tokens += hit_tokens;
    }
    hit_.clear();
    hit_evictable_ = 0;
  }
  grow(r, computed, reserve);
}

PrefixCacheStats KvCacheManager::prefix_stats() const {
  PrefixCacheStats s = stats_;
  if (cache_) s.evicted_blocks = cache_->counters().evicted_blocks;
  return s;
}

}  // namespace moesim
