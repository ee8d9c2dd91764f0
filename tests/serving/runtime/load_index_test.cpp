// The routers' load index (router.h LoadIndex) against the linear scan it replaces: on random sequences of
// load changes, the index picks the same group as the router's scan of every group, ties included.
#include <catch2/catch.hpp>
#include <cstdint>
#include <random>
#include <vector>

#include "sim/serving/runtime/router.h"

using namespace moesim;

namespace {

// Changes one random group at a time (small ranges, so ties are frequent) and checks, after each change,
// the index's pick against the router's scan and against the first smallest key found here.
void check_against_scan(Router& router, std::size_t groups, int changes, std::uint64_t seed) {
  std::mt19937_64 rng(seed);
  auto draw = [&rng](std::int64_t hi) {
    return static_cast<std::int64_t>(rng() % static_cast<std::uint64_t>(hi + 1));
  };
  std::vector<GroupLoad> loads(groups);
  LoadIndex index;
  index.reset(groups);
  for (std::size_t i = 0; i < groups; ++i) index.set(i, router.key(loads[i]));
  for (int c = 0; c < changes; ++c) {
    const auto i = static_cast<std::size_t>(rng() % groups);
    loads[i] =
        GroupLoad{.running = draw(3), .waiting = draw(2), .free_kv_blocks = draw(3), .total_kv_blocks = 3};
    index.set(i, router.key(loads[i]));
    std::size_t first_min = 0;
    for (std::size_t k = 1; k < groups; ++k) {
      if (router.key(loads[k]) < router.key(loads[first_min])) first_min = k;
    }
    REQUIRE(index.best() == router.route(loads));
    REQUIRE(static_cast<std::size_t>(index.best()) == first_min);
  }
}

}  // namespace

TEST_CASE("the load index picks what the least-loaded router's scan picks, ties to the first") {
  LeastLoadedRouter router;
  REQUIRE(router.view() == RouterView::kKey);
  for (const std::size_t groups : {1UL, 2UL, 3UL, 7UL, 16UL, 100UL, 1024UL})
    check_against_scan(router, groups, 3000, 11 + groups);
}

TEST_CASE(
    "the load index picks what the KV-aware router's scan picks, ties to the least loaded, then the first") {
  KvAwareRouter router(4);
  REQUIRE(router.view() == RouterView::kKey);
  for (const std::size_t groups : {1UL, 2UL, 5UL, 33UL, 72UL, 1000UL})
    check_against_scan(router, groups, 3000, 97 + groups);
}

TEST_CASE("the load index starts with every key zero and the first group as its pick") {
  LoadIndex index;
  index.reset(5);
  REQUIRE(index.size() == 5);
  REQUIRE(index.best() == 0);
  index.set(0, {.primary = 1});
  REQUIRE(index.best() == 1);
  index.set(3, {.primary = -1});
  REQUIRE(index.best() == 3);
  index.set(3, {.primary = 0, .secondary = 1});  // (0, 1) loses to groups 1, 2 and 4's (0, 0)
  REQUIRE(index.best() == 1);
  REQUIRE(index.key(3) == LoadKey{.primary = 0, .secondary = 1});
}

TEST_CASE("routers that read more than a key or nothing but the count say so") {
  REQUIRE(RoundRobinRouter().view() == RouterView::kCount);
  REQUIRE(LoadAwareRouter().view() == RouterView::kLoads);
  REQUIRE(CacheAwareRouter().view() == RouterView::kLoads);
}
