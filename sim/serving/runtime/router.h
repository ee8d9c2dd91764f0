// Routers (docs/architecture.md "The serving runtime"): a policy that picks the attention group (a DP rank of
// a replica) for each arriving request from a read-only view of every group's load. A new router is its
// class (a file of its own) plus its line in kRouters (router.cpp): the scenario parser, the error messages
// and make_router read that table.
#pragma once

#include <cstdint>
#include <memory>
#include <span>
#include <string_view>
#include <vector>

#include "sim/serving/spec/scenario_spec.h"

namespace moesim {

// One attention group as a router sees it; groups are numbered replica-major.
struct GroupLoad {
  std::int64_t running = 0;
  std::int64_t waiting = 0;
  double busy_s = 0;  // EWMA of its GPUs' busy time per step (0 before its first step)
  // Filled for the cache-aware router only: the request's full prompt blocks, how many leading ones this
  // group's prefix cache holds, and how many blocks it caches in all.
  std::int64_t prompt_blocks = 0;
  std::int64_t cached_prefix_blocks = 0;
  std::int64_t cached_blocks = 0;
  std::int64_t free_kv_blocks = 0;
  std::int64_t total_kv_blocks = 0;  // the group's KV pool
  // Blocks held by its running requests plus those its waiting requests' tokens to compute will take
  // (Dynamo's active blocks: everything routed to the group and not finished).
  std::int64_t active_kv_blocks = 0;
  bool accepting = true;  // false: its instance takes no new requests (the planner's idle, loading, draining)
};

// A router's ordering of the groups when its pick is the group with the smallest key, the first on ties:
// `primary`, then `secondary` (compared as integers, so no rounding can reorder two groups).
struct LoadKey {
  std::int64_t primary = 0;
  std::int64_t secondary = 0;
  auto operator<=>(const LoadKey&) const = default;
};

// How a router reads the groups, so that the host fills only what it reads.
enum class RouterView {
  kLoads,  // route() reads every group's GroupLoad: the host fills them all before each route
  kKey,    // the first group with the smallest key(): the host may keep a LoadIndex and route from it
  kCount,  // route() reads only the number of groups
};

class Router {
 public:
  virtual ~Router() = default;
  // Index into `groups` of the group that takes the next request. `groups` is not empty.
  virtual int route(std::span<const GroupLoad> groups) = 0;
  [[nodiscard]] virtual RouterView view() const { return RouterView::kLoads; }
  // True when route() reads the groups' prefix-cache fields (the host probes each group's cache for the
  // request's prompt blocks; the scenario must turn deployment.prefix_caching on).
  [[nodiscard]] virtual bool reads_prefix_cache() const { return false; }
  // For a kKey router: the key whose first smallest group route() picks.
  [[nodiscard]] virtual LoadKey key(const GroupLoad& g) const {
    (void)g;
    return {};
  }
};

// The first group with the smallest key, kept up to date one group at a time: a tournament tree over the
// groups (each node holds the winner of its two children), so a change costs O(log groups) and the pick
// O(1) instead of a scan of every group per route. Same pick as the scan: ties go to the lower index.
class LoadIndex {
 public:
  // `groups` groups, every key zero.
  void reset(std::size_t groups);
  [[nodiscard]] std::size_t size() const { return keys_.size(); }
  // Sets group `i`'s key; O(log groups) when it changed, O(1) when not.
  void set(std::size_t i, LoadKey key);
  [[nodiscard]] const LoadKey& key(std::size_t i) const { return keys_[i]; }
  // The first group with the smallest key. The index is not empty.
  [[nodiscard]] int best() const { return winner_[1]; }

 private:
  [[nodiscard]] int better(int a, int b) const;

  std::vector<LoadKey> keys_;
  std::vector<int> winner_;  // heap order: node k's children are 2k and 2k+1; leaves from leaves_; -1: none
  std::size_t leaves_ = 1;
};

// A router a scenario can name: deployment.router = `name`.
struct RouterEntry {
  std::string_view name;
  std::string_view what;              // one line for --help and error messages
  bool needs_prefix_caching = false;  // its router reads the groups' prefix caches
  std::unique_ptr<Router> (*make)(const DeploymentSpec& d) = nullptr;
};
// Every router, in the order error messages list them.
[[nodiscard]] std::span<const RouterEntry> routers();
// The entry named `name`, or nullptr.
[[nodiscard]] const RouterEntry* find_router(std::string_view name);

// The router the scenario names (deployment.router; experts.admission = gpu_load_aware puts the
// load-aware router in least_loaded's place).
std::unique_ptr<Router> make_router(const ScenarioSpec& s);
// The router of a pool with deployment `d` (a decode pool's: deployment.pools[i].router).
std::unique_ptr<Router> make_router(const DeploymentSpec& d, bool load_aware_admission);

// Each group in turn.
class RoundRobinRouter final : public Router {
 public:
  int route(std::span<const GroupLoad> groups) override;
  [[nodiscard]] RouterView view() const override { return RouterView::kCount; }

 private:
  std::int64_t next_ = 0;
};

// The group with the fewest running + waiting requests (first on ties): vLLM/SGLang DP attention.
class LeastLoadedRouter final : public Router {
 public:
  int route(std::span<const GroupLoad> groups) override;
  [[nodiscard]] RouterView view() const override { return RouterView::kKey; }
  [[nodiscard]] LoadKey key(const GroupLoad& g) const override { return {.primary = g.running + g.waiting}; }
};

// Cache-aware routing as Dynamo's KV router does it (docs/router/kv_cache_routing.md and
// docs/design_docs/router_design.md; lib/llm/src/kv_router/scheduler.rs DefaultWorkerSelector): each
// group's cost is kv_overlap_score_weight (1) x the prompt blocks it would have to prefill (those past its
// cached prefix) + its active blocks (held by its running requests and to be taken by its waiting ones);
// the cheapest group takes the request (router temperature 0), ties to the fewest requests, then the
// first. A long cached prefix wins only while it saves more prefill than the queue in front of it costs.
// SGLang's sgl-router rule (src/policies/cache_aware.rs: least loaded only past an imbalance of 32
// requests and 1.1x, else the longest prefix match over half the prompt, else the smallest tree) is not
// followed: below 32 requests of imbalance it ignores load, and with few long prompts per DP rank it
// queued prompts behind each other on the ranks that cached them (Mooncake conversation trace: hit rate
// 18.3% against 7.1%, mean TTFT 13.6 s against 8.4 s least loaded).
class CacheAwareRouter final : public Router {
 public:
  static constexpr std::int64_t kOverlapScoreWeight = 1;  // --kv-overlap-score-weight default
  int route(std::span<const GroupLoad> groups) override;
  [[nodiscard]] bool reads_prefix_cache() const override { return true; }
  [[nodiscard]] static std::int64_t cost(const GroupLoad& g) {
    return kOverlapScoreWeight * (g.prompt_blocks - g.cached_prefix_blocks) + g.active_kv_blocks;
  }
};

// KV-aware: the group whose two capacities, sequences and KV blocks, are least used, summed as shares:
// (running + waiting) / max_batch_size + used blocks / pool blocks (ties: the fewest requests, then the
// first). Dynamo's KV router (docs/router/kv_cache_routing.md, docs/design_docs/router_design.md:
// cost = kv_overlap_score_weight x new prefill blocks + active decode blocks) weighs blocks alone, as
// this router did: under data-parallel attention every rank waits for the busiest, whose step grows with
// its sequences (routed tokens, per-sequence kernels) as much as with its KV, and block-only routing sent
// new requests to ranks of many young, short sequences (DeepSeek-V3 EP72 decode: mean step 43.2 ms
// against 37.7 ms least loaded). The share of each capacity is the load of both that SGLang's
// schedulers bound (max_running_requests and the token pool). No prefix overlap term: kv_aware routes
// requests whose KV is computed (decode pools); cache_aware weighs overlap.
class KvAwareRouter final : public Router {
 public:
  explicit KvAwareRouter(int max_seqs = 256) : max_seqs_(max_seqs) {}
  int route(std::span<const GroupLoad> groups) override;
  [[nodiscard]] RouterView view() const override { return RouterView::kKey; }
  // The summed shares over the common denominator max_batch_size x pool blocks, exact in integers.
  [[nodiscard]] LoadKey key(const GroupLoad& g) const override {
    const std::int64_t seqs = g.running + g.waiting;
    const std::int64_t used = g.total_kv_blocks - g.free_kv_blocks;
    return {.primary = seqs * g.total_kv_blocks + used * max_seqs_, .secondary = seqs};
  }

 private:
  std::int64_t max_seqs_;
};

// Least loaded, with each group's (queue + 1) weighted by its GPUs' recent busy time relative to the least
// busy group's, so new requests avoid DP ranks whose GPUs hold the hot experts (seed section 7).
class LoadAwareRouter final : public Router {
 public:
  int route(std::span<const GroupLoad> groups) override;
};

}  // namespace moesim
