// EPLB-style replication against the published example of github.com/deepseek-ai/EPLB (README), as
// transcribed in shared/reference/COMPONENT_FIGURES.md section 3.
#include <algorithm>
#include <catch2/catch.hpp>
#include <cmath>
#include <functional>
#include <numeric>
#include <utility>
#include <vector>

#include "sim/serving/experts/placement.h"

namespace moesim {
namespace {

// README input: 2 MoE layers x 12 logical experts.
const std::vector<double> kWeight = {90, 132, 40,  61, 104, 165, 39,  4,   73,  56, 183, 86,   // layer 0
                                     20, 107, 104, 64, 19,  197, 187, 157, 172, 86, 16,  27};  // layer 1

// Per-GPU load when every replica of an expert carries load / replica count.
std::vector<double> gpu_loads(const Placement& p, int layer) {
  std::vector<double> loads(static_cast<std::size_t>(p.gpus()), 0.0);
  const auto map = p.phy2log(layer);
  const auto reps = p.replicas(layer);
  for (int s = 0; s < p.slots(); ++s) {
    const int e = map[static_cast<std::size_t>(s)];
    loads[static_cast<std::size_t>(p.gpu_of_slot(s))] +=
        kWeight[static_cast<std::size_t>(layer * 12 + e)] / reps[static_cast<std::size_t>(e)];
  }
  return loads;
}

}  // namespace

TEST_CASE("the hierarchical EPLB policy reproduces the README example slot for slot") {
  const EplbSpec spec{.physical_slots = 16, .groups = 4, .nodes = 2, .gpus = 8};
  const Placement p = eplb_placement(kWeight, 2, 12, spec);
  REQUIRE(p.slots_per_gpu() == 2);
  const std::vector<int> layer0 = {5, 6, 5, 7, 8, 4, 3, 4, 10, 9, 10, 2, 0, 1, 11, 1};
  const std::vector<int> layer1 = {7, 10, 6, 8, 6, 11, 8, 9, 2, 4, 5, 1, 5, 0, 3, 1};
  const auto got0 = p.phy2log(0);
  const auto got1 = p.phy2log(1);
  CHECK(std::vector<int>(got0.begin(), got0.end()) == layer0);
  CHECK(std::vector<int>(got1.begin(), got1.end()) == layer1);
}

TEST_CASE("the EPLB example gives the published per-GPU loads and replicates the four hottest experts") {
  const Placement p =
      eplb_placement(kWeight, 2, 12, {.physical_slots = 16, .groups = 4, .nodes = 2, .gpus = 8});
  const std::vector<double> want0 = {121.5, 86.5, 125.0, 113.0, 147.5, 131.5, 156.0, 152.0};
  const std::vector<double> want1 = {173.0, 179.5, 120.5, 172.0, 123.0, 152.0, 118.5, 117.5};
  const auto got0 = gpu_loads(p, 0);
  const auto got1 = gpu_loads(p, 1);
  for (std::size_t g = 0; g < 8; ++g) {
    CHECK(got0[g] == Approx(want0[g]));
    CHECK(got1[g] == Approx(want1[g]));
  }
  for (const int e : {1, 4, 5, 10}) CHECK(p.replicas(0)[static_cast<std::size_t>(e)] == 2);
  for (const int e : {1, 5, 6, 8}) CHECK(p.replicas(1)[static_cast<std::size_t>(e)] == 2);
  CHECK(p.replicated_experts(0) == 4);
  // Node totals of the table: 446 / 587 (layer 0), 645 / 511 (layer 1).
  CHECK(std::accumulate(got0.begin(), got0.begin() + 4, 0.0) == Approx(446.0));
  CHECK(std::accumulate(got1.begin(), got1.begin() + 4, 0.0) == Approx(645.0));
}

TEST_CASE("every EPLB replica is listed under its expert and the counts add up to the slots") {
  const Placement p =
      eplb_placement(kWeight, 2, 12, {.physical_slots = 16, .groups = 4, .nodes = 2, .gpus = 8});
  for (int l = 0; l < 2; ++l) {
    int total = 0;
    for (int e = 0; e < 12; ++e) {
      const auto slots = p.slots_of(l, e);
      total += static_cast<int>(slots.size());
      CHECK(static_cast<int>(slots.size()) == p.replicas(l)[static_cast<std::size_t>(e)]);
      for (const int s : slots) CHECK(p.phy2log(l)[static_cast<std::size_t>(s)] == e);
    }
    CHECK(total == 16);
  }
}

TEST_CASE("the global EPLB policy never does worse on the heaviest GPU than no replication") {
  // Global policy (groups not divisible by nodes): replicate over all GPUs, pack with the greedy.
  const Placement p =
      eplb_placement(kWeight, 2, 12, {.physical_slots = 16, .groups = 3, .nodes = 2, .gpus = 8});
  const Placement same = eplb_placement(
      kWeight, 2, 12, {.physical_slots = 16, .groups = 4, .nodes = 2, .gpus = 8, .force_global = true});
  for (int l = 0; l < 2; ++l) {
    const auto a = p.phy2log(l);
    const auto b = same.phy2log(l);
    CHECK(std::vector<int>(a.begin(), a.end()) == std::vector<int>(b.begin(), b.end()));
    const auto loads = gpu_loads(p, l);
    const double total = std::accumulate(loads.begin(), loads.end(), 0.0);
    const double peak = *std::max_element(loads.begin(), loads.end());
    CHECK(total == Approx(std::accumulate(kWeight.begin() + l * 12, kWeight.begin() + (l + 1) * 12, 0.0)));
    // Greedy packing bound: no GPU exceeds the mean plus the largest replica load.
    double largest = 0;
    for (int s = 0; s < 16; ++s) {
      const int e = p.phy2log(l)[static_cast<std::size_t>(s)];
      largest = std::max(largest, kWeight[static_cast<std::size_t>(l * 12 + e)] /
                                      p.replicas(l)[static_cast<std::size_t>(e)]);
    }
    CHECK(peak <= total / 8.0 + largest);
    // Without replication the heaviest GPU carries at least the heaviest expert (183 / 197).
    CHECK(peak < (l == 0 ? 183.0 : 197.0));
  }
}

TEST_CASE("DeepSeek-V3's 32 redundant experts on EP72 and EP144 go to the hottest experts") {
  // 256 experts with Zipf loads 1 / (rank + 1)^1.1, the hot ones spread over the ids.
  constexpr int kExperts = 256;
  constexpr int kRedundant = 32;
  std::vector<double> load(kExperts);
  for (int e = 0; e < kExperts; ++e)
    load[static_cast<std::size_t>((e * 37) % kExperts)] = std::pow(e + 1.0, -1.1);
  // Independent computation: adding a replica to the expert with the highest load per replica, R times,
  // takes the R largest of all load / c (c = 1, 2, ...) beyond the first copy of each expert, since each
  // expert's sequence load / c decreases. Expected replica count = 1 + how many of its load / c, c >= 1,
  // are among the R largest.
  std::vector<std::pair<double, int>> marginal;
  for (int e = 0; e < kExperts; ++e) {
    for (int c = 1; c <= kRedundant; ++c) marginal.emplace_back(load[static_cast<std::size_t>(e)] / c, e);
  }
  std::sort(marginal.begin(), marginal.end(), std::greater<>());
  std::vector<int> want(kExperts, 1);
  for (int i = 0; i < kRedundant; ++i)
    ++want[static_cast<std::size_t>(marginal[static_cast<std::size_t>(i)].second)];
  for (const auto& [gpus, nodes] : {std::pair{72, 9}, std::pair{144, 18}}) {
    const Placement p =
        eplb_placement(load, 1, kExperts,
                       {.physical_slots = kExperts + kRedundant, .groups = 1, .nodes = nodes, .gpus = gpus});
    REQUIRE(p.slots_per_gpu() == (kExperts + kRedundant) / gpus);
    int slots = 0;
    for (int e = 0; e < kExperts; ++e) {
      const int got = p.replicas(0)[static_cast<std::size_t>(e)];
      CHECK(got >= 1);
      CHECK(got == want[static_cast<std::size_t>(e)]);
      slots += got;
    }
    CHECK(slots == kExperts + kRedundant);
  }
}

}  // namespace moesim
