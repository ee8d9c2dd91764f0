// deployment.expert_kernel: the grouped expert kernel apart from the engine's own
// (hwmodels/expert_kernel_family.h).
#include <catch2/catch.hpp>
#include <string>

#include "hwmodels/engine_profile.h"
#include "sim/engine/check.h"
#include "sim/scenario/scenario_parser.h"

using namespace moesim;

TEST_CASE(
    "deployment.expert_kernel overrides the engine's kernel and an unknown one is refused by its path") {
  static const std::string path = std::string(MOESIM_SOURCE_DIR) + "/scenarios/default.json";
  const LoadedScenario own = load_scenario(path, {"deployment.engine=\"vllm\""});
  CHECK(own.spec.deployment.engine.expert_family == ExpertKernelFamily::kTritonFusedMoe);
  const LoadedScenario set =
      load_scenario(path, {"deployment.engine=\"vllm\"", "deployment.expert_kernel=\"deepgemm\""});
  CHECK(set.spec.deployment.engine.expert_family == ExpertKernelFamily::kDeepGemm);
  try {
    (void)load_scenario(path, {"deployment.expert_kernel=\"marlin\""});
    FAIL("an unknown expert kernel was accepted");
  } catch (const InputError& e) {
    CHECK_THAT(e.what(), Catch::Contains("deployment.expert_kernel") &&
                             Catch::Contains("known: cutlass_grouped, triton_fused_moe, deepgemm"));
  }
}
