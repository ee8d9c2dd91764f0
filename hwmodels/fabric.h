// The fabric cost model: All-to-All (dispatch/combine), all-reduce, point-to-point, weight transfers
// between GPUs and host -> GPU copies, over the Topology built from a FabricSpec. Pure const cost
// functions; all_to_all reuses scratch buffers, so one Fabric must not be shared between threads.
#pragma once

#include <array>
#include <span>
#include <vector>

#include "hwmodels/fabric_spec.h"
#include "hwmodels/topology.h"
#include "sim/engine/time.h"

namespace moesim {

enum class AllToAllMode {
  kHighThroughput,  // DeepEP normal: one NIC crossing per (token, destination node) to the same-rail
                    // GPU there, then NVLink fan-out; NVLink only inside a node
  kLowLatency,      // DeepEP low-latency: one message per (token, expert) pair straight to the rank
  kNvlinkDomain,    // one-sided NVLink kernel (NVL72): one copy per (token, destination rank)
  kAuto,            // the cheaper of high-throughput and low-latency for this step
};

// Traffic of one dispatch (the combine is its mirror image), derived by the step planner from routing
// counts and placement. Matrices are row-major [src][dst]; diagonal entries stay on the GPU.
// Rank r runs on GPU (first_node + r / ranks_per_node) * gpus_per_node + r % ranks_per_node.
struct AllToAllTraffic {
  int ranks = 0;
  int ranks_per_node = 1;
  std::vector<double> tokens_to_rank{};  // distinct tokens src sends to dst
  std::vector<double> pairs_to_rank{};   // (token, expert) pairs from src to experts on dst
  std::vector<double> tokens_to_node{};  // [src][node]: distinct tokens src sends to a node
  double dispatch_bytes_per_token = 0;
  double combine_bytes_per_token = 0;
  int first_node = 0;
  // Or, with `separable`, the outer products the matrices would hold (the step planner's expected
  // traffic): src sends src_tokens[s] * rank_share[d] tokens to rank d, src_tokens[s] * node_share[n] to
  // node n and src_tokens[s] * pair_share[d] pairs to rank d. The matrices are then not read, and the
  // costing is O(ranks + nodes) instead of O(ranks^2): the same loads up to rounding.
  bool separable = false;
  std::vector<double> src_tokens{}, rank_share{}, node_share{}, pair_share{};
  // Other traffic on each rank's NIC path during the phase (KV-cache transfers of disaggregated serving):
  // the fraction of the time a flow of its own holds the rank's outgoing (NIC out, PCIe up) and incoming
  // (NIC in, PCIe down) links. Links share fairly, so the All-to-All's data time on them stretches by
  // 1 + that fraction. Empty: none.
  std::vector<double> nic_out_shared{}, nic_in_shared{};
};

struct AllToAllCost {
  Duration dispatch{};
  Duration combine{};
  double nvlink_bytes = 0;  // dispatch + combine bytes that crossed NVLink
  double nic_bytes = 0;     // dispatch + combine bytes that crossed a NIC
  // Where the time goes: the rank whose ports drain last, its data time over the mean rank's
  // (1 when balanced), the kind of its busiest link and that link's share of the dispatch time.
  int hot_rank = -1;
  double hot_rank_ratio = 1.0;
  LinkKind hot_link = LinkKind::kNvlinkOut;
  double hot_link_utilisation = 0;
  AllToAllMode mode = AllToAllMode::kHighThroughput;  // the mode costed (resolves kAuto)
};

// Working arrays of one All-to-All costing: units (tokens or pairs) per directed link of the cluster, and
// per rank the units sent (row) and received (col) over NVLink and the NIC and the NIC units whose other
// end sits on the same leaf (they never reach the spine). A caller on its own thread brings its own.
struct AllToAllScratch {
  std::vector<double> row_nvl, col_nvl, row_nic, col_nic, row_leaf, col_leaf;
  std::vector<int> rank_leaf, rank_node, rank_local;
  // Each rank's links (Fabric::RankLink order: NVLink out and in, NIC out and in, PCIe up and down, its
  // leaf's uplink bundle up and down) as indices into the group's own links (each once: GPUs may share a
  // NIC or a leaf), for the group last costed: rebuilt when the group changes. `load` holds their loads,
  // `link_bw` and `link_kind` what the topology says of them.
  std::vector<std::array<int, 8>> rank_links;
  std::vector<double> load;
  // load / link_bw of each link, for cost_loads.
  std::vector<double> drain;
  std::vector<double> link_bw;
  std::vector<Duration> link_latency;
  std::vector<LinkKind> link_kind;
  double doublings = 0;  // of the group beyond 8 ranks
  int group_ranks = 0, group_per_node = 0, group_first_node = -1;
  std::vector<double> sums;  // partial sums of the separable costing
  double nvl_units = 0;
  double nic_units = 0;
  std::vector<Duration> ll_dispatch, ll_combine;  // kAuto: the low-latency candidate's per-rank times
  // ECMP fabrics: per link of the group, the factor its drain time takes (Fabric::ecmp_factors), one set per
  // mode (high-throughput, low-latency, NVLink domain: their flows differ); empty until costed for the group.
  std::array<std::vector<double>, 3> ecmp{};
};

class Fabric {
 public:
  // Builds the topology graph and its routes; throws std::invalid_argument for an unwireable spec.
  explicit Fabric(FabricSpec spec);
  [[nodiscard]] const FabricSpec& spec() const { return spec_; }
  [[nodiscard]] const Topology& topology() const { return topology_; }

  // O(ranks^2 + links) (separable traffic: O(ranks + nodes + links)), no allocation after the first call
  // with a given rank count. ranks <= 1 costs
  // nothing. Bytes per link follow the counts of the step: a hot rank shows up as a slow rank.
  [[nodiscard]] AllToAllCost all_to_all(const AllToAllTraffic& t, AllToAllMode mode) const;
  // Same, and writes each rank's dispatch and combine time (spans of size t.ranks, or empty).
  AllToAllCost all_to_all(const AllToAllTraffic& t, AllToAllMode mode, std::span<Duration> rank_dispatch,
                          std::span<Duration> rank_combine) const;
  // Same with the caller's scratch: safe beside other threads costing on this fabric with theirs (the two
  // overloads above share one internal scratch and are for one thread).
  AllToAllCost all_to_all(const AllToAllTraffic& t, AllToAllMode mode, std::span<Duration> rank_dispatch,
                          std::span<Duration> rank_combine, AllToAllScratch& scratch) const;

  // All-reduce of `bytes` per GPU over `group` GPUs by `kernel`. NCCL: a ring on NVLink inside one node;
  // across nodes (intra_node false) reduce-scatter on NVLink, rings across nodes on each GPU's NIC,
  // all-gather. One-shot and two-shot (custom NVLink kernels, one node only): see all_reduce_custom.
  [[nodiscard]] Duration all_reduce(double bytes, int group, bool intra_node,
                                    AllReduceKernel kernel = AllReduceKernel::kNccl) const;
  // One point-to-point message (pipeline-parallel activations), NCCL send/recv.
  [[nodiscard]] Duration send_recv(double bytes, bool intra_node) const;
  // Bulk copy of `bytes` (expert weights, KV caches) from one GPU to another over their route. `shared`:
  // the fraction of the time another flow holds the route's bottleneck (fair sharing halves the rate then,
  // so the data time stretches by 1 + shared); 0: alone on it.
  [[nodiscard]] Duration transfer(double bytes, int src_gpu, int dst_gpu, double shared = 0) const;
  // Host -> GPU copy over the GPU's host link, alone on it. A loader that runs several copies on one
  // host link shares host_link_bytes_per_s between them.
  [[nodiscard]] Duration host_to_gpu(double bytes, int gpu) const;
  [[nodiscard]] double host_link_bytes_per_s(int gpu) const;
  [[nodiscard]] int host_link_of(int gpu) const { return topology_.host_link_of(gpu); }

 private:
  void load_high_throughput(const AllToAllTraffic& t, AllToAllScratch& sc) const;
  void load_direct(const AllToAllTraffic& t, AllToAllScratch& sc, const std::vector<double>& units,
                   bool intranode_nvlink) const;
  void load_high_throughput_separable(const AllToAllTraffic& t, AllToAllScratch& sc) const;
  void load_direct_separable(const AllToAllTraffic& t, AllToAllScratch& sc, const std::vector<double>& share,
                             bool intranode_nvlink) const;
  void reset_ranks(const AllToAllTraffic& t, AllToAllScratch& sc) const;
  void scatter_ranks(const AllToAllTraffic& t, AllToAllScratch& sc) const;
  const std::vector<double>& ecmp_factors(const AllToAllTraffic& t, AllToAllScratch& sc,
                                          AllToAllMode mode) const;
  [[nodiscard]] Duration path_latency(const AllToAllTraffic& t, const AllToAllScratch& sc,
                                      AllToAllMode mode) const;
  [[nodiscard]] AllToAllCost cost_loads(const AllToAllTraffic& t, AllToAllScratch& sc,
                                        const AllToAllKernel& k, AllToAllMode mode,
                                        std::span<Duration> rank_dispatch,
                                        std::span<Duration> rank_combine) const;
  // Slots of AllToAllScratch::rank_links.
  enum RankLink : std::size_t { kNvlOut, kNvlIn, kNicOut, kNicIn, kPcieUp, kPcieDown, kLeafUp, kLeafDown };
  [[nodiscard]] int gpu_of(const AllToAllTraffic& t, int rank) const {
    return (t.first_node + rank / t.ranks_per_node) * spec_.gpus_per_node + rank % t.ranks_per_node;
  }

  FabricSpec spec_;
  Topology topology_;
  mutable AllToAllScratch scratch_;  // of the single-thread overloads
};

}  // namespace moesim
