// The KV-cache manager's block arithmetic.
#include "sim/serving/kv_cache_manager.h"

#include <catch2/catch.hpp>

using namespace moesim;

TEST_CASE("a request holds ceil(tokens / block size) blocks and gives them all back") {
  KvCacheManager kv(10, 16);
  Request r;
  REQUIRE(kv.blocks_needed(r, 33) == 3);  // ceil(33 / 16)
  kv.grow(r, 33);
  REQUIRE(r.blocks == 3);
  REQUIRE(kv.free_blocks() == 7);
  REQUIRE(kv.blocks_needed(r, 48) == 0);  // 48 tokens still fit in 3 blocks
  REQUIRE(kv.blocks_needed(r, 49) == 1);
  kv.grow(r, 49);
  kv.note_peak();
  REQUIRE(kv.used_blocks() == 4);
  kv.release(r);
  REQUIRE(r.blocks == 0);
  REQUIRE(kv.free_blocks() == 10);
  REQUIRE(kv.peak_used_blocks() == 4);
}

TEST_CASE("the pool refuses what it cannot hold") {
  KvCacheManager kv(2, 16);
  Request r;
  REQUIRE(kv.can_hold(r, 32));
  REQUIRE_FALSE(kv.can_hold(r, 33));
}

TEST_CASE("a request that arrives with its KV takes no prefix hit, a fresh one with the same prompt does") {
  KvCacheManager kv(16, 16, /*prefix_caching=*/true);
  // A first request computes a 64-token prompt (4 full blocks named by their hashes) and leaves.
  Request first;
  first.prompt = 64;
  first.target = 64;  // a fresh request computes its prompt before it samples its first token
  first.prompt_hashes = {11, 12, 13, 14};
  REQUIRE(kv.lookup_prefix(first) == 0);
  kv.admit(first, 64);
  kv.release(first);
  // Same prompt, fresh: the three leading blocks that leave a token to compute are a hit (as vLLM caps a
  // hit at the prompt less one token: the last one is computed to sample from).
  Request fresh = first;
  fresh.block_ids.clear();
  fresh.blocks = 0;
  fresh.named_blocks = 0;
  fresh.computed = 0;
  REQUIRE(kv.lookup_prefix(fresh) == 48);
  // Same prompt, but migrated or handed off with 70 computed tokens (target 71): its KV came with it, so a
  // hit would count those tokens twice (computed past the target, the request would never finish).
  Request moved = fresh;
  moved.computed = 70;
  moved.target = 71;
  REQUIRE(kv.lookup_prefix(moved) == 0);
  REQUIRE(kv.can_admit(moved, 71));
  kv.admit(moved, 71);
  CHECK(moved.computed == 70);
  CHECK(moved.blocks == 5);  // ceil(71 / 16) blocks of its own
}
