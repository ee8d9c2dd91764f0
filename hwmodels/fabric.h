// The fabric cost model: All-to-All (dispatch/combine), all-reduce, point-to-point and weight transfers
// between the GPUs of a cluster of nodes (NVLink inside a node, one NIC per GPU between nodes).
#pragma once

#include <vector>

#include "sim/engine/time.h"

namespace moesim {

struct FabricSpec {
  int nodes = 1;
  int gpus_per_node = 8;
  double nvlink_bytes_per_s = 450e9;  // per GPU, per direction
  Duration nvlink_latency = Duration::from_us(2.0);
  double nic_bytes_per_s = 50e9;  // per GPU, per direction
  Duration nic_latency = Duration::from_us(5.0);
  // Fraction of line rate that All-to-All kernels reach (DeepEP: ~80% of NVLink and NIC line rate,
  // shared/reference/COMPONENT_FIGURES.md section 1).
  double efficiency = 0.8;
};

enum class AllToAllMode {
  kHighThroughput,  // NVLink inside a node; one NIC crossing per destination node, then NVLink fan-out
  kLowLatency,      // direct RDMA to every destination rank, one message per (token, expert) pair
};

// Traffic of one dispatch (the combine is its mirror image), derived by the step planner from routing
// counts and placement. Matrices are row-major [src][dst]; diagonal entries stay on the GPU.
struct AllToAllTraffic {
  int ranks = 0;
  int ranks_per_node = 1;
  std::vector<double> tokens_to_rank;  // distinct tokens src sends to dst
  std::vector<double> pairs_to_rank;   // (token, expert) pairs from src to experts on dst
  std::vector<double> tokens_to_node;  // [src][node]: distinct tokens src sends to a node
  double dispatch_bytes_per_token = 0;
  double combine_bytes_per_token = 0;
};

struct AllToAllCost {
  Duration dispatch;
  Duration combine;
  double nvlink_bytes = 0;  // dispatch + combine bytes that crossed NVLink
  double nic_bytes = 0;     // dispatch + combine bytes that crossed a NIC
};

class Fabric {
 public:
  explicit Fabric(FabricSpec spec) : spec_(spec) {}
  [[nodiscard]] const FabricSpec& spec() const { return spec_; }

  [[nodiscard]] AllToAllCost all_to_all(const AllToAllTraffic& t, AllToAllMode mode) const;
  // Ring all-reduce of `bytes` over `group` GPUs of one node (or across nodes if !intra_node).
  [[nodiscard]] Duration all_reduce(double bytes, int group, bool intra_node) const;
  [[nodiscard]] Duration send_recv(double bytes, bool intra_node) const;

 private:
  FabricSpec spec_;
};

}  // namespace moesim
