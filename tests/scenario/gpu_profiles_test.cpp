// One cost model for every GPU: profiles derived from the H200 fit by datasheet ratios, and the property
// that the same deployment is never slower on an H200 than on an H100 (every reference scenario).
#include <algorithm>
#include <catch2/catch.hpp>
#include <filesystem>
#include <functional>
#include <optional>
#include <string>
#include <vector>

#include "hwmodels/fabric.h"
#include "sim/scenario/profile_io.h"
#include "sim/scenario/scenario_parser.h"
#include "sim/serving/step/step_planner.h"
#include "workloads/expert_popularity.h"

namespace moesim {
namespace {

ScenarioSpec scenario_on(const std::string& file, const std::string& gpu) {
  return load_scenario(file, {"cluster.gpu=\"" + gpu + "\""}).spec;
}

// The H200 profile moved to `gpu`: every fit's memory term scaled by `memory`, its compute by `compute` of
// its precision (checked where that is set), its fixed cost kept.
void check_derived_from_h200(const std::string& gpu, double memory,
                             const std::function<std::optional<double>(Precision)>& compute) {
  const auto h200 = find_profile("h200-sxm");
  REQUIRE(h200.has_value());
  const ScenarioSpec a = scenario_on(MOESIM_SOURCE_DIR "/scenarios/default.json", "h200-sxm");
  const ScenarioSpec b = scenario_on(MOESIM_SOURCE_DIR "/scenarios/default.json", gpu);
  const GpuProfile derived = derive_profile(*h200, a.cluster.gpu, b.cluster.gpu);
  REQUIRE(derived.fits.size() == h200->fits.size());
  for (std::size_t i = 0; i < derived.fits.size(); ++i) {
    const RooflineFit& r = h200->fits[i].params;
    const RooflineFit& d = derived.fits[i].params;
    CHECK(d.bytes_per_s == Approx(r.bytes_per_s * memory));
    if (const auto f = compute(h200->fits[i].precision)) CHECK(d.flops_per_s == Approx(r.flops_per_s * *f));
    CHECK(d.fixed_s == r.fixed_s);
  }
}

std::vector<std::string> reference_scenarios() {
  std::vector<std::string> out;
  for (const auto& e : std::filesystem::directory_iterator(std::filesystem::path(MOESIM_SOURCE_DIR) /
                                                           "scenarios/reference")) {
    if (e.path().extension() == ".json") out.push_back(e.path().string());
  }
  std::sort(out.begin(), out.end());
  return out;
}

// One decode step (32 sequences per attention group at 2,000 cached tokens) and one prefill step (a
// 2,048-token chunk per group), same routing draws on both GPUs.
// The experts-in-the-loop mechanisms are left off (a co-activation model belongs to the simulation).
Duration step_cost(ScenarioSpec s, bool prefill) {
  s.experts = ExpertsSpec{};
  const auto gpu = make_gpu_cost_model(s.cluster.gpu);
  const Fabric fabric(s.cluster.fabric);
  const ExpertPopularity pop(s.workload.popularity, s.model.moe_layers(), s.model.routed_experts,
                             s.model.top_k, Rng(7));
  StepPlanner planner(s, *gpu, fabric, pop, Rng(11));
  GroupBatch b;
  if (prefill) {
    b.prefill_tokens = 2048;
    b.prefill_pairs = 2048.0 * 2049.0 / 2.0;
    b.prefill_kv_tokens = 2048;
    b.sampled_seqs = 1;
  } else {
    b.decode_seqs = 32;
    b.decode_context_tokens = 32.0 * 2000.0;
    b.sampled_seqs = 32;
  }
  const std::vector<GroupBatch> groups(static_cast<std::size_t>(s.deployment.attention_dp), b);
  return planner.plan(groups, Time{}).total;
}

}  // namespace

TEST_CASE("an H100 profile is the H200 fit with memory terms scaled by 3.35/4.8 and compute by 989/989") {
  check_derived_from_h200("h100-sxm", 3.35 / 4.8, [](Precision) { return std::optional<double>(1.0); });
  const ScenarioSpec b = scenario_on(MOESIM_SOURCE_DIR "/scenarios/default.json", "h100-sxm");
  const auto model = make_gpu_cost_model(b.cluster.gpu);
  CHECK(model->source().find("profile hwmodels/profiles/h200-sxm.json scaled to h100-sxm") == 0);
}

TEST_CASE("Blackwell profiles apply the H200 fit's efficiencies to the Blackwell datasheet and say so") {
  const ScenarioSpec h200 = scenario_on(MOESIM_SOURCE_DIR "/scenarios/default.json", "h200-sxm");
  const ScenarioSpec b200 = scenario_on(MOESIM_SOURCE_DIR "/scenarios/default.json", "b200");
  const auto model = make_gpu_cost_model(b200.cluster.gpu);
  CHECK(model->source().find("efficiencies on the datasheet of b200") != std::string::npos);
  // A memory-bound GEMM: HBM bandwidth ratio 8 / 4.8 on the memory term, same fixed cost.
  const auto h = make_gpu_cost_model(h200.cluster.gpu);
  const GemmWork w{.m = 1, .n = 129280, .k = 7168};
  CHECK(model->gemm(w) < h->gemm(w));
  for (const char* gpu : {"h800-sxm", "h20", "gb200", "gb300"}) {
    INFO(gpu);
    const ScenarioSpec s = scenario_on(MOESIM_SOURCE_DIR "/scenarios/default.json", gpu);
    CHECK(make_gpu_cost_model(s.cluster.gpu)->source().find("profile") == 0);
  }
}

TEST_CASE(
    "the A100 profile is the H200 fit moved by the A100 datasheet: memory x 2.039/4.8, BF16 x 312/989") {
  const ScenarioSpec b = scenario_on(MOESIM_SOURCE_DIR "/scenarios/default.json", "a100-sxm");
  CHECK(b.cluster.gpu.hbm_bytes == Approx(80e9));
  // No FP8 tensor cores: FP8 weights are costed at the BF16 rate (weight-only).
  CHECK(b.cluster.gpu.peak_flops(Precision::kFP8) == b.cluster.gpu.peak_flops(Precision::kBF16));
  check_derived_from_h200("a100-sxm", 2.039 / 4.8, [](Precision p) {
    return p == Precision::kBF16 ? std::optional<double>(312.0 / 989) : std::nullopt;
  });
  const auto model = make_gpu_cost_model(b.cluster.gpu);
  CHECK(model->source().find("efficiencies on the datasheet of a100-sxm") != std::string::npos);
}

TEST_CASE("the same deployment is never slower on an H200 than on an H100, for every reference scenario") {
  for (const std::string& file : reference_scenarios()) {
    INFO(file);
    const ScenarioSpec h200 = scenario_on(file, "h200-sxm");
    const ScenarioSpec h100 = scenario_on(file, "h100-sxm");
    for (const bool prefill : {false, true}) {
      CHECK(step_cost(h200, prefill) <= step_cost(h100, prefill));
    }
  }
}

}  // namespace moesim
