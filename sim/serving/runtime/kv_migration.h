// KV migration (deployment.kv_migration): which instance of a decode pool gives how many running requests to
// which, a pure decision on a read-only view of the instances' loads. The cluster carries it out (the
// requests leave at the giver's next step boundary and their KV caches cross the fabric).
#pragma once

#include <cstdint>
#include <optional>
#include <span>

#include "sim/serving/spec/scenario_spec.h"

namespace moesim {

// One instance of the pool as the policy sees it.
struct MigrationLoad {
  std::int64_t in_system = 0;  // running + waiting requests
  bool migrating = false;      // its previous migration is still under way
};

// Instance `from` gives up to `requests` running decode requests to instance `to` (indices into the view).
struct Migration {
  int from = 0;
  int to = 0;
  int requests = 0;
  auto operator<=>(const Migration&) const = default;
};

// The most loaded instance (the first of equals) gives requests to the least loaded (the first of equals)
// when its load passes imbalance_ratio x the least loaded's (an empty one counts as 1), they differ by two
// or more, and it is not migrating already: half the difference, at most max_requests_per_check. None
// otherwise. O(instances).
[[nodiscard]] std::optional<Migration> choose_migration(std::span<const MigrationLoad> loads,
                                                        const KvMigrationSpec& spec);

}  // namespace moesim
