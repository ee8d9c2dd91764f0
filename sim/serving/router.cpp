#include "sim/serving/router.h"

namespace moesim {

std::unique_ptr<Router> make_router(const ScenarioSpec& s) {
  if (s.deployment.router == RouterPolicy::kRoundRobin) return std::make_unique<RoundRobinRouter>();
  if (s.experts.load_aware_admission) return std::make_unique<LoadAwareRouter>();
  return std::make_unique<LeastLoadedRouter>();
}

int RoundRobinRouter::route(std::span<const GroupLoad> groups) {
  return static_cast<int>(next_++ % static_cast<std::int64_t>(groups.size()));
}

int LeastLoadedRouter::route(std::span<const GroupLoad> groups) {
  int best = 0;
  std::int64_t best_load = 0;
  for (std::size_t i = 0; i < groups.size(); ++i) {
    const std::int64_t load = groups[i].running + groups[i].waiting;
    if (i == 0 || load < best_load) {
      best_load = load;
      best = static_cast<int>(i);
    }
  }
  return best;
}

int LoadAwareRouter::route(std::span<const GroupLoad> groups) {
  // Groups that have not stepped yet count as the least busy (ratio 1), never as idle.
  double min_busy = 0;
  for (const GroupLoad& g : groups) {
    if (g.busy_s > 0 && (min_busy == 0 || g.busy_s < min_busy)) min_busy = g.busy_s;
  }
  int best = 0;
  double best_load = 0;
  for (std::size_t i = 0; i < groups.size(); ++i) {
    const GroupLoad& g = groups[i];
    const double ratio = min_busy > 0 && g.busy_s > 0 ? g.busy_s / min_busy : 1.0;
    const double load = (static_cast<double>(g.running + g.waiting) + 1.0) * ratio;
    if (i == 0 || load < best_load) {
      best_load = load;
      best = static_cast<int>(i);
    }
  }
  return best;
}

}  // namespace moesim
