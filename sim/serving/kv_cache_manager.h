// The KV-cache manager of one attention group: a pool of fixed-size blocks (vLLM's PagedAttention
// blocks), allocation as requests compute tokens, release when they finish or are preempted. Which request
// to preempt is the batch policy's decision; the manager only counts blocks.
#pragma once

#include <algorithm>
#include <cstdint>

#include "sim/serving/request.h"

namespace moesim {

class KvCacheManager {
 public:
  KvCacheManager(std::int64_t blocks, std::int64_t block_tokens)
      : total_(blocks), free_(blocks), block_tokens_(block_tokens) {}

  // Blocks `r` must add to hold `computed` tokens (0 when it already holds enough).
  [[nodiscard]] std::int64_t blocks_needed(const Request& r, std::int64_t computed) const {
    return std::max<std::int64_t>(0, (computed + block_tokens_ - 1) / block_tokens_ - r.blocks);
  }
  [[nodiscard]] bool can_hold(const Request& r, std::int64_t computed) const {
    return blocks_needed(r, computed) <= free_;
  }
  // Grows `r` to `computed` tokens. Precondition: can_hold(r, computed).
  void grow(Request& r, std::int64_t computed);
  // Returns every block of `r` to the pool.
  void release(Request& r) {
    free_ += r.blocks;
    r.blocks = 0;
  }

  [[nodiscard]] std::int64_t free_blocks() const { return free_; }
  [[nodiscard]] std::int64_t total_blocks() const { return total_; }
  [[nodiscard]] std::int64_t used_blocks() const { return total_ - free_; }
  [[nodiscard]] std::int64_t peak_used_blocks() const { return peak_used_; }
  [[nodiscard]] std::int64_t block_tokens() const { return block_tokens_; }
  void note_peak() { peak_used_ = std::max(peak_used_, used_blocks()); }

 private:
  std::int64_t total_;
  std::int64_t free_;
  std::int64_t block_tokens_;
  std::int64_t peak_used_ = 0;
};

}  // namespace moesim
