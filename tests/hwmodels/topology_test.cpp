// The topology graph: who is wired to which leaf, which links a route crosses, what a leaf uplink
// carries under oversubscription, which GPUs share a host link.
#include "hwmodels/topology.h"

#include <catch2/catch.hpp>
#include <stdexcept>

namespace moesim {
namespace {

FabricSpec hgx(int nodes) { return FabricSpec{.nodes = nodes, .gpus_per_node = 8}; }

LinkKind kind_at(const Topology& t, const Route& r, int hop) {
  return t.link(r.links[static_cast<std::size_t>(hop)]).kind;
}

}  // namespace

TEST_CASE("a rail-optimised cluster puts NIC k of every node on leaf k") {
  const Topology t(hgx(4));
  CHECK(t.gpus() == 32);
  CHECK(t.leaves() == 8);
  for (int node = 0; node < 4; ++node) {
    for (int k = 0; k < 8; ++k) CHECK(t.leaf_of(node * 8 + k) == k);
  }
}

TEST_CASE("GPUs of one node talk over NVLink, two hops through the NVSwitch") {
  const Topology t(hgx(2));
  const Route r = t.route(1, 6);
  REQUIRE(r.hops == 2);
  CHECK(kind_at(t, r, 0) == LinkKind::kNvlinkOut);
  CHECK(kind_at(t, r, 1) == LinkKind::kNvlinkIn);
  CHECK(t.route(3, 3).hops == 0);
}

TEST_CASE("same-rail GPUs of two nodes meet at their leaf, other rails cross the spine") {
  const Topology t(hgx(2));
  const Route same_rail = t.route(2, 8 + 2);
  REQUIRE(same_rail.hops == 4);
  CHECK(kind_at(t, same_rail, 0) == LinkKind::kPcie);
  CHECK(kind_at(t, same_rail, 1) == LinkKind::kNicOut);
  CHECK(kind_at(t, same_rail, 2) == LinkKind::kNicIn);
  CHECK(kind_at(t, same_rail, 3) == LinkKind::kPcie);
  const Route cross_rail = t.route(2, 8 + 5);
  REQUIRE(cross_rail.hops == 6);
  CHECK(kind_at(t, cross_rail, 2) == LinkKind::kLeafUp);
  CHECK(kind_at(t, cross_rail, 3) == LinkKind::kLeafDown);
}

TEST_CASE("a fat-tree leaf carries whole nodes and its uplinks shrink with oversubscription") {
  FabricSpec s = hgx(8);
  s.layout = NetworkLayout::kFatTree;
  s.nodes_per_leaf_group = 2;
  s.oversubscription = 4.0;
  const Topology t(s);
  CHECK(t.leaves() == 4);
  CHECK(t.leaf_of(0) == t.leaf_of(15));
  CHECK(t.leaf_of(16) == 1);
  // Two nodes of 8 NICs below each leaf: 16 x 50 GB/s down, a quarter of it up.
  CHECK(t.link(t.leaf_up(0)).bytes_per_s == Approx(16 * s.nic_bytes_per_s / 4.0));
  CHECK(t.route(0, 7).hops == 2);
  CHECK(t.route(0, 15).hops == 4);
  CHECK(t.route(0, 16 + 3).hops == 6);
  CHECK(t.route(0, 8 + 3).hops == 4);
}

TEST_CASE("an NVL72 rack is one NVLink domain of 72 GPUs") {
  const Topology t(FabricSpec{.nodes = 2, .gpus_per_node = 72, .nvlink_bytes_per_s = 900e9});
  CHECK(t.route(0, 71).hops == 2);
  CHECK(t.route(0, 72).hops >= 4);
}

TEST_CASE("GPUs under one PCIe switch share its host link") {
  const Topology t(hgx(2));
  CHECK(t.host_links() == 8);
  CHECK(t.host_link_of(0) == t.host_link_of(1));
  CHECK(t.host_link_of(1) != t.host_link_of(2));
  CHECK(t.host_link_of(8) == 4);
  CHECK(t.gpus_on_host_link(0) == 2);
  const Route r = t.host_route(5);
  REQUIRE(r.hops == 2);
  CHECK(kind_at(t, r, 0) == LinkKind::kHostLink);
}

TEST_CASE("NICs shared by GPUs serve all of them") {
  FabricSpec s = hgx(2);
  s.nics_per_node = 4;
  const Topology t(s);
  CHECK(t.gpus_per_nic() == 2);
  CHECK(t.nic_out(0) == t.nic_out(1));
  CHECK(t.nic_out(1) != t.nic_out(2));
}

TEST_CASE("a spec that cannot be wired is rejected") {
  FabricSpec s = hgx(2);
  s.nics_per_node = 3;
  CHECK_THROWS_AS(Topology(s), std::invalid_argument);
  s = hgx(2);
  s.oversubscription = 0.5;
  CHECK_THROWS_AS(Topology(s), std::invalid_argument);
  s = hgx(0);
  CHECK_THROWS_AS(Topology(s), std::invalid_argument);
}

TEST_CASE("route latencies add up to the end-to-end latencies of the spec") {
  const FabricSpec s = hgx(2);
  const Topology t(s);
  auto latency = [&t](const Route& r) {
    Duration d;
    for (int i = 0; i < r.hops; ++i) d += t.link(r.links[static_cast<std::size_t>(i)]).latency;
    return d;
  };
  CHECK(latency(t.route(0, 1)) == s.nvlink_latency);
  CHECK(latency(t.route(0, 8)) == s.nic_latency);
  CHECK(latency(t.route(0, 9)) == s.nic_latency + s.switch_latency * 2);
}

}  // namespace moesim

namespace moesim {

TEST_CASE("a one-GPU node still wires: its GPU has the host link to itself") {
  const Topology t(FabricSpec{.nodes = 1, .gpus_per_node = 1});
  CHECK(t.gpus() == 1);
  CHECK(t.gpus_on_host_link(t.host_link_of(0)) == 1);
}

}  // namespace moesim
