// Static ECMP hashing as balls into bins: the expected busiest uplink against hand-derived cases, exhaustive
// enumeration and Monte Carlo; and its effect on a fabric: cross-leaf All-to-All data time stretched by
// exactly that factor, single-leaf traffic untouched.
#include "hwmodels/ecmp.h"

#include <catch2/catch.hpp>
#include <cmath>
#include <cstdint>
#include <vector>

#include "hwmodels/fabric.h"

namespace moesim {
namespace {

// E[max load] by visiting all uplinks^flows assignments (each equally likely).
double enumerated_max_load(int flows, int uplinks) {
  std::vector<int> pick(static_cast<std::size_t>(flows), 0);
  double sum = 0;
  double count = 0;
  while (true) {
    std::vector<int> load(static_cast<std::size_t>(uplinks), 0);
    int most = 0;
    for (const int u : pick) most = std::max(most, ++load[static_cast<std::size_t>(u)]);
    sum += most;
    count += 1;
    int i = 0;
    while (i < flows && ++pick[static_cast<std::size_t>(i)] == uplinks)
      pick[static_cast<std::size_t>(i++)] = 0;
    if (i == flows) break;
  }
  return sum / count;
}

// E[max load] and its standard error over `trials` hashings (a 64-bit LCG, Knuth's MMIX constants).
std::pair<double, double> monte_carlo_max_load(int flows, int uplinks, int trials) {
  std::uint64_t state = 2024;
  double sum = 0;
  double sum2 = 0;
  std::vector<int> load(static_cast<std::size_t>(uplinks));
  for (int t = 0; t < trials; ++t) {
    std::fill(load.begin(), load.end(), 0);
    int most = 0;
    for (int f = 0; f < flows; ++f) {
      state = state * 6364136223846793005ULL + 1442695040888963407ULL;
      const auto u = static_cast<std::size_t>((state >> 33) % static_cast<std::uint64_t>(uplinks));
      most = std::max(most, ++load[u]);
    }
    sum += most;
    sum2 += static_cast<double>(most) * most;
  }
  const double mean = sum / trials;
  return {mean, std::sqrt((sum2 / trials - mean * mean) / trials)};
}

}  // namespace

TEST_CASE("the busiest of U uplinks under F hashed flows, small cases by hand") {
  // 2 flows on 2 uplinks: apart (max 1) or together (max 2), each with probability 1/2: E = 1.5, mean 1.
  CHECK(ecmp_max_load_factor(2, 2) == Approx(1.5).epsilon(1e-12));
  // 3 on 2: all on one uplink with probability 2/8 (max 3), else 2-1 (max 2): E = 2.25 over a mean of 1.5.
  CHECK(ecmp_max_load_factor(3, 2) == Approx(2.25 / 1.5).epsilon(1e-12));
  // 4 on 2: the first uplink's count is Binomial(4, 1/2): max 4 w.p. 2/16, 3 w.p. 8/16, 2 w.p. 6/16: E
  // = 2.75.
  CHECK(ecmp_max_load_factor(4, 2) == Approx(2.75 / 2.0).epsilon(1e-12));
  // 2 on 4: together w.p. 1/4: E = 1.25 over a mean of 0.5 (fewer flows than uplinks: a flow per uplink at
  // best).
  CHECK(ecmp_max_load_factor(2, 4) == Approx(2.5).epsilon(1e-12));
  // One uplink or no flows: nothing to hash.
  CHECK(ecmp_max_load_factor(7, 1) == 1.0);
  CHECK(ecmp_max_load_factor(0, 8) == 1.0);
}

TEST_CASE("the exact expectation matches exhaustive enumeration") {
  for (int flows = 1; flows <= 7; ++flows) {
    for (int uplinks = 2; uplinks <= 4; ++uplinks) {
      INFO(flows << " flows on " << uplinks << " uplinks");
      CHECK(expected_max_load_exact(flows, uplinks) ==
            Approx(enumerated_max_load(flows, uplinks)).epsilon(1e-12));
    }
  }
  // The fabric test's case: 8 flows on 4 uplinks (65,536 assignments).
  CHECK(expected_max_load_exact(8, 4) == Approx(enumerated_max_load(8, 4)).epsilon(1e-12));
}

TEST_CASE("the exact expectation and the normal approximation match Monte Carlo hashing") {
  for (const auto& [flows, uplinks] : std::vector<std::pair<int, int>>{{64, 16}, {256, 8}, {512, 32}}) {
    const auto [mc, se] = monte_carlo_max_load(flows, uplinks, 40000);
    INFO(flows << " flows on " << uplinks << " uplinks: Monte Carlo " << mc << " +- " << se);
    CHECK(std::abs(expected_max_load_exact(flows, uplinks) - mc) < 4 * se);
  }
  // Beyond kEcmpExactFlows the normal approximation: within 1% of Monte Carlo for 4,096 flows on 16 uplinks.
  const auto [mc, se] = monte_carlo_max_load(4096, 16, 4000);
  CHECK(ecmp_max_load_factor(4096, 16) * 4096 / 16 == Approx(mc).epsilon(0.01));
  // And it takes over from the exact value without a jump of more than 1%.
  const double exact = ecmp_max_load_factor(kEcmpExactFlows, 16);
  const double approx = ecmp_max_load_factor(kEcmpExactFlows + 1, 16);
  CHECK(approx == Approx(exact).epsilon(0.01));
}

TEST_CASE("E[max of n standard normals] has its closed forms for n = 2 and 3") {
  CHECK(expected_max_std_normal(1) == 0.0);
  CHECK(expected_max_std_normal(2) == Approx(1.0 / std::sqrt(M_PI)).epsilon(1e-9));
  CHECK(expected_max_std_normal(3) == Approx(1.5 / std::sqrt(M_PI)).epsilon(1e-9));
}

namespace {

constexpr double kFp8Token = 7168 * 2 * (1.0 + 4.0 / 128.0) / 2.0;
constexpr double kBf16Token = 7168 * 2;

// EP16 on two HGX nodes, every rank sending `tokens` tokens uniformly over the 16 ranks (its node and the
// other one alike).
AllToAllTraffic uniform_ep16(double tokens) {
  constexpr int kRanks = 16;
  AllToAllTraffic t{.ranks = kRanks,
                    .ranks_per_node = 8,
                    .dispatch_bytes_per_token = kFp8Token,
                    .combine_bytes_per_token = kBf16Token,
                    .separable = true};
  t.src_tokens.assign(kRanks, tokens);
  t.rank_share.assign(kRanks, 1.0 / kRanks);
  t.pair_share.assign(kRanks, 8.0 / kRanks);
  t.node_share.assign(2, 0.5);
  return t;
}

// Two HGX nodes on a RoCE-like fat tree (ECMP) or an InfiniBand-like one (adaptive routing): a leaf per node
// with 8 NIC downlinks and 4 uplinks (2:1), or both nodes on one leaf.
FabricSpec two_nodes(ScaleOutRouting routing, int nodes_per_leaf) {
  const bool ecmp = routing == ScaleOutRouting::kEcmp;
  return FabricSpec{.nodes = 2,
                    .nic_latency = Duration::from_us(ecmp ? 5.5 : 5.0),
                    .layout = NetworkLayout::kFatTree,
                    .nodes_per_leaf_group = nodes_per_leaf,
                    .oversubscription = 2.0,
                    .routing = routing,
                    .switch_latency = Duration::from_us(ecmp ? 0.8 : 0.6)};
}

// The data time of one dispatch: its growth between two token sizes (startup, latency and floor cancel).
double dispatch_data_s(const Fabric& f, AllToAllMode mode) {
  AllToAllTraffic small = uniform_ep16(2048);
  AllToAllTraffic large = small;
  large.dispatch_bytes_per_token *= 2;
  return (f.all_to_all(large, mode).dispatch - f.all_to_all(small, mode).dispatch).seconds();
}

}  // namespace

TEST_CASE(
    "RoCE with ECMP takes exactly the expected busiest-uplink factor longer than InfiniBand across leaves") {
  // Low-latency peers all over the NIC, so that its data time is the NIC path's alone (with NVLink peers the
  // kernel's overlap penalty adds a share of the NVLink time, which ECMP does not stretch).
  FabricSpec ib_spec = two_nodes(ScaleOutRouting::kAdaptive, 1);
  FabricSpec roce_spec = two_nodes(ScaleOutRouting::kEcmp, 1);
  ib_spec.low_latency.intranode_over_nvlink = roce_spec.low_latency.intranode_over_nvlink = false;
  const Fabric ib(ib_spec);
  const Fabric roce(roce_spec);
  // High-throughput: each of a leaf's 8 ranks sends one flow, to its rail peer in the other node (8 flows on
  // 4 uplinks); low-latency: each sends to the 8 ranks of the other node (64 flows). The leaf uplinks are the
  // bottleneck (8 NICs' cross-leaf traffic on 4 uplinks' capacity: half of each NIC's traffic on half the
  // links, against 15/16 of it on the NIC), so the data time stretches by E[max] x U / F.
  const double ht_factor = enumerated_max_load(8, 4) * 4 / 8.0;
  CHECK(dispatch_data_s(roce, AllToAllMode::kHighThroughput) ==
        Approx(ht_factor * dispatch_data_s(ib, AllToAllMode::kHighThroughput)).epsilon(1e-6));
  const auto [mc, se] = monte_carlo_max_load(64, 4, 40000);
  const double ll_ratio =
      dispatch_data_s(roce, AllToAllMode::kLowLatency) / dispatch_data_s(ib, AllToAllMode::kLowLatency);
  INFO("low-latency ratio " << ll_ratio << ", Monte Carlo E[max] x U / F " << mc * 4 / 64 << " +- "
                            << se * 4 / 64);
  CHECK(std::abs(ll_ratio - mc * 4 / 64) < 4 * se * 4 / 64);
  CHECK(ll_ratio == Approx(ecmp_max_load_factor(64, 4)).epsilon(1e-6));
}

TEST_CASE("on one leaf ECMP changes nothing: RoCE differs from InfiniBand by its NIC latency alone") {
  const Fabric ib(two_nodes(ScaleOutRouting::kAdaptive, 2));
  const Fabric roce(two_nodes(ScaleOutRouting::kEcmp, 2));
  FabricSpec ib_ecmp_spec = two_nodes(ScaleOutRouting::kAdaptive, 2);
  ib_ecmp_spec.routing = ScaleOutRouting::kEcmp;
  const Fabric ib_ecmp(ib_ecmp_spec);
  const AllToAllTraffic t = uniform_ep16(2048);
  for (const AllToAllMode mode : {AllToAllMode::kHighThroughput, AllToAllMode::kLowLatency}) {
    CHECK(ib_ecmp.all_to_all(t, mode).dispatch == ib.all_to_all(t, mode).dispatch);
    CHECK(ib_ecmp.all_to_all(t, mode).combine == ib.all_to_all(t, mode).combine);
    // No spine on one leaf: the path adds NIC out + in, the end-to-end NIC latency, 5.5 us against 5 us.
    CHECK((roce.all_to_all(t, mode).dispatch - ib.all_to_all(t, mode).dispatch) == Duration::from_us(0.5));
  }
}

}  // namespace moesim
