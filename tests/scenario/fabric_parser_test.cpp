// cluster.fabric in scenarios: catalog names, base + overrides, full objects, strict keys with JSON paths,
// the cluster-level link overrides, and the All-to-All modes of the deployment block.
#include "sim/scenario/fabric_parser.h"

#include <catch2/catch.hpp>
#include <string>

#include "sim/scenario/catalog.h"
#include "sim/scenario/scenario_parser.h"
#include "tests/support/scenario_error.h"

using namespace moesim;

namespace {

// A small valid scenario; `cluster` and `deployment` are spliced in by each test.
Json scenario(const Json& cluster, const Json& deployment = Json::object()) {
  Json j = {
      {"name", "fabric-test"},
      {"model", "qwen3-30b-a3b"},
      {"cluster", cluster},
      {"deployment", deployment},
      {"workload",
       {{"arrival", {{"kind", "closed_loop"}, {"users", 2}}},
        {"prompt_tokens", {{"kind", "fixed"}, {"tokens", 16}}},
        {"output_tokens", {{"kind", "fixed"}, {"tokens", 4}}}}},
      {"run", {{"requests", 4}}},
  };
  return j;
}

using moesim_test::error_of;

const Json& catalog_entry(const std::string& name) { return catalog(kFabricsCatalog)[name]; }

}  // namespace

TEST_CASE("a fabric catalog name gives the catalog's link figures in SI units") {
  const Json& e = catalog_entry("hgx-h100-roce-fat-tree");
  const ScenarioSpec s =
      parse_scenario(scenario({{"gpu", "h100-sxm"}, {"nodes", 2}, {"fabric", "hgx-h100-roce-fat-tree"}}), "")
          .spec;
  const FabricSpec& f = s.cluster.fabric;
  CHECK(s.cluster.gpus_per_node == e["gpus_per_node"].get<int>());
  CHECK(f.nodes == 2);
  CHECK(f.gpus_per_node == 8);
  CHECK(f.nvlink_bytes_per_s == Approx(e["nvlink_gb_per_s"].get<double>() * 1e9));
  CHECK(f.nic_bytes_per_s == Approx(e["nic_gbit_per_s"].get<double>() * 1e9 / 8));
  CHECK(f.nic_latency.us() == Approx(e["nic_latency_us"].get<double>()));
  CHECK(f.layout == NetworkLayout::kFatTree);
  CHECK(e["routing"] == "ecmp");
  CHECK(f.routing == ScaleOutRouting::kEcmp);
  CHECK(f.nodes_per_leaf_group == e["nodes_per_leaf_group"].get<int>());
  CHECK(f.oversubscription == Approx(e["oversubscription"].get<double>()));
  CHECK(f.switch_latency.us() == Approx(e["switch_latency_us"].get<double>()));
  CHECK(f.host_link_bytes_per_s == Approx(e["host_link_gb_per_s"].get<double>() * 1e9));
  CHECK(f.gpus_per_host_link == e["gpus_per_host_link"].get<int>());
}

TEST_CASE("every fabric in the catalog parses and wires for two nodes") {
  for (const auto& name : catalog_names(kFabricsCatalog)) {
    INFO(name);
    const Json resolved = resolve_entry(Json(name), kFabricsCatalog, "cluster.fabric");
    GpuSpec gpu;
    const FabricSpec f = parse_fabric(resolved, "cluster.fabric", 2, fabric_gpus_per_node(resolved, 8), gpu);
    CHECK(f.total_gpus() == 2 * resolved["gpus_per_node"].get<int>());
  }
}

TEST_CASE("the cluster takes its GPUs per node from the fabric when it does not give them") {
  const ScenarioSpec s =
      parse_scenario(scenario({{"gpu", "b200"}, {"fabric", "gb200-nvl72"}}, {{"ep_size", 8}}), "").spec;
  CHECK(s.cluster.gpus_per_node == 72);
  CHECK(s.cluster.total_gpus() == 72);
}

TEST_CASE("a base fabric with overrides changes only the overridden figures, kernel fits included") {
  const Json fabric = {
      {"base", "hgx-h100-8x400g"},
      {"nic_gbit_per_s", 200},
      {"oversubscription", 2.0},
      {"all_to_all_kernels", {{"low_latency", {{"nic_efficiency", 0.5}, {"dispatch_startup_us", 30}}}}},
      {"collectives", {{"p2p_nic_efficiency", 0.6}}}};
  const FabricSpec f = parse_scenario(scenario({{"gpu", "h100-sxm"}, {"nodes", 2}, {"fabric", fabric}}), "")
                           .spec.cluster.fabric;
  CHECK(f.nic_bytes_per_s == Approx(25e9));
  CHECK(f.oversubscription == 2.0);
  CHECK(f.nvlink_bytes_per_s ==
        Approx(catalog_entry("hgx-h100-8x400g")["nvlink_gb_per_s"].get<double>() * 1e9));
  CHECK(f.low_latency.nic_efficiency == 0.5);
  CHECK(f.low_latency.dispatch_startup == Duration::from_us(30));
  CHECK(f.low_latency.combine_startup == deepep_low_latency_kernel().combine_startup);
  CHECK(f.low_latency.nvlink_efficiency == deepep_low_latency_kernel().nvlink_efficiency);
  CHECK(f.high_throughput.dispatch_floor == deepep_normal_kernel().dispatch_floor);
  CHECK(f.collectives.p2p_nic_efficiency == 0.6);
}

TEST_CASE("without a fabric the GPU entry's link figures are used, as before fabrics existed") {
  const ScenarioSpec s = parse_scenario(scenario({{"gpu", "h100-sxm"}, {"nodes", 2}}), "").spec;
  const FabricSpec& f = s.cluster.fabric;
  CHECK(f.nvlink_bytes_per_s == s.cluster.gpu.nvlink_bytes_per_s);
  CHECK(f.nic_bytes_per_s == s.cluster.gpu.nic_bytes_per_s);
  CHECK(f.nvlink_latency == s.cluster.gpu.nvlink_latency);
  CHECK(f.nic_latency == s.cluster.gpu.nic_latency);
  CHECK(f.gpus_per_node == 8);
  CHECK(f.nodes == 2);
}

TEST_CASE("the cluster-level link keys override the fabric's figures") {
  const ScenarioSpec s = parse_scenario(scenario({{"gpu", "h100-sxm"},
                                                  {"nodes", 2},
                                                  {"fabric", "hgx-h100-8x400g"},
                                                  {"nic_gbit_per_s", 100},
                                                  {"nvlink_latency_us", 3}}),
                                        "")
                             .spec;
  CHECK(s.cluster.fabric.nic_bytes_per_s == Approx(100e9 / 8));
  CHECK(s.cluster.fabric.nvlink_latency == Duration::from_us(3));
  CHECK(s.cluster.fabric.layout == NetworkLayout::kRailOptimized);
}

TEST_CASE("a misspelt fabric key is an error naming its JSON path") {
  const std::string top =
      error_of(scenario({{"gpu", "h100-sxm"}, {"fabric", {{"base", "hgx-h100-8x400g"}, {"nic_gbps", 200}}}}));
  CHECK_THAT(top, Catch::Contains("cluster.fabric.nic_gbps") && Catch::Contains("unknown key"));
  const Json nested = {{"base", "hgx-h100-8x400g"},
                       {"all_to_all_kernels", {{"low_latency", {{"nvlink_eficiency", 0.5}}}}}};
  CHECK_THAT(error_of(scenario({{"gpu", "h100-sxm"}, {"fabric", nested}})),
             Catch::Contains("cluster.fabric.all_to_all_kernels.low_latency.nvlink_eficiency"));
  const Json family = {{"base", "hgx-h100-8x400g"}, {"all_to_all_kernels", {{"deepep", Json::object()}}}};
  CHECK_THAT(error_of(scenario({{"gpu", "h100-sxm"}, {"fabric", family}})),
             Catch::Contains("cluster.fabric.all_to_all_kernels.deepep"));
}

TEST_CASE("unknown fabric names, bad values and mismatched node sizes are errors naming their JSON path") {
  CHECK_THAT(error_of(scenario({{"gpu", "h100-sxm"}, {"fabric", "hgx-h999"}})),
             Catch::Contains("cluster.fabric") && Catch::Contains("hgx-h100-8x400g"));
  CHECK_THAT(error_of(scenario({{"gpu", "h100-sxm"},
                                {"fabric", {{"base", "hgx-h100-8x400g"}, {"oversubscription", 0.5}}}})),
             Catch::Contains("cluster.fabric.oversubscription"));
  CHECK_THAT(error_of(scenario(
                 {{"gpu", "h100-sxm"}, {"fabric", {{"base", "hgx-h100-8x400g"}, {"nics_per_node", 3}}}})),
             Catch::Contains("cluster.fabric.nics_per_node"));
  CHECK_THAT(error_of(scenario(
                 {{"gpu", "h100-sxm"}, {"fabric", {{"base", "hgx-h100-8x400g"}, {"layout", "torus"}}}})),
             Catch::Contains("cluster.fabric.layout") && Catch::Contains("fat_tree"));
  CHECK_THAT(error_of(scenario(
                 {{"gpu", "h100-sxm"}, {"fabric", {{"base", "hgx-h100-8x400g"}, {"routing", "spray"}}}})),
             Catch::Contains("cluster.fabric.routing") && Catch::Contains("adaptive, ecmp"));
  const Json kernel = {{"base", "hgx-h100-8x400g"},
                       {"all_to_all_kernels", {{"high_throughput", {{"overlap_penalty", 1.5}}}}}};
  CHECK_THAT(error_of(scenario({{"gpu", "h100-sxm"}, {"fabric", kernel}})),
             Catch::Contains("cluster.fabric.all_to_all_kernels.high_throughput.overlap_penalty"));
  CHECK_THAT(error_of(scenario({{"gpu", "h100-sxm"}, {"gpus_per_node", 4}, {"fabric", "hgx-h100-8x400g"}},
                               {{"ep_size", 4}})),
             Catch::Contains("cluster.fabric.gpus_per_node"));
}

TEST_CASE("all_to_all_efficiency is refused with a pointer to the per-kernel efficiencies") {
  CHECK_THAT(error_of(scenario({{"gpu", "h100-sxm"}, {"all_to_all_efficiency", 0.7}})),
             Catch::Contains("cluster.all_to_all_efficiency") &&
                 Catch::Contains("cluster.fabric.all_to_all_kernels"));
}

TEST_CASE("the deployment accepts every All-to-All mode and keeps nvlink_domain inside one NVLink domain") {
  const Json one_node = {{"gpu", "h100-sxm"}};
  CHECK(parse_scenario(scenario(one_node, {{"all_to_all", "auto"}}), "").spec.deployment.all_to_all_mode ==
        AllToAllMode::kAuto);
  CHECK(parse_scenario(scenario(one_node, {{"all_to_all", "nvlink_domain"}}), "")
            .spec.deployment.all_to_all_mode == AllToAllMode::kNvlinkDomain);
  CHECK(parse_scenario(scenario(one_node, {{"all_to_all", "low_latency"}}), "")
            .spec.deployment.all_to_all_mode == AllToAllMode::kLowLatency);
  const Json two_nodes = {{"gpu", "h100-sxm"}, {"nodes", 2}};
  CHECK_THAT(error_of(scenario(two_nodes, {{"all_to_all", "nvlink_domain"}})),
             Catch::Contains("deployment.all_to_all") && Catch::Contains("NVLink domain"));
  CHECK_THAT(error_of(scenario(one_node, {{"all_to_all", "deepep"}})),
             Catch::Contains("deployment.all_to_all") && Catch::Contains("auto"));
}

TEST_CASE("the effective scenario echoes the resolved fabric") {
  const LoadedScenario sc = parse_scenario(
      scenario({{"gpu", "h100-sxm"}, {"fabric", {{"base", "hgx-h100-8x400g"}, {"nic_latency_us", 9}}}}), "");
  CHECK(sc.effective["cluster"]["fabric"]["nic_latency_us"] == 9);
  CHECK(sc.effective["cluster"]["fabric"]["layout"] == "rail_optimized");
}
