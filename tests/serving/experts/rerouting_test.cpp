// Router post-processing at count level: loads end within threshold x mean when possible, totals are
// conserved, and the re-routed count is exactly what moved.
#include "sim/serving/experts/rerouting.h"

#include <algorithm>
#include <catch2/catch.hpp>
#include <numeric>
#include <vector>

#include "workloads/expert_popularity.h"

namespace moesim {
namespace {

std::vector<double> gpu_loads(const Placement& p, const std::vector<std::int32_t>& counts) {
  std::vector<double> loads(static_cast<std::size_t>(p.gpus()), 0.0);
  for (int s = 0; s < p.slots(); ++s) {
    const auto e = static_cast<std::size_t>(p.phy2log(0)[static_cast<std::size_t>(s)]);
    loads[static_cast<std::size_t>(p.gpu_of_slot(s))] += static_cast<double>(counts[e]) / p.replicas(0)[e];
  }
  return loads;
}

}  // namespace

TEST_CASE("re-routing brings every GPU within the threshold and conserves routed pairs") {
  const int experts = 64;
  const int gpus = 8;
  const int top_k = 8;
  const std::int64_t tokens = 1024;
  auto probs = zipf_probabilities(experts, 1.0);
  cap_for_top_k(probs, top_k);
  const Placement p = contiguous_placement(1, experts, gpus);  // hottest experts share GPU 0
  Rng rng(8);
  Rerouter rerouter(gpus, p.slots_per_gpu());
  for (const double threshold : {1.1, 1.25, 1.5}) {
    std::vector<std::int32_t> counts(experts);
    sample_routing_counts(probs, tokens, top_k, rng, counts);
    const std::vector<std::int32_t> before = counts;
    const double mean = static_cast<double>(tokens * top_k) / gpus;
    const auto loads_before = gpu_loads(p, before);
    REQUIRE(*std::max_element(loads_before.begin(), loads_before.end()) > threshold * mean);
    const RerouteResult r = rerouter.apply(p, 0, probs, tokens, threshold, counts);
    const auto after = gpu_loads(p, counts);
    CHECK(r.within_threshold);
    CHECK(*std::max_element(after.begin(), after.end()) <= threshold * mean + 1e-9);
    CHECK(std::accumulate(counts.begin(), counts.end(), std::int64_t{0}) == tokens * top_k);
    std::int64_t decreases = 0;
    for (int e = 0; e < experts; ++e) {
      const auto u = static_cast<std::size_t>(e);
      decreases += std::max(0, before[u] - counts[u]);
      CHECK(counts[u] >= 0);
      CHECK(counts[u] <= tokens);
    }
    CHECK(r.rerouted == decreases);
    CHECK(r.rerouted > 0);
  }
}

TEST_CASE("re-routing leaves a balanced layer alone") {
  const Placement p = round_robin_placement(1, 16, 4);
  std::vector<std::int32_t> counts(16, 100);
  const std::vector<double> probs(16, 1.0 / 16);
  Rerouter rerouter(4, p.slots_per_gpu());
  const RerouteResult r = rerouter.apply(p, 0, probs, 400, 1.2, counts);
  CHECK(r.rerouted == 0);
  CHECK(r.within_threshold);
}

TEST_CASE("re-routing reports failure when replicated experts are the only donors") {
  // 3 experts on 2 GPUs x 2 slots: expert 0 fills GPU 0 with two replicas, so GPU 0 has no single-copy donor.
  Placement p(1, 3, 2, 2);
  const std::vector<int> map = {0, 0, 1, 2};
  std::copy(map.begin(), map.end(), p.mutable_phy2log(0).begin());
  p.finalize();
  std::vector<std::int32_t> counts = {300, 10, 10};
  const std::vector<double> probs = {0.9, 0.05, 0.05};
  Rerouter rerouter(2, 2);
  const RerouteResult r = rerouter.apply(p, 0, probs, 300, 1.1, counts);
  CHECK_FALSE(r.within_threshold);
  CHECK(r.rerouted == 0);
  CHECK(counts[0] == 300);
}

}  // namespace moesim
