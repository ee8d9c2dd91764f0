// Cost of partition_layer, the co-activation graph partition that a co-activation placement runs per MoE
// layer at start and at every rebalance: DeepSeek-V3 shape (256 experts, top-8, co-activation groups of 8,
// rho 0.5) over 8, 16 and 32 GPUs, under the 80/20 Pareto law of the reference scenarios (expert order
// shuffled) and under uniform load. Counters give the quality of the result: cut (cut_weight, the affinity
// between experts on different GPUs) and max_mean (max over GPUs / mean GPU load).
#include <benchmark/benchmark.h>

#include <algorithm>
#include <numeric>
#include <utility>
#include <vector>

#include "sim/serving/experts/placement.h"
#include "workloads/coactivation.h"
#include "workloads/expert_popularity.h"

namespace {

constexpr int kExperts = 256;
constexpr int kTopK = 8;

// Per-expert load: 80/20 Pareto law with the expert order shuffled, or uniform.
std::vector<double> loads(bool pareto) {
  if (!pareto) return std::vector<double>(kExperts, 1.0 / kExperts);
  const double s = moesim::zipf_exponent_for_top_share(kExperts, kTopK, 0.2, 0.8);
  auto p = moesim::zipf_probabilities(kExperts, s);
  moesim::cap_for_top_k(p, kTopK);
  moesim::Rng rng(2);
  for (std::size_t i = p.size() - 1; i > 0; --i) std::swap(p[i], p[rng.below(i + 1)]);
  return p;
}

void BM_PartitionLayer(benchmark::State& state) {
  const int gpus = static_cast<int>(state.range(0));
  const bool pareto = state.range(1) != 0;
  const auto load = loads(pareto);
  const moesim::CoactivationModel model({.group_size = 8, .rho = 0.5}, 1, kExperts, moesim::Rng(3));
  std::vector<double> affinity(static_cast<std::size_t>(kExperts) * kExperts);
  moesim::coactivation_affinity(model, 0, load, kTopK, affinity);
  std::vector<int> slots(kExperts);
  const moesim::PartitionSpec spec{};
  for (auto _ : state) {
    moesim::partition_layer(load, affinity, gpus, spec, slots);
    benchmark::DoNotOptimize(slots.data());
  }
  // Quality of the last result (every iteration computes the same partition).
  const int per_gpu = kExperts / gpus;
  std::vector<double> gpu_load(static_cast<std::size_t>(gpus), 0.0);
  for (int s = 0; s < kExperts; ++s) {
    gpu_load[static_cast<std::size_t>(s / per_gpu)] +=
        load[static_cast<std::size_t>(slots[static_cast<std::size_t>(s)])];
  }
  const double mean = std::accumulate(gpu_load.begin(), gpu_load.end(), 0.0) / gpus;
  std::vector<int> sorted = slots;
  std::sort(sorted.begin(), sorted.end());
  bool permutation = true;
  for (int e = 0; e < kExperts; ++e) permutation = permutation && sorted[static_cast<std::size_t>(e)] == e;
  if (!permutation) state.SkipWithError("partition is not a permutation of the experts");
  state.counters["cut"] = moesim::cut_weight(affinity, slots, per_gpu);
  state.counters["max_mean"] = *std::max_element(gpu_load.begin(), gpu_load.end()) / mean;
}
BENCHMARK(BM_PartitionLayer)
    ->ArgNames({"gpus", "pareto"})
    ->Args({8, 1})
    ->Args({16, 1})
    ->Args({32, 1})
    ->Args({8, 0})
    ->Args({16, 0})
    ->Args({32, 0})
    ->Unit(benchmark::kMicrosecond);

}  // namespace

BENCHMARK_MAIN();
