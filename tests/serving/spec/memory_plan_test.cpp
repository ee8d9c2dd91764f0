#include "sim/serving/spec/memory_plan.h"

#include <catch2/catch.hpp>
#include <string>
#include <utility>
#include <vector>

#include "sim/scenario/scenario_parser.h"

using namespace moesim;

TEST_CASE("DeepSeek-V3 parameter counts match the published 671B total and 37B active") {
  const ScenarioSpec s = load_scenario("", {}).spec;  // default: DeepSeek-V3
  REQUIRE(s.model.total_params() / 1e9 == Approx(671).epsilon(0.01));
  REQUIRE(s.model.active_params() / 1e9 == Approx(37).epsilon(0.03));
  // MLA cache per token: (512 + 64) x 61 layers x 2 bytes (COMPONENT_FIGURES.md section 2).
  REQUIRE(s.model.kv_bytes_per_token(Precision::kBF16) == Approx(70272));
}

TEST_CASE("routed experts are spread over the EP group at their precision") {
  const ScenarioSpec s = load_scenario("", {}).spec;  // FP8 weights, EP8
  const MemoryPlan m = plan_memory(s);
  const double expert = 3.0 * 7168 * 2048;  // parameters per expert
  REQUIRE(m.experts_per_gpu == 32);
  REQUIRE(m.weights_per_gpu.routed_experts == Approx(expert * 32 * 58 * 1.0));
  const ScenarioSpec s16 =
      load_scenario("", {"cluster.nodes=2", "deployment.ep_size=16", "deployment.attention.dp=16"}).spec;
  REQUIRE(plan_memory(s16).weights_per_gpu.routed_experts == Approx(expert * 16 * 58 * 1.0));
}

TEST_CASE("a model too large for the cluster is refused with the shortfall") {
  const ScenarioSpec s = load_scenario("", {"precision.weights=bf16", "cluster.gpu=h100-sxm"}).spec;
  const MemoryPlan m = plan_memory(s);
  REQUIRE_FALSE(m.fits());
  try {
    check_fits(s, m);
    FAIL("expected an error");
  } catch (const InputError& e) {
    const std::string what = e.what();
    REQUIRE(what.find("does not fit") != std::string::npos);
    REQUIRE(what.find("short by") != std::string::npos);
  }
}

TEST_CASE("the KV pool is what the memory fraction leaves after weights, activations and overhead") {
  const ScenarioSpec s = load_scenario("", {}).spec;
  const MemoryPlan m = plan_memory(s);
  const double expected = 141e9 * 0.9 - m.weights_per_gpu.total() - 4 * kGiB - 2 * kGiB;
  REQUIRE(m.kv_pool_bytes_per_gpu == Approx(expected));
  REQUIRE(m.kv_tokens_per_group == (static_cast<std::int64_t>(expected / 70272.0) / 16) * 16);
}

TEST_CASE("redundant slots make EP72 and EP144 legal for DeepSeek-V3 and their weights are counted") {
  const double expert = 3.0 * 7168 * 2048;  // parameters per expert, FP8: one byte each
  for (const auto& [ep, nodes] : {std::pair{72, 9}, std::pair{144, 18}}) {
    const std::vector<std::string> sets = {"cluster.nodes=" + std::to_string(nodes),
                                           "deployment.ep_size=" + std::to_string(ep),
                                           "deployment.attention.dp=" + std::to_string(ep),
                                           "experts.placement=eplb", "experts.redundant_experts=32"};
    const ScenarioSpec s = load_scenario("", sets).spec;
    const MemoryPlan m = plan_memory(s);
    // (256 experts + 32 redundant) / EP: 288 / 72 = 4, 288 / 144 = 2 slots on every GPU.
    REQUIRE(m.experts_per_gpu == 288 / ep);
    REQUIRE(m.weights_per_gpu.routed_experts == Approx(expert * (288.0 / ep) * 58));
  }
}
