// The KV migration policy on hand-built views of a pool's instances: who gives how many requests to whom,
// and when nothing moves (balanced, below the ratio, a difference under two, a migration under way).
#include "sim/serving/runtime/kv_migration.h"

#include <algorithm>
#include <catch2/catch.hpp>
#include <vector>

using namespace moesim;

namespace {

KvMigrationSpec ratio(double r, int max_requests = 8) {
  return KvMigrationSpec{.imbalance_ratio = r, .max_requests_per_check = max_requests};
}

std::vector<MigrationLoad> loads(const std::vector<std::int64_t>& in_system) {
  std::vector<MigrationLoad> out;
  for (const std::int64_t n : in_system) out.push_back(MigrationLoad{.in_system = n});
  return out;
}

}  // namespace

TEST_CASE("the most loaded instance gives half the difference to the least loaded") {
  const std::vector<MigrationLoad> v = loads({5, 12, 3, 9});
  const auto m = choose_migration(v, ratio(1.5));
  REQUIRE(m);
  CHECK(m->from == 1);
  CHECK(m->to == 2);
  CHECK(m->requests == (12 - 3) / 2);
}

TEST_CASE("a migration moves at most max_requests_per_check requests") {
  const auto m = choose_migration(loads({40, 0}), ratio(1.5, 6));
  REQUIRE(m);
  CHECK(m->requests == std::min(6, (40 - 0) / 2));
}

TEST_CASE("ties go to the first most loaded and the first least loaded instance") {
  const auto m = choose_migration(loads({2, 10, 2, 10}), ratio(2.0));
  REQUIRE(m);
  CHECK(*m == Migration{.from = 1, .to = 0, .requests = 4});
}

TEST_CASE("nothing moves while the most loaded is within the ratio of the least loaded") {
  // 10 > 2 x 4 = 8 migrates; 8 is not above 2 x 4.
  CHECK(choose_migration(loads({4, 10}), ratio(2.0)));
  CHECK_FALSE(choose_migration(loads({4, 8}), ratio(2.0)));
  // An empty instance counts as one request: 3 > 2 x 1 with a difference of 3.
  CHECK(choose_migration(loads({0, 3}), ratio(2.0)));
  CHECK_FALSE(choose_migration(loads({0, 2}), ratio(2.0)));
}

TEST_CASE("nothing moves for a difference under two requests, between equals or for one instance") {
  // 1 > 1.5 x max(0, 1) but half of a difference of one is nothing.
  CHECK_FALSE(choose_migration(loads({0, 1}), ratio(1.5)));
  CHECK_FALSE(choose_migration(loads({7, 7, 7}), ratio(1.5)));
  CHECK_FALSE(choose_migration(loads({30}), ratio(1.5)));
  CHECK_FALSE(choose_migration(std::vector<MigrationLoad>{}, ratio(1.5)));
}

TEST_CASE("an instance whose previous migration is under way gives nothing more") {
  std::vector<MigrationLoad> v = loads({1, 20, 6});
  v[1].migrating = true;
  CHECK_FALSE(choose_migration(v, ratio(1.5)));
  // The destination's own migration does not stop it.
  v[1].migrating = false;
  v[0].migrating = true;
  const auto m = choose_migration(v, ratio(1.5));
  REQUIRE(m);
  CHECK(*m == Migration{.from = 1, .to = 0, .requests = 8});
}
