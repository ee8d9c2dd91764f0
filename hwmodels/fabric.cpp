#include "hwmodels/fabric.h"

#include <algorithm>
#include <cmath>
#include <string>

#include "hwmodels/ecmp.h"
#include "sim/engine/check.h"

namespace moesim {

namespace {

// Doublings of the group beyond 8 ranks: the kernel tables show efficiency and floor degrading as
// the same bytes spread over more peers in smaller messages (COMPONENT_FIGURES.md 1.6).
double doublings_beyond_8(int ranks) { return std::max(0.0, std::log2(static_cast<double>(ranks) / 8.0)); }

}  // namespace

Fabric::Fabric(FabricSpec spec) : spec_(spec), topology_(spec_) {}

// The O(ranks^2) passes below only sum rows and columns (sequential reads, no scattered writes);
// scatter_ranks() then puts the per-rank sums on the links of each rank's GPU, NIC and leaf.
void Fabric::reset_ranks(const AllToAllTraffic& t, AllToAllScratch& sc) const {
  const auto r = static_cast<std::size_t>(t.ranks);
  for (auto* v : {&sc.row_nvl, &sc.col_nvl, &sc.row_nic, &sc.col_nic, &sc.row_leaf, &sc.col_leaf})
    v->assign(r, 0.0);
  if (sc.group_ranks == t.ranks && sc.group_per_node == t.ranks_per_node &&
      sc.group_first_node == t.first_node)
    return;
  // A planner costs one group over and over: its ranks' GPUs, leaves and links once.
  sc.group_ranks = t.ranks;
  sc.group_per_node = t.ranks_per_node;
  sc.group_first_node = t.first_node;
  sc.rank_leaf.resize(r);
  sc.rank_node.resize(r);
  sc.rank_local.resize(r);
  sc.rank_links.resize(r);
  sc.link_bw.clear();
  sc.link_latency.clear();
  sc.link_kind.clear();
  sc.doublings = doublings_beyond_8(t.ranks);
  for (auto& e : sc.ecmp) e.clear();
  std::vector<int> local_of(static_cast<std::size_t>(topology_.link_count()), -1);
  for (int k = 0; k < t.ranks; ++k) {
    const auto i = static_cast<std::size_t>(k);
    const int g = gpu_of(t, k);
    const int leaf = topology_.leaf_of(g);
    sc.rank_leaf[i] = leaf;
    sc.rank_node[i] = k / t.ranks_per_node;
    sc.rank_local[i] = k % t.ranks_per_node;
    sc.rank_links[i] = {topology_.nvlink_out(g), topology_.nvlink_in(g),   topology_.nic_out(g),
                        topology_.nic_in(g),     topology_.pcie_up(g),     topology_.pcie_down(g),
                        topology_.leaf_up(leaf), topology_.leaf_down(leaf)};
    for (int& link : sc.rank_links[i]) {
      int& local = local_of[static_cast<std::size_t>(link)];
      if (local < 0) {
        local = static_cast<int>(sc.link_bw.size());
        sc.link_bw.push_back(topology_.link(link).bytes_per_s);
        sc.link_latency.push_back(topology_.link(link).latency);
        sc.link_kind.push_back(topology_.link(link).kind);
      }
      link = local;
    }
  }
  sc.load.assign(sc.link_bw.size(), 0.0);
}

void Fabric::scatter_ranks(const AllToAllTraffic& t, AllToAllScratch& sc) const {
  // Only the links of the group's GPUs and of their leaves carry its traffic, and cost_loads() reads only
  // those: the scratch holds them alone (a cluster-wide array, cleared per call, was 42% of a run's
  // instructions at 1,024 GPUs).
  std::fill(sc.load.begin(), sc.load.end(), 0.0);
  sc.nvl_units = 0;
  sc.nic_units = 0;
  for (int k = 0; k < t.ranks; ++k) {
    const auto i = static_cast<std::size_t>(k);
    const std::array<int, 8>& l = sc.rank_links[i];
    const auto at = [&sc](int link) -> double& { return sc.load[static_cast<std::size_t>(link)]; };
    at(l[kNvlOut]) += sc.row_nvl[i];
    at(l[kNvlIn]) += sc.col_nvl[i];
    at(l[kPcieUp]) += sc.row_nic[i];
    at(l[kNicOut]) += sc.row_nic[i];
    at(l[kNicIn]) += sc.col_nic[i];
    at(l[kPcieDown]) += sc.col_nic[i];
    at(l[kLeafUp]) += sc.row_nic[i] - sc.row_leaf[i];
    at(l[kLeafDown]) += sc.col_nic[i] - sc.col_leaf[i];
    sc.nvl_units += sc.row_nvl[i];
    sc.nic_units += sc.row_nic[i];
  }
}

namespace {

// `u` units from rank `si` over its NIC to rank `fi` in another node; on one leaf they never reach the spine.
void add_nic_crossing(AllToAllScratch& sc, std::size_t si, std::size_t fi, double u) {
  sc.row_nic[si] += u;
  sc.col_nic[fi] += u;
  if (sc.rank_leaf[si] == sc.rank_leaf[fi]) {
    sc.row_leaf[si] += u;
    sc.col_leaf[fi] += u;
  }
}

// The NIC crossings of load_high_throughput_separable() between the ranks of local index `l` (one per
// node that has it; `a_l`: their sources' tokens): rank s of node n sends a[s] x c[m] to the rank of every
// other node m, so its row is a[s] x (the c of those nodes less its own) and its column c[n] x (a_l less
// its own a); the leaf sums are the same over the ranks on its leaf, in `c_leaf` and `a_leaf` (indexed by
// leaf, cleared here for the leaves touched). O(ranks / ranks_per_node).
void separable_nic_crossings(const AllToAllTraffic& t, AllToAllScratch& sc, int l, double a_l, double* c_leaf,
                             double* a_leaf) {
  const int r = t.ranks;
  const int per_node = t.ranks_per_node;
  const double* a = t.src_tokens.data();
  const double* c = t.node_share.data();
  const auto leaf = [&sc](int s) {
    return static_cast<std::size_t>(sc.rank_leaf[static_cast<std::size_t>(s)]);
  };
  for (int s = l; s < r; s += per_node) c_leaf[leaf(s)] = a_leaf[leaf(s)] = 0;
  double c_l = 0;
  for (int s = l; s < r; s += per_node) {
    const double cn = c[s / per_node];
    c_l += cn;
    c_leaf[leaf(s)] += cn;
    a_leaf[leaf(s)] += a[s];
  }
  for (int s = l; s < r; s += per_node) {
    const auto si = static_cast<std::size_t>(s);
    const double cn = c[s / per_node];
    sc.row_nic[si] = a[s] * std::max(0.0, c_l - cn);
    sc.col_nic[si] = cn * std::max(0.0, a_l - a[s]);
    sc.row_leaf[si] = a[s] * std::max(0.0, c_leaf[leaf(s)] - cn);
    sc.col_leaf[si] = cn * std::max(0.0, a_leaf[leaf(s)] - a[s]);
  }
}

}  // namespace

// DeepEP normal kernels (internode.cu): a token crosses the NIC once per destination node, landing on
// the GPU of the same local index (same rail), which forwards it over NVLink to every destination rank
// of that node. Tokens for the sender's own node take the NVLink hop directly. Intranode-only groups
// reduce to direct NVLink copies.
void Fabric::load_high_throughput(const AllToAllTraffic& t, AllToAllScratch& sc) const {
  reset_ranks(t, sc);
  const int r = t.ranks;
  const int per_node = t.ranks_per_node;
  const int nodes = (r + per_node - 1) / per_node;
  for (int s = 0; s < r; ++s) {
    const int local = s % per_node;
    const double* row = t.tokens_to_rank.data() + static_cast<std::ptrdiff_t>(s) * r;
    for (int node = 0; node < nodes; ++node) {
      const int begin = node * per_node;
      const int end = std::min(r, begin + per_node);
      const int fwd = begin + local;
      double forwarded = 0;
      for (int d = begin; d < end; ++d) {
        const double u = d == fwd ? 0.0 : row[d];
        forwarded += u;
        sc.col_nvl[static_cast<std::size_t>(d)] += u;
      }
      if (fwd < end) sc.row_nvl[static_cast<std::size_t>(fwd)] += forwarded;
      if (node == s / per_node || fwd >= end) continue;
      add_nic_crossing(sc, static_cast<std::size_t>(s), static_cast<std::size_t>(fwd),
                       t.tokens_to_node[static_cast<std::size_t>(s * nodes + node)]);
    }
  }
  scatter_ranks(t, sc);
}

// Direct kernels (DeepEP low-latency, one-sided NVLink): every unit goes straight to its rank.
void Fabric::load_direct(const AllToAllTraffic& t, AllToAllScratch& sc, const std::vector<double>& units,
                         bool intranode_nvlink) const {
  reset_ranks(t, sc);
  const int r = t.ranks;
  const int* node = sc.rank_node.data();
  const int* leaf = sc.rank_leaf.data();
  for (int s = 0; s < r; ++s) {
    const auto si = static_cast<std::size_t>(s);
    const double* row = units.data() + static_cast<std::ptrdiff_t>(s) * r;
    double nvl = 0;
    double nic = 0;
    double same_leaf = 0;
    for (int d = 0; d < r; ++d) {
      const double u = d == s ? 0.0 : row[d];
      const auto di = static_cast<std::size_t>(d);
      if (intranode_nvlink && node[si] == node[di]) {
        nvl += u;
        sc.col_nvl[di] += u;
      } else {
        nic += u;
        sc.col_nic[di] += u;
        if (leaf[si] == leaf[di]) {
          same_leaf += u;
          sc.col_leaf[di] += u;
        }
      }
    }
    sc.row_nvl[si] += nvl;
    sc.row_nic[si] += nic;
    sc.row_leaf[si] += same_leaf;
  }
  scatter_ranks(t, sc);
}

// load_high_throughput() on an outer product. Rank d receives over NVLink from every source but those of
// its own local index (for them d is the forwarder into its node), and the forwarder of local index l in
// node n sends on every token its l-sources have for the node's other ranks. The NIC crossings, a[s] x c[n]
// from each source s to the rank of its local index in every other node n (where the node has one), are
// summed per source over the nodes and per destination over the sources of its local index: O(ranks).
void Fabric::load_high_throughput_separable(const AllToAllTraffic& t, AllToAllScratch& sc) const {
  reset_ranks(t, sc);
  const int r = t.ranks;
  const int per_node = t.ranks_per_node;
  const int nodes = (r + per_node - 1) / per_node;
  const double* a = t.src_tokens.data();
  const double* b = t.rank_share.data();
  const auto leaves = static_cast<std::size_t>(topology_.leaves());
  const auto sums = static_cast<std::size_t>(per_node + nodes);
  sc.sums.resize(sums + 2 * leaves);
  std::fill_n(sc.sums.begin(), sums, 0.0);
  double* a_local = sc.sums.data();     // tokens of the sources of each local index
  double* b_node = a_local + per_node;  // rank shares of each node
  double* c_leaf = b_node + nodes;      // per leaf (separable_nic_crossings)
  double* a_leaf = c_leaf + leaves;
  double a_all = 0;
  const int* local = sc.rank_local.data();
  const int* node_of = sc.rank_node.data();
  for (int s = 0; s < r; ++s) {
    a_local[local[s]] += a[s];
    b_node[node_of[s]] += b[s];
    a_all += a[s];
  }
  for (int d = 0; d < r; ++d) {
    const auto di = static_cast<std::size_t>(d);
    sc.col_nvl[di] = b[d] * std::max(0.0, a_all - a_local[local[d]]);
    sc.row_nvl[di] = std::max(0.0, b_node[node_of[d]] - b[d]) * a_local[local[d]];
  }
  for (int l = 0; l < per_node; ++l) separable_nic_crossings(t, sc, l, a_local[l], c_leaf, a_leaf);
  scatter_ranks(t, sc);
}

// load_direct() on an outer product: each rank's sums are its share of the totals over the ranks of its
// node, its leaf and the group, less its own entry. O(ranks).
void Fabric::load_direct_separable(const AllToAllTraffic& t, AllToAllScratch& sc,
                                   const std::vector<double>& share, bool intranode_nvlink) const {
  reset_ranks(t, sc);
  const int r = t.ranks;
  const int per_node = t.ranks_per_node;
  const double* a = t.src_tokens.data();
  const double* b = share.data();
  // Per leaf of the cluster (only the group's leaves are touched): sums over the group, then over one node.
  const auto leaves = static_cast<std::size_t>(topology_.leaves());
  sc.sums.resize(4 * leaves);
  double* a_leaf = sc.sums.data();
  double* b_leaf = a_leaf + leaves;
  double* a_leaf_node = b_leaf + leaves;
  double* b_leaf_node = a_leaf_node + leaves;
  for (int s = 0; s < r; ++s) {
    const auto l = static_cast<std::size_t>(sc.rank_leaf[static_cast<std::size_t>(s)]);
    a_leaf[l] = b_leaf[l] = 0;
  }
  double a_all = 0;
  double b_all = 0;
  for (int s = 0; s < r; ++s) {
    const auto l = static_cast<std::size_t>(sc.rank_leaf[static_cast<std::size_t>(s)]);
    a_leaf[l] += a[s];
    b_leaf[l] += b[s];
    a_all += a[s];
    b_all += b[s];
  }
  const auto gap = [](double total, double part) { return std::max(0.0, total - part); };
  for (int begin = 0; begin < r; begin += per_node) {
    const int end = std::min(r, begin + per_node);
    double a_node = 0;
    double b_node = 0;
    for (int s = begin; s < end; ++s) {
      const auto l = static_cast<std::size_t>(sc.rank_leaf[static_cast<std::size_t>(s)]);
      a_leaf_node[l] = b_leaf_node[l] = 0;
    }
    for (int s = begin; s < end; ++s) {
      const auto l = static_cast<std::size_t>(sc.rank_leaf[static_cast<std::size_t>(s)]);
      a_leaf_node[l] += a[s];
      b_leaf_node[l] += b[s];
      a_node += a[s];
      b_node += b[s];
    }
    for (int s = begin; s < end; ++s) {
      const auto si = static_cast<std::size_t>(s);
      const auto l = static_cast<std::size_t>(sc.rank_leaf[si]);
      if (intranode_nvlink) {  // the node's other ranks over NVLink, the rest over the NIC
        sc.row_nvl[si] = a[s] * gap(b_node, b[s]);
        sc.col_nvl[si] = b[s] * gap(a_node, a[s]);
        sc.row_nic[si] = a[s] * gap(b_all, b_node);
        sc.col_nic[si] = b[s] * gap(a_all, a_node);
        sc.row_leaf[si] = a[s] * gap(b_leaf[l], b_leaf_node[l]);
        sc.col_leaf[si] = b[s] * gap(a_leaf[l], a_leaf_node[l]);
      } else {  // every other rank over the NIC
        sc.row_nic[si] = a[s] * gap(b_all, b[s]);
        sc.col_nic[si] = b[s] * gap(a_all, a[s]);
        sc.row_leaf[si] = a[s] * gap(b_leaf[l], b[s]);
        sc.col_leaf[si] = b[s] * gap(a_leaf[l], a[s]);
      }
    }
  }
  scatter_ranks(t, sc);
}

namespace {

// The flows (one per pair of ranks the kernel connects over the NIC) that leave each leaf of the group; as
// many enter it (the pairs are symmetric). High-throughput: a rank to the rank of its local index in every
// other node; direct kernels: a rank to every other rank, but those of its node when they go over NVLink.
// Pairs on one leaf never reach the spine.
std::vector<int> leaf_flows(const AllToAllTraffic& t, const AllToAllScratch& sc, int leaves,
                            bool high_throughput, bool intranode_nvlink) {
  const int r = t.ranks;
  const int per_node = t.ranks_per_node;
  const auto leaf = [&sc](int s) {
    return static_cast<std::size_t>(sc.rank_leaf[static_cast<std::size_t>(s)]);
  };
  std::vector<int> on_leaf(static_cast<std::size_t>(leaves), 0);
  for (int s = 0; s < r; ++s) ++on_leaf[leaf(s)];
  std::vector<int> flows(static_cast<std::size_t>(leaves), 0);
  if (high_throughput) {
    std::vector<int> of_local(static_cast<std::size_t>(per_node), 0);
    std::vector<int> on_leaf_local(static_cast<std::size_t>(leaves * per_node), 0);
    const auto local = [&sc](int s) {
      return static_cast<std::size_t>(sc.rank_local[static_cast<std::size_t>(s)]);
    };
    for (int s = 0; s < r; ++s) {
      ++of_local[local(s)];
      ++on_leaf_local[leaf(s) * static_cast<std::size_t>(per_node) + local(s)];
    }
    for (int s = 0; s < r; ++s) {
      flows[leaf(s)] +=
          of_local[local(s)] - on_leaf_local[leaf(s) * static_cast<std::size_t>(per_node) + local(s)];
    }
    return flows;
  }
  for (int begin = 0; begin < r; begin += per_node) {
    const int end = std::min(r, begin + per_node);
    for (int s = begin; s < end; ++s) {
      int node_off_leaf = 0;  // ranks of s's node on other leaves (rail-optimised layouts)
      for (int d = begin; d < end; ++d) node_off_leaf += leaf(d) != leaf(s) ? 1 : 0;
      flows[leaf(s)] += r - on_leaf[leaf(s)] - (intranode_nvlink ? node_off_leaf : 0);
    }
  }
  return flows;
}

// Each link's drain time per unit: load / capacity, x its ECMP factor where the fabric hashes (`ecmp` not
// null).
void fill_drain(const AllToAllScratch& sc, const std::vector<double>* ecmp, std::vector<double>& drain) {
  drain.resize(sc.load.size());
  for (std::size_t i = 0; i < drain.size(); ++i) {
    drain[i] = sc.load[i] / sc.link_bw[i] * (ecmp != nullptr ? (*ecmp)[i] : 1.0);
  }
}

}  // namespace

// Under static ECMP the busiest uplink of a leaf (and the busiest spine downlink into it) carries
// ecmp_max_load_factor(flows, uplinks) times the bundle's mean: the leaf links' drain time takes that factor.
// The bundle holds capacity / nic_bytes_per_s uplinks. Costed once per group and mode.
const std::vector<double>& Fabric::ecmp_factors(const AllToAllTraffic& t, AllToAllScratch& sc,
                                                AllToAllMode mode) const {
  const bool ht = mode == AllToAllMode::kHighThroughput;
  const bool ll = mode == AllToAllMode::kLowLatency;
  std::vector<double>& f = sc.ecmp[ht ? 0 : (ll ? 1 : 2)];
  if (!f.empty()) return f;
  f.assign(sc.link_bw.size(), 1.0);
  const std::vector<int> flows =
      leaf_flows(t, sc, topology_.leaves(), ht, !ll || spec_.low_latency.intranode_over_nvlink);
  std::vector<double> of_leaf(flows.size(), -1.0);
  for (int s = 0; s < t.ranks; ++s) {
    const auto si = static_cast<std::size_t>(s);
    const auto leaf = static_cast<std::size_t>(sc.rank_leaf[si]);
    const auto up = static_cast<std::size_t>(sc.rank_links[si][kLeafUp]);
    const auto down = static_cast<std::size_t>(sc.rank_links[si][kLeafDown]);
    if (of_leaf[leaf] < 0) {
      const auto uplinks = static_cast<int>(std::lround(sc.link_bw[up] / spec_.nic_bytes_per_s));
      of_leaf[leaf] = ecmp_max_load_factor(flows[leaf], std::max(1, uplinks));
    }
    f[up] = f[down] = of_leaf[leaf];
  }
  return f;
}

// The latency of the phase's longest path: a message's first byte crosses the links of its route (their
// latencies, topology.cpp: NVLink out + in, NIC out + in, and the leaf uplink and spine downlink when the
// traffic leaves its leaf). Direct kernels send over NVLink and the NIC side by side; DeepEP normal kernels
// forward what crossed the NIC over NVLink at the far node, so the two add up.
Duration Fabric::path_latency(const AllToAllTraffic& t, const AllToAllScratch& sc, AllToAllMode mode) const {
  const std::array<int, 8>& l = sc.rank_links[0];
  const auto lat = [&](RankLink k) { return sc.link_latency[static_cast<std::size_t>(l[k])]; };
  Duration nvl = sc.nvl_units > 0 ? lat(kNvlOut) + lat(kNvlIn) : Duration::zero();
  if (sc.nic_units <= 0) return nvl;
  Duration nic = lat(kNicOut) + lat(kNicIn);
  for (int r = 0; r < t.ranks; ++r) {
    const std::array<int, 8>& lr = sc.rank_links[static_cast<std::size_t>(r)];
    if (sc.load[static_cast<std::size_t>(lr[kLeafUp])] > 0) {
      nic += sc.link_latency[static_cast<std::size_t>(lr[kLeafUp])] +
             sc.link_latency[static_cast<std::size_t>(lr[kLeafDown])];
      break;
    }
  }
  return mode == AllToAllMode::kHighThroughput ? nic + nvl : max(nic, nvl);
}

// Fair sharing of a link among the flows crossing it is work-conserving, so transfers that start
// together drain a link in load / capacity: each rank finishes when its busiest port (NVLink, or the
// NIC path: PCIe, NIC, its leaf's uplink bundle) drains, and the phase ends with the slowest rank.
AllToAllCost Fabric::cost_loads(const AllToAllTraffic& t, AllToAllScratch& sc, const AllToAllKernel& k,
                                AllToAllMode mode, std::span<Duration> rank_dispatch,
                                std::span<Duration> rank_combine) const {
  AllToAllCost c;
  c.mode = mode;
  c.nvlink_bytes = sc.nvl_units * (t.dispatch_bytes_per_token + t.combine_bytes_per_token);
  c.nic_bytes = sc.nic_units * (t.dispatch_bytes_per_token + t.combine_bytes_per_token);
  if (sc.nvl_units <= 0 && sc.nic_units <= 0) {
    for (auto& d : rank_dispatch) d = Duration::zero();
    for (auto& d : rank_combine) d = Duration::zero();
    return c;
  }
  const double doublings = sc.doublings;
  const double eff_scale = std::max(0.05, 1.0 - k.efficiency_loss_per_doubling * doublings);
  const double nvl_rate = spec_.nvlink_bytes_per_s * k.nvlink_efficiency * eff_scale;
  const double nic_eff = k.nic_efficiency * eff_scale;
  const Duration floor_growth = k.floor_growth_per_doubling.scaled(doublings);
  const Duration dispatch_floor = k.dispatch_floor + floor_growth;
  const Duration combine_floor = k.combine_floor + floor_growth;
  const Duration latency = path_latency(t, sc, mode);
  const Duration dispatch_startup = k.dispatch_startup + latency;
  const Duration combine_startup = k.combine_startup + latency;

  // Each link's drain time per unit, once per link (ranks share their leaf's links, and some their NIC).
  std::vector<double>& drain = sc.drain;
  fill_drain(sc, spec_.routing == ScaleOutRouting::kEcmp ? &ecmp_factors(t, sc, mode) : nullptr, drain);
  const bool stretched = !t.nic_out_shared.empty() || !t.nic_in_shared.empty();
  // A rank's drain time per unit on its NVLink ports and on its NIC path (the NIC path's busiest link first
  // in {NIC out, NIC in, PCIe up, PCIe down, leaf up, leaf down}, the one `nic_slot` names).
  struct Ports {
    double nvl;
    double nic;
    std::size_t nic_slot;
  };
  const auto ports = [&](std::size_t ri, bool find_slot) {
    const std::array<int, 8>& l = sc.rank_links[ri];
    const auto at = [&](RankLink slot) { return drain[static_cast<std::size_t>(l[slot])]; };
    Ports p{.nvl = std::max(at(kNvlOut), at(kNvlIn)), .nic = 0, .nic_slot = kNicOut};
    const double out_stretch = stretched && ri < t.nic_out_shared.size() ? 1.0 + t.nic_out_shared[ri] : 1.0;
    const double in_stretch = stretched && ri < t.nic_in_shared.size() ? 1.0 + t.nic_in_shared[ri] : 1.0;
    const std::array<double, 6> v{at(kNicOut) * out_stretch,
                                  at(kNicIn) * in_stretch,
                                  at(kPcieUp) * out_stretch,
                                  at(kPcieDown) * in_stretch,
                                  at(kLeafUp),
                                  at(kLeafDown)};
    for (const double x : v) p.nic = std::max(p.nic, x);
    if (find_slot) {
      constexpr std::array<RankLink, 6> kSlots{kNicOut, kNicIn, kPcieUp, kPcieDown, kLeafUp, kLeafDown};
      double best = 0;
      for (std::size_t j = 0; j < v.size(); ++j) {
        if (v[j] > best) {
          best = v[j];
          p.nic_slot = kSlots[j];
        }
      }
    }
    return p;
  };
  const double nvl_scale = spec_.nvlink_bytes_per_s;
  const auto data_of = [&](const Ports& p, double& a, double& b) {
    a = p.nvl * nvl_scale / nvl_rate;  // seconds per byte of a unit
    b = p.nic / nic_eff;
    return std::max(a, b) + k.overlap_penalty * std::min(a, b);
  };

  double worst = -1;
  double sum = 0;
  for (int r = 0; r < t.ranks; ++r) {
    const auto ri = static_cast<std::size_t>(r);
    double a = 0;
    double b = 0;
    const double data = data_of(ports(ri, false), a, b);
    sum += data;
    if (data > worst) {
      worst = data;
      c.hot_rank = r;
    }
    if (ri < rank_dispatch.size()) {
      rank_dispatch[ri] =
          max(dispatch_floor, dispatch_startup + Duration::from_seconds(data * t.dispatch_bytes_per_token));
    }
    if (ri < rank_combine.size()) {
      rank_combine[ri] =
          max(combine_floor, combine_startup + Duration::from_seconds(data * t.combine_bytes_per_token));
    }
  }
  // The hot rank's busiest link and its seconds per unit-byte at line rate.
  double worst_link_s = 0;
  if (c.hot_rank >= 0) {
    const auto hi = static_cast<std::size_t>(c.hot_rank);
    const Ports p = ports(hi, true);
    double a = 0;
    double b = 0;
    (void)data_of(p, a, b);
    const int nic_link = sc.rank_links[hi][p.nic_slot];
    c.hot_link = a >= b ? LinkKind::kNvlinkOut : sc.link_kind[static_cast<std::size_t>(nic_link)];
    worst_link_s = std::max(p.nvl, p.nic);
  }
  c.dispatch =
      max(dispatch_floor, dispatch_startup + Duration::from_seconds(worst * t.dispatch_bytes_per_token));
  c.combine = max(combine_floor, combine_startup + Duration::from_seconds(worst * t.combine_bytes_per_token));
  c.hot_rank_ratio = sum > 0 ? worst * t.ranks / sum : 1.0;
  c.hot_link_utilisation =
      c.dispatch.ps() > 0 ? worst_link_s * t.dispatch_bytes_per_token / c.dispatch.seconds() : 0.0;
  return c;
}

AllToAllCost Fabric::all_to_all(const AllToAllTraffic& t, AllToAllMode mode) const {
  return all_to_all(t, mode, {}, {}, scratch_);
}

AllToAllCost Fabric::all_to_all(const AllToAllTraffic& t, AllToAllMode mode,
                                std::span<Duration> rank_dispatch, std::span<Duration> rank_combine) const {
  return all_to_all(t, mode, rank_dispatch, rank_combine, scratch_);
}

AllToAllCost Fabric::all_to_all(const AllToAllTraffic& t, AllToAllMode mode,
                                std::span<Duration> rank_dispatch, std::span<Duration> rank_combine,
                                AllToAllScratch& sc) const {
  if (t.ranks <= 1) {
    for (auto& d : rank_dispatch) d = Duration::zero();
    for (auto& d : rank_combine) d = Duration::zero();
    return AllToAllCost{.mode = mode == AllToAllMode::kAuto ? AllToAllMode::kHighThroughput : mode};
  }
  const auto r = static_cast<std::size_t>(t.ranks);
  MOESIM_CHECK(t.ranks_per_node >= 1 && t.ranks_per_node <= spec_.gpus_per_node,
               "ranks_per_node exceeds the GPUs of a node");
  const int nodes = (t.ranks + t.ranks_per_node - 1) / t.ranks_per_node;
  MOESIM_CHECK(t.first_node >= 0 && t.first_node + nodes <= spec_.nodes,
               "All-to-All group of " + std::to_string(t.ranks) + " ranks does not fit the fabric");
  if (t.separable) {
    MOESIM_CHECK(t.src_tokens.size() == r && t.rank_share.size() == r && t.pair_share.size() == r &&
                     t.node_share.size() == static_cast<std::size_t>(nodes),
                 "separable traffic sizes do not match ranks and nodes");
  } else {
    MOESIM_CHECK(t.tokens_to_rank.size() == r * r, "tokens_to_rank size does not match ranks");
  }
  if (mode == AllToAllMode::kAuto) {
    // Each candidate writes its own per-rank times (the low-latency one into the scratch), so that the
    // winner's are kept without costing it a third time.
    const bool per_rank = !rank_dispatch.empty() || !rank_combine.empty();
    if (per_rank) {
      sc.ll_dispatch.resize(rank_dispatch.size());
      sc.ll_combine.resize(rank_combine.size());
    }
    const AllToAllCost ht = all_to_all(t, AllToAllMode::kHighThroughput, rank_dispatch, rank_combine, sc);
    const AllToAllCost ll = per_rank
                                ? all_to_all(t, AllToAllMode::kLowLatency, sc.ll_dispatch, sc.ll_combine, sc)
                                : all_to_all(t, AllToAllMode::kLowLatency, {}, {}, sc);
    const bool use_ll = ll.dispatch + ll.combine < ht.dispatch + ht.combine;
    if (use_ll && per_rank) {
      std::copy(sc.ll_dispatch.begin(), sc.ll_dispatch.end(), rank_dispatch.begin());
      std::copy(sc.ll_combine.begin(), sc.ll_combine.end(), rank_combine.begin());
    }
    return use_ll ? ll : ht;
  }
  switch (mode) {
    case AllToAllMode::kHighThroughput:
      if (t.separable) {
        load_high_throughput_separable(t, sc);
        return cost_loads(t, sc, spec_.high_throughput, mode, rank_dispatch, rank_combine);
      }
      MOESIM_CHECK(t.tokens_to_node.size() == r * static_cast<std::size_t>(nodes),
                   "tokens_to_node size does not match ranks x nodes");
      load_high_throughput(t, sc);
      return cost_loads(t, sc, spec_.high_throughput, mode, rank_dispatch, rank_combine);
    case AllToAllMode::kLowLatency:
      if (t.separable) {
        load_direct_separable(t, sc, t.pair_share, spec_.low_latency.intranode_over_nvlink);
        return cost_loads(t, sc, spec_.low_latency, mode, rank_dispatch, rank_combine);
      }
      MOESIM_CHECK(t.pairs_to_rank.size() == r * r, "pairs_to_rank size does not match ranks");
      load_direct(t, sc, t.pairs_to_rank, spec_.low_latency.intranode_over_nvlink);
      return cost_loads(t, sc, spec_.low_latency, mode, rank_dispatch, rank_combine);
    case AllToAllMode::kNvlinkDomain:
    case AllToAllMode::kAuto:
      break;
  }
  if (t.separable) {
    load_direct_separable(t, sc, t.rank_share, true);
  } else {
    load_direct(t, sc, t.tokens_to_rank, true);
  }
  return cost_loads(t, sc, spec_.nvlink_domain, mode, rank_dispatch, rank_combine);
}

// Ring all-reduce moves 2(p-1)/p of the buffer through every GPU's link (Patarasuk and Yuan, JPDC
// 2009); the bus efficiency, startup and floor are fitted to Vidur's H100 DGX NCCL profiles
// (COMPONENT_FIGURES.md section 5). Across nodes: the two-level scheme of NCCL/ASTRA-sim, with the
// inter-node rings on each GPU's share of the NIC.
Duration Fabric::all_reduce(double bytes, int group, bool intra_node, AllReduceKernel kernel) const {
  if (group <= 1 || bytes <= 0) return Duration::zero();
  const CollectiveCalibration& c = spec_.collectives;
  if (kernel != AllReduceKernel::kNccl) {
    MOESIM_CHECK(intra_node, "a custom all-reduce runs inside one NVLink domain");
    // One-shot: each GPU reads the whole buffer of each of its group - 1 peers and sums locally, one round
    // of remote reads. Two-shot: a reduce-scatter (each GPU reads its 1/group slice from every peer) and,
    // after the slices are visible, an all-gather (every slice from its owner): 2 (group - 1) / group of
    // the buffer in two dependent rounds. Both between the same two barriers (vLLM
    // cross_device_reduce_1stage / _2stage); the reads arrive on the GPU's NVLink ingress, and each round
    // and barrier costs one NVLink latency.
    const double p = group;
    const bool one_shot = kernel == AllReduceKernel::kOneShot;
    const double read = one_shot ? (p - 1.0) * bytes : 2.0 * (p - 1.0) / p * bytes;
    const int rounds = c.custom_all_reduce_barriers + (one_shot ? 1 : 2);
    return c.custom_all_reduce_launch + spec_.nvlink_latency * rounds +
           Duration::from_seconds(read / (spec_.nvlink_bytes_per_s * spec_.efficiency));
  }
  const double eff = c.all_reduce_bus_efficiency;
  const int local = intra_node ? group : std::min(group, spec_.gpus_per_node);
  const int across = intra_node ? 1 : (group + local - 1) / local;
  const double pl = local;
  const double pn = across;
  double seconds = local > 1 ? 2.0 * (pl - 1.0) / pl * bytes / (spec_.nvlink_bytes_per_s * eff) : 0.0;
  Duration steps = c.all_reduce_step_latency * (2 * (local - 1));
  if (across > 1) {
    const double nic_share =
        std::min(spec_.nic_bytes_per_s / topology_.gpus_per_nic(), spec_.pcie_bytes_per_s);
    seconds += 2.0 * (pn - 1.0) / pn * (bytes / pl) / (nic_share * eff);
    steps += (spec_.nic_latency + c.all_reduce_step_latency) * (2 * (across - 1));
  }
  return max(c.all_reduce_floor, c.all_reduce_startup + steps + Duration::from_seconds(seconds));
}

Duration Fabric::send_recv(double bytes, bool intra_node) const {
  const CollectiveCalibration& c = spec_.collectives;
  if (intra_node) {
    return spec_.nvlink_latency + c.p2p_nvlink_overhead +
           Duration::from_seconds(std::max(0.0, bytes) / (spec_.nvlink_bytes_per_s * spec_.efficiency));
  }
  const double rate = std::min(spec_.nic_bytes_per_s, spec_.pcie_bytes_per_s) * c.p2p_nic_efficiency;
  return spec_.nic_latency + c.p2p_nic_overhead + Duration::from_seconds(std::max(0.0, bytes) / rate);
}

Duration Fabric::transfer(double bytes, int src_gpu, int dst_gpu, double shared) const {
  MOESIM_CHECK(src_gpu >= 0 && src_gpu < topology_.gpus() && dst_gpu >= 0 && dst_gpu < topology_.gpus(),
               "transfer between GPUs outside the fabric");
  if (src_gpu == dst_gpu || bytes <= 0) return Duration::zero();
  const Route route = topology_.route(src_gpu, dst_gpu);
  double rate = spec_.nvlink_bytes_per_s;
  Duration latency;
  for (int i = 0; i < route.hops; ++i) {
    const Link& l = topology_.link(route.links[static_cast<std::size_t>(i)]);
    rate = std::min(rate, l.bytes_per_s);
    latency += l.latency;
  }
  const bool intra = topology_.node_of(src_gpu) == topology_.node_of(dst_gpu);
  const CollectiveCalibration& c = spec_.collectives;
  const Duration overhead = intra ? c.p2p_nvlink_overhead : c.p2p_nic_overhead;
  const double eff = intra ? spec_.efficiency : c.p2p_nic_efficiency;
  return latency + overhead +
         Duration::from_seconds(bytes / (rate * eff) * (1.0 + std::clamp(shared, 0.0, 1.0)));
}

Duration Fabric::host_to_gpu(double bytes, int gpu) const {
  MOESIM_CHECK(gpu >= 0 && gpu < topology_.gpus(), "host_to_gpu for a GPU outside the fabric");
  if (bytes <= 0) return Duration::zero();
  const Route route = topology_.host_route(gpu);
  double rate = spec_.host_link_bytes_per_s;
  for (int i = 0; i < route.hops; ++i) {
    rate = std::min(rate, topology_.link(route.links[static_cast<std::size_t>(i)]).bytes_per_s);
  }
  return spec_.host_link_latency + Duration::from_seconds(bytes / rate);
}

double Fabric::host_link_bytes_per_s(int gpu) const {
  return topology_.link(topology_.host_route(gpu).links[0]).bytes_per_s;
}

}  // namespace moesim
