// Synthetic shared prefixes: every request starts with the system prompt's blocks, a conversation's next
// turn starts with every block of its previous turn, turns per conversation follow the configured mean,
// and the same seed gives the same requests and keys.
#include "workloads/prefixed_source.h"

#include <catch2/catch.hpp>
#include <cmath>
#include <map>

namespace moesim {
namespace {

std::vector<std::uint64_t> keys_of(const PrefixedSource& s, const RequestSpec& r) {
  std::vector<std::uint64_t> k;
  s.prompt_block_keys(r, k);
  return k;
}

}  // namespace

TEST_CASE("a shared system prompt gives every request the same first blocks and its own after them") {
  const RandomStreams streams(5);
  PrefixWorkloadSpec spec;
  spec.system_prompt_tokens = 100;
  PrefixedSource src(spec, PoissonArrivals{10.0}, UniformLength{1, 200}, FixedLength{8},
                     RunLimits{.max_requests = 200}, streams);
  std::vector<std::vector<std::uint64_t>> all;
  while (auto r = src.next()) {
    REQUIRE(r->prompt_tokens >= 101);
    REQUIRE(r->prefix_blocks == static_cast<std::uint32_t>((r->prompt_tokens + 15) / 16));
    all.push_back(keys_of(src, *r));
  }
  REQUIRE(all.size() == 200);
  const std::size_t shared = 100 / 16;  // 6 whole blocks; block 6 holds the prompt's end and user text
  for (const auto& k : all) {
    for (std::size_t j = 0; j < shared; ++j) REQUIRE(k[j] == all[0][j]);
  }
  for (std::size_t i = 1; i < all.size(); ++i) REQUIRE(all[i][shared] != all[0][shared]);
  CHECK(src.prefix_block_tokens() == 16);
  CHECK(max_prefixed_prompt(spec, UniformLength{1, 200}) == 300);
}

TEST_CASE("the next turn of a conversation starts with every full block of the previous turn") {
  const RandomStreams streams(6);
  const PrefixWorkloadSpec spec{
      .system_prompt_tokens = 64,
      .conversations = true,
      .conversation = {.turns_mean = 5, .think_time_s = 20, .max_prompt_tokens = 100000},
      .block_tokens = 16};
  PrefixedSource src(spec, PoissonArrivals{2.0}, UniformLength{10, 100}, UniformLength{5, 50},
                     RunLimits{.max_requests = 3000}, streams);
  std::map<std::uint32_t, RequestSpec> last;
  int follow_ups = 0;
  Time t;
  while (auto r = src.next()) {
    REQUIRE(r->arrival >= t);
    t = r->arrival;
    const auto it = last.find(r->prefix_ref);
    if (it != last.end()) {
      ++follow_ups;
      const RequestSpec& prev = it->second;
      REQUIRE(r->prompt_tokens >= prev.prompt_tokens + prev.output_tokens + 10);
      REQUIRE(r->prompt_tokens <= prev.prompt_tokens + prev.output_tokens + 100);
      const auto now_keys = keys_of(src, *r);
      const auto prev_keys = keys_of(src, prev);
      REQUIRE(now_keys.size() >= prev_keys.size());
      // Every full block of the previous turn; its partial last block (if any) is other content now.
      const auto full = static_cast<std::size_t>(prev.prompt_tokens / 16);
      for (std::size_t j = 0; j < full; ++j) REQUIRE(now_keys[j] == prev_keys[j]);
      if (full < prev_keys.size()) REQUIRE(now_keys[full] != prev_keys[full]);
    }
    last[r->prefix_ref] = *r;
  }
  CHECK(follow_ups > 1000);  // about 4 of every 5 requests
}

TEST_CASE("turns per conversation are geometric with the configured mean") {
  const RandomStreams streams(7);
  PrefixWorkloadSpec spec;
  spec.conversations = true;
  spec.conversation = {.turns_mean = 4, .think_time_s = 0, .max_prompt_tokens = 1 << 30};
  // Think time 0: every turn of a conversation arrives with its first turn, so no conversation is cut.
  PrefixedSource src(spec, PoissonArrivals{10.0}, FixedLength{10}, FixedLength{10},
                     RunLimits{.max_arrival_time = Duration::from_seconds(400)}, streams);
  std::map<std::uint32_t, int> turns;
  while (auto r = src.next()) ++turns[r->prefix_ref];
  double sum = 0;
  for (const auto& [c, n] : turns) sum += n;
  const double n = static_cast<double>(turns.size());
  // Geometric with p = 1/4: variance (1 - p) / p^2 = 12; 4 standard errors.
  CHECK(std::abs(sum / n - 4.0) < 4.0 * std::sqrt(12.0 / n));
  CHECK(n > 3500);
}

TEST_CASE("the same seed gives the same prefixed requests and keys") {
  const PrefixWorkloadSpec spec{
      .system_prompt_tokens = 40,
      .conversations = true,
      .conversation = {.turns_mean = 3, .think_time_s = 5, .max_prompt_tokens = 4000},
      .block_tokens = 16};
  auto run = [&](std::uint64_t seed) {
    const RandomStreams streams(seed);
    PrefixedSource src(spec, GammaArrivals{5.0, 2.0}, UniformLength{1, 300}, UniformLength{1, 300},
                       RunLimits{.max_requests = 500}, streams);
    std::vector<std::uint64_t> out;
    while (auto r = src.next()) {
      REQUIRE(r->prompt_tokens <= 4000);
      out.push_back(static_cast<std::uint64_t>(r->arrival.since_start().ps()));
      out.push_back(static_cast<std::uint64_t>(r->prompt_tokens));
      for (const auto k : keys_of(src, *r)) out.push_back(k);
    }
    return out;
  };
  CHECK(run(1) == run(1));
  CHECK(run(1) != run(2));
}

}  // namespace moesim
