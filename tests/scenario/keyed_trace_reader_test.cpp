// Mooncake traces with their block ids: rows index one flat key array; bad rows name file:line; the
// conversation trace's ideal prefix reuse equals an independent count of ids seen before (and the 36.6% of
// blocks / 37.4% of tokens its README states), and an LRU cache of every distinct block reaches it.
#include <catch2/catch.hpp>
#include <filesystem>
#include <fstream>
#include <set>

#include "sim/engine/check.h"
#include "sim/scenario/trace_reader.h"
#include "sim/serving/offline/prefix_hit_analysis.h"

namespace moesim {
namespace {

std::string write_temp(const std::string& name, const std::string& text) {
  const auto p = std::filesystem::temp_directory_path() / name;
  std::ofstream(p) << text;
  return p.string();
}

const std::string kConversation =
    std::string(MOESIM_SHARED_DIR) + "/data/traces/mooncake_fast25_conversation/conversation_trace.jsonl";

}  // namespace

TEST_CASE("a Mooncake trace's hash ids become each row's slice of one key array") {
  const auto f =
      write_temp("keyed_ok.jsonl",
                 "{\"timestamp\": 0, \"input_length\": 600, \"output_length\": 5, \"hash_ids\": [7, 8]}\n"
                 "{\"timestamp\": 1500, \"input_length\": 512, \"output_length\": 1, \"hash_ids\": [7]}\n");
  const KeyedTrace t = read_mooncake_keyed(f);
  REQUIRE(t.rows.size() == 2);
  CHECK(t.keys.block_tokens == 512);
  CHECK(t.keys.keys == std::vector<std::uint64_t>{7, 8, 7});
  CHECK(t.rows[1].prefix_ref == 2);
  CHECK(t.rows[1].prefix_blocks == 1);
  CHECK(t.rows[1].arrival.since_start() == Duration::from_ms(1500));
  TraceSource src(t.rows, t.keys, 1.0, {});
  std::vector<std::uint64_t> keys;
  const auto first = src.next();
  REQUIRE(first);
  src.prompt_block_keys(*first, keys);
  CHECK(keys == std::vector<std::uint64_t>{7, 8});
  CHECK(src.prefix_block_tokens() == 512);
}

TEST_CASE("a Mooncake row whose hash ids do not cover its prompt is refused with file:line") {
  const auto f =
      write_temp("keyed_bad.jsonl",
                 "{\"timestamp\": 0, \"input_length\": 600, \"output_length\": 5, \"hash_ids\": [7, 8]}\n"
                 "{\"timestamp\": 1, \"input_length\": 1100, \"output_length\": 5, \"hash_ids\": [7, 8]}\n");
  REQUIRE_THROWS_AS(read_mooncake_keyed(f), InputError);
  try {
    read_mooncake_keyed(f);
  } catch (const InputError& e) {
    CHECK(e.where() == f + ":2");
    CHECK(std::string(e.what()).find("3 blocks of 512 tokens") != std::string::npos);
  }
  const auto g =
      write_temp("keyed_neg.jsonl",
                 "{\"timestamp\": 0, \"input_length\": 5, \"output_length\": 5, \"hash_ids\": [-1]}\n");
  CHECK_THROWS_WITH(read_mooncake_keyed(g), Catch::Contains("non-negative integers"));
}

TEST_CASE(
    "the conversation trace's ideal prefix reuse equals a count of ids seen before, and LRU reaches it") {
  const KeyedTrace t = read_mooncake_keyed(kConversation);
  CHECK(t.rows.size() == 12031);
  std::set<std::uint64_t> seen;
  std::int64_t blocks = 0, hit_blocks = 0, tokens = 0, hit_tokens = 0;
  for (const auto& r : t.rows) {
    for (std::uint32_t i = 0; i < r.prefix_blocks; ++i) {
      const auto tok = std::min<std::int64_t>(512, r.prompt_tokens - 512 * static_cast<std::int64_t>(i));
      ++blocks;
      tokens += tok;
      if (seen.count(t.keys.keys[r.prefix_ref + i]) != 0) {
        ++hit_blocks;
        hit_tokens += tok;
      }
    }
    for (std::uint32_t i = 0; i < r.prefix_blocks; ++i) seen.insert(t.keys.keys[r.prefix_ref + i]);
  }
  const PrefixHitResult ideal = ideal_prefix_hits(t.rows, t.keys);
  CHECK(ideal.blocks == blocks);
  CHECK(ideal.hit_blocks == hit_blocks);
  CHECK(ideal.tokens == tokens);
  CHECK(ideal.hit_tokens == hit_tokens);
  CHECK(ideal.distinct_blocks == static_cast<std::int64_t>(seen.size()));
  // The trace README (computed there with Python): 36.6% of blocks, 37.4% of tokens, 182,790 distinct.
  CHECK(ideal.block_hit_rate() == Approx(0.366).margin(0.0005));
  CHECK(ideal.token_hit_rate() == Approx(0.374).margin(0.0005));
  CHECK(seen.size() == 182790);
  const PrefixHitResult lru = lru_prefix_hits(t.rows, t.keys, static_cast<std::int32_t>(seen.size()));
  CHECK(lru.hit_blocks == ideal.hit_blocks);
  CHECK(lru.hit_tokens == ideal.hit_tokens);
  const PrefixHitResult small = lru_prefix_hits(t.rows, t.keys, 1000);
  CHECK(small.hit_blocks < ideal.hit_blocks);
}

}  // namespace moesim
