// The cluster as a graph: GPUs, NVSwitch domains, NICs, leaf and spine switches, PCIe switches and
// hosts. Built once from a FabricSpec (Boost.Graph stays in topology.cpp); routes are computed at
// construction and exposed as flat arrays of directed link ids that the fabric model loads per call.
#pragma once

#include <array>
#include <vector>

#include "hwmodels/fabric_spec.h"
#include "sim/engine/time.h"

namespace moesim {

enum class LinkKind {
  kNvlinkOut,  // GPU -> NVSwitch
  kNvlinkIn,   // NVSwitch -> GPU
  kPcie,       // GPU <-> NIC or host through the PCIe switch (one direction)
  kNicOut,     // NIC -> leaf
  kNicIn,      // leaf -> NIC
  kLeafUp,     // leaf -> spine (all uplinks of a leaf as one bundle)
  kLeafDown,   // spine -> leaf
  kHostLink,   // host -> PCIe switch (shared by the GPUs under the switch)
};

struct Link {
  LinkKind kind = LinkKind::kNvlinkOut;
  double bytes_per_s = 0;
  Duration latency;
};

// A route between two GPUs: at most kMaxHops directed links, in order.
struct Route {
  static constexpr int kMaxHops = 8;
  std::array<int, kMaxHops> links{};
  int hops = 0;
};

class Topology {
 public:
  // Throws std::invalid_argument when the spec cannot be wired (non-positive counts, a NIC count
  // that does not divide the GPUs of a node, an oversubscription below 1).
  explicit Topology(const FabricSpec& spec);

  [[nodiscard]] int gpus() const { return gpus_; }
  [[nodiscard]] int leaves() const { return leaves_; }
  [[nodiscard]] int host_links() const { return static_cast<int>(host_link_link_.size()); }
  [[nodiscard]] const Link& link(int id) const { return links_[static_cast<std::size_t>(id)]; }
  [[nodiscard]] int link_count() const { return static_cast<int>(links_.size()); }

  [[nodiscard]] int node_of(int gpu) const { return gpu / gpus_per_node_; }
  [[nodiscard]] int leaf_of(int gpu) const { return leaf_of_gpu_[static_cast<std::size_t>(gpu)]; }
  [[nodiscard]] int nvlink_out(int gpu) const { return nvl_out_[static_cast<std::size_t>(gpu)]; }
  [[nodiscard]] int nvlink_in(int gpu) const { return nvl_in_[static_cast<std::size_t>(gpu)]; }
  [[nodiscard]] int pcie_up(int gpu) const { return pcie_up_[static_cast<std::size_t>(gpu)]; }
  [[nodiscard]] int pcie_down(int gpu) const { return pcie_down_[static_cast<std::size_t>(gpu)]; }
  [[nodiscard]] int nic_out(int gpu) const { return nic_out_[static_cast<std::size_t>(gpu)]; }
  [[nodiscard]] int nic_in(int gpu) const { return nic_in_[static_cast<std::size_t>(gpu)]; }
  // The GPUs that share a NIC (1 with one NIC per GPU).
  [[nodiscard]] int gpus_per_nic() const { return gpus_per_nic_; }
  // Fabric links between two leaves (empty when equal): leaf uplink bundle, spine, leaf downlink.
  [[nodiscard]] const Route& leaf_route(int from_leaf, int to_leaf) const {
    return leaf_routes_[static_cast<std::size_t>(from_leaf * leaves_ + to_leaf)];
  }
  [[nodiscard]] int leaf_up(int leaf) const { return leaf_up_[static_cast<std::size_t>(leaf)]; }
  [[nodiscard]] int leaf_down(int leaf) const { return leaf_down_[static_cast<std::size_t>(leaf)]; }

  // GPU -> GPU: NVLink inside a node; otherwise PCIe to the NIC, the NIC, the fabric, the remote NIC
  // and PCIe. O(1), no allocation.
  [[nodiscard]] Route route(int src_gpu, int dst_gpu) const;
  // Host link of a GPU and the GPUs that share it; the host -> GPU route is host link then PCIe.
  [[nodiscard]] int host_link_of(int gpu) const { return host_of_gpu_[static_cast<std::size_t>(gpu)]; }
  [[nodiscard]] int gpus_on_host_link(int host_link) const {
    return gpus_on_host_[static_cast<std::size_t>(host_link)];
  }
  [[nodiscard]] Route host_route(int gpu) const;

 private:
  int add_link(LinkKind kind, double bytes_per_s, Duration latency);

  int gpus_ = 0;
  int gpus_per_node_ = 1;
  int gpus_per_nic_ = 1;
  int leaves_ = 0;
  std::vector<Link> links_;
  std::vector<int> nvl_out_, nvl_in_, pcie_up_, pcie_down_, nic_out_, nic_in_, leaf_of_gpu_;
  std::vector<int> leaf_up_, leaf_down_;
  std::vector<Route> leaf_routes_;  // [from_leaf * leaves + to_leaf]
  std::vector<int> host_of_gpu_, host_link_link_, gpus_on_host_;
};

}  // namespace moesim
