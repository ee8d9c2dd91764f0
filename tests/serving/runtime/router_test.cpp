// Routers on hand-built views of the attention groups' load.
#include "sim/serving/runtime/router.h"

#include <catch2/catch.hpp>
#include <vector>

using namespace moesim;

TEST_CASE("the round-robin router visits every group in turn") {
  RoundRobinRouter r;
  const std::vector<GroupLoad> g(3);
  std::vector<int> picks;
  for (int i = 0; i < 7; ++i) picks.push_back(r.route(g));
  REQUIRE(picks == std::vector<int>{0, 1, 2, 0, 1, 2, 0});
}

TEST_CASE("the least-loaded router picks the fewest running plus waiting, the first on ties") {
  LeastLoadedRouter r;
  const std::vector<GroupLoad> g{
      {.running = 3, .waiting = 1}, {.running = 1, .waiting = 2}, {.running = 0, .waiting = 3}};
  REQUIRE(r.route(g) == 1);  // loads 4, 3, 3: group 1 is the first of the two least loaded
  const std::vector<GroupLoad> idle{{.running = 2}, {.running = 0}, {.running = 0}};
  REQUIRE(r.route(idle) == 1);
}

TEST_CASE("the load-aware router weighs each queue by its GPUs' busy time relative to the least busy") {
  LoadAwareRouter r;
  // (queue + 1) x busy / min busy: group 0: (1 + 1) x 3/1 = 6; group 1: (3 + 1) x 1 = 4; group 2: (2 + 1) x 2
  // = 6.
  const std::vector<GroupLoad> g{
      {.running = 1, .busy_s = 3e-3}, {.running = 3, .busy_s = 1e-3}, {.running = 2, .busy_s = 2e-3}};
  REQUIRE(r.route(g) == 1);
  // A least-loaded router would have picked group 0.
  LeastLoadedRouter plain;
  REQUIRE(plain.route(g) == 0);
  // A group that has not stepped yet counts as the least busy (ratio 1), not as idle.
  const std::vector<GroupLoad> fresh{{.running = 1, .busy_s = 1e-3}, {.running = 2, .busy_s = 0}};
  REQUIRE(r.route(fresh) == 0);  // 2 x 1 vs 3 x 1
}

TEST_CASE("make_router follows deployment.router and the load-aware admission switch") {
  ScenarioSpec s;
  s.deployment.router = "round_robin";
  REQUIRE(dynamic_cast<RoundRobinRouter*>(make_router(s).get()) != nullptr);
  s.deployment.router = "least_loaded";
  REQUIRE(dynamic_cast<LeastLoadedRouter*>(make_router(s).get()) != nullptr);
  s.experts.load_aware_admission = true;
  REQUIRE(dynamic_cast<LoadAwareRouter*>(make_router(s).get()) != nullptr);
}

TEST_CASE("the cache-aware router weighs the prefill a cached prefix saves against the blocks queued") {
  CacheAwareRouter r;
  // Costs (blocks to prefill + active blocks): 10 - 6 + 20 = 24; 10 - 2 + 10 = 18; 10 - 0 + 9 = 19.
  std::vector<GroupLoad> g{
      {.running = 3, .prompt_blocks = 10, .cached_prefix_blocks = 6, .active_kv_blocks = 20},
      {.running = 1, .prompt_blocks = 10, .cached_prefix_blocks = 2, .active_kv_blocks = 10},
      {.running = 2, .prompt_blocks = 10, .cached_prefix_blocks = 0, .active_kv_blocks = 9}};
  CHECK(r.route(g) == 1);  // the longest prefix does not pay for the queue in front of it
  // With 11 blocks less queued, the prefix wins: 10 - 6 + 9 = 13 < 18.
  g[0].active_kv_blocks = 9;
  CHECK(r.route(g) == 0);
  // Equal costs (13): the fewer requests.
  g[2].active_kv_blocks = 3;  // 10 - 0 + 3 = 13
  CHECK(r.route(g) == 2);     // 2 requests against 3
  // Nothing cached anywhere: the fewest active blocks, as a least-loaded router in blocks.
  for (GroupLoad& x : g) x.cached_prefix_blocks = 0;
  CHECK(r.route(g) == 2);
}

TEST_CASE("the KV-aware router picks the least summed share of sequences and KV blocks") {
  KvAwareRouter r(100);  // 100 sequences a group
  // Shares: 10/100 + 100/1000 = 0.2; 2/100 + 500/1000 = 0.52; 30/100 + 0/1000 = 0.3.
  const std::vector<GroupLoad> g{{.running = 10, .free_kv_blocks = 900, .total_kv_blocks = 1000},
                                 {.running = 2, .free_kv_blocks = 500, .total_kv_blocks = 1000},
                                 {.running = 30, .free_kv_blocks = 1000, .total_kv_blocks = 1000}};
  REQUIRE(r.route(g) == 0);  // blocks alone would pick the third, sequences alone the second
  // Many sequences weigh against an empty pool: 50/100 + 0 = 0.5 against 5/100 + 300/1000 = 0.35.
  const std::vector<GroupLoad> seqs{
      {.running = 40, .waiting = 10, .free_kv_blocks = 1000, .total_kv_blocks = 1000},
      {.running = 5, .free_kv_blocks = 700, .total_kv_blocks = 1000}};
  REQUIRE(r.route(seqs) == 1);
  // Equal shares (0.1 + 0.2 = 0.2 + 0.1): the fewer requests.
  const std::vector<GroupLoad> tie{{.running = 20, .free_kv_blocks = 900, .total_kv_blocks = 1000},
                                   {.running = 10, .free_kv_blocks = 800, .total_kv_blocks = 1000}};
  REQUIRE(r.route(tie) == 1);
}

TEST_CASE("the scenario's router names pick their policies") {
  DeploymentSpec d;
  d.router = "kv_aware";
  // Shares with 256 sequences a group: 0 + 9/10 against 5/256 + 8/10.
  const std::vector<GroupLoad> g{{.running = 0, .free_kv_blocks = 1, .total_kv_blocks = 10},
                                 {.running = 5, .free_kv_blocks = 2, .total_kv_blocks = 10}};
  REQUIRE(make_router(d, false)->route(g) == 1);
  d.router = "least_loaded";
  REQUIRE(make_router(d, false)->route(g) == 0);
}

TEST_CASE("every router of the table builds, and says what it reads as its entry does") {
  REQUIRE(routers().size() >= 4);
  for (const RouterEntry& e : routers()) {
    INFO(e.name);
    DeploymentSpec d;
    d.router = std::string(e.name);
    const std::unique_ptr<Router> r = make_router(d, false);
    REQUIRE(r != nullptr);
    CHECK(r->reads_prefix_cache() == e.needs_prefix_caching);
    CHECK(find_router(e.name) == &e);
    CHECK_FALSE(e.what.empty());
  }
  CHECK(find_router("no_such_router") == nullptr);
  // The load-aware admission takes least_loaded's place only.
  DeploymentSpec d;
  d.router = "least_loaded";
  CHECK(dynamic_cast<LoadAwareRouter*>(make_router(d, true).get()) != nullptr);
  d.router = "round_robin";
  CHECK(dynamic_cast<RoundRobinRouter*>(make_router(d, true).get()) != nullptr);
}
