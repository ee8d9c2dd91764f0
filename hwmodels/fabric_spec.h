// The hardware of a cluster's interconnect as the fabric and topology models see it: NVLink domains,
// NICs, leaf/spine switches, host links, plus the fitted efficiencies and latency floors of the
// All-to-All kernel families and of NCCL-style collectives (CALIBRATION_FABRIC.md). Units are SI.
#pragma once

#include <cstdint>

#include "sim/engine/time.h"

namespace moesim {

// How the NICs of the nodes are wired to leaf switches; leaves reach each other through one spine
// layer, non-blocking beyond each leaf's uplink bundle (ScaleOutRouting says how a leaf spreads its flows
// over the uplinks of its bundle).
enum class NetworkLayout {
  kRailOptimized,  // NIC k of every node of a rail group goes to leaf k of that group
  kFatTree,        // the NICs of consecutive nodes fill one leaf after another
};

// How a leaf spreads the flows that leave it over its uplinks, and the spine those that enter it over its
// downlinks (docs/validation/fabric_sources.md has the published behaviour of each).
enum class ScaleOutRouting : std::uint8_t {
  kAdaptive,  // InfiniBand adaptive routing, Spectrum-X: packets go to the least loaded uplink, the bundle
              // drains evenly (load / bundle capacity)
  kEcmp,      // static ECMP: each flow hashed onto one uplink for its life, the busiest uplink drains last
              // (ecmp_max_load_factor)
};

// One family of All-to-All kernels. A rank's phase time is
//   max(floor, startup + latency + max(t_nvl, t_nic) + overlap_penalty * min(t_nvl, t_nic))
// where latency is that of the links the phase crosses (Fabric::path_latency) and startup the kernel's
// own: each startup below is the fitted one less the path latency of the fabric it was fitted on
// (NVLink 2 us, NIC 5 us, one leaf), so the fits are unchanged on that fabric.
// where t_x = bytes on the rank's busiest port of kind x / (line rate * efficiency(ranks)), and
// efficiency and floor degrade with the number of ranks: per doubling of ranks beyond 8.
struct AllToAllKernel {
  double nvlink_efficiency = 0.8;
  double nic_efficiency = 0.8;
  Duration dispatch_startup{};
  Duration combine_startup{};
  Duration dispatch_floor{};
  Duration combine_floor{};
  Duration floor_growth_per_doubling{};
  double efficiency_loss_per_doubling = 0;
  double overlap_penalty = 0;         // 0: NVLink and NIC transfers overlap fully, 1: they serialise
  bool intranode_over_nvlink = true;  // low-latency family only: peers in the node go over NVLink
};

// DeepEP normal (high-throughput) kernels, fitted on the H800 rows of COMPONENT_FIGURES.md 1.2
// (April 2025 columns; startup 20 us on the internode path of NIC then NVLink, 7 us). The floor is an
// assumption (notify + host sync), not pinned by the table.
constexpr AllToAllKernel deepep_normal_kernel() {
  return AllToAllKernel{.nvlink_efficiency = 0.66,
                        .nic_efficiency = 0.85,
                        .dispatch_startup = Duration::from_us(13),
                        .combine_startup = Duration::from_us(13),
                        .dispatch_floor = Duration::from_us(50),
                        .combine_floor = Duration::from_us(50)};
}

// DeepEP low-latency kernels, fitted on both tables of COMPONENT_FIGURES.md 1.3 (H800; startup 18 us,
// of which the NIC path's 5 us, the rows being internode but one).
constexpr AllToAllKernel deepep_low_latency_kernel() {
  return AllToAllKernel{.nvlink_efficiency = 0.62,
                        .nic_efficiency = 0.85,
                        .dispatch_startup = Duration::from_us(13),
                        .combine_startup = Duration::from_us(13),
                        .overlap_penalty = 0.25};
}

// TensorRT-LLM one-sided NVLink All-to-All, fitted on COMPONENT_FIGURES.md 1.6 (GB200 NVL72; startups
// 15 and 18 us, of which NVLink's 2 us).
constexpr AllToAllKernel nvlink_one_sided_kernel() {
  return AllToAllKernel{.nvlink_efficiency = 0.785,
                        .nic_efficiency = 0.85,
                        .dispatch_startup = Duration::from_us(13),
                        .combine_startup = Duration::from_us(16),
                        .dispatch_floor = Duration::from_us(18),
                        .combine_floor = Duration::from_us(31.5),
                        .floor_growth_per_doubling = Duration::from_us(1.2),
                        .efficiency_loss_per_doubling = 0.042};
}

// The all-reduce kernel a serving engine runs for one message (the engine chooses, EngineProfile; the
// fabric costs). NCCL: ring/two-level, the library's own kernels. One-shot and two-shot: the custom
// NVLink all-reduce of vLLM, SGLang and TensorRT-LLM (vLLM csrc/custom_all_reduce.cuh,
// cross_device_reduce_1stage / _2stage): every GPU reads its peers' buffers through NVLink peer mappings,
// between two flag barriers, inside one kernel.
enum class AllReduceKernel : std::uint8_t { kNccl, kOneShot, kTwoShot };

// NCCL-style collectives and point-to-point copies, fitted on Vidur's H100 DGX profiles
// (COMPONENT_FIGURES.md section 5).
struct CollectiveCalibration {
  double all_reduce_bus_efficiency = 0.78;  // of the NVLink (or NIC) line rate
  Duration all_reduce_startup = Duration::from_us(25);
  Duration all_reduce_floor = Duration::from_us(38);
  Duration all_reduce_step_latency{};  // per ring step, added to the link latency
  double p2p_nic_efficiency = 0.73;
  Duration p2p_nvlink_overhead = Duration::from_us(4.7);  // on top of nvlink_latency
  Duration p2p_nic_overhead = Duration::from_us(20);      // on top of nic_latency
  // Custom all-reduce: one kernel launch inside the step's CUDA graph (a tiny kernel replayed in a graph
  // takes 1.16 us on H200: shared/calibration/h200/platform.json, launch.graph_tiny_kernel_us) and two
  // flag barriers, each one NVLink latency (a flag written to every peer, polled until all peers' flags
  // arrive); the data at the bulk NVLink copy efficiency (FabricSpec::efficiency).
  Duration custom_all_reduce_launch = Duration::from_ns(1160);
  int custom_all_reduce_barriers = 2;
};

struct FabricSpec {
  // A "node" is one NVLink domain: an 8-GPU HGX board, or a 72-GPU NVL72 rack.
  int nodes = 1;
  int gpus_per_node = 8;
  double nvlink_bytes_per_s = 450e9;  // per GPU, per direction
  Duration nvlink_latency = Duration::from_us(2.0);
  double nic_bytes_per_s = 50e9;  // per NIC, per direction
  Duration nic_latency = Duration::from_us(5.0);
  // Achieved fraction of line rate for bulk copies over NVLink (weights, activations); the NIC
  // fraction is collectives.p2p_nic_efficiency. 0.8 matches Vidur's H100 NVLink send/recv.
  double efficiency = 0.8;

  // Topology.
  NetworkLayout layout = NetworkLayout::kRailOptimized;
  int nics_per_node = 0;          // 0: one NIC per GPU
  int nodes_per_leaf_group = 32;  // nodes that share a leaf (rail-optimised: per rail) before the spine
  double oversubscription = 1.0;  // leaf downlink : uplink capacity
  ScaleOutRouting routing = ScaleOutRouting::kAdaptive;  // uplinks of nic_bytes_per_s each
  Duration switch_latency = Duration::from_ns(600);      // per switch hop beyond the first leaf
  double pcie_bytes_per_s = 63e9;                        // GPU <-> PCIe switch (Gen5 x16, per direction)
  // Host -> GPU: one host link per PCIe switch (or Grace C2C), shared by gpus_per_host_link GPUs.
  // 55 GB/s and 10 us: pinned H2D measured on H200, a two-point fit of shared/calibration/h200/platform.json
  // (1 MiB in 29.1 us, 512 MiB in 9.78 ms: 54.9 GB/s). Expert tier loads use this link (host_link_of).
  double host_link_bytes_per_s = 55e9;
  int gpus_per_host_link = 2;
  Duration host_link_latency = Duration::from_us(10.0);

  // Calibration of the software on top of the links.
  AllToAllKernel high_throughput = deepep_normal_kernel();
  AllToAllKernel low_latency = deepep_low_latency_kernel();
  AllToAllKernel nvlink_domain = nvlink_one_sided_kernel();
  CollectiveCalibration collectives{};

  [[nodiscard]] int total_gpus() const { return nodes * gpus_per_node; }
  [[nodiscard]] int nics_in_node() const { return nics_per_node > 0 ? nics_per_node : gpus_per_node; }
};

}  // namespace moesim
