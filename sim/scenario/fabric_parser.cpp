#include "sim/scenario/fabric_parser.h"

#include <algorithm>
#include <stdexcept>

#include "hwmodels/topology.h"
#include "sim/engine/check.h"

namespace moesim {

namespace {

// A duration in microseconds, >= 0; the fallback is kept exactly when the key is absent.
Duration microseconds(JsonReader& r, std::string_view key, Duration fallback) {
  if (!r.has(key)) {
    (void)r.number(key, 0.0);
    return fallback;
  }
  const double us = r.number(key);
  // At most a second: sums over hops and kernel launches stay far inside the picosecond clock.
  if (us < 0 || us > 1e6) r.fail(key, "must be in [0, 1e6] microseconds, got " + Json(us).dump());
  return Duration::from_us(us);
}

// A bandwidth in units of `unit_bytes_per_s` (1e9 for GB/s, 1e9 / 8 for Gb/s), > 0.
double bandwidth(JsonReader& r, std::string_view key, double unit_bytes_per_s, double fallback_bytes_per_s) {
  if (!r.has(key)) {
    (void)r.number(key, 0.0);
    return fallback_bytes_per_s;
  }
  // Physical range: transfer times divide by it and must stay inside the picosecond clock.
  return r.number_in(key, 0.01, 1e6) * unit_bytes_per_s;
}

// A number in [lo, hi] (hi_open: [lo, hi)).
double bounded(JsonReader& r, std::string_view key, double fallback, double lo, double hi, bool hi_open) {
  const double x = r.number(key, fallback);
  if (x < lo || x > hi || (hi_open && x == hi)) {
    r.fail(key, "must be in [" + Json(lo).dump() + ", " + Json(hi).dump() + (hi_open ? ")" : "]") + ", got " +
                    Json(x).dump());
  }
  return x;
}

// A link efficiency: transfer times divide by it, so it is held to [0.01, 1] (the catalog's are 0.75 and
// up) and a time stays inside the picosecond clock.
double efficiency(JsonReader& r, std::string_view key, double fallback) {
  const double x = r.fraction(key, fallback);
  if (x < 0.01) r.fail(key, "must be in [0.01, 1], got " + Json(x).dump());
  return x;
}

AllToAllKernel parse_kernel(JsonReader r, AllToAllKernel k) {
  k.nvlink_efficiency = efficiency(r, "nvlink_efficiency", k.nvlink_efficiency);
  k.nic_efficiency = efficiency(r, "nic_efficiency", k.nic_efficiency);
  k.dispatch_startup = microseconds(r, "dispatch_startup_us", k.dispatch_startup);
  k.combine_startup = microseconds(r, "combine_startup_us", k.combine_startup);
  k.dispatch_floor = microseconds(r, "dispatch_floor_us", k.dispatch_floor);
  k.combine_floor = microseconds(r, "combine_floor_us", k.combine_floor);
  k.floor_growth_per_doubling = microseconds(r, "floor_growth_per_doubling_us", k.floor_growth_per_doubling);
  k.efficiency_loss_per_doubling =
      bounded(r, "efficiency_loss_per_doubling", k.efficiency_loss_per_doubling, 0.0, 1.0, true);
  k.overlap_penalty = bounded(r, "overlap_penalty", k.overlap_penalty, 0.0, 1.0, false);
  k.intranode_over_nvlink = r.boolean("intranode_over_nvlink", k.intranode_over_nvlink);
  r.finish();
  return k;
}

CollectiveCalibration parse_collectives(JsonReader r, CollectiveCalibration c) {
  c.all_reduce_bus_efficiency = efficiency(r, "all_reduce_bus_efficiency", c.all_reduce_bus_efficiency);
  c.all_reduce_startup = microseconds(r, "all_reduce_startup_us", c.all_reduce_startup);
  c.all_reduce_floor = microseconds(r, "all_reduce_floor_us", c.all_reduce_floor);
  c.all_reduce_step_latency = microseconds(r, "all_reduce_step_latency_us", c.all_reduce_step_latency);
  c.p2p_nic_efficiency = efficiency(r, "p2p_nic_efficiency", c.p2p_nic_efficiency);
  c.p2p_nvlink_overhead = microseconds(r, "p2p_nvlink_overhead_us", c.p2p_nvlink_overhead);
  c.p2p_nic_overhead = microseconds(r, "p2p_nic_overhead_us", c.p2p_nic_overhead);
  r.finish();
  return c;
}

void parse_kernels(JsonReader r, FabricSpec& f) {
  if (auto k = r.optional_object("high_throughput")) f.high_throughput = parse_kernel(*k, f.high_throughput);
  if (auto k = r.optional_object("low_latency")) f.low_latency = parse_kernel(*k, f.low_latency);
  if (auto k = r.optional_object("nvlink_domain")) f.nvlink_domain = parse_kernel(*k, f.nvlink_domain);
  r.finish();
}

void parse_topology(JsonReader& r, FabricSpec& f) {
  const std::string layout = r.string("layout", "rail_optimized");
  if (layout == "rail_optimized") {
    f.layout = NetworkLayout::kRailOptimized;
  } else if (layout == "fat_tree") {
    f.layout = NetworkLayout::kFatTree;
  } else {
    r.fail("layout", "unknown layout \"" + layout + "\" (known: rail_optimized, fat_tree)");
  }
  const std::int64_t nics = r.integer_in("nics_per_node", f.nics_per_node, 0, 4096);
  if (nics < 0) r.fail("nics_per_node", "must be >= 0 (0: one NIC per GPU), got " + std::to_string(nics));
  if (nics > 0 && f.gpus_per_node % nics != 0) {
    r.fail("nics_per_node", std::to_string(nics) + " NICs do not divide the node's " +
                                std::to_string(f.gpus_per_node) + " GPUs");
  }
  f.nics_per_node = static_cast<int>(nics);
  f.nodes_per_leaf_group = r.int_in("nodes_per_leaf_group", f.nodes_per_leaf_group, 1, 4096);
  f.oversubscription = r.number("oversubscription", f.oversubscription);
  if (f.oversubscription < 1.0 || f.oversubscription > 1e3) {
    r.fail("oversubscription",
           "must be in [1, 1000] (leaf downlink : uplink capacity), got " + Json(f.oversubscription).dump());
  }
  const std::string routing = r.string("routing", "adaptive");
  if (routing == "adaptive") {
    f.routing = ScaleOutRouting::kAdaptive;
  } else if (routing == "ecmp") {
    f.routing = ScaleOutRouting::kEcmp;
  } else {
    r.fail("routing", "unknown routing \"" + routing + "\" (known: adaptive, ecmp)");
  }
  f.switch_latency = microseconds(r, "switch_latency_us", f.switch_latency);
  f.pcie_bytes_per_s = bandwidth(r, "pcie_gb_per_s", 1e9, f.pcie_bytes_per_s);
  f.host_link_bytes_per_s = bandwidth(r, "host_link_gb_per_s", 1e9, f.host_link_bytes_per_s);
  f.gpus_per_host_link = r.int_in("gpus_per_host_link", f.gpus_per_host_link, 1, 4096);
  // A node smaller than a PCIe switch puts all its GPUs on one host link (Topology does the same).
  const int per_host = std::min(f.gpus_per_host_link, f.gpus_per_node);
  if (f.gpus_per_node % per_host != 0) {
    r.fail("gpus_per_host_link", std::to_string(per_host) + " does not divide the node's " +
                                     std::to_string(f.gpus_per_node) + " GPUs");
  }
  f.host_link_latency = microseconds(r, "host_link_latency_us", f.host_link_latency);
}

}  // namespace

int fabric_gpus_per_node(const Json& resolved, int fallback) {
  if (!resolved.is_object()) return fallback;
  const auto it = resolved.find("gpus_per_node");
  if (it == resolved.end() || !it->is_number_integer()) return fallback;
  const auto n = it->get<std::int64_t>();
  return n > 0 && n <= 1'000'000 ? static_cast<int>(n) : fallback;
}

FabricSpec parse_fabric(const Json& resolved, const std::string& path, int nodes, int gpus_per_node,
                        const GpuSpec& gpu) {
  JsonReader r(resolved, path);
  FabricSpec f;
  f.nodes = nodes;
  f.gpus_per_node = gpus_per_node;
  (void)r.string("source", "");
  if (r.has("gpus_per_node")) {
    const std::int64_t n = r.positive_integer("gpus_per_node");
    if (n != gpus_per_node) {
      r.fail("gpus_per_node",
             "the fabric has " + std::to_string(n) + " GPUs per NVLink domain but cluster.gpus_per_node is " +
                 std::to_string(gpus_per_node) + " (leave cluster.gpus_per_node out to take the fabric's)");
    }
  }
  f.nvlink_bytes_per_s = bandwidth(r, "nvlink_gb_per_s", 1e9, gpu.nvlink_bytes_per_s);
  f.nvlink_latency = microseconds(r, "nvlink_latency_us", gpu.nvlink_latency);
  f.nic_bytes_per_s = bandwidth(r, "nic_gbit_per_s", 1e9 / 8.0, gpu.nic_bytes_per_s);
  f.nic_latency = microseconds(r, "nic_latency_us", gpu.nic_latency);
  f.efficiency = efficiency(r, "nvlink_copy_efficiency", f.efficiency);
  parse_topology(r, f);
  if (auto k = r.optional_object("all_to_all_kernels")) parse_kernels(*k, f);
  if (auto c = r.optional_object("collectives")) f.collectives = parse_collectives(*c, f.collectives);
  r.finish();
  try {
    const Topology wired(f);
    (void)wired;
  } catch (const std::invalid_argument& e) {
    throw InputError(path, e.what());
  }
  return f;
}

}  // namespace moesim
