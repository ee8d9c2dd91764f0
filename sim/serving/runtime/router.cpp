#include "sim/serving/runtime/router.h"

#include <algorithm>
#include <string>

#include "sim/engine/check.h"

namespace moesim {

std::unique_ptr<Router> make_router(const ScenarioSpec& s) {
  return make_router(s.deployment, s.experts.load_aware_admission);
}

namespace {

template <class R>
std::unique_ptr<Router> make(const DeploymentSpec& /*d*/) {
  return std::make_unique<R>();
}

// The routers a scenario can name; a new router adds its line here.
constexpr RouterEntry kRouters[] = {
    {"least_loaded", "the fewest running + waiting requests (vLLM/SGLang DP attention)", false,
     make<LeastLoadedRouter>},
    {"round_robin", "each attention group in turn", false, make<RoundRobinRouter>},
    {"kv_aware", "the least used sequences and KV blocks, as shares (decode pools)", false,
     [](const DeploymentSpec& d) -> std::unique_ptr<Router> {
       return std::make_unique<KvAwareRouter>(d.max_batch_size);
     }},
    {"cache_aware", "prefill saved by a cached prefix against active KV blocks (Dynamo's KV router)", true,
     make<CacheAwareRouter>},
};

}  // namespace

std::span<const RouterEntry> routers() { return kRouters; }

const RouterEntry* find_router(std::string_view name) {
  for (const RouterEntry& e : kRouters)
    if (e.name == name) return &e;
  return nullptr;
}

std::unique_ptr<Router> make_router(const DeploymentSpec& d, bool load_aware_admission) {
  if (load_aware_admission && d.router == "least_loaded") return std::make_unique<LoadAwareRouter>();
  const RouterEntry* e = find_router(d.router);
  MOESIM_CHECK(e != nullptr, "deployment.router \"" + d.router + "\" is not in the router table");
  return e->make(d);
}

void LoadIndex::reset(std::size_t groups) {
  keys_.assign(groups, LoadKey{});
  leaves_ = 1;
  while (leaves_ < groups) leaves_ *= 2;
  winner_.assign(2 * leaves_, -1);
  for (std::size_t i = 0; i < groups; ++i) winner_[leaves_ + i] = static_cast<int>(i);
  for (std::size_t k = leaves_ - 1; k >= 1; --k) winner_[k] = better(winner_[2 * k], winner_[2 * k + 1]);
}

int LoadIndex::better(int a, int b) const {
  if (a < 0) return b;
  if (b < 0) return a;
  // a < b always (a comes from the left subtree): a wins ties.
  return keys_[static_cast<std::size_t>(b)] < keys_[static_cast<std::size_t>(a)] ? b : a;
}

void LoadIndex::set(std::size_t i, LoadKey key) {
  if (keys_[i] == key) return;
  keys_[i] = key;
  for (std::size_t k = (leaves_ + i) / 2; k >= 1; k /= 2)
    winner_[k] = better(winner_[2 * k], winner_[2 * k + 1]);
}

int KvAwareRouter::route(std::span<const GroupLoad> groups) {
  int best = 0;
  for (std::size_t i = 1; i < groups.size(); ++i) {
    if (key(groups[i]) < key(groups[static_cast<std::size_t>(best)])) best = static_cast<int>(i);
  }
  return best;
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

int CacheAwareRouter::route(std::span<const GroupLoad> groups) {
  int best = 0;
  for (std::size_t i = 1; i < groups.size(); ++i) {
    const GroupLoad& g = groups[i];
    const GroupLoad& b = groups[static_cast<std::size_t>(best)];
    const std::int64_t cg = cost(g);
    const std::int64_t cb = cost(b);
    if (cg < cb || (cg == cb && g.running + g.waiting < b.running + b.waiting)) best = static_cast<int>(i);
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
