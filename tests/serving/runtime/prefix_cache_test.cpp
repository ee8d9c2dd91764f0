// Prefix cache: shared prefixes hit, multi-turn extensions hit their previous turn, LRU order of
// unreferenced blocks, pinned blocks never evicted, eviction frees exactly what it says; and a randomized
// run against a plain std::list/std::map model of the same policy.
#include "sim/serving/runtime/prefix_cache.h"

#include <catch2/catch.hpp>
#include <list>
#include <map>
#include <random>
#include <vector>

namespace moesim {
namespace {

std::vector<BlockHash> hashes_of(std::vector<std::uint64_t> keys) {
  std::vector<BlockHash> h;
  chain_block_hashes(keys, h);
  return h;
}

// One request as a KV-cache manager runs it: reuse the cached prefix, allocate and name the rest, finish.
// Returns the prefix hit in blocks; `keep` leaves the blocks pinned (a running request).
int serve(PrefixCache& c, const std::vector<BlockHash>& h, std::int64_t tokens, std::vector<BlockId>* keep) {
  std::vector<BlockId> blocks;
  const PrefixMatch m = c.match(h, tokens, blocks);
  c.acquire(blocks);
  for (std::size_t i = blocks.size(); i < h.size(); ++i) {
    const BlockId b = c.allocate();
    if (b == kNoBlock) break;
    c.insert(b, h[i]);
    blocks.push_back(b);
  }
  if (keep != nullptr) {
    *keep = blocks;
  } else {
    c.release(blocks);
  }
  return m.blocks;
}

}  // namespace

TEST_CASE("chained block hashes name the whole prefix, not only the block") {
  const auto a = hashes_of({7, 8, 9});
  const auto b = hashes_of({7, 8, 10});
  const auto c = hashes_of({6, 8, 9});
  CHECK(a[0] == b[0]);
  CHECK(a[1] == b[1]);
  CHECK(a[2] != b[2]);
  CHECK(a[1] != c[1]);  // same block key after a different parent
  CHECK(a[2] != c[2]);
  const std::vector<std::int32_t> t1{1, 2, 3};
  const std::vector<std::int32_t> t2{1, 2, 4};
  CHECK(block_key_of_tokens(t1) == block_key_of_tokens(std::vector<std::int32_t>{1, 2, 3}));
  CHECK(block_key_of_tokens(t1) != block_key_of_tokens(t2));
}

TEST_CASE("requests sharing a system prompt hit its blocks and miss their own") {
  PrefixCache c(100, 16);
  // System prompt of 2 full blocks (32 tokens), then each user's own text.
  CHECK(serve(c, hashes_of({1, 2, 100, 101}), 60, nullptr) == 0);
  CHECK(serve(c, hashes_of({1, 2, 200}), 40, nullptr) == 2);
  CHECK(serve(c, hashes_of({1, 2, 300, 301, 302}), 70, nullptr) == 2);
  const auto& k = c.counters();
  CHECK(k.lookups == 3);
  CHECK(k.lookup_blocks == 12);
  CHECK(k.hit_blocks == 4);
  CHECK(k.lookup_tokens == 170);
  CHECK(k.hit_tokens == 4 * 16);
  CHECK(k.block_hit_rate() == Approx(4.0 / 12.0));
  CHECK(c.cached_blocks() == 4 + 1 + 3);  // the shared 2 once, and each request's own blocks
}

TEST_CASE(
    "the next turn of a conversation hits every block of the previous turn, the partial one counted "
    "by its tokens") {
  PrefixCache c(100, 16);
  // Turn 1: 40 prompt tokens = blocks {c0, c1, c2 (8 tokens)}.
  CHECK(serve(c, hashes_of({10, 11, 12}), 40, nullptr) == 0);
  // Turn 2's prompt extends turn 1's: the same three keys, then two more blocks.
  std::vector<BlockId> out;
  const auto h2 = hashes_of({10, 11, 12, 13, 14});
  const PrefixMatch m = c.match(h2, 70, out);
  CHECK(m.blocks == 3);
  CHECK(m.tokens == 48);
  // The whole prompt cached: the hit is capped by the prompt's tokens (last block partial).
  const auto h1 = hashes_of({10, 11, 12});
  const PrefixMatch whole = c.match(h1, 40, out);
  CHECK(whole.blocks == 3);
  CHECK(whole.tokens == 40);
}

TEST_CASE("unreferenced cached blocks are evicted least recently used first, a request's tail first") {
  PrefixCache c(4, 16);
  serve(c, hashes_of({1}), 16, nullptr);     // X
  serve(c, hashes_of({2}), 16, nullptr);     // Y
  serve(c, hashes_of({3, 4}), 32, nullptr);  // Z head, Z tail
  CHECK(c.evictable_blocks() == 4);
  CHECK(c.free_blocks() == 0);
  serve(c, hashes_of({1}), 16, nullptr);  // X used again: now most recent
  CHECK(c.evict(1) == 1);
  CHECK_FALSE(c.is_cached(hashes_of({2})[0]));  // Y was least recent
  CHECK(c.evict(1) == 1);
  CHECK(c.is_cached(hashes_of({3, 4})[0]));  // Z's head outlives Z's tail
  CHECK_FALSE(c.is_cached(hashes_of({3, 4})[1]));
  CHECK(c.evict(1) == 1);
  CHECK_FALSE(c.is_cached(hashes_of({3})[0]));
  CHECK(c.is_cached(hashes_of({1})[0]));
  CHECK(c.counters().evicted_blocks == 3);
}

TEST_CASE(
    "blocks pinned by running requests are never evicted, and allocation fails only when all are "
    "pinned") {
  PrefixCache c(3, 16);
  std::vector<BlockId> running;
  serve(c, hashes_of({1, 2}), 32, &running);
  CHECK(c.ref_count(running[0]) == 1);
  serve(c, hashes_of({9}), 16, nullptr);  // cached, unreferenced
  CHECK(c.available_blocks() == 1);
  // A second request sharing the first block pins it twice.
  std::vector<BlockId> second;
  CHECK(serve(c, hashes_of({1, 5}), 32, &second) == 1);
  CHECK(c.ref_count(running[0]) == 2);
  CHECK_FALSE(c.is_cached(hashes_of({9})[0]));  // evicted to make room for block {1, 5}
  CHECK(c.available_blocks() == 0);
  CHECK(c.allocate() == kNoBlock);
  CHECK(c.evict(10) == 0);
  c.release(second);
  CHECK(c.ref_count(running[0]) == 1);
  CHECK(c.evictable_blocks() == 1);  // {1, 5}; block {1} is still pinned by the first request
  CHECK(c.evict(10) == 1);
  CHECK(c.is_cached(hashes_of({1})[0]));
}

TEST_CASE("evict frees exactly the requested count when that many are evictable") {
  PrefixCache c(10, 16);
  for (std::uint64_t k = 1; k <= 6; ++k) serve(c, hashes_of({k}), 16, nullptr);
  std::vector<BlockId> pinned;
  serve(c, hashes_of({50, 51}), 32, &pinned);
  CHECK(c.free_blocks() == 2);
  CHECK(c.evictable_blocks() == 6);
  CHECK(c.evict(4) == 4);
  CHECK(c.free_blocks() == 6);
  CHECK(c.cached_blocks() == 4);
  CHECK(c.evict(5) == 2);  // only two unreferenced remain; the pinned two stay
  CHECK(c.free_blocks() == 8);
  CHECK(c.cached_blocks() == 2);
}

TEST_CASE("a duplicate block computed concurrently stays unnamed and returns to the free list") {
  PrefixCache c(4, 16);
  std::vector<BlockId> a;
  std::vector<BlockId> b;
  serve(c, hashes_of({1}), 16, &a);
  // A second request that missed before the first one named its block.
  const BlockId dup = c.allocate();
  CHECK_FALSE(c.insert(dup, hashes_of({1})[0]));
  c.release(std::vector<BlockId>{dup});
  CHECK(c.free_blocks() == 3);
  CHECK(c.cached_blocks() == 1);
}

TEST_CASE("a random run matches a std::list LRU model of the same policy") {
  // The model: a map hash -> reference count, an ordered list of unreferenced cached hashes, a free count.
  struct Model {
    int capacity;
    int free;
    std::map<BlockHash, int> ref;
    std::list<BlockHash> lru;
    int run(const std::vector<BlockHash>& h) {
      int hit = 0;
      while (hit < static_cast<int>(h.size()) && ref.count(h[static_cast<std::size_t>(hit)]) != 0) ++hit;
      std::vector<BlockHash> held(h.begin(), h.begin() + hit);
      for (const auto x : held)
        if (ref[x]++ == 0) lru.remove(x);
      std::vector<bool> named(held.size(), true);
      for (std::size_t i = held.size(); i < h.size(); ++i) {
        if (free == 0) {
          if (lru.empty()) break;
          ref.erase(lru.front());
          lru.pop_front();
          ++free;
        }
        --free;
        held.push_back(h[i]);
        const bool fresh = ref.count(h[i]) == 0;
        named.push_back(fresh);
        if (fresh) ref[h[i]] = 1;
      }
      for (std::size_t i = held.size(); i-- > 0;) {
        if (!named[i]) {
          ++free;
          continue;
        }
        if (--ref[held[i]] == 0) lru.push_back(held[i]);
      }
      return hit;
    }
  };
  std::mt19937_64 gen(42);
  for (const int capacity : {1, 7, 40, 300}) {
    PrefixCache c(capacity, 16);
    Model m{capacity, capacity, {}, {}};
    std::int64_t hits = 0;
    for (int r = 0; r < 3000; ++r) {
      // Prefixes from a small tree: 3 roots, 4 children each, then a tail that repeats a third of the time.
      std::vector<std::uint64_t> keys{gen() % 3, 10 + gen() % 4};
      const std::uint64_t tail = gen() % 3 == 0 ? 100 + gen() % 20 : 1000 + gen();
      const auto extra = gen() % 6;
      for (std::uint64_t i = 0; i < extra; ++i) keys.push_back(tail * 31 + i);
      const auto h = hashes_of(keys);
      const int got = serve(c, h, static_cast<std::int64_t>(h.size()) * 16, nullptr);
      REQUIRE(got == m.run(h));
      hits += got;
      REQUIRE(c.free_blocks() + c.evictable_blocks() == capacity);
      REQUIRE(c.cached_blocks() == static_cast<int>(m.ref.size()));
    }
    CHECK(c.counters().hit_blocks == hits);
    if (capacity >= 40) CHECK(hits > 0);
  }
}

}  // namespace moesim
