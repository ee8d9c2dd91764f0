// Block-hash prefix cache of one KV-cache pool, as vLLM's automatic prefix caching and SGLang's
// RadixAttention keep it: a KV block is named by a chained hash of (parent block's hash, the block's
// content key), blocks used by running requests are reference counted, and unreferenced cached blocks stay
// in the pool until the pool needs them, evicted least recently used first. A pure data structure for the
// KV-cache manager: fixed capacity in blocks, flat arrays and an open-addressing table, O(1) per block.
#pragma once

#include <cstdint>
#include <span>
#include <vector>

namespace moesim {

using BlockHash = std::uint64_t;
using BlockId = std::int32_t;  // a block of the pool, in [0, capacity)
constexpr BlockId kNoBlock = -1;

// The hash of a block after `parent` (0 for the first block) whose content is identified by `key` (a trace's
// block id, a synthetic content id, or block_key_of_tokens()). Equal chains of keys give equal hashes, so a
// block hash names the whole prefix up to and including that block.
[[nodiscard]] BlockHash chain_block_hash(BlockHash parent, std::uint64_t key);
// The content key of one block's token ids.
[[nodiscard]] std::uint64_t block_key_of_tokens(std::span<const std::int32_t> tokens);
// Chains `keys` into block hashes: out[i] = chain_block_hash(out[i-1], keys[i]), out[-1] = 0. out is resized.
void chain_block_hashes(std::span<const std::uint64_t> keys, std::vector<BlockHash>& out);

struct PrefixCacheCounters {
  std::int64_t lookups = 0;        // match() calls
  std::int64_t lookup_blocks = 0;  // blocks asked for
  std::int64_t lookup_tokens = 0;  // prompt tokens asked for
  std::int64_t hit_blocks = 0;     // leading blocks found cached
  std::int64_t hit_tokens = 0;     // tokens of those blocks
  std::int64_t evicted_blocks = 0;
  [[nodiscard]] double block_hit_rate() const {
    return lookup_blocks > 0 ? double(hit_blocks) / double(lookup_blocks) : 0.0;
  }
  [[nodiscard]] double token_hit_rate() const {
    return lookup_tokens > 0 ? double(hit_tokens) / double(lookup_tokens) : 0.0;
  }
};

struct PrefixMatch {
  int blocks = 0;           // leading blocks cached (their ids were written to the caller's buffer)
  std::int64_t tokens = 0;  // prompt tokens they hold
};

class PrefixCache final {
 public:
  // A pool of `capacity_blocks` blocks of `block_tokens` tokens each. Allocates once, here.
  PrefixCache(std::int32_t capacity_blocks, std::int64_t block_tokens);

  // The longest cached prefix of `hashes` (the prompt's block hashes in order; the last block may be
  // partial: `prompt_tokens` says how many tokens the prompt has). Writes the cached blocks' ids to
  // `blocks_out` (resized to the hit count; a reused buffer does not allocate) and counts the lookup.
  // Does not pin or touch the blocks: acquire() them before anything can evict them.
  PrefixMatch match(std::span<const BlockHash> hashes, std::int64_t prompt_tokens,
                    std::vector<BlockId>& blocks_out);
  // Same without counting (a router's probe of several replicas).
  [[nodiscard]] int cached_prefix_blocks(std::span<const BlockHash> hashes) const;
  // The cached leading blocks' ids into `blocks_out` (resized to the hit count), without counting: a
  // caller that counts lookups its own way (KvCacheManager counts admitted requests only).
  void find_prefix(std::span<const BlockHash> hashes, std::vector<BlockId>& blocks_out) const;

  // Pins blocks for a running request (reference count + 1); a pinned block is never evicted.
  void acquire(std::span<const BlockId> blocks);
  // A fresh block for new KV (reference count 1, no hash): a free block, else the least recently used
  // unreferenced cached block is evicted for it; kNoBlock when every block is pinned.
  [[nodiscard]] BlockId allocate();
  // Names a block of a running request once its KV is complete (after prefill). False (and nothing
  // changes) when a block with that hash is already cached: the duplicate stays unnamed and returns to the
  // free list when released, as vLLM does.
  bool insert(BlockId block, BlockHash hash);
  // Unpins a request's blocks, last block first, so that a request's tail is evicted before its head (the
  // order vLLM's free-block queue keeps). A named block whose count reaches 0 becomes the most recently
  // used evictable block; an unnamed one becomes free.
  void release(std::span<const BlockId> blocks);
  // Evicts up to `n` unreferenced cached blocks, least recently used first, to the free list; returns how
  // many it freed (fewer only when fewer are evictable).
  std::int32_t evict(std::int32_t n);

  [[nodiscard]] std::int32_t capacity_blocks() const { return capacity_; }
  [[nodiscard]] std::int64_t block_tokens() const { return block_tokens_; }
  [[nodiscard]] std::int32_t free_blocks() const { return free_count_; }
  [[nodiscard]] std::int32_t evictable_blocks() const { return lru_count_; }
  [[nodiscard]] std::int32_t cached_blocks() const { return cached_count_; }  // named, pinned or not
  // Blocks a new request can get: free plus evictable.
  [[nodiscard]] std::int32_t available_blocks() const { return free_count_ + lru_count_; }
  [[nodiscard]] std::int32_t ref_count(BlockId b) const { return ref_[static_cast<std::size_t>(b)]; }
  [[nodiscard]] bool is_cached(BlockHash hash) const { return find(hash) != kNoBlock; }
  [[nodiscard]] const PrefixCacheCounters& counters() const { return counters_; }

 private:
  [[nodiscard]] BlockId find(BlockHash hash) const;
  void table_insert(BlockHash hash, BlockId b);
  void table_erase(BlockHash hash);
  void lru_push_back(BlockId b);
  void lru_unlink(BlockId b);
  void drop_name(BlockId b);  // an evicted block forgets its hash

  std::int32_t capacity_;
  std::int64_t block_tokens_;
  // Per block.
  std::vector<BlockHash> hash_;
  std::vector<std::int32_t> ref_;
  std::vector<std::uint8_t> named_;
  std::vector<BlockId> prev_;  // LRU list of unreferenced named blocks (doubly linked), or free stack
  std::vector<BlockId> next_;
  BlockId lru_head_ = kNoBlock;  // least recently used
  BlockId lru_tail_ = kNoBlock;
  std::int32_t lru_count_ = 0;
  std::vector<BlockId> free_;  // stack of free block ids
  std::int32_t free_count_ = 0;
  std::int32_t cached_count_ = 0;
  // Open addressing with linear probing, backward-shift deletion; slots hold a block id or kNoBlock.
  std::vector<BlockId> table_;
  std::size_t mask_ = 0;
  PrefixCacheCounters counters_;
};

}  // namespace moesim
