// Placement policies: the simple maps, replica splitting, the METIS partition against a brute-force optimum,
// and the All-to-All saving of a co-activation-aware placement.
#include "sim/serving/experts/placement.h"

#include <algorithm>
#include <catch2/catch.hpp>
#include <cmath>
#include <cstdio>
#include <numeric>
#include <vector>

#include "sim/engine/check.h"
#include "workloads/expert_popularity.h"

namespace moesim {
namespace {

std::vector<double> random_symmetric(int n, Rng& rng, double density) {
  std::vector<double> a(static_cast<std::size_t>(n * n), 0.0);
  for (int i = 0; i < n; ++i) {
    for (int j = i + 1; j < n; ++j) {
      const double w = rng.uniform() < density ? rng.uniform() : 0.0;
      a[static_cast<std::size_t>(i * n + j)] = w;
      a[static_cast<std::size_t>(j * n + i)] = w;
    }
  }
  return a;
}

// Brute force over all 4/4 splits of 8 experts whose heavier side is within tol x mean.
double best_balanced_cut(const std::vector<double>& load, const std::vector<double>& aff, double tol) {
  const int n = 8;
  const double mean = std::accumulate(load.begin(), load.end(), 0.0) / 2.0;
  double best = 1e300;
  for (int mask = 0; mask < (1 << n); ++mask) {
    if (__builtin_popcount(static_cast<unsigned>(mask)) != 4 || (mask & 1) == 0)
      continue;  // expert 0 on side A
    double side = 0;
    double cut = 0;
    for (int i = 0; i < n; ++i) {
      if ((mask >> i) & 1) side += load[static_cast<std::size_t>(i)];
      for (int j = i + 1; j < n; ++j) {
        if (((mask >> i) & 1) != ((mask >> j) & 1)) cut += aff[static_cast<std::size_t>(i * n + j)];
      }
    }
    if (std::max(side, 2 * mean - side) <= tol * mean + 1e-12) best = std::min(best, cut);
  }
  return best;
}

}  // namespace

TEST_CASE("contiguous and round-robin placements put each expert on the expected GPU") {
  const Placement c = contiguous_placement(2, 16, 4);
  const Placement r = round_robin_placement(2, 16, 4);
  for (int e = 0; e < 16; ++e) {
    REQUIRE(c.slots_of(1, e).size() == 1);
    CHECK(c.gpu_of_slot(c.slots_of(1, e)[0]) == e / 4);
    CHECK(r.gpu_of_slot(r.slots_of(1, e)[0]) == e % 4);
    CHECK(r.replicas(1)[static_cast<std::size_t>(e)] == 1);
  }
}

TEST_CASE("a placement without a lost GPU keeps each expert's live copies, and a copy left alone is single") {
  // 4 experts, 3 GPUs x 3 slots: GPU 0 holds experts 0, 1, 3; GPU 1 holds 0, 2, 3; GPU 2 holds 1, 2, 3.
  Placement p(2, 4, 3, 3);
  const std::vector<int> map = {0, 1, 3, 0, 2, 3, 1, 2, 3};
  for (int l = 0; l < 2; ++l) std::copy(map.begin(), map.end(), p.mutable_phy2log(l).begin());
  p.finalize();
  const Placement q = without_gpus(p, std::vector<char>{0, 1, 0});
  const auto gpus_of = [&](int l, int e) {
    std::vector<int> g;
    for (const int s : q.slots_of(l, e)) g.push_back(q.gpu_of_slot(s));
    return g;
  };
  for (int l = 0; l < 2; ++l) {
    // GPU 1's slots (3, 4, 5) are vacant; every other slot keeps its expert.
    for (const std::size_t s : {3U, 4U, 5U}) CHECK(q.phy2log(l)[s] == Placement::kVacant);
    for (const std::size_t s : {0U, 1U, 2U, 6U, 7U, 8U}) CHECK(q.phy2log(l)[s] == map[s]);
    // Expert 0 (GPUs 0 and 1) and expert 2 (GPUs 1 and 2) are left with one copy each; expert 1 (GPUs 0
    // and 2) keeps both; expert 3 (all three GPUs) keeps GPUs 0 and 2.
    CHECK(gpus_of(l, 0) == std::vector<int>{0});
    CHECK(gpus_of(l, 1) == std::vector<int>{0, 2});
    CHECK(gpus_of(l, 2) == std::vector<int>{2});
    CHECK(gpus_of(l, 3) == std::vector<int>{0, 2});
    CHECK(std::vector<int>(q.replicas(l).begin(), q.replicas(l).end()) == std::vector<int>{1, 2, 1, 2});
    CHECK(q.replicated_experts(l) == 2);
  }
  // Routed pairs follow the live copies only: 10 tokens of expert 0 all on GPU 0, none on GPU 1.
  std::vector<std::int64_t> gpu(3);
  gpu_token_counts(q, 0, std::vector<std::int32_t>{10, 0, 0, 0}, gpu);
  CHECK(gpu == std::vector<std::int64_t>{10, 0, 0});
  gpu_token_counts(p, 0, std::vector<std::int32_t>{10, 0, 0, 0}, gpu);
  CHECK(gpu == std::vector<std::int64_t>{5, 5, 0});  // replica_share(10, 2, r) = 5 each
  // Losing GPUs 0 and 1 leaves expert 0 without a copy: not a placement.
  CHECK_THROWS_AS(without_gpus(p, std::vector<char>{1, 1, 0}), InternalError);
  // Nothing lost: the same placement.
  const Placement same = without_gpus(p, std::vector<char>{0, 0, 0});
  CHECK(std::equal(same.phy2log(1).begin(), same.phy2log(1).end(), p.phy2log(1).begin()));
  for (int e = 0; e < 4; ++e)
    CHECK(same.replicas(1)[static_cast<std::size_t>(e)] == p.replicas(1)[static_cast<std::size_t>(e)]);
}

TEST_CASE("replica shares split a count exactly and per-GPU token counts add up to the routed pairs") {
  for (const int count : {0, 1, 7, 100}) {
    int sum = 0;
    for (int r = 0; r < 3; ++r) sum += replica_share(count, 3, r);
    CHECK(sum == count);
  }
  // 4 experts, 3 GPUs x 2 slots: expert 0 has three replicas.
  Placement p(1, 4, 3, 2);
  const std::vector<int> map = {0, 1, 0, 2, 0, 3};
  std::copy(map.begin(), map.end(), p.mutable_phy2log(0).begin());
  p.finalize();
  CHECK(p.replicas(0)[0] == 3);
  const std::vector<std::int32_t> counts = {10, 5, 6, 7};
  std::vector<std::int64_t> gpu(3);
  gpu_token_counts(p, 0, counts, gpu);
  CHECK(gpu[0] == 4 + 5);  // replica 0 of expert 0 takes the remainder: 10 = 4 + 3 + 3
  CHECK(gpu[1] == 3 + 6);
  CHECK(gpu[2] == 3 + 7);
}

TEST_CASE("the METIS partition matches the brute-force best balanced bipartition of 8 experts") {
  Rng rng(42);
  int equal = 0;
  double worst_ratio = 1.0;
  const int trials = 30;
  const double tol = 1.10;
  for (int t = 0; t < trials; ++t) {
    std::vector<double> load(8);
    for (double& x : load) x = 0.5 + rng.uniform();
    const auto aff = random_symmetric(8, rng, 0.6);
    const double best = best_balanced_cut(load, aff, tol);
    REQUIRE(best < 1e300);
    std::vector<int> slots(8);
    partition_layer(load, aff, 2, {.load_tolerance = tol}, slots);
    // Feasible: 4 experts per GPU (by construction of slots) and load within the tolerance.
    double side = 0;
    for (int s = 0; s < 4; ++s) side += load[static_cast<std::size_t>(slots[static_cast<std::size_t>(s)])];
    const double total = std::accumulate(load.begin(), load.end(), 0.0);
    CHECK(std::max(side, total - side) <= tol * total / 2 + 1e-9);
    const double cut = cut_weight(aff, slots, 4);
    CHECK(cut >= best - 1e-9);
    worst_ratio = std::max(worst_ratio, cut / best);
    if (cut <= best + 1e-9) ++equal;
  }
  std::printf("partition vs brute force: %d/%d optimal, worst cut ratio %.4f\n", equal, trials, worst_ratio);
  // Stated bound: optimal in at least 90% of cases and never more than 10% above the optimum.
  CHECK(equal >= trials * 9 / 10);
  CHECK(worst_ratio <= 1.10);
}

TEST_CASE("a partition without co-activation still balances load with equal expert counts") {
  const int n = 64;
  const int gpus = 8;
  auto probs = zipf_probabilities(n, 1.0);
  cap_for_top_k(probs, 8);
  std::vector<double> aff(static_cast<std::size_t>(n * n), 0.0);
  std::vector<int> slots(static_cast<std::size_t>(n));
  partition_layer(probs, aff, gpus, {.load_tolerance = 1.05}, slots);
  std::vector<int> sorted = slots;
  std::sort(sorted.begin(), sorted.end());
  for (int e = 0; e < n; ++e) CHECK(sorted[static_cast<std::size_t>(e)] == e);
  std::vector<double> load(gpus, 0.0);
  for (int s = 0; s < n; ++s)
    load[static_cast<std::size_t>(s / 8)] +=
        probs[static_cast<std::size_t>(slots[static_cast<std::size_t>(s)])];
  // Zipf(1) over 64: the hottest expert alone is 1/H_64 = 0.210 of the load, above the mean 0.125, so the
  // best possible peak is that expert plus the 7 coldest; check against that lower bound instead of 1.05.
  const double peak = *std::max_element(load.begin(), load.end());
  const double bound = std::max(1.0 / gpus, probs[0] + std::accumulate(probs.end() - 7, probs.end(), 0.0));
  CHECK(peak <= 1.05 * bound);
}

TEST_CASE("uniform loads with co-activation groups that fit a GPU put every group whole on one GPU") {
  // 256 experts in 32 groups of 8: with 8, 16 or 32 GPUs each GPU can hold whole groups, so the best
  // partition cuts nothing and every GPU carries exactly the mean load.
  const int experts = 256;
  const CoactivationModel model({.group_size = 8, .rho = 0.5}, 1, experts, Rng(3));
  const std::vector<double> probs(experts, 1.0 / experts);
  std::vector<double> aff(static_cast<std::size_t>(experts * experts));
  coactivation_affinity(model, 0, probs, 8, aff);
  for (const int gpus : {8, 16, 32}) {
    std::vector<int> slots(experts);
    partition_layer(probs, aff, gpus, {}, slots);
    const int per_gpu = experts / gpus;
    std::vector<int> gpu_of(experts, -1);
    for (int s = 0; s < experts; ++s)
      gpu_of[static_cast<std::size_t>(slots[static_cast<std::size_t>(s)])] = s / per_gpu;
    for (int e = 0; e < experts; ++e) {
      REQUIRE(gpu_of[static_cast<std::size_t>(e)] >= 0);  // a permutation: each expert has a slot
      const int first = model.members(0, model.group_of(0, e))[0];
      CHECK(gpu_of[static_cast<std::size_t>(e)] == gpu_of[static_cast<std::size_t>(first)]);
    }
    CHECK(cut_weight(aff, slots, per_gpu) == 0.0);
  }
}

TEST_CASE("a layer whose hottest expert exceeds the mean GPU load gets a peak near its lower bound") {
  // The 80/20 law of the reference scenarios over 256 experts: the hottest expert takes 1/8 of the routed
  // pairs (the top-8 cap), as much as the mean load of a GPU at 8 GPUs and more at 16 or 32, so
  // load_tolerance cannot be met. The GPU holding it carries at least it plus the lightest per_gpu - 1
  // others.
  const int experts = 256;
  auto probs = zipf_probabilities(experts, zipf_exponent_for_top_share(experts, 8, 0.2, 0.8));
  cap_for_top_k(probs, 8);
  Rng rng(2);
  for (std::size_t i = probs.size() - 1; i > 0; --i) std::swap(probs[i], probs[rng.below(i + 1)]);
  const CoactivationModel model({.group_size = 8, .rho = 0.5}, 1, experts, Rng(3));
  std::vector<double> aff(static_cast<std::size_t>(experts * experts));
  coactivation_affinity(model, 0, probs, 8, aff);
  std::vector<double> sorted = probs;
  std::sort(sorted.begin(), sorted.end());
  for (const int gpus : {8, 16, 32}) {
    const int per_gpu = experts / gpus;
    std::vector<int> slots(experts);
    partition_layer(probs, aff, gpus, {}, slots);
    std::vector<int> check = slots;
    std::sort(check.begin(), check.end());
    for (int e = 0; e < experts; ++e) REQUIRE(check[static_cast<std::size_t>(e)] == e);
    std::vector<double> load(static_cast<std::size_t>(gpus), 0.0);
    for (int s = 0; s < experts; ++s) {
      load[static_cast<std::size_t>(s / per_gpu)] +=
          probs[static_cast<std::size_t>(slots[static_cast<std::size_t>(s)])];
    }
    const double mean = 1.0 / gpus;
    const double bound = sorted.back() + std::accumulate(sorted.begin(), sorted.begin() + per_gpu - 1, 0.0);
    const double peak = *std::max_element(load.begin(), load.end());
    CHECK(peak <= 1.03 * std::max(mean, bound));
    // Round robin ignores the groups; keeping groups together should cut far less.
    std::vector<int> rr(experts);
    for (int s = 0; s < experts; ++s) rr[static_cast<std::size_t>(s)] = s / per_gpu + (s % per_gpu) * gpus;
    CHECK(cut_weight(aff, slots, per_gpu) < 0.5 * cut_weight(aff, rr, per_gpu));
  }
}

TEST_CASE("co-activation placement cuts All-to-All token copies against round-robin") {
  const int experts = 256;
  const int gpus = 32;
  const int top_k = 8;
  const int layers = 2;
  PopularitySpec pop{.kind = PopularitySpec::Kind::kZipf, .zipf_exponent = 0.6};
  const ExpertPopularity popularity(pop, layers, experts, top_k, Rng(7));
  std::vector<double> probs;
  for (int l = 0; l < layers; ++l) {
    const auto row = popularity.layer(l);
    probs.insert(probs.end(), row.begin(), row.end());
  }
  const Placement rr = round_robin_placement(layers, experts, gpus);
  for (const double rho : {0.3, 0.5, 0.7, 0.9}) {
    const CoactivationModel model({.group_size = 8, .rho = rho}, layers, experts, Rng(11));
    const Placement part = coactivation_placement(model, probs, top_k, gpus, {.load_tolerance = 1.10});
    PlacementMeter meter(gpus, model.groups());
    double rr_copies = 0;
    double part_copies = 0;
    double part_imbalance = 0;
    double rr_imbalance = 0;
    for (int l = 0; l < layers; ++l) {
      const auto row = popularity.layer(l);
      const auto q_rr = meter.measure(rr, l, row, top_k, &model);
      const auto q_part = meter.measure(part, l, row, top_k, &model);
      rr_copies += q_rr.token_copies / layers;
      part_copies += q_part.token_copies / layers;
      rr_imbalance = std::max(rr_imbalance, q_rr.load_imbalance);
      part_imbalance = std::max(part_imbalance, q_part.load_imbalance);
    }
    const double saving = 1.0 - part_copies / rr_copies;
    std::printf("rho %.1f: token copies round-robin %.3f, partition %.3f (-%.1f%%); imbalance %.3f vs %.3f\n",
                rho, rr_copies, part_copies, 100 * saving, rr_imbalance, part_imbalance);
    CHECK(part_copies < rr_copies);
    if (rho >= 0.5) CHECK(saving >= 0.10);
    CHECK(part_imbalance <= std::max(1.10, rr_imbalance) + 1e-9);
  }
}

}  // namespace moesim
