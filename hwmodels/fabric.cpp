#include "hwmodels/fabric.h"

#include <algorithm>

#include "sim/engine/check.h"

namespace moesim {

namespace {
// Bottleneck time of one direction: every GPU sends and receives over its NVLink and NIC ports in
// parallel; the phase ends when the most loaded port drains.
Duration phase_time(const AllToAllTraffic& t, AllToAllMode mode, double bytes_per_token,
                    const FabricSpec& s, double& nvl_total, double& nic_total) {
  const int r = t.ranks;
  const int per_node = std::max(1, t.ranks_per_node);
  const int nodes = (r + per_node - 1) / per_node;
  std::vector<double> nvl_out(static_cast<std::size_t>(r), 0.0);
  std::vector<double> nvl_in(static_cast<std::size_t>(r), 0.0);
  std::vector<double> nic_out(static_cast<std::size_t>(r), 0.0);
  std::vector<double> nic_in(static_cast<std::size_t>(r), 0.0);
  bool crosses_nodes = false;
  for (int src = 0; src < r; ++src) {
    const int src_node = src / per_node;
    for (int dst = 0; dst < r; ++dst) {
      if (dst == src) continue;
      const auto i = static_cast<std::size_t>(src * r + dst);
      const bool same_node = dst / per_node == src_node;
      if (same_node || mode == AllToAllMode::kLowLatency) {
        const double units = mode == AllToAllMode::kLowLatency ? t.pairs_to_rank[i] : t.tokens_to_rank[i];
        const double b = units * bytes_per_token;
        auto& out = same_node ? nvl_out : nic_out;
        auto& in = same_node ? nvl_in : nic_in;
        out[static_cast<std::size_t>(src)] += b;
        in[static_cast<std::size_t>(dst)] += b;
        if (!same_node) crosses_nodes = true;
      } else {
        // High-throughput: the NIC part is accounted per destination node below; the NVLink fan-out
        // on the destination node is charged to the receiving GPU's NVLink port.
        nvl_in[static_cast<std::size_t>(dst)] += t.tokens_to_rank[i] * bytes_per_token;
      }
    }
    if (mode == AllToAllMode::kHighThroughput) {
      for (int node = 0; node < nodes; ++node) {
        if (node == src_node) continue;
        const double b = t.tokens_to_node[static_cast<std::size_t>(src * nodes + node)] * bytes_per_token;
        if (b <= 0) continue;
        crosses_nodes = true;
        nic_out[static_cast<std::size_t>(src)] += b;
        // Arrives at the same-rail GPU of the destination node.
        nic_in[static_cast<std::size_t>(node * per_node + src % per_node)] += b;
      }
    }
  }
  double worst_nvl = 0;
  double worst_nic = 0;
  for (int g = 0; g < r; ++g) {
    const auto i = static_cast<std::size_t>(g);
    worst_nvl = std::max({worst_nvl, nvl_out[i], nvl_in[i]});
    worst_nic = std::max({worst_nic, nic_out[i], nic_in[i]});
    nvl_total += nvl_out[i];
    nic_total += nic_out[i];
  }
  const double nvl_s = worst_nvl / (s.nvlink_bytes_per_s * s.efficiency);
  const double nic_s = worst_nic / (s.nic_bytes_per_s * s.efficiency);
  const Duration latency = crosses_nodes ? s.nic_latency : s.nvlink_latency;
  if (worst_nvl <= 0 && worst_nic <= 0) return Duration::zero();
  return latency + Duration::from_seconds(std::max(nvl_s, nic_s));
}
}  // namespace

AllToAllCost Fabric::all_to_all(const AllToAllTraffic& t, AllToAllMode mode) const {
  MOESIM_CHECK(t.tokens_to_rank.size() == static_cast<std::size_t>(t.ranks * t.ranks),
               "traffic matrix size does not match ranks");
  AllToAllCost c;
  c.dispatch = phase_time(t, mode, t.dispatch_bytes_per_token, spec_, c.nvlink_bytes, c.nic_bytes);
  c.combine = phase_time(t, mode, t.combine_bytes_per_token, spec_, c.nvlink_bytes, c.nic_bytes);
  return c;
}

Duration Fabric::all_reduce(double bytes, int group, bool intra_node) const {
  if (group <= 1 || bytes <= 0) return Duration::zero();
  // Ring all-reduce: 2(p-1) steps, each moving bytes/p per GPU (Patarasuk and Yuan, JPDC 2009).
  const double p = group;
  const double bw = (intra_node ? spec_.nvlink_bytes_per_s : spec_.nic_bytes_per_s) * spec_.efficiency;
  const Duration lat = intra_node ? spec_.nvlink_latency : spec_.nic_latency;
  return lat * (2 * (group - 1)) + Duration::from_seconds(2.0 * (p - 1.0) / p * bytes / bw);
}

Duration Fabric::send_recv(double bytes, bool intra_node) const {
  const double bw = (intra_node ? spec_.nvlink_bytes_per_s : spec_.nic_bytes_per_s) * spec_.efficiency;
  return (intra_node ? spec_.nvlink_latency : spec_.nic_latency) + Duration::from_seconds(bytes / bw);
}

}  // namespace moesim
