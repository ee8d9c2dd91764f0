#include "sim/serving/runtime/kv_migration.h"

#include <algorithm>

namespace moesim {

std::optional<Migration> choose_migration(std::span<const MigrationLoad> loads, const KvMigrationSpec& spec) {
  int most = -1;
  int least = -1;
  for (std::size_t i = 0; i < loads.size(); ++i) {
    const std::int64_t load = loads[i].in_system;
    if (most < 0 || load > loads[static_cast<std::size_t>(most)].in_system) most = static_cast<int>(i);
    if (least < 0 || load < loads[static_cast<std::size_t>(least)].in_system) least = static_cast<int>(i);
  }
  if (most < 0) return std::nullopt;
  const std::int64_t hi = loads[static_cast<std::size_t>(most)].in_system;
  const std::int64_t lo = loads[static_cast<std::size_t>(least)].in_system;
  if (most != least && hi - lo >= 2 &&
      static_cast<double>(hi) > spec.imbalance_ratio * static_cast<double>(std::max<std::int64_t>(lo, 1)) &&
      !loads[static_cast<std::size_t>(most)].migrating) {
    const auto n = static_cast<int>(std::min<std::int64_t>(spec.max_requests_per_check, (hi - lo) / 2));
    return Migration{.from = most, .to = least, .requests = n};
  }
  return std::nullopt;
}

}  // namespace moesim
