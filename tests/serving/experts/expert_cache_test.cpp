// Tiered expert cache: LRU over warm copies only, pinned hot copies, cold copies through staging,
// memory freed at once, prefetch by routed count over a window.
#include "sim/serving/experts/expert_cache.h"

#include <array>
#include <catch2/catch.hpp>
#include <numeric>
#include <vector>

#include "sim/engine/random.h"

namespace moesim {
namespace {
constexpr std::int64_t kB = 100;  // bytes per copy in these tests
}

TEST_CASE(
    "the least recently used warm expert is evicted when HBM is short, and its memory is free at once") {
  ExpertCache cache(1, 8, {.hbm_bytes = 3 * kB, .staging_bytes = kB});
  for (int e = 0; e < 4; ++e) cache.add_copy({0, e}, kB, Tier::kHostDram, Precision::kINT8, Hotness::kWarm);
  std::vector<ExpertKey> evicted;
  for (int e = 0; e < 3; ++e) CHECK(cache.access({0, e}, 5, evicted).outcome == CacheOutcome::kLoaded);
  CHECK(cache.hbm_used() == 3 * kB);
  CHECK(cache.access({0, 0}, 5, evicted).outcome == CacheOutcome::kHit);  // 0 becomes most recent
  const CacheAccess a = cache.access({0, 3}, 5, evicted);
  CHECK(a.outcome == CacheOutcome::kLoaded);
  CHECK(a.source == Tier::kHostDram);
  CHECK(a.bytes == kB);
  REQUIRE(evicted.size() == 1);
  CHECK(evicted[0] == ExpertKey{0, 1});  // 1 was used least recently
  CHECK_FALSE(cache.is_resident({0, 1}));
  CHECK(cache.hbm_used() == 3 * kB);
  CHECK(cache.hits() == 1);
  CHECK(cache.misses() == 4);
}

TEST_CASE("hot experts are pinned: a warm miss that finds only hot experts goes through staging") {
  ExpertCache cache(1, 4, {.hbm_bytes = 2 * kB, .staging_bytes = kB});
  cache.add_copy({0, 0}, kB, Tier::kHbm, Precision::kBF16, Hotness::kHot);
  cache.add_copy({0, 1}, kB, Tier::kHbm, Precision::kBF16, Hotness::kHot);
  cache.add_copy({0, 2}, kB, Tier::kHostDram, Precision::kINT8, Hotness::kWarm);
  std::vector<ExpertKey> evicted;
  const CacheAccess a = cache.access({0, 2}, 3, evicted);
  CHECK(a.outcome == CacheOutcome::kStaged);
  CHECK(evicted.empty());
  CHECK(cache.is_resident({0, 0}));
  CHECK(cache.is_resident({0, 1}));
  CHECK(cache.admit({0, 2}, evicted).outcome == CacheOutcome::kNoRoom);
}

TEST_CASE("cold experts are staged for one batch, never evict warm ones and never stay resident") {
  ExpertCache cache(1, 4, {.hbm_bytes = kB, .staging_bytes = kB});
  cache.add_copy({0, 0}, kB, Tier::kHostDram, Precision::kINT8, Hotness::kWarm);
  cache.add_copy({0, 1}, kB, Tier::kNvme, Precision::kINT4, Hotness::kCold);
  cache.add_copy({0, 2}, kB, Tier::kNvme, Precision::kINT4, Hotness::kCold);
  std::vector<ExpertKey> evicted;
  CHECK(cache.access({0, 0}, 1, evicted).outcome == CacheOutcome::kLoaded);
  const CacheAccess c = cache.access({0, 1}, 1, evicted);
  CHECK(c.outcome == CacheOutcome::kStaged);
  CHECK(c.source == Tier::kNvme);
  CHECK(cache.access({0, 1}, 1, evicted).outcome == CacheOutcome::kHit);     // still staged this batch
  CHECK(cache.access({0, 2}, 1, evicted).outcome == CacheOutcome::kNoRoom);  // staging full
  CHECK(evicted.empty());
  CHECK(cache.is_resident({0, 0}));
  cache.end_batch();
  CHECK(cache.staging_used() == 0);
  CHECK(cache.access({0, 2}, 1, evicted).outcome == CacheOutcome::kStaged);
  CHECK_FALSE(cache.is_resident({0, 1}));
}

TEST_CASE("a resident expert that turns cold leaves HBM at once") {
  ExpertCache cache(1, 2, {.hbm_bytes = 2 * kB});
  cache.add_copy({0, 0}, kB, Tier::kHostDram, Precision::kINT8, Hotness::kWarm);
  std::vector<ExpertKey> evicted;
  CHECK(cache.admit({0, 0}, evicted).outcome == CacheOutcome::kLoaded);
  cache.set_hotness({0, 0}, Hotness::kCold, evicted);
  CHECK_FALSE(cache.is_resident({0, 0}));
  CHECK(cache.hbm_used() == 0);
  REQUIRE(evicted.size() == 1);
}

TEST_CASE(
    "a warm expert is a prefetch candidate while its routed count over the last N batches passes the "
    "threshold") {
  ExpertCache cache(
      2, 2, {.hbm_bytes = kB, .staging_bytes = 0, .prefetch_window_batches = 3, .prefetch_threshold = 10});
  cache.add_copy({1, 0}, kB, Tier::kHostDram, Precision::kINT8, Hotness::kWarm);
  cache.add_copy({1, 1}, kB, Tier::kHostDram, Precision::kINT8, Hotness::kWarm);
  std::vector<ExpertKey> out;
  cache.record_routed({1, 1}, 4);
  cache.end_batch();
  cache.record_routed({1, 1}, 4);
  cache.prefetch_candidates(out);
  CHECK(out.empty());  // 8 < 10
  cache.end_batch();
  cache.record_routed({1, 1}, 4);
  cache.prefetch_candidates(out);
  REQUIRE(out.size() == 1);  // 12 over the last 3 batches
  CHECK(out[0] == ExpertKey{1, 1});
  cache.end_batch();  // the first 4 leaves the window: 8
  CHECK(cache.window_count({1, 1}) == 8);
  cache.prefetch_candidates(out);
  CHECK(out.empty());
  // A resident copy is never a candidate.
  std::vector<ExpertKey> evicted;
  cache.record_routed({1, 0}, 20);
  CHECK(cache.admit({1, 0}, evicted).outcome == CacheOutcome::kLoaded);
  cache.prefetch_candidates(out);
  CHECK(out.empty());
}

TEST_CASE("window counts equal the routed pairs of the last N batches, for copies left unused for a while") {
  // Random uses over 60 batches against the full history: copies go unused for gaps shorter and longer
  // than the window, and are read between uses (the window moves on when a copy is next used or read).
  for (const int n : {1, 3, 8, 12}) {
    ExpertCache cache(
        1, 4, {.hbm_bytes = kB, .staging_bytes = 0, .prefetch_window_batches = n, .prefetch_threshold = 1});
    for (int e = 0; e < 4; ++e) cache.add_copy({0, e}, kB, Tier::kHostDram, Precision::kINT8, Hotness::kWarm);
    std::vector<std::vector<std::int64_t>> history(4);
    Rng rng(static_cast<std::uint64_t>(n));
    for (int batch = 0; batch < 60; ++batch) {
      for (int e = 0; e < 4; ++e) {
        std::int64_t routed = 0;
        if (rng.uniform() < 0.2 * (e + 1)) {  // expert 0 is mostly idle, expert 3 nearly always used
          routed = static_cast<std::int64_t>(rng.below(9));
          cache.record_routed({0, e}, static_cast<std::int32_t>(routed));
        }
        history[static_cast<std::size_t>(e)].push_back(routed);
      }
      std::vector<ExpertKey> listed;
      cache.prefetch_candidates(listed);
      std::vector<ExpertKey> expected;
      for (int e = 0; e < 4; ++e) {  // this batch and the n - 1 before it
        const auto& h = history[static_cast<std::size_t>(e)];
        const std::int64_t sum =
            std::accumulate(h.end() - std::min<std::ptrdiff_t>(n, std::ssize(h)), h.end(), std::int64_t{0});
        CHECK(cache.window_count({0, e}) == sum);
        if (sum >= 1) expected.push_back({0, e});
      }
      CHECK(listed == expected);
      cache.end_batch();
    }
  }
}

TEST_CASE(
    "a copy stored at another precision leaves HBM and its next use loads it at its new size and home") {
  ExpertCache cache(1, 4, {.hbm_bytes = 3 * kB, .staging_bytes = kB});
  for (int e = 0; e < 3; ++e) cache.add_copy({0, e}, kB, Tier::kHostDram, Precision::kINT8, Hotness::kWarm);
  std::vector<ExpertKey> evicted;
  for (int e = 0; e < 3; ++e) REQUIRE(cache.access({0, e}, 5, evicted).outcome == CacheOutcome::kLoaded);
  // Same precision and size: only the home moves, the copy stays.
  cache.set_format({0, 0}, Precision::kINT8, kB, Tier::kNvme, evicted);
  CHECK(evicted.empty());
  CHECK(cache.is_resident({0, 0}));
  // Expert 1 goes to FP8 at twice the size: out of HBM at once, its old bytes freed.
  cache.set_format({0, 1}, Precision::kFP8, 2 * kB, Tier::kHostDram, evicted);
  REQUIRE(evicted.size() == 1);
  CHECK(evicted[0] == ExpertKey{0, 1});
  CHECK_FALSE(cache.is_resident({0, 1}));
  CHECK(cache.hbm_used() == 2 * kB);
  CHECK(cache.precision({0, 1}) == Precision::kFP8);
  CHECK(cache.bytes({0, 1}) == 2 * kB);
  // Its next use loads 2 kB, evicting the least recently used warm copy (0) to make room.
  evicted.clear();
  const CacheAccess a = cache.access({0, 1}, 5, evicted);
  CHECK(a.outcome == CacheOutcome::kLoaded);
  CHECK(a.bytes == 2 * kB);
  REQUIRE(evicted.size() == 1);
  CHECK(evicted[0] == ExpertKey{0, 0});
  CHECK(cache.hbm_used() == 3 * kB);
  // Expert 0's next load comes from its new home.
  evicted.clear();
  cache.set_hotness({0, 2}, Hotness::kHot, evicted);  // pinned: 0 must go through staging
  CHECK(cache.access({0, 0}, 5, evicted).source == Tier::kNvme);
}

TEST_CASE("prefetch candidates are the warm copies out of HBM whose window count passes the threshold") {
  // Random uses, admissions, reclassifications and batch ends; after each step the candidates equal the
  // list built from the public accessors.
  ExpertCache cache(
      2, 6,
      {.hbm_bytes = 5 * kB, .staging_bytes = 2 * kB, .prefetch_window_batches = 3, .prefetch_threshold = 6});
  std::vector<ExpertKey> keys;
  for (int l = 0; l < 2; ++l) {
    for (int e = 0; e < 6; ++e) {
      keys.push_back({l, e});
      cache.add_copy({l, e}, kB, Tier::kHostDram, Precision::kINT8,
                     e % 3 == 0 ? Hotness::kHot : Hotness::kWarm);
    }
  }
  const std::array<Hotness, 3> classes{Hotness::kHot, Hotness::kWarm, Hotness::kCold};
  Rng rng(11);
  std::vector<ExpertKey> evicted;
  std::vector<ExpertKey> listed;
  for (int step = 0; step < 2000; ++step) {
    const ExpertKey k = keys[rng.below(keys.size())];
    switch (rng.below(5)) {
      case 0:
      case 1:
        (void)cache.access(k, static_cast<std::int32_t>(rng.below(5)), evicted);
        break;
      case 2:
        (void)cache.admit(k, evicted);
        break;
      case 3:
        if (rng.below(2) == 0) {
          cache.set_hotness(k, classes[rng.below(3)], evicted);
        } else {
          const bool big = rng.below(2) == 0;
          cache.set_format(k, big ? Precision::kFP8 : Precision::kINT4, big ? kB : kB / 2, Tier::kHostDram,
                           evicted);
        }
        break;
      default:
        cache.end_batch();
    }
    cache.prefetch_candidates(listed);
    std::vector<ExpertKey> expected;
    for (const ExpertKey& key : keys) {
      if (cache.hotness(key) == Hotness::kWarm && !cache.is_resident(key) && cache.window_count(key) >= 6)
        expected.push_back(key);
    }
    REQUIRE(listed == expected);
    REQUIRE(cache.hbm_used() <= 5 * kB);
  }
}

}  // namespace moesim
