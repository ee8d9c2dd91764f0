// Offline prefix-hit analysis against an independent count: a block hits when its id was seen in an
// earlier request (a std::set of ids; the trace's ids are prefix ids, so this equals the leading-prefix
// rule), and an LRU cache large enough for every distinct block reaches the ideal.
#include "sim/serving/offline/prefix_hit_analysis.h"

#include <algorithm>
#include <catch2/catch.hpp>
#include <set>
#include <vector>

namespace moesim {
namespace {

struct HandTrace {
  std::vector<RequestSpec> rows;
  TraceBlockKeys keys{.keys = {}, .block_tokens = 4};
  void add(std::int64_t prompt, std::vector<std::uint64_t> ids) {
    RequestSpec r;
    r.prompt_tokens = prompt;
    r.prefix_ref = static_cast<std::uint32_t>(keys.keys.size());
    r.prefix_blocks = static_cast<std::uint32_t>(ids.size());
    keys.keys.insert(keys.keys.end(), ids.begin(), ids.end());
    rows.push_back(r);
  }
};

// Prefix ids as Mooncake remaps them: equal id = equal prefix up to that block.
HandTrace hand_trace() {
  HandTrace t;
  t.add(10, {0, 1, 2});     // system prompt block 0, then its own
  t.add(7, {0, 3});         // shares block 0
  t.add(14, {0, 1, 2, 4});  // the first request's next turn (its 10 tokens, then 4 more)
  t.add(4, {5});
  t.add(9, {0, 3, 6});  // the second request's next turn
  t.add(4, {5});        // a repeat
  return t;
}

struct SetCount {
  std::int64_t blocks = 0, hit_blocks = 0, tokens = 0, hit_tokens = 0;
};

SetCount set_count(const HandTrace& t) {
  SetCount c;
  std::set<std::uint64_t> seen;
  for (const auto& r : t.rows) {
    for (std::uint32_t i = 0; i < r.prefix_blocks; ++i) {
      const std::uint64_t id = t.keys.keys[r.prefix_ref + i];
      const std::int64_t tok =
          std::min<std::int64_t>(t.keys.block_tokens, r.prompt_tokens - i * t.keys.block_tokens);
      ++c.blocks;
      c.tokens += tok;
      if (seen.count(id) != 0) {
        ++c.hit_blocks;
        c.hit_tokens += tok;
      }
    }
    for (std::uint32_t i = 0; i < r.prefix_blocks; ++i) seen.insert(t.keys.keys[r.prefix_ref + i]);
  }
  return c;
}

}  // namespace

TEST_CASE("the ideal prefix hit rate of a hand-made trace equals a count of ids seen before") {
  const HandTrace t = hand_trace();
  const SetCount want = set_count(t);
  // By hand: request 2 hits {0}, request 3 hits {0,1,2}, request 5 hits {0,3}, request 6 hits {5}.
  CHECK(want.hit_blocks == 7);
  CHECK(want.blocks == 14);
  const PrefixHitResult got = ideal_prefix_hits(t.rows, t.keys);
  CHECK(got.blocks == want.blocks);
  CHECK(got.hit_blocks == want.hit_blocks);
  CHECK(got.tokens == want.tokens);
  CHECK(got.hit_tokens == want.hit_tokens);
  CHECK(got.hit_tokens == 4 + (4 + 4 + 4) + (4 + 4) + 4);
  CHECK(got.distinct_blocks == 7);
}

TEST_CASE(
    "an LRU cache that holds every distinct block reaches the ideal, and a one-block cache keeps "
    "only the most recent first block") {
  const HandTrace t = hand_trace();
  const PrefixHitResult ideal = ideal_prefix_hits(t.rows, t.keys);
  for (const std::int32_t cap : {7, 8, 100}) {
    const PrefixHitResult lru = lru_prefix_hits(t.rows, t.keys, cap);
    CHECK(lru.hit_blocks == ideal.hit_blocks);
    CHECK(lru.hit_tokens == ideal.hit_tokens);
  }
  // One block: each request leaves only its first block cached (the rest cannot be allocated while the
  // first is pinned). Requests 2 and 3 hit {0}; request 4 evicts it for {5}, request 5 evicts {5} for {0},
  // so request 6 misses {5}.
  const PrefixHitResult one = lru_prefix_hits(t.rows, t.keys, 1);
  CHECK(one.hit_blocks == 2);
  CHECK(one.hit_tokens == 4 + 4);
}

}  // namespace moesim
