#include "hwmodels/topology.h"

#include <algorithm>
#include <boost/graph/adjacency_list.hpp>
#include <boost/graph/dijkstra_shortest_paths.hpp>
#include <boost/graph/filtered_graph.hpp>
#include <cstdint>
#include <limits>
#include <stdexcept>
#include <string>

#include "sim/engine/check.h"

namespace moesim {

namespace {

struct EdgeProps {
  int link = -1;            // directed link id, -1 for a hop inside a PCIe switch
  std::int64_t weight = 1;  // latency in ps plus one, so equal latencies prefer fewer hops
};
enum class VertexKind : std::uint8_t { kGpu, kNvSwitch, kNic, kLeaf, kSpine, kPcieSwitch, kHost };
struct VertexProps {
  VertexKind kind = VertexKind::kGpu;
};
using Graph = boost::adjacency_list<boost::vecS, boost::vecS, boost::directedS, VertexProps, EdgeProps>;
using Vertex = boost::graph_traits<Graph>::vertex_descriptor;

void require(bool ok, const std::string& what) {
  if (!ok) throw std::invalid_argument("fabric topology: " + what);
}

// Leaf and spine switches only: routes between leaves never detour through a node.
struct SwitchesOnly {
  const Graph* g = nullptr;
  bool operator()(Vertex v) const {
    const VertexKind k = (*g)[v].kind;
    return k == VertexKind::kLeaf || k == VertexKind::kSpine;
  }
};

}  // namespace

int Topology::add_link(LinkKind kind, double bytes_per_s, Duration latency) {
  links_.push_back(Link{.kind = kind, .bytes_per_s = bytes_per_s, .latency = latency});
  return static_cast<int>(links_.size()) - 1;
}

Topology::Topology(const FabricSpec& s) {
  require(s.nodes > 0 && s.gpus_per_node > 0, "nodes and gpus_per_node must be positive");
  const int nics = s.nics_in_node();
  require(nics > 0 && s.gpus_per_node % nics == 0, "nics_per_node must divide gpus_per_node");
  // A node smaller than a PCIe switch (a 1-GPU test cluster) has its GPUs on one host link.
  const int per_host = std::min(s.gpus_per_host_link, s.gpus_per_node);
  require(per_host > 0 && s.gpus_per_node % per_host == 0, "gpus_per_host_link must divide gpus_per_node");
  require(s.nodes_per_leaf_group > 0, "nodes_per_leaf_group must be positive");
  require(s.oversubscription >= 1.0, "oversubscription must be >= 1");
  require(s.nvlink_bytes_per_s > 0 && s.nic_bytes_per_s > 0 && s.pcie_bytes_per_s > 0 &&
              s.host_link_bytes_per_s > 0,
          "link bandwidths must be positive");

  // Link latencies add up along a route: each direction of a NIC or NVLink hop carries half of the
  // end-to-end latency of the spec, each switch hop beyond the first leaf adds switch_latency.
  gpus_ = s.total_gpus();
  gpus_per_node_ = s.gpus_per_node;
  gpus_per_nic_ = s.gpus_per_node / nics;
  const int groups = (s.nodes + s.nodes_per_leaf_group - 1) / s.nodes_per_leaf_group;
  const bool rail = s.layout == NetworkLayout::kRailOptimized;
  leaves_ = rail ? groups * nics : groups;
  const int nodes_per_leaf = std::min(s.nodes, s.nodes_per_leaf_group);
  const int downlinks_per_leaf = rail ? nodes_per_leaf : nodes_per_leaf * nics;
  const int host_links_per_node = s.gpus_per_node / per_host;

  Graph g;
  auto add_vertex = [&g](VertexKind k) { return boost::add_vertex(VertexProps{.kind = k}, g); };
  auto connect = [&g](Vertex a, Vertex b, int link, Duration latency) {
    boost::add_edge(a, b, EdgeProps{.link = link, .weight = latency.ps() + 1}, g);
  };
  const auto gu = static_cast<std::size_t>(gpus_);
  nvl_out_.resize(gu);
  nvl_in_.resize(gu);
  pcie_up_.resize(gu);
  pcie_down_.resize(gu);
  nic_out_.resize(gu);
  nic_in_.resize(gu);
  leaf_of_gpu_.resize(gu);
  host_of_gpu_.resize(gu);

  std::vector<Vertex> gpu_v(gu);
  for (auto& v : gpu_v) v = add_vertex(VertexKind::kGpu);
  std::vector<Vertex> leaf_v(static_cast<std::size_t>(leaves_));
  for (int l = 0; l < leaves_; ++l) {
    leaf_v[static_cast<std::size_t>(l)] = add_vertex(VertexKind::kLeaf);
    const double up_bps = downlinks_per_leaf * s.nic_bytes_per_s / s.oversubscription;
    leaf_up_.push_back(add_link(LinkKind::kLeafUp, up_bps, s.switch_latency));
    leaf_down_.push_back(add_link(LinkKind::kLeafDown, up_bps, s.switch_latency));
  }
  if (leaves_ > 1) {
    const Vertex spine = add_vertex(VertexKind::kSpine);
    for (int l = 0; l < leaves_; ++l) {
      const auto li = static_cast<std::size_t>(l);
      connect(leaf_v[li], spine, leaf_up_[li], s.switch_latency);
      connect(spine, leaf_v[li], leaf_down_[li], s.switch_latency);
    }
  }

  for (int n = 0; n < s.nodes; ++n) {
    const Vertex nvswitch = add_vertex(VertexKind::kNvSwitch);
    const Vertex host = add_vertex(VertexKind::kHost);
    std::vector<Vertex> pcie_v(static_cast<std::size_t>(host_links_per_node));
    for (int h = 0; h < host_links_per_node; ++h) {
      pcie_v[static_cast<std::size_t>(h)] = add_vertex(VertexKind::kPcieSwitch);
      const int h2d = add_link(LinkKind::kHostLink, s.host_link_bytes_per_s, s.host_link_latency);
      const int d2h = add_link(LinkKind::kHostLink, s.host_link_bytes_per_s, s.host_link_latency);
      connect(host, pcie_v[static_cast<std::size_t>(h)], h2d, s.host_link_latency);
      connect(pcie_v[static_cast<std::size_t>(h)], host, d2h, s.host_link_latency);
      host_link_link_.push_back(h2d);
      gpus_on_host_.push_back(per_host);
    }
    for (int k = 0; k < nics; ++k) {
      const Vertex nic = add_vertex(VertexKind::kNic);
      const int leaf = rail ? (n / s.nodes_per_leaf_group) * nics + k : n / s.nodes_per_leaf_group;
      const int out = add_link(LinkKind::kNicOut, s.nic_bytes_per_s, s.nic_latency / 2);
      const int in = add_link(LinkKind::kNicIn, s.nic_bytes_per_s, s.nic_latency / 2);
      connect(nic, leaf_v[static_cast<std::size_t>(leaf)], out, s.nic_latency);
      connect(leaf_v[static_cast<std::size_t>(leaf)], nic, in, s.nic_latency);
      const int first_gpu = k * gpus_per_nic_;
      const Vertex sw = pcie_v[static_cast<std::size_t>(first_gpu / per_host)];
      connect(sw, nic, -1, Duration::zero());
      connect(nic, sw, -1, Duration::zero());
      for (int j = first_gpu; j < first_gpu + gpus_per_nic_; ++j) {
        const auto gi = static_cast<std::size_t>(n * s.gpus_per_node + j);
        nic_out_[gi] = out;
        nic_in_[gi] = in;
        leaf_of_gpu_[gi] = leaf;
      }
    }
    for (int j = 0; j < s.gpus_per_node; ++j) {
      const auto gi = static_cast<std::size_t>(n * s.gpus_per_node + j);
      nvl_out_[gi] = add_link(LinkKind::kNvlinkOut, s.nvlink_bytes_per_s, s.nvlink_latency / 2);
      nvl_in_[gi] = add_link(LinkKind::kNvlinkIn, s.nvlink_bytes_per_s, s.nvlink_latency / 2);
      connect(gpu_v[gi], nvswitch, nvl_out_[gi], s.nvlink_latency);
      connect(nvswitch, gpu_v[gi], nvl_in_[gi], s.nvlink_latency);
      const int h = j / per_host;
      pcie_up_[gi] = add_link(LinkKind::kPcie, s.pcie_bytes_per_s, Duration::zero());
      pcie_down_[gi] = add_link(LinkKind::kPcie, s.pcie_bytes_per_s, Duration::zero());
      connect(gpu_v[gi], pcie_v[static_cast<std::size_t>(h)], pcie_up_[gi], Duration::zero());
      connect(pcie_v[static_cast<std::size_t>(h)], gpu_v[gi], pcie_down_[gi], Duration::zero());
      host_of_gpu_[gi] = n * host_links_per_node + h;
    }
  }

  // Leaf-to-leaf routes: shortest (latency, then hops) paths over the switches, computed once.
  const auto nv = boost::num_vertices(g);
  std::vector<Vertex> pred(nv);
  std::vector<std::int64_t> dist(nv);
  const boost::filtered_graph<Graph, boost::keep_all, SwitchesOnly> switches(g, boost::keep_all{},
                                                                             SwitchesOnly{&g});
  leaf_routes_.assign(static_cast<std::size_t>(leaves_ * leaves_), Route{});
  for (int a = 0; a < leaves_; ++a) {
    const Vertex src = leaf_v[static_cast<std::size_t>(a)];
    boost::dijkstra_shortest_paths(
        switches, src,
        boost::predecessor_map(
            boost::make_iterator_property_map(pred.begin(), boost::get(boost::vertex_index, g)))
            .distance_map(boost::make_iterator_property_map(dist.begin(), boost::get(boost::vertex_index, g)))
            .weight_map(boost::get(&EdgeProps::weight, g)));
    for (int b = 0; b < leaves_; ++b) {
      if (a == b) continue;
      std::array<int, Route::kMaxHops> rev{};
      int hops = 0;
      for (Vertex v = leaf_v[static_cast<std::size_t>(b)]; v != src; v = pred[v]) {
        MOESIM_CHECK(pred[v] != v && hops < Route::kMaxHops, "leaf " + std::to_string(b) + " unreachable");
        const auto [e, found] = boost::edge(pred[v], v, g);
        MOESIM_CHECK(found, "route edge missing");
        rev[static_cast<std::size_t>(hops++)] = g[e].link;
      }
      Route& r = leaf_routes_[static_cast<std::size_t>(a * leaves_ + b)];
      r.hops = hops;
      for (int i = 0; i < hops; ++i)
        r.links[static_cast<std::size_t>(i)] = rev[static_cast<std::size_t>(hops - 1 - i)];
    }
  }

  // Every GPU must reach every other GPU (a disconnected layout is a wiring error, not a slow one).
  boost::dijkstra_shortest_paths(
      g, gpu_v[0],
      boost::distance_map(boost::make_iterator_property_map(dist.begin(), boost::get(boost::vertex_index, g)))
          .weight_map(boost::get(&EdgeProps::weight, g)));
  for (const Vertex v : gpu_v) {
    require(dist[v] < std::numeric_limits<std::int64_t>::max(), "a GPU is not connected to GPU 0");
  }
}

Route Topology::route(int src, int dst) const {
  Route r;
  if (src == dst) return r;
  auto push = [&r](int link) { r.links[static_cast<std::size_t>(r.hops++)] = link; };
  const auto si = static_cast<std::size_t>(src);
  const auto di = static_cast<std::size_t>(dst);
  if (node_of(src) == node_of(dst)) {
    push(nvl_out_[si]);
    push(nvl_in_[di]);
    return r;
  }
  push(pcie_up_[si]);
  push(nic_out_[si]);
  const Route& fabric = leaf_route(leaf_of_gpu_[si], leaf_of_gpu_[di]);
  for (int i = 0; i < fabric.hops; ++i) push(fabric.links[static_cast<std::size_t>(i)]);
  push(nic_in_[di]);
  push(pcie_down_[di]);
  return r;
}

Route Topology::host_route(int gpu) const {
  Route r;
  r.links[0] = host_link_link_[static_cast<std::size_t>(host_of_gpu_[static_cast<std::size_t>(gpu)])];
  r.links[1] = pcie_down_[static_cast<std::size_t>(gpu)];
  r.hops = 2;
  return r;
}

}  // namespace moesim
