#include "sim/serving/runtime/prefix_cache.h"

#include <algorithm>

#include "sim/engine/check.h"
#include "sim/engine/random.h"

namespace moesim {

BlockHash chain_block_hash(BlockHash parent, std::uint64_t key) {
  // Two rounds of splitmix64 over (parent, key): equal chains give equal hashes; a collision between two
  // different prefixes has probability about 2^-64 per pair.
  return splitmix64(splitmix64(parent ^ 0x9e3779b97f4a7c15ULL) ^ key);
}

std::uint64_t block_key_of_tokens(std::span<const std::int32_t> tokens) {
  std::uint64_t h = 0x6a09e667f3bcc908ULL ^ tokens.size();
  for (const std::int32_t t : tokens) h = splitmix64(h ^ static_cast<std::uint32_t>(t));
  return h;
}

void chain_block_hashes(std::span<const std::uint64_t> keys, std::vector<BlockHash>& out) {
  out.resize(keys.size());
  BlockHash parent = 0;
  for (std::size_t i = 0; i < keys.size(); ++i) out[i] = parent = chain_block_hash(parent, keys[i]);
}

PrefixCache::PrefixCache(std::int32_t capacity_blocks, std::int64_t block_tokens)
    : capacity_(capacity_blocks), block_tokens_(block_tokens) {
  MOESIM_CHECK(capacity_blocks >= 0, "prefix cache capacity must be >= 0 blocks");
  MOESIM_CHECK(block_tokens > 0, "prefix cache blocks must hold at least one token");
  const auto n = static_cast<std::size_t>(capacity_);
  hash_.assign(n, 0);
  ref_.assign(n, 0);
  named_.assign(n, 0);
  prev_.assign(n, kNoBlock);
  next_.assign(n, kNoBlock);
  free_.resize(n);
  // Lowest ids on top of the stack, so that blocks are handed out in id order.
  for (std::size_t i = 0; i < n; ++i) free_[i] = static_cast<BlockId>(n - 1 - i);
  free_count_ = capacity_;
  std::size_t slots = 2;
  while (slots < 2 * n) slots *= 2;
  table_.assign(slots, kNoBlock);
  mask_ = slots - 1;
}

BlockId PrefixCache::find(BlockHash hash) const {
  for (std::size_t i = splitmix64(hash) & mask_;; i = (i + 1) & mask_) {
    const BlockId b = table_[i];
    if (b == kNoBlock) return kNoBlock;
    if (hash_[static_cast<std::size_t>(b)] == hash) return b;
  }
}

void PrefixCache::table_insert(BlockHash hash, BlockId b) {
  std::size_t i = splitmix64(hash) & mask_;
  while (table_[i] != kNoBlock) i = (i + 1) & mask_;
  table_[i] = b;
}

void PrefixCache::table_erase(BlockHash hash) {
  std::size_t i = splitmix64(hash) & mask_;
  while (hash_[static_cast<std::size_t>(table_[i])] != hash) i = (i + 1) & mask_;
  // Backward-shift deletion (Knuth vol. 3, 6.4 algorithm R): move later entries of the run into the hole
  // when their home slot does not lie cyclically in (hole, entry].
  for (std::size_t j = (i + 1) & mask_; table_[j] != kNoBlock; j = (j + 1) & mask_) {
    const std::size_t home = splitmix64(hash_[static_cast<std::size_t>(table_[j])]) & mask_;
    const bool stays = i <= j ? (i < home && home <= j) : (i < home || home <= j);
    if (stays) continue;
    table_[i] = table_[j];
    i = j;
  }
  table_[i] = kNoBlock;
}

void PrefixCache::lru_push_back(BlockId b) {
  const auto u = static_cast<std::size_t>(b);
  prev_[u] = lru_tail_;
  next_[u] = kNoBlock;
  if (lru_tail_ != kNoBlock) {
    next_[static_cast<std::size_t>(lru_tail_)] = b;
  } else {
    lru_head_ = b;
  }
  lru_tail_ = b;
  ++lru_count_;
}

void PrefixCache::lru_unlink(BlockId b) {
  const auto u = static_cast<std::size_t>(b);
  if (prev_[u] != kNoBlock) {
    next_[static_cast<std::size_t>(prev_[u])] = next_[u];
  } else {
    lru_head_ = next_[u];
  }
  if (next_[u] != kNoBlock) {
    prev_[static_cast<std::size_t>(next_[u])] = prev_[u];
  } else {
    lru_tail_ = prev_[u];
  }
  prev_[u] = next_[u] = kNoBlock;
  --lru_count_;
}

void PrefixCache::drop_name(BlockId b) {
  const auto u = static_cast<std::size_t>(b);
  table_erase(hash_[u]);
  named_[u] = 0;
  hash_[u] = 0;
  --cached_count_;
}

void PrefixCache::find_prefix(std::span<const BlockHash> hashes, std::vector<BlockId>& blocks_out) const {
  blocks_out.clear();
  for (const BlockHash h : hashes) {
    const BlockId b = find(h);
    if (b == kNoBlock) break;
    blocks_out.push_back(b);
  }
}

PrefixMatch PrefixCache::match(std::span<const BlockHash> hashes, std::int64_t prompt_tokens,
                               std::vector<BlockId>& blocks_out) {
  find_prefix(hashes, blocks_out);
  PrefixMatch m;
  m.blocks = static_cast<int>(blocks_out.size());
  m.tokens = std::min(prompt_tokens, static_cast<std::int64_t>(m.blocks) * block_tokens_);
  ++counters_.lookups;
  counters_.lookup_blocks += static_cast<std::int64_t>(hashes.size());
  counters_.lookup_tokens += prompt_tokens;
  counters_.hit_blocks += m.blocks;
  counters_.hit_tokens += m.tokens;
  return m;
}

int PrefixCache::cached_prefix_blocks(std::span<const BlockHash> hashes) const {
  int n = 0;
  for (const BlockHash h : hashes) {
    if (find(h) == kNoBlock) break;
    ++n;
  }
  return n;
}

void PrefixCache::acquire(std::span<const BlockId> blocks) {
  for (const BlockId b : blocks) {
    const auto u = static_cast<std::size_t>(b);
    MOESIM_CHECK(b >= 0 && b < capacity_, "acquire of a block outside the pool");
    MOESIM_CHECK(named_[u] != 0 || ref_[u] > 0, "acquire of a free block");
    if (ref_[u]++ == 0) lru_unlink(b);
  }
}

BlockId PrefixCache::allocate() {
  if (free_count_ == 0 && evict(1) == 0) return kNoBlock;
  const BlockId b = free_[static_cast<std::size_t>(--free_count_)];
  ref_[static_cast<std::size_t>(b)] = 1;
  return b;
}

bool PrefixCache::insert(BlockId block, BlockHash hash) {
  const auto u = static_cast<std::size_t>(block);
  MOESIM_CHECK(block >= 0 && block < capacity_ && ref_[u] > 0, "insert of a block that is not in use");
  if (named_[u] != 0) return hash_[u] == hash;
  if (find(hash) != kNoBlock) return false;
  hash_[u] = hash;
  named_[u] = 1;
  table_insert(hash, block);
  ++cached_count_;
  return true;
}

void PrefixCache::release(std::span<const BlockId> blocks) {
  for (auto it = blocks.rbegin(); it != blocks.rend(); ++it) {
    const BlockId b = *it;
    const auto u = static_cast<std::size_t>(b);
    MOESIM_CHECK(b >= 0 && b < capacity_ && ref_[u] > 0, "release of a block that is not in use");
    if (--ref_[u] > 0) continue;
    if (named_[u] != 0) {
      lru_push_back(b);
    } else {
      free_[static_cast<std::size_t>(free_count_++)] = b;
    }
  }
}

std::int32_t PrefixCache::evict(std::int32_t n) {
  std::int32_t freed = 0;
  while (freed < n && lru_head_ != kNoBlock) {
    const BlockId b = lru_head_;
    lru_unlink(b);
    drop_name(b);
    free_[static_cast<std::size_t>(free_count_++)] = b;
    ++freed;
  }
  counters_.evicted_blocks += freed;
  return freed;
}

}  // namespace moesim
