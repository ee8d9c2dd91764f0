// A model with no routed experts (every layer dense) runs: its placement is empty, no step time goes to
// experts or All-to-All, and a lone decoding request costs about one read of the weights per token.
#include <catch2/catch.hpp>

#include "hwmodels/roofline_cost_model.h"
#include "sim/scenario/scenario_parser.h"
#include "sim/serving/experts/placement.h"
#include "sim/serving/runtime/serving_simulation.h"
#include "sim/serving/spec/memory_plan.h"

namespace moesim {
namespace {

Json dense_scenario() {
  return Json::parse(R"({
    "model": {"num_layers": 32, "hidden": 4096, "vocab": 128256, "attention": "gqa", "num_heads": 32,
              "num_kv_heads": 8, "head_dim": 128, "routed_experts": 0, "dense_inter": 14336},
    "cluster": {"gpu": "h100-sxm", "nodes": 1, "gpus_per_node": 1},
    "deployment": {"ep_size": 1},
    "workload": {"arrival": {"kind": "closed_loop", "users": 1},
                 "prompt_tokens": {"kind": "fixed", "tokens": 16},
                 "output_tokens": {"kind": "fixed", "tokens": 200}},
    "run": {"requests": 3}})");
}

}  // namespace

TEST_CASE("a dense model has the empty placement") {
  const Placement p = contiguous_placement(0, 0, 8);
  CHECK(p.experts() == 0);
  CHECK(p.layers() == 0);
  CHECK_THROWS_AS(Placement(0, 4, 8, 1), InternalError);
}

TEST_CASE("a dense model runs with no expert or All-to-All time and decodes at the weight-read time") {
  const LoadedScenario sc = parse_scenario(dense_scenario(), "");
  const ScenarioSpec& s = sc.spec;
  REQUIRE(s.model.moe_layers() == 0);
  const RooflineCostModel gpu(s.cluster.gpu);
  const Report r = simulate(s, gpu);
  CHECK(r.requests_finished == 3);
  CHECK(r.share(StepPart::kExperts) == 0);
  CHECK(r.share(StepPart::kDispatch) == 0);
  CHECK(r.share(StepPart::kCombine) == 0);
  // One sequence per step: each decode step reads every weight once (attention, dense FFN, LM head in
  // BF16), so TPOT is at least that read at the achievable HBM bandwidth; kernel overheads add a little.
  const ModelSpec& m = s.model;
  const double weight_bytes = (m.attention_params_per_layer() + m.dense_ffn_params()) * m.num_layers * 2.0 +
                              double(m.vocab * m.hidden) * 2.0;
  const double read_s = weight_bytes / (s.cluster.gpu.hbm_bytes_per_s * s.cluster.gpu.mem_efficiency);
  CHECK(r.tpot.mean >= read_s);
  CHECK(r.tpot.mean <= 1.15 * read_s);
  CHECK(plan_memory(s).weights_per_gpu.routed_experts == 0);
}

}  // namespace moesim
