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
