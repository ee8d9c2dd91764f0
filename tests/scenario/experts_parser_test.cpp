// The scenario's experts section and popularity extensions: strict keys with JSON paths, units converted
// once.
#include <catch2/catch.hpp>
#include <string>

#include "sim/scenario/scenario_parser.h"
#include "tests/support/scenario_error.h"
#include "workloads/skew_calibration.h"

using namespace moesim;

namespace {
Json base() {
  return Json::parse(R"({
    "model": "qwen3-30b-a3b",
    "cluster": {"gpu": "h100-sxm", "nodes": 1, "gpus_per_node": 4},
    "deployment": {"ep_size": 4},
    "workload": {"arrival": {"kind": "poisson", "rate_per_s": 1},
                 "prompt_tokens": {"kind": "fixed", "tokens": 8}, "output_tokens": {"kind": "fixed", "tokens": 8}},
    "run": {"requests": 1}})");
}

using moesim_test::error_of;
}  // namespace

TEST_CASE("every experts key is read into the typed spec with units converted") {
  Json j = base();
  j["experts"] = Json::parse(R"({"placement": "eplb", "redundant_slots_per_gpu": 1,
    "rebalance": {"every_steps": 1000, "imbalance_threshold": 1.3, "cost": "transfer"},
    "stats": {"window_batches": 2000},
    "tiers": {"hbm_expert_gib": 4, "staging_gib": 0.5, "cold_home": "nvme", "nvme_drive_gb_per_s": 3.5, "nvme_drives": 2},
    "quantization": {"hot": "fp8", "warm": "int8", "cold": "int4", "quality_penalty": {"int4": 0.02}},
    "rerouting": {"threshold": 1.5}, "admission": "gpu_load_aware"})");
  const ExpertsSpec x = parse_scenario(j, "").spec.experts;
  REQUIRE(x.placement == PlacementPolicy::kEplb);
  REQUIRE(x.redundant_experts == 4);  // one per GPU of the EP4 group
  REQUIRE(x.rebalance.every_steps == 1000);
  REQUIRE(x.rebalance.imbalance_threshold == 1.3);
  REQUIRE(x.stats.window_batches == 2000);
  REQUIRE(x.tiers.enabled);
  REQUIRE(x.tiers.hbm_expert_bytes == 4.0 * 1024 * 1024 * 1024);
  REQUIRE(x.tiers.staging_bytes == 0.5 * 1024 * 1024 * 1024);
  REQUIRE(x.tiers.loader.nvme_drive_bytes_per_s == 3.5e9);
  REQUIRE(x.tiers.loader.nvme_drives == 2);
  REQUIRE(x.quantization);
  REQUIRE(x.quant.hot == Precision::kFP8);
  REQUIRE(x.quant.quality_penalty[precision_index(Precision::kINT4)] == 0.02);
  REQUIRE(x.reroute_threshold == 1.5);
  REQUIRE(x.load_aware_admission);
}

TEST_CASE("a misspelled experts key is an error naming its JSON path") {
  Json j = base();
  j["experts"] = Json::parse(R"({"tiers": {"hbm_expert_gib": 4, "nvme_gbps": 3}})");
  REQUIRE_THAT(error_of(j), Catch::Contains("experts.tiers.nvme_gbps"));
  j["experts"] = Json::parse(R"({"placment": "eplb"})");
  REQUIRE_THAT(error_of(j), Catch::Contains("experts.placment"));
}

TEST_CASE("replicas without EPLB and co-activation placement without a co-activation model are refused") {
  Json j = base();
  j["experts"] = Json::parse(R"({"redundant_slots_per_gpu": 1})");
  REQUIRE_THAT(error_of(j), Catch::Contains("experts.redundant_slots_per_gpu"));
  j["experts"] = Json::parse(R"({"placement": "coactivation"})");
  REQUIRE_THAT(error_of(j), Catch::Contains("coactivation"));
  j["experts"] = Json::parse(R"({"placement": "round_robin", "rebalance": {"every_steps": 10}})");
  REQUIRE_THAT(error_of(j), Catch::Contains("experts.rebalance"));
}

TEST_CASE("calibrated popularity gets the Zipf exponent of the measured imbalance ratio") {
  Json j = base();
  j["workload"]["expert_popularity"] =
      Json::parse(R"({"kind": "calibrated", "imbalance_ratio": 3.0, "tokens_per_iteration": 1024})");
  const PopularitySpec p = parse_scenario(j, "").spec.workload.popularity;
  REQUIRE(p.kind == PopularitySpec::Kind::kZipf);
  const double s = calibrate_zipf_exponent(3.0, SkewSetting{.experts = 128, .top_k = 8, .tokens = 1024});
  REQUIRE(p.zipf_exponent == Approx(s));
  REQUIRE(
      expected_imbalance_ratio(p.zipf_exponent, SkewSetting{.experts = 128, .top_k = 8, .tokens = 1024}) ==
      Approx(3.0).epsilon(0.02));
}

TEST_CASE("drift and co-activation sit under workload.expert_popularity") {
  Json j = base();
  j["workload"]["expert_popularity"] = Json::parse(R"({"kind": "zipf", "exponent": 1.0,
    "drift": {"half_life_s": 600, "phase_times_s": [100, 200]}, "coactivation": {"group_size": 8, "rho": 0.5}})");
  const WorkloadSpec w = parse_scenario(j, "").spec.workload;
  REQUIRE(w.drift);
  REQUIRE(w.drift_spec.half_life_s == 600);
  REQUIRE(w.drift_spec.phase_times_s.size() == 2);
  REQUIRE(w.coactivation);
  REQUIRE(w.coactivation_spec.rho == 0.5);
  j["workload"]["expert_popularity"]["coactivation"]["group_size"] = 7;
  REQUIRE_THAT(error_of(j), Catch::Contains("workload.expert_popularity.coactivation.group_size"));
}

TEST_CASE("per-request expert affinity is off when absent and refused out of range or with co-activation") {
  Json j = base();
  j["workload"]["expert_popularity"] = Json::parse(R"({"kind": "zipf", "exponent": 1.0})");
  REQUIRE(parse_scenario(j, "").spec.workload.request_affinity_sd == 0);
  j["workload"]["expert_popularity"]["request_affinity_sd"] = 1.25;
  REQUIRE(parse_scenario(j, "").spec.workload.request_affinity_sd == 1.25);
  for (const double bad : {-0.5, 4.5}) {
    j["workload"]["expert_popularity"]["request_affinity_sd"] = bad;
    REQUIRE_THAT(error_of(j),
                 Catch::StartsWith("workload.expert_popularity.request_affinity_sd: must be in"));
  }
  j["workload"]["expert_popularity"]["request_affinity_sd"] = "large";
  REQUIRE_THAT(error_of(j), Catch::StartsWith("workload.expert_popularity.request_affinity_sd"));
  j["workload"]["expert_popularity"]["request_affinity_sd"] = 1.0;
  j["workload"]["expert_popularity"]["coactivation"] = Json::parse(R"({"group_size": 8, "rho": 0.5})");
  REQUIRE_THAT(error_of(j), Catch::StartsWith("workload.expert_popularity.request_affinity_sd") &&
                                Catch::Contains("coactivation"));
}

TEST_CASE("an EP size is legal when experts plus redundant slots divide by it") {
  // qwen3-30b-a3b: 128 experts. On 12 GPUs, 128 does not divide by 12 but 128 + 4 = 132 does.
  Json j = base();
  j["cluster"]["gpus_per_node"] = 12;
  j["deployment"]["ep_size"] = 12;
  REQUIRE_THAT(error_of(j), Catch::StartsWith("deployment.ep_size: 12 does not divide 128 experts") &&
                                Catch::Contains("experts.redundant_experts") && Catch::Contains("e.g. 4"));
  j["experts"] = Json::parse(R"({"placement": "eplb", "redundant_experts": 4})");
  const ScenarioSpec s = parse_scenario(j, "").spec;
  REQUIRE(s.experts.redundant_experts == 4);
  REQUIRE(s.experts.slots_per_gpu(128, 12) == 11);  // 132 / 12
  j["experts"] = Json::parse(R"({"placement": "eplb", "redundant_experts": 5})");
  REQUIRE(error_of(j) ==
          "experts.redundant_experts: 128 experts + 5 redundant slots = 133 slots do not divide over "
          "deployment.ep_size = 12 GPUs (next multiple: 144 slots)");
  // Per GPU: 12 x 1 = 12 redundant slots, 140 in all, not a multiple of 12.
  j["experts"] = Json::parse(R"({"placement": "eplb", "redundant_slots_per_gpu": 1})");
  REQUIRE_THAT(error_of(j), Catch::StartsWith("experts.redundant_slots_per_gpu: 128 experts + 12 redundant"));
  j["experts"] = Json::parse(R"({"placement": "round_robin", "redundant_experts": 4})");
  REQUIRE(error_of(j) == "experts.redundant_experts: replicas need placement \"eplb\"");
  j["experts"] =
      Json::parse(R"({"placement": "eplb", "redundant_experts": 4, "redundant_slots_per_gpu": 1})");
  REQUIRE_THAT(error_of(j), Catch::StartsWith("experts.redundant_experts: give redundant_experts"));
  j["experts"] = Json::parse(R"({"placement": "eplb", "redundant_experts": -4})");
  REQUIRE_THAT(error_of(j), Catch::StartsWith("experts.redundant_experts:"));
}

TEST_CASE("redundant slots per GPU are the total over the EP group") {
  Json j = base();  // EP4, 128 experts
  j["experts"] = Json::parse(R"({"placement": "eplb", "redundant_slots_per_gpu": 2})");
  const ScenarioSpec s = parse_scenario(j, "").spec;
  REQUIRE(s.experts.redundant_experts == 8);
  REQUIRE(s.experts.slots_per_gpu(128, 4) == 34);
}
