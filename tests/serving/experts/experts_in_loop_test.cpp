// Experts in the loop wired into the planner and the run: each mechanism switched on in a
// scenario changes what the report says in the direction and by the amount theory gives.
#include <catch2/catch.hpp>
#include <string>
#include <vector>

#include "hwmodels/roofline_cost_model.h"
#include "sim/scenario/scenario_parser.h"
#include "sim/serving/experts/expert_loop.h"
#include "sim/serving/runtime/serving_simulation.h"
#include "sim/serving/spec/memory_plan.h"
#include "sim/serving/step/serving_models.h"
#include "sim/serving/step/step_planner.h"

using namespace moesim;

namespace {
std::string tiny(const char* name) { return std::string(MOESIM_SOURCE_DIR) + "/scenarios/tiny/" + name; }

Report run(const std::vector<std::string>& overrides = {}) {
  const LoadedScenario sc = load_scenario(tiny("tiny_poisson_ep4.json"), overrides);
  const RooflineCostModel gpu(sc.spec.cluster.gpu);
  return simulate(sc.spec, gpu);
}

// One GPU, one MoE layer of 4 experts, top-2; `experts` is the scenario's experts object.
// `fabric` (optional) is a `, "fabric": ...` member of the cluster.
ScenarioSpec one_gpu_spec(const std::string& experts, const std::string& fabric = "") {
  const Json j = Json::parse(R"({
    "model": {"num_layers": 1, "hidden": 1024, "vocab": 1000, "attention": "gqa", "num_heads": 8,
              "num_kv_heads": 8, "head_dim": 128, "routed_experts": 4, "top_k": 2, "expert_inter": 512},
    "cluster": {"gpu": "h100-sxm", "nodes": 1, "gpus_per_node": 1)" +
                             fabric + R"(},
    "deployment": {"ep_size": 1, "max_batched_tokens": 1024},
    "workload": {"arrival": {"kind": "poisson", "rate_per_s": 1},
                 "prompt_tokens": {"kind": "fixed", "tokens": 8}, "output_tokens": {"kind": "fixed", "tokens": 8}},
    "experts": )" + experts + R"(,
    "run": {"requests": 1}})");
  return parse_scenario(j, "").spec;
}

// A planner and the expert loop it follows on `popularity`, wired by hand as ServingModels wires them.
StandalonePlanner planner_with_loop(const ScenarioSpec& s, const GpuCostModel& gpu, const Fabric& fabric,
                                    const ExpertPopularity& popularity) {
  StandalonePlanner out;
  out.loop = std::make_unique<ExpertLoop>(
      s, fabric, [&popularity](int l) { return popularity.layer(l); }, nullptr);
  out.planner =
      std::make_unique<StepPlanner>(s, gpu, fabric, popularity, Rng(2), nullptr, nullptr, out.loop.get());
  return out;
}

std::vector<GroupBatch> decode_batch(std::int64_t seqs) {
  GroupBatch b;
  b.decode_seqs = seqs;
  b.decode_context_tokens = static_cast<double>(seqs) * 100;
  b.sampled_seqs = seqs;
  return {b};
}
}  // namespace

TEST_CASE("an empty experts section leaves the run exactly as it was") {
  const Report off = run();
  const Report empty = run({"experts={}"});
  REQUIRE(empty.fingerprint == off.fingerprint);
  REQUIRE(empty.mean_step_s == off.mean_step_s);
  REQUIRE_FALSE(empty.experts.enabled);
}

TEST_CASE("a layer whose experts all live on NVMe waits their bytes over the drive bandwidth") {
  // No HBM for experts, every copy's home on NVMe, latencies zero: all four experts of the layer are read
  // one after another from one drive, so the layer ends 4 x bytes / bandwidth after routing is known.
  const ScenarioSpec s = one_gpu_spec(
      R"({"tiers": {"hbm_expert_gib": 0, "staging_gib": 1, "warm_home": "nvme",
      "cold_home": "nvme", "prefetch": false, "nvme_drive_gb_per_s": 6.5, "nvme_latency_us": 0}})",
      R"(, "fabric": {"base": "hgx-h100-8x400g", "gpus_per_node": 1, "nics_per_node": 1, "host_link_latency_us": 0, "host_link_gb_per_s": 1000})");
  const RooflineCostModel gpu(s.cluster.gpu);
  const Fabric fabric(s.cluster.fabric);
  const ExpertPopularity uniform(PopularitySpec{}, 1, 4, 2, Rng(1));
  StandalonePlanner planner = planner_with_loop(s, gpu, fabric, uniform);
  const StepPlan& p = planner.plan(decode_batch(128), Time{});
  const double bytes = 3.0 * 1024 * 512 * 2.0;  // gate, up, down projections in BF16
  const double expected = 4.0 * bytes / 6.5e9;
  // The last expert's FFN (microseconds) runs after its load: within 1% of the load time.
  REQUIRE((p.part(StepPart::kExpertStall) + p.part(StepPart::kExperts)).seconds() >= expected);
  REQUIRE((p.part(StepPart::kExpertStall) + p.part(StepPart::kExperts)).seconds() ==
          Approx(expected).epsilon(0.01));
  REQUIRE(p.nvme_loads == 4);
  REQUIRE(p.nvme_bytes == Approx(4.0 * bytes));
  REQUIRE(p.hbm_hits == 0);
  REQUIRE(p.total == p.part(StepPart::kAttention) + p.part(StepPart::kLayerKernels) +
                         p.part(StepPart::kDenseFfn) + p.part(StepPart::kExperts) +
                         p.part(StepPart::kExpertStall) + p.part(StepPart::kDispatch) +
                         p.part(StepPart::kCombine) + p.part(StepPart::kLmHead));
}

TEST_CASE("experts that fit in the HBM budget never stall") {
  const ScenarioSpec s = one_gpu_spec(R"({"tiers": {"hbm_expert_gib": 1}})");
  const RooflineCostModel gpu(s.cluster.gpu);
  const Fabric fabric(s.cluster.fabric);
  const ExpertPopularity uniform(PopularitySpec{}, 1, 4, 2, Rng(1));
  StandalonePlanner planner = planner_with_loop(s, gpu, fabric, uniform);
  const StepPlan& p = planner.plan(decode_batch(128), Time{});
  REQUIRE(p.part(StepPart::kExpertStall) == Duration::zero());
  REQUIRE(p.hbm_hits == 4);
}

TEST_CASE("the seed's SSD budget comes out of the loader: 1.3 GB at 3-7 GB/s takes 200-400 ms") {
  for (const double gb_per_s : {3.0, 7.0}) {
    const ScenarioSpec s = one_gpu_spec(R"({"tiers": {"hbm_expert_gib": 0, "nvme_drive_gb_per_s": )" +
                                        std::to_string(gb_per_s) + "}}");
    const ExpertLoader loader(s.experts.tiers.loader, host_link_of(s.cluster.fabric), 1);
    const double t = loader.uncontended_time(Tier::kNvme, 1'300'000'000).seconds();
    REQUIRE(t == Approx(1.3 / gb_per_s).epsilon(0.01));
    REQUIRE(t > 0.18);
    REQUIRE(t < 0.45);
  }
}

TEST_CASE("EPLB placement with redundant slots lowers the GPU load imbalance under skew") {
  const Report base = run();
  const Report eplb = run({"experts.placement=eplb", "experts.redundant_slots_per_gpu=2"});
  REQUIRE(eplb.experts.placement == "eplb");
  REQUIRE(eplb.gpu_load_imbalance < base.gpu_load_imbalance - 0.1);
  REQUIRE(eplb.requests_finished + eplb.requests_dropped == eplb.requests_arrived);
  // Two more expert slots per GPU per MoE layer in the memory plan (48 layers of Qwen3-30B-A3B).
  const double expert_bytes = 3.0 * 2048 * 768 * 2.0;
  REQUIRE(eplb.memory.routed_expert_weights - base.memory.routed_expert_weights ==
          Approx(2 * 48 * expert_bytes));
}

TEST_CASE("rebalancing every N steps happens once per N steps and its weight moves are reported") {
  const Report r = run(
      {"experts.placement=eplb", "experts.redundant_slots_per_gpu=1", "experts.rebalance.every_steps=100"});
  const Report all = run({"experts.placement=eplb", "experts.redundant_slots_per_gpu=1",
                          "experts.rebalance.every_steps=100", "run.warmup_s=0"});
  REQUIRE(all.experts.rebalances == all.steps / 100);
  REQUIRE(r.experts.rebalances >= 1);
  REQUIRE(r.experts.rebalance_bytes > 0);
  REQUIRE(r.experts.rebalance_s > 0);
  // A fixed pause costs exactly the pause per rebalance.
  const Report paused =
      run({"experts.placement=eplb", "experts.rebalance.every_steps=100", "experts.rebalance.cost=\"pause\"",
           "experts.rebalance.pause_ms=5", "run.warmup_s=0"});
  REQUIRE(paused.experts.rebalance_s == Approx(0.005 * static_cast<double>(paused.experts.rebalances)));
}

TEST_CASE("router post-processing lowers the hottest GPU's load and counts the re-routed pairs") {
  const Report base = run();
  const Report rr = run({"experts.rerouting.threshold=1.1"});
  REQUIRE(rr.experts.rerouted_pairs > 0);
  REQUIRE(rr.experts.rerouted_share > 0);
  REQUIRE(rr.experts.rerouted_share < 0.5);
  REQUIRE(rr.gpu_load_imbalance < base.gpu_load_imbalance);
}

TEST_CASE("INT4 warm and cold experts shrink routed-expert memory and cost a labelled quality proxy") {
  const Report base = run();
  const Report q =
      run({"experts.quantization={\"hot\": \"bf16\", \"warm\": \"int4\", \"cold\": \"int4\", "
           "\"quality_penalty\": {\"int4\": 0.01}}"});
  REQUIRE(q.experts.quantization);
  REQUIRE(q.memory.routed_expert_weights < base.memory.routed_expert_weights);
  // INT4 with g128 FP16 scales is 0.5 + 2/128 bytes per weight: at least that fraction of BF16.
  REQUIRE(q.memory.routed_expert_weights > base.memory.routed_expert_weights * (0.5 + 2.0 / 128) / 2.0);
  double int4 = 0;
  for (const auto& [name, share] : q.experts.precision_share) {
    if (name == "int4") int4 = share;
  }
  // Warm + cold experts carry 1 - hot_share of the load (20%, by the classification rule).
  REQUIRE(int4 == Approx(0.2).margin(0.05));
  REQUIRE(q.experts.quality_proxy == Approx(0.01 * int4));
}

TEST_CASE("drifting popularity re-prepares routing only when it changes") {
  const Report r =
      run({"workload.expert_popularity.drift={\"half_life_s\": 2.0, \"update_interval_s\": 0.5}"});
  REQUIRE(r.experts.drift);
  // One update per 0.5 s of simulated time at most (one planner).
  REQUIRE(r.experts.drift_updates > 0);
  REQUIRE(static_cast<double>(r.experts.drift_updates) <= r.sim_end_s / 0.5 + 1);
  REQUIRE(r.requests_finished + r.requests_dropped == r.requests_arrived);
}

TEST_CASE("co-activation placement sends fewer dispatch bytes per token than round robin at rho 0.8") {
  const std::string rho = "workload.expert_popularity.coactivation={\"group_size\": 8, \"rho\": 0.8}";
  const Report rr = run({rho, "experts.placement=round_robin"});
  const Report co = run({rho, "experts.placement=coactivation"});
  const double rr_bytes = rr.nvlink_bytes_per_step / rr.mean_batch_tokens;
  const double co_bytes = co.nvlink_bytes_per_step / co.mean_batch_tokens;
  // Seed section 7: partitioning the co-activation graph saves 20-40% of All-to-All traffic.
  REQUIRE(co_bytes < 0.9 * rr_bytes);
}

TEST_CASE("GPU-load-aware admission still serves every request") {
  const Report r = run({"experts.admission=\"gpu_load_aware\""});
  REQUIRE(r.experts.admission);
  REQUIRE(r.requests_finished + r.requests_dropped == r.requests_arrived);
  REQUIRE(r.requests_finished > 0);
}

TEST_CASE("expert loads from host DRAM take the fabric's host link: GB200's C2C beats PCIe") {
  // Every copy in host DRAM, none in HBM: the layer's four experts cross the host link one after another.
  const std::string tiers = R"({"tiers": {"hbm_expert_gib": 0, "staging_gib": 1, "warm_home": "host_dram",
      "cold_home": "host_dram", "prefetch": false}})";
  auto stall = [&](const std::string& fabric) {
    const ScenarioSpec s = one_gpu_spec(
        tiers, R"(, "fabric": {"gpus_per_node": 1, "nics_per_node": 1, "base": ")" + fabric + "\"}");
    const RooflineCostModel gpu(s.cluster.gpu);
    const Fabric f(s.cluster.fabric);
    const ExpertPopularity uniform(PopularitySpec{}, 1, 4, 2, Rng(1));
    StandalonePlanner planner = planner_with_loop(s, gpu, f, uniform);
    const StepPlan& p = planner.plan(decode_batch(128), Time{});
    REQUIRE(p.host_loads == 4);
    return std::pair{(p.part(StepPart::kExpertStall) + p.part(StepPart::kExperts)).seconds(),
                     s.cluster.fabric.host_link_bytes_per_s};
  };
  const double bytes = 3.0 * 1024 * 512 * 2.0;
  const auto [pcie, pcie_bw] = stall("hgx-h100-8x400g");
  const auto [c2c, c2c_bw] = stall("gb200-nvl72");
  REQUIRE(c2c_bw > 5 * pcie_bw);
  REQUIRE(pcie >= 4.0 * bytes / pcie_bw);
  REQUIRE(c2c >= 4.0 * bytes / c2c_bw);
  REQUIRE(c2c < pcie / 3);
}
