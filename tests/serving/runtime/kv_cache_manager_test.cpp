// The KV-cache manager's block arithmetic.
#include "sim/serving/runtime/kv_cache_manager.h"

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

TEST_CASE("an admission that reserves a whole prompt names only the blocks it computes") {
  KvCacheManager kv(16, 16, /*prefix_caching=*/true);
  Request a;
  a.prompt = a.target = 100;
  a.prompt_hashes = {21, 22, 23, 24, 25, 26};  // 6 full blocks of the 100-token prompt
  REQUIRE(kv.lookup_prefix(a) == 0);
  // A 32-token first chunk with the whole prompt reserved: ceil(100 / 16) = 7 blocks held.
  REQUIRE(kv.can_admit(a, 100));
  kv.admit(a, 32, 100);
  CHECK(a.blocks == 7);
  CHECK(kv.free_blocks() == 9);
  // Only the 2 blocks of the computed chunk carry their hashes: a request with the same prompt hits 32
  // tokens, not the 4 reserved blocks that hold no KV yet.
  Request b;
  b.prompt = b.target = 100;
  b.prompt_hashes = a.prompt_hashes;
  CHECK(kv.lookup_prefix(b) == 32);
  // Growing `a` to the next chunk needs no block and names 2 more.
  kv.grow(a, 64);
  CHECK(a.blocks == 7);
  CHECK(kv.lookup_prefix(b) == 64);
}

TEST_CASE("an admission watermark keeps blocks free") {
  KvCacheManager kv(10, 16);
  Request r;
  r.prompt = r.target = 64;  // 4 blocks
  CHECK(kv.can_admit(r, 64, 6));
  CHECK_FALSE(kv.can_admit(r, 64, 7));
}

TEST_CASE("a finished turn's generated blocks are cached, so the next turn hits on its answer") {
  KvCacheManager kv(32, 16, /*prefix_caching=*/true);
  // Turn 1: a 40-token prompt and a 30-token answer, hashed as one sequence of 70 tokens: 4 full blocks.
  Request t1;
  t1.prompt = t1.target = 40;
  t1.output = 30;
  t1.prompt_hashes = {31, 32, 33, 34};
  REQUIRE(kv.lookup_prefix(t1) == 0);
  kv.admit(t1, 40);
  t1.computed = 40;
  // Decode: each step computes the KV of the last sampled token; the 30th token is sampled, never fed
  // back, so the KV covers 40 + 29 = 69 tokens and 4 full blocks are named.
  for (int step = 1; step < 30; ++step) {
    kv.grow(t1, t1.computed + 1);
    ++t1.computed;
  }
  CHECK(t1.computed == 69);
  CHECK(t1.named_blocks == 4);
  kv.release(t1);
  // Turn 2: the previous prompt and answer and a 20-token message, 90 tokens: its first 4 blocks hash as
  // turn 1's; 5 of its blocks could hit ((90 - 1) / 16), 4 are cached: 64 tokens, where caching the
  // prompt alone would give its 2 full blocks (32 tokens).
  Request t2;
  t2.prompt = t2.target = 90;
  t2.prompt_hashes = {31, 32, 33, 34, 35};
  CHECK(kv.lookup_prefix(t2) == 64);
}
