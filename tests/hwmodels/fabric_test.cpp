// Directions the physics demands of the All-to-All model (more remote traffic costs more, a faster NIC
// never hurts, low-latency kernels win small batches and lose large ones, skew shows as a hot rank,
// oversubscription shows on cross-leaf traffic), plus weight transfers and host -> GPU copies.
#include "hwmodels/fabric.h"

#include <algorithm>
#include <catch2/catch.hpp>
#include <vector>

namespace moesim {
namespace {

constexpr double kFp8Token = 7168 * 2 * (1.0 + 4.0 / 128.0) / 2.0;
constexpr double kBf16Token = 7168 * 2;

FabricSpec hgx(int nodes) { return FabricSpec{.nodes = nodes, .gpus_per_node = 8}; }

// Every rank sends `tokens` tokens, each to `k` experts spread uniformly; `local_share` of a rank's
// pairs stay inside its node. Expected distinct tokens per rank and per node follow from treating
// the k choices as independent (the step planner's own approximation).
AllToAllTraffic spread_traffic(int ranks, int per_node, double tokens, int k, double local_share) {
  const int nodes = (ranks + per_node - 1) / per_node;
  const auto r = static_cast<std::size_t>(ranks);
  AllToAllTraffic t{.ranks = ranks,
                    .ranks_per_node = per_node,
                    .tokens_to_rank = std::vector<double>(r * r),
                    .pairs_to_rank = std::vector<double>(r * r),
                    .tokens_to_node = std::vector<double>(r * static_cast<std::size_t>(nodes)),
                    .dispatch_bytes_per_token = kFp8Token,
                    .combine_bytes_per_token = kBf16Token};
  for (int s = 0; s < ranks; ++s) {
    for (int d = 0; d < ranks; ++d) {
      const bool local = s / per_node == d / per_node;
      const double q = nodes == 1 ? 1.0 / ranks
                       : local    ? local_share / per_node
                                  : (1.0 - local_share) / (ranks - per_node);
      t.pairs_to_rank[static_cast<std::size_t>(s * ranks + d)] = tokens * k * q;
      t.tokens_to_rank[static_cast<std::size_t>(s * ranks + d)] = tokens * (1.0 - std::pow(1.0 - q, k));
    }
    for (int n = 0; n < nodes; ++n) {
      const double q = nodes == 1 ? 1.0 : n == s / per_node ? local_share : (1.0 - local_share) / (nodes - 1);
      t.tokens_to_node[static_cast<std::size_t>(s * nodes + n)] = tokens * (1.0 - std::pow(1.0 - q, k));
    }
  }
  return t;
}

Duration total(const AllToAllCost& c) { return c.dispatch + c.combine; }

}  // namespace

TEST_CASE("a single rank moves nothing and costs nothing") {
  const Fabric fabric(hgx(1));
  const AllToAllTraffic t{.ranks = 1,
                          .ranks_per_node = 1,
                          .tokens_to_rank = {10},
                          .pairs_to_rank = {80},
                          .tokens_to_node = {10},
                          .dispatch_bytes_per_token = kFp8Token,
                          .combine_bytes_per_token = kBf16Token};
  for (const auto mode : {AllToAllMode::kHighThroughput, AllToAllMode::kLowLatency,
                          AllToAllMode::kNvlinkDomain, AllToAllMode::kAuto}) {
    const AllToAllCost c = fabric.all_to_all(t, mode);
    CHECK(c.dispatch == Duration::zero());
    CHECK(c.combine == Duration::zero());
    CHECK(c.nic_bytes == 0);
  }
}

TEST_CASE("more inter-node traffic makes the All-to-All longer") {
  const Fabric fabric(hgx(4));
  for (const auto mode : {AllToAllMode::kHighThroughput, AllToAllMode::kLowLatency}) {
    Duration previous = Duration::zero();
    double previous_nic = -1;
    for (const double local : {0.9, 0.6, 0.3, 0.1}) {
      const AllToAllCost c = fabric.all_to_all(spread_traffic(32, 8, 2048, 8, local), mode);
      CHECK(total(c) >= previous);
      CHECK(c.nic_bytes > previous_nic);
      previous = total(c);
      previous_nic = c.nic_bytes;
    }
  }
}

TEST_CASE("a faster NIC never makes an All-to-All slower") {
  for (const auto mode : {AllToAllMode::kHighThroughput, AllToAllMode::kLowLatency, AllToAllMode::kAuto}) {
    for (const double tokens : {4.0, 128.0, 4096.0}) {
      Duration previous = Duration::max();
      for (const double gbit : {100.0, 200.0, 400.0, 800.0, 1600.0}) {
        FabricSpec s = hgx(4);
        s.nic_bytes_per_s = gbit * 1e9 / 8;
        const AllToAllCost c = Fabric(s).all_to_all(spread_traffic(32, 8, tokens, 8, 0.25), mode);
        CHECK(total(c) <= previous);
        previous = total(c);
      }
    }
  }
}

TEST_CASE("low-latency kernels win at small batches and lose at large ones") {
  const Fabric fabric(hgx(4));
  const AllToAllTraffic small = spread_traffic(32, 8, 4, 8, 0.25);
  const AllToAllTraffic large = spread_traffic(32, 8, 4096, 8, 0.25);
  CHECK(total(fabric.all_to_all(small, AllToAllMode::kLowLatency)) <
        total(fabric.all_to_all(small, AllToAllMode::kHighThroughput)));
  CHECK(total(fabric.all_to_all(large, AllToAllMode::kLowLatency)) >
        total(fabric.all_to_all(large, AllToAllMode::kHighThroughput)));
  CHECK(fabric.all_to_all(small, AllToAllMode::kAuto).mode == AllToAllMode::kLowLatency);
  CHECK(fabric.all_to_all(large, AllToAllMode::kAuto).mode == AllToAllMode::kHighThroughput);
}

TEST_CASE("a skewed expert load shows up as a hot rank that sets the pace") {
  const Fabric fabric(hgx(2));
  AllToAllTraffic t = spread_traffic(16, 8, 1024, 8, 0.5);
  const AllToAllCost balanced = fabric.all_to_all(t, AllToAllMode::kLowLatency);
  CHECK(balanced.hot_rank_ratio == Approx(1.0).epsilon(0.01));
  constexpr int kHot = 11;
  for (int s = 0; s < 16; ++s) {
    t.pairs_to_rank[static_cast<std::size_t>(s * 16 + kHot)] *= 4;
    t.tokens_to_rank[static_cast<std::size_t>(s * 16 + kHot)] *= 3;
  }
  std::vector<Duration> per_rank(16);
  std::vector<Duration> per_rank_combine(16);
  const AllToAllCost skewed = fabric.all_to_all(t, AllToAllMode::kLowLatency, per_rank, per_rank_combine);
  CHECK(skewed.hot_rank == kHot);
  CHECK(skewed.hot_rank_ratio > 1.5);
  CHECK(skewed.dispatch > balanced.dispatch);
  CHECK(std::max_element(per_rank.begin(), per_rank.end()) - per_rank.begin() == kHot);
  CHECK(per_rank[kHot] == skewed.dispatch);
  CHECK(per_rank_combine[kHot] == skewed.combine);
  CHECK(fabric.all_to_all(t, AllToAllMode::kHighThroughput).hot_rank == kHot);
}

TEST_CASE("an oversubscribed spine slows cross-rail low-latency traffic but not same-rail forwarding") {
  FabricSpec thin = hgx(4);
  thin.oversubscription = 8.0;
  const Fabric full(hgx(4));
  const Fabric oversubscribed(thin);
  const AllToAllTraffic t = spread_traffic(32, 8, 1024, 8, 0.125);
  // Low-latency kernels send straight to every rank: 7/8 of remote pairs change rail, via the spine.
  CHECK(total(oversubscribed.all_to_all(t, AllToAllMode::kLowLatency)) >
        total(full.all_to_all(t, AllToAllMode::kLowLatency)) * 2);
  const AllToAllCost c = oversubscribed.all_to_all(t, AllToAllMode::kLowLatency);
  CHECK((c.hot_link == LinkKind::kLeafUp || c.hot_link == LinkKind::kLeafDown));
  // High-throughput kernels cross to the same rail of the destination node: the leaf, never the spine.
  CHECK(total(oversubscribed.all_to_all(t, AllToAllMode::kHighThroughput)) ==
        total(full.all_to_all(t, AllToAllMode::kHighThroughput)));
}

TEST_CASE("combine costs more than dispatch when it carries more bytes per token") {
  const Fabric fabric(hgx(2));
  const AllToAllCost c =
      fabric.all_to_all(spread_traffic(16, 8, 2048, 8, 0.5), AllToAllMode::kHighThroughput);
  CHECK(c.combine > c.dispatch);
  // Bytes crossed scale with the bytes of each direction.
  const double ratio = (kFp8Token + kBf16Token) / kFp8Token;
  AllToAllTraffic fp8_only = spread_traffic(16, 8, 2048, 8, 0.5);
  fp8_only.combine_bytes_per_token = 0;
  CHECK(c.nic_bytes == Approx(fabric.all_to_all(fp8_only, AllToAllMode::kHighThroughput).nic_bytes * ratio));
}

TEST_CASE("repeated calls give the same answer: scratch buffers are reset") {
  const Fabric fabric(hgx(2));
  const AllToAllTraffic a = spread_traffic(16, 8, 512, 8, 0.5);
  const AllToAllTraffic b = spread_traffic(16, 8, 4096, 8, 0.1);
  const AllToAllCost first = fabric.all_to_all(a, AllToAllMode::kHighThroughput);
  (void)fabric.all_to_all(b, AllToAllMode::kLowLatency);
  const AllToAllCost again = fabric.all_to_all(a, AllToAllMode::kHighThroughput);
  CHECK(first.dispatch == again.dispatch);
  CHECK(first.combine == again.combine);
  CHECK(first.nic_bytes == again.nic_bytes);
}

TEST_CASE("a group placed on later nodes uses those nodes' links") {
  FabricSpec s = hgx(4);
  const Fabric fabric(s);
  AllToAllTraffic t = spread_traffic(16, 8, 1024, 8, 0.5);
  const AllToAllCost at0 = fabric.all_to_all(t, AllToAllMode::kHighThroughput);
  t.first_node = 2;
  CHECK(fabric.all_to_all(t, AllToAllMode::kHighThroughput).dispatch == at0.dispatch);
  t.first_node = 3;
  CHECK_THROWS(fabric.all_to_all(t, AllToAllMode::kHighThroughput));
}

// The step planner's traffic is an outer product (every source sends its tokens in the same shares), which
// Fabric costs in O(ranks + nodes): it must cost what the dense matrices of the same product cost.
TEST_CASE("separable traffic costs what its dense outer product costs, on every kernel and topology") {
  struct Case {
    const char* name;
    FabricSpec spec;
    int ranks;
    int per_node;
    int first_node;
  };
  FabricSpec multi_leaf = hgx(4);
  multi_leaf.nodes_per_leaf_group = 2;
  multi_leaf.oversubscription = 4.0;
  FabricSpec fat = hgx(4);
  fat.layout = NetworkLayout::kFatTree;
  fat.nodes_per_leaf_group = 1;
  fat.oversubscription = 2.0;
  FabricSpec shared_nic = hgx(3);
  shared_nic.nics_per_node = 4;
  FabricSpec nic_only = hgx(2);
  nic_only.low_latency.intranode_over_nvlink = false;
  const std::vector<Case> cases = {{"EP16 on two nodes", hgx(2), 16, 8, 0},
                                   {"two leaf groups, oversubscribed", multi_leaf, 32, 8, 0},
                                   {"fat tree, a leaf per node", fat, 32, 8, 0},
                                   {"partial last node", hgx(3), 20, 8, 0},
                                   {"four ranks per node on later nodes", multi_leaf, 12, 4, 1},
                                   {"two GPUs per NIC", shared_nic, 24, 8, 0},
                                   {"low-latency peers over the NIC", nic_only, 16, 8, 0},
                                   {"one node", hgx(1), 8, 8, 0}};
  std::uint64_t state = 12345;
  auto uniform = [&state] {  // a 64-bit LCG (Knuth's MMIX constants): values in [0, 1)
    state = state * 6364136223846793005ULL + 1442695040888963407ULL;
    return static_cast<double>(state >> 11) * 0x1.0p-53;
  };
  for (const Case& c : cases) {
    const int nodes = (c.ranks + c.per_node - 1) / c.per_node;
    const auto r = static_cast<std::size_t>(c.ranks);
    AllToAllTraffic sep{.ranks = c.ranks,
                        .ranks_per_node = c.per_node,
                        .dispatch_bytes_per_token = kFp8Token,
                        .combine_bytes_per_token = kBf16Token,
                        .first_node = c.first_node,
                        .separable = true};
    for (std::size_t i = 0; i < r; ++i) {
      sep.src_tokens.push_back(64 + 512 * uniform());
      sep.rank_share.push_back(0.05 + 0.5 * uniform());
      sep.pair_share.push_back(0.2 + uniform());
    }
    for (int n = 0; n < nodes; ++n) sep.node_share.push_back(0.1 + 0.8 * uniform());
    AllToAllTraffic dense = sep;
    dense.separable = false;
    for (std::size_t s = 0; s < r; ++s) {
      for (std::size_t d = 0; d < r; ++d) {
        dense.tokens_to_rank.push_back(sep.src_tokens[s] * sep.rank_share[d]);
        dense.pairs_to_rank.push_back(sep.src_tokens[s] * sep.pair_share[d]);
      }
      for (int n = 0; n < nodes; ++n)
        dense.tokens_to_node.push_back(sep.src_tokens[s] * sep.node_share[static_cast<std::size_t>(n)]);
    }
    const Fabric fabric(c.spec);
    for (const AllToAllMode mode : {AllToAllMode::kHighThroughput, AllToAllMode::kLowLatency,
                                    AllToAllMode::kNvlinkDomain, AllToAllMode::kAuto}) {
      INFO(c.name << ", mode " << static_cast<int>(mode));
      std::vector<Duration> sep_dispatch(r), sep_combine(r), dense_dispatch(r), dense_combine(r);
      const AllToAllCost a = fabric.all_to_all(sep, mode, sep_dispatch, sep_combine);
      const AllToAllCost b = fabric.all_to_all(dense, mode, dense_dispatch, dense_combine);
      CHECK(a.mode == b.mode);
      CHECK(a.dispatch.seconds() == Approx(b.dispatch.seconds()).epsilon(1e-9));
      CHECK(a.combine.seconds() == Approx(b.combine.seconds()).epsilon(1e-9));
      CHECK(a.nvlink_bytes == Approx(b.nvlink_bytes).epsilon(1e-9));
      CHECK(a.nic_bytes == Approx(b.nic_bytes).epsilon(1e-9));
      CHECK(a.hot_rank == b.hot_rank);
      CHECK(a.hot_link == b.hot_link);
      CHECK(a.hot_rank_ratio == Approx(b.hot_rank_ratio).epsilon(1e-9));
      for (std::size_t i = 0; i < r; ++i) {
        CHECK(sep_dispatch[i].seconds() == Approx(dense_dispatch[i].seconds()).epsilon(1e-9));
        CHECK(sep_combine[i].seconds() == Approx(dense_combine[i].seconds()).epsilon(1e-9));
      }
    }
  }
}

// Disaggregated serving moves KV caches over the NICs the All-to-All uses. Fair sharing halves a flow's
// rate while the other is on: a transfer whose bottleneck is busy a fraction f of the time takes 1 + f
// times its data time, and an All-to-All whose NIC paths carry KV a fraction f of the phase the same.
TEST_CASE("KV traffic on a NIC stretches the data time of transfers and All-to-Alls by 1 + its share") {
  const Fabric fabric(hgx(2));
  // transfer = fixed + bytes x slope: the slope from two sizes, alone and shared half the time.
  const auto slope = [&](double shared) {
    return (fabric.transfer(2e9, 0, 8, shared) - fabric.transfer(1e9, 0, 8, shared)).seconds() / 1e9;
  };
  CHECK(slope(0.5) == Approx(1.5 * slope(0.0)).epsilon(1e-9));
  CHECK(slope(1.0) == Approx(2.0 * slope(0.0)).epsilon(1e-9));
  CHECK((fabric.transfer(1e9, 0, 8, 0.5) - fabric.transfer(1e9, 0, 8)).seconds() ==
        Approx(0.5 * 1e9 * slope(0.0)).epsilon(1e-9));

  // One GPU per node: the All-to-All is NIC traffic only, large enough to be above the latency floors;
  // the phase is startup + the NIC path's latency + data, and only the data stretches.
  FabricSpec one_gpu_nodes{.nodes = 4, .gpus_per_node = 1};
  const Fabric nics(one_gpu_nodes);
  AllToAllTraffic t = spread_traffic(4, 1, 8192, 8, 0.0);
  for (const AllToAllMode mode : {AllToAllMode::kHighThroughput, AllToAllMode::kLowLatency}) {
    const AllToAllKernel& k =
        mode == AllToAllMode::kHighThroughput ? one_gpu_nodes.high_throughput : one_gpu_nodes.low_latency;
    t.nic_out_shared.clear();
    t.nic_in_shared.clear();
    const Duration dispatch_fixed = k.dispatch_startup + one_gpu_nodes.nic_latency;
    const Duration combine_fixed = k.combine_startup + one_gpu_nodes.nic_latency;
    const AllToAllCost alone = nics.all_to_all(t, mode);
    REQUIRE(alone.dispatch > max(k.dispatch_floor, dispatch_fixed) * 2);
    t.nic_out_shared.assign(4, 0.5);
    const AllToAllCost out_shared = nics.all_to_all(t, mode);
    CHECK((out_shared.dispatch - dispatch_fixed).seconds() ==
          Approx(1.5 * (alone.dispatch - dispatch_fixed).seconds()).epsilon(1e-9));
    CHECK((out_shared.combine - combine_fixed).seconds() ==
          Approx(1.5 * (alone.combine - combine_fixed).seconds()).epsilon(1e-9));
    t.nic_out_shared.clear();
    t.nic_in_shared = {0.0, 0.25, 0.0, 0.0};  // one GPU receiving KV a quarter of the time: the slowest rank
    const AllToAllCost in_shared = nics.all_to_all(t, mode);
    CHECK((in_shared.dispatch - dispatch_fixed).seconds() ==
          Approx(1.25 * (alone.dispatch - dispatch_fixed).seconds()).epsilon(1e-9));
    CHECK(in_shared.hot_rank == 1);
  }
}

TEST_CASE("moving expert weights inside a node beats moving them across nodes") {
  const FabricSpec s = hgx(2);
  const Fabric fabric(s);
  const double expert_bytes = 3.0 * 7168 * 2048;  // one DeepSeek-V3 expert in FP8
  const Duration intra = fabric.transfer(expert_bytes, 0, 5);
  const Duration inter = fabric.transfer(expert_bytes, 0, 8);
  CHECK(intra < inter);
  CHECK(fabric.transfer(expert_bytes, 3, 3) == Duration::zero());
  CHECK(intra == fabric.send_recv(expert_bytes, true));
  CHECK(inter == fabric.send_recv(expert_bytes, false));
  // Cross-rail adds the two spine hops.
  CHECK(fabric.transfer(expert_bytes, 0, 9) == inter + s.switch_latency * 2);
  const Duration bandwidth_only =
      Duration::from_seconds(expert_bytes / (s.nvlink_bytes_per_s * s.efficiency));
  CHECK(intra - bandwidth_only == s.nvlink_latency + s.collectives.p2p_nvlink_overhead);
}

TEST_CASE("host to GPU copies run at the measured pinned rate of the host link") {
  const Fabric fabric(hgx(1));
  // shared/calibration/h200/platform.json: 64 MiB pinned H2D in 1.2296 ms, 512 MiB in 9.782 ms.
  constexpr double kMiB = 1024.0 * 1024.0;
  CHECK(fabric.host_to_gpu(64 * kMiB, 0).ms() == Approx(1.2296).epsilon(0.05));
  CHECK(fabric.host_to_gpu(512 * kMiB, 7).ms() == Approx(9.7823).epsilon(0.05));
  CHECK(fabric.host_link_bytes_per_s(0) == Approx(55e9));
  CHECK(fabric.host_link_of(0) == fabric.host_link_of(1));
  CHECK(fabric.host_to_gpu(0, 0) == Duration::zero());
}

TEST_CASE("An All-to-All pays the latency of the links it crosses") {
  // Traffic large enough that no floor binds; the same traffic on fabrics that
  // differ only in one latency moves the phase by exactly the latency of the path, topology.cpp's links.
  FabricSpec base{.nodes = 4, .gpus_per_node = 8};
  base.nodes_per_leaf_group = 32;
  const AllToAllTraffic t = spread_traffic(32, 8, 1024, 8, 0.0);
  const auto phase = [&](const FabricSpec& s, AllToAllMode mode) { return Fabric(s).all_to_all(t, mode); };
  for (const AllToAllMode mode : {AllToAllMode::kLowLatency, AllToAllMode::kHighThroughput}) {
    FabricSpec slow_nic = base;
    slow_nic.nic_latency = base.nic_latency + Duration::from_us(3);
    CHECK((phase(slow_nic, mode).dispatch - phase(base, mode).dispatch) == Duration::from_us(3));
    // Rail-optimised leaves: DeepEP normal kernels cross the NIC rail to rail (one leaf, no spine), so a
    // slower switch changes nothing; direct kernels send to every rank of the far node, other rails
    // included, through the spine: two more switch hops.
    FabricSpec slow_switch = base;
    slow_switch.switch_latency = base.switch_latency + Duration::from_us(1);
    const Duration spine_hops = mode == AllToAllMode::kLowLatency ? Duration::from_us(2) : Duration::zero();
    CHECK((phase(slow_switch, mode).combine - phase(base, mode).combine) == spine_hops);
    // Nodes on leaves of their own: the rail-to-rail traffic climbs to the spine too.
    FabricSpec spread = slow_switch;
    spread.nodes_per_leaf_group = 1;
    CHECK((phase(spread, mode).combine - phase(slow_switch, mode).combine) ==
          (mode == AllToAllMode::kLowLatency ? Duration::zero() : slow_switch.switch_latency * 2));
  }
  // Direct kernels send over NVLink beside the NIC (the longer path counts); DeepEP normal kernels forward
  // over NVLink what crossed the NIC (the two add up): a slower NVLink moves only the latter.
  FabricSpec slow_nvl = base;
  slow_nvl.nvlink_latency = base.nvlink_latency + Duration::from_us(1);
  CHECK(phase(slow_nvl, AllToAllMode::kLowLatency).dispatch ==
        phase(base, AllToAllMode::kLowLatency).dispatch);
  CHECK((phase(slow_nvl, AllToAllMode::kHighThroughput).dispatch -
         phase(base, AllToAllMode::kHighThroughput).dispatch) == Duration::from_us(1));
  // Inside one node only NVLink's latency counts.
  const AllToAllTraffic node = spread_traffic(8, 8, 1024, 8, 0.0);
  FabricSpec one_node = base;
  one_node.nodes = 1;
  FabricSpec one_node_slow_nic = one_node;
  one_node_slow_nic.nic_latency = Duration::from_us(50);
  CHECK(Fabric(one_node).all_to_all(node, AllToAllMode::kLowLatency).dispatch ==
        Fabric(one_node_slow_nic).all_to_all(node, AllToAllMode::kLowLatency).dispatch);
}

}  // namespace moesim
