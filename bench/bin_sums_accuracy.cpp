// How closely RoutingSampler::sample_bin_sums (per-GPU cold-expert sums from their moments) follows
// sample_binned (each cold expert drawn, Poisson): 40,000 layers each way, 256 experts top-8 over 8 or 16
// GPUs, Pareto 80/20 or uniform popularity. Prints a Markdown table: each GPU's touched experts (mean,
// variance) and the slowest GPU's grouped cost, touched + pairs / 16 (mean, 99th percentile).
//   build/bench/bin_sums_accuracy
#include <algorithm>
#include <cstdio>
#include <numeric>
#include <vector>

#include "workloads/expert_popularity.h"

using moesim::RoutingSampler;

int main() {
  constexpr int kExperts = 256;
  constexpr int kTopK = 8;
  constexpr int kReps = 40000;
  auto pareto =
      moesim::zipf_probabilities(kExperts, moesim::zipf_exponent_for_top_share(kExperts, kTopK, 0.2, 0.8));
  moesim::cap_for_top_k(pareto, kTopK);
  const std::vector<double> uniform(kExperts, 1.0 / kExperts);
  std::printf(
      "| popularity | GPUs | tokens | touched per GPU: mean | variance | slowest GPU: mean | p99 |\n");
  std::printf("|---|---|---|---|---|---|---|\n");
  for (const bool is_pareto : {true, false}) {
    for (const int bins : {8, 16}) {
      for (const std::int64_t tokens : {16, 64, 128, 180, 256, 1024}) {
        const auto nb = static_cast<std::size_t>(bins);
        std::vector<int> bin_of(kExperts);
        for (int e = 0; e < kExperts; ++e) bin_of[static_cast<std::size_t>(e)] = (e * 5 + e / bins) % bins;
        const auto layer = RoutingSampler::prepare(is_pareto ? pareto : uniform, kTopK);
        const auto binned = RoutingSampler::bin(layer, bin_of, bins);
        RoutingSampler sampler(kExperts);
        moesim::Rng rng(11);
        std::vector<std::int32_t> counts(kExperts);
        std::vector<std::int64_t> bin_pairs(nb);
        std::vector<std::int32_t> bin_hot(nb);
        std::vector<RoutingSampler::Tally> tally(RoutingSampler::kTallyCounts);
        for (std::size_t n = 0; n < tally.size(); ++n) tally[n] = {.a = n, .b = std::uint64_t{n > 0}};
        std::vector<RoutingSampler::Tally> bin_cold(nb);
        std::vector<RoutingSampler::ColdSums> sums(nb);
        RoutingSampler::BinLaw law;
        double sum[2] = {0, 0}, squares[2] = {0, 0};
        std::vector<double> slowest[2];
        for (int r = 0; r < kReps; ++r) {
          for (int w = 0; w < 2; ++w) {
            if (w == 0) {
              sampler.sample_binned(layer, binned, tokens, rng, counts, bin_pairs, bin_hot, tally, bin_cold);
            } else {
              sampler.sample_bin_sums(layer, binned, tokens, rng, law, bin_pairs, sums);
            }
            double worst = 0;
            for (std::size_t k = 0; k < nb; ++k) {
              const double pairs =
                  double(bin_pairs[k]) + (w == 0 ? double(bin_cold[k].a) : double(sums[k].pairs));
              const double touched = w == 0 ? double(bin_hot[k]) + double(bin_cold[k].b)
                                            : double(law.bin_hot[k]) + double(sums[k].touched);
              sum[w] += touched;
              squares[w] += touched * touched;
              worst = std::max(worst, touched + pairs / 16);
            }
            slowest[w].push_back(worst);
          }
        }
        const double n = double(kReps) * double(bins);
        double mean[2], var[2], slow_mean[2], slow_p99[2];
        for (int w = 0; w < 2; ++w) {
          mean[w] = sum[w] / n;
          var[w] = squares[w] / n - mean[w] * mean[w];
          std::sort(slowest[w].begin(), slowest[w].end());
          slow_mean[w] = std::accumulate(slowest[w].begin(), slowest[w].end(), 0.0) / kReps;
          slow_p99[w] = slowest[w][static_cast<std::size_t>(kReps) * 99 / 100];
        }
        const auto change = [](double was, double now) { return was > 0 ? 100 * (now / was - 1) : 0.0; };
        std::printf(
            "| %s | %d | %ld | %.2f / %.2f (%+.2f%%) | %.3f / %.3f | %.2f / %.2f (%+.2f%%) | %.2f / %.2f "
            "(%+.2f%%) |\n",
            is_pareto ? "Pareto 80/20" : "uniform", bins, static_cast<long>(tokens), mean[0], mean[1],
            change(mean[0], mean[1]), var[0], var[1], slow_mean[0], slow_mean[1],
            change(slow_mean[0], slow_mean[1]), slow_p99[0], slow_p99[1], change(slow_p99[0], slow_p99[1]));
      }
    }
  }
  return 0;
}
