// Cost of the routing samplers and touch fractions that StepPlanner calls per layer and step (or per drift
// update): DeepSeek-V3 shape (256 experts, top-8) under the 80/20 Pareto law of the reference scenarios.
#include <benchmark/benchmark.h>

#include <numeric>
#include <vector>

#include "workloads/coactivation.h"
#include "workloads/expert_popularity.h"
#include "workloads/popularity_drift.h"

namespace {

constexpr int kExperts = 256;
constexpr int kTopK = 8;

moesim::ExpertPopularity pareto(int layers) {
  const double s = moesim::zipf_exponent_for_top_share(kExperts, kTopK, 0.2, 0.8);
  return {{.kind = moesim::PopularitySpec::Kind::kZipf, .zipf_exponent = s},
          layers,
          kExperts,
          kTopK,
          moesim::Rng(1)};
}

void BM_RoutingSample(benchmark::State& state) {
  const auto pop = pareto(1);
  const auto layer = moesim::RoutingSampler::prepare(pop.layer(0), kTopK);
  moesim::RoutingSampler sampler(kExperts);
  moesim::Rng rng(2);
  std::vector<std::int32_t> counts(kExperts);
  const std::int64_t tokens = state.range(0);
  for (auto _ : state) {
    sampler.sample(layer, tokens, rng, counts);
    benchmark::DoNotOptimize(counts.data());
  }
  state.SetItemsProcessed(state.iterations());
}
BENCHMARK(BM_RoutingSample)->ArgName("tokens")->Arg(64)->Arg(512)->Arg(1024)->Arg(8192);

// Binned routing as a decode step draws it: 8 GPUs of 32 experts (expert e on GPU e mod 8), the cold experts
// one by one with their sums tallied per GPU. items = experts drawn per second.
// One Pareto layer over kBins GPUs, expert e on GPU e mod kBins.
constexpr int kBins = 8;
struct BinnedLayer {
  moesim::RoutingSampler::Layer layer = moesim::RoutingSampler::prepare(pareto(1).layer(0), kTopK);
  moesim::RoutingSampler::Bins bins = moesim::RoutingSampler::bin(layer, gpu_of_expert(), kBins);
  static std::vector<int> gpu_of_expert() {
    std::vector<int> bin_of(kExperts);
    for (int e = 0; e < kExperts; ++e) bin_of[static_cast<std::size_t>(e)] = e % kBins;
    return bin_of;
  }
};

void BM_RoutingSampleBinned(benchmark::State& state) {
  const BinnedLayer binned;
  const auto& layer = binned.layer;
  const auto& bins = binned.bins;
  moesim::RoutingSampler sampler(kExperts);
  moesim::Rng rng(2);
  std::vector<std::int32_t> cold(kExperts);
  std::vector<std::int64_t> bin_pairs(kBins);
  std::vector<std::int32_t> bin_hot(kBins);
  std::vector<moesim::RoutingSampler::Tally> tally(moesim::RoutingSampler::kTallyCounts);
  for (std::size_t n = 0; n < tally.size(); ++n) tally[n] = {.a = n | n << 32, .b = std::uint64_t{n > 0}};
  std::vector<moesim::RoutingSampler::Tally> bin_cold(kBins);
  const std::int64_t tokens = state.range(0);
  for (auto _ : state) {
    sampler.sample_binned(layer, bins, tokens, rng, cold, bin_pairs, bin_hot, tally, bin_cold);
    benchmark::DoNotOptimize(bin_cold.data());
  }
  state.SetItemsProcessed(state.iterations() * kExperts);
}
BENCHMARK(BM_RoutingSampleBinned)->ArgName("tokens")->Arg(8)->Arg(16)->Arg(32)->Arg(64)->Arg(180)->Arg(1024);

// The same layer as the planner draws it without two-batch overlap from 4 pairs per expert: per-GPU cold
// sums from their moments. rebuild = 1 derives the law on every call (a token count not seen before), 0
// reuses it. items = experts covered per second.
void BM_RoutingSampleBinSums(benchmark::State& state) {
  const BinnedLayer binned;
  const auto& layer = binned.layer;
  const auto& bins = binned.bins;
  moesim::RoutingSampler sampler(kExperts);
  moesim::Rng rng(2);
  std::vector<std::int64_t> bin_pairs(kBins);
  std::vector<moesim::RoutingSampler::ColdSums> sums(kBins);
  moesim::RoutingSampler::BinLaw law;
  const std::int64_t tokens = state.range(0);
  const bool rebuild = state.range(1) != 0;
  for (auto _ : state) {
    if (rebuild) law.tokens = -1;
    sampler.sample_bin_sums(layer, bins, tokens, rng, law, bin_pairs, sums);
    benchmark::DoNotOptimize(sums.data());
  }
  state.SetItemsProcessed(state.iterations() * kExperts);
}
BENCHMARK(BM_RoutingSampleBinSums)->ArgNames({"tokens", "rebuild"})->ArgsProduct({{180, 1024}, {0, 1}});

void BM_RoutingPrepare(benchmark::State& state) {
  const auto pop = pareto(1);
  for (auto _ : state)
    benchmark::DoNotOptimize(moesim::RoutingSampler::prepare(pop.layer(0), kTopK).sd.data());
}
BENCHMARK(BM_RoutingPrepare);

void BM_CoactivationSample(benchmark::State& state) {
  const auto pop = pareto(1);
  const moesim::CoactivationModel model({.group_size = 8, .rho = 0.5}, 1, kExperts, moesim::Rng(3));
  moesim::Rng rng(4);
  std::vector<std::int32_t> counts(kExperts);
  std::vector<std::int64_t> group_tokens(static_cast<std::size_t>(model.groups()));
  const auto prepared = moesim::CoactivationSampler::prepare(model, 0, pop.layer(0));
  moesim::CoactivationSampler sampler(model);
  const std::int64_t tokens = state.range(0);
  for (auto _ : state) {
    sampler.sample(0, prepared, pop.layer(0), tokens, kTopK, rng, counts, group_tokens);
    benchmark::DoNotOptimize(counts.data());
  }
}
BENCHMARK(BM_CoactivationSample)->ArgName("tokens")->Arg(64)->Arg(1024)->Arg(8192);

void BM_CoactivationPrepare(benchmark::State& state) {
  const auto pop = pareto(1);
  const moesim::CoactivationModel model({.group_size = 8, .rho = 0.5}, 1, kExperts, moesim::Rng(3));
  for (auto _ : state)
    benchmark::DoNotOptimize(moesim::CoactivationSampler::prepare(model, 0, pop.layer(0)).member.data());
}
BENCHMARK(BM_CoactivationPrepare);

// One slot per expert, contiguous bins (EP16 GPUs: 16 bins of 16 slots; nodes: 2 bins of 128).
struct Slots {
  std::vector<int> slot_expert = std::vector<int>(kExperts);
  std::vector<int> replicas = std::vector<int>(kExperts, 1);
  Slots() { std::iota(slot_expert.begin(), slot_expert.end(), 0); }
  [[nodiscard]] moesim::SlotMap map(int bins) const {
    return {.slot_expert = slot_expert, .slots_per_bin = kExperts / bins, .replicas = replicas};
  }
};

void BM_TouchIndependent(benchmark::State& state) {
  const auto pop = pareto(1);
  const Slots slots;
  const int bins = static_cast<int>(state.range(0));
  std::vector<double> touch(static_cast<std::size_t>(bins));
  for (auto _ : state) {
    moesim::touch_fractions_independent(pop.layer(0), slots.map(bins), kTopK, touch);
    benchmark::DoNotOptimize(touch.data());
  }
}
BENCHMARK(BM_TouchIndependent)->ArgName("bins")->Arg(2)->Arg(16);

void BM_TouchCoactivated(benchmark::State& state) {
  const auto pop = pareto(1);
  const Slots slots;
  const moesim::CoactivationModel model({.group_size = 8, .rho = 0.5}, 1, kExperts, moesim::Rng(3));
  const int bins = static_cast<int>(state.range(0));
  std::vector<double> scratch(moesim::touch_scratch_size(model.groups(), bins));
  std::vector<double> touch(static_cast<std::size_t>(bins));
  for (auto _ : state) {
    moesim::touch_fractions_coactivated(model, 0, pop.layer(0), slots.map(bins), kTopK, scratch, touch);
    benchmark::DoNotOptimize(touch.data());
  }
}
BENCHMARK(BM_TouchCoactivated)->ArgName("bins")->Arg(2)->Arg(16);

// What StepPlanner::ensure_touch does per layer at EP16: GPUs (16 bins) and nodes (2 bins) in one call.
// memo 0: a fresh memo per call (a layer's first computation); memo 1: the layer's memo kept while the
// probabilities alternate between two permutations of each other, as drift updates permute them (the table
// holds, the group solves start from their last roots).
void BM_TouchCoactivatedGpusAndNodes(benchmark::State& state) {
  const auto pop = pareto(1);
  const Slots slots;
  const moesim::CoactivationModel model({.group_size = 8, .rho = 0.5}, 1, kExperts, moesim::Rng(3));
  std::vector<double> scratch(moesim::touch_scratch_size(model.groups(), 16));
  std::vector<double> gpus(16);
  std::vector<double> nodes(2);
  const moesim::TouchBins bins[] = {{.slots_per_bin = kExperts / 16, .touch = gpus},
                                    {.slots_per_bin = kExperts / 2, .touch = nodes}};
  const auto probs = pop.layer(0);
  const std::vector<double> reversed(probs.rbegin(), probs.rend());
  const bool keep = state.range(0) != 0;
  moesim::TouchMemo memo;
  std::size_t call = 0;
  for (auto _ : state) {
    if (!keep) memo = {};
    const std::span<const double> p = call++ % 2 == 0 ? probs : std::span<const double>(reversed);
    moesim::touch_fractions_coactivated(model, 0, p, slots.map(16), kTopK, scratch, bins, memo);
    benchmark::DoNotOptimize(gpus.data());
  }
}
BENCHMARK(BM_TouchCoactivatedGpusAndNodes)->ArgName("memo")->Arg(0)->Arg(1);

// One drift update of all 58 layers (the OU step and the re-rank).
void BM_DriftUpdate(benchmark::State& state) {
  const auto pop = pareto(58);
  moesim::DriftingPopularity drift(pop, {.half_life_s = 600}, moesim::Rng(5));
  double t = 0;
  for (auto _ : state) {
    t += 600.0 / 64;
    drift.advance_to(t);
    benchmark::DoNotOptimize(drift.layer(0).data());
  }
}
BENCHMARK(BM_DriftUpdate)->Unit(benchmark::kMicrosecond);

}  // namespace

BENCHMARK_MAIN();
