// Capacity at N-1: the rates `plan` gives with one GPU or one node lost follow from its own throughput
// rows (recomputed here) and the instance's attention ranks, with or without redundant experts covering
// the lost GPU.
#include <catch2/catch.hpp>
#include <string>

#include "hwmodels/roofline_cost_model.h"
#include "sim/scenario/scenario_parser.h"
#include "sim/serving/offline/capacity_plan.h"
#include "tests/support/toy_moe.h"

using namespace moesim;

namespace {

// The toy MoE (toy_moe.h: 32 experts, top-2) on `nodes` nodes of eight H100 in instances of EP `ep`.
ScenarioSpec toy(int nodes, int ep, bool redundant) {
  Json j = Json::parse(R"({
    "name": "toy-n1",
    "precision": {"weights": "bf16", "kv_cache": "bf16"},
    "cluster": {"gpu": "h100-sxm", "gpus_per_node": 8},
    "deployment": {"max_batch_size": 16},
    "workload": {"arrival": {"kind": "poisson", "rate_per_s": 10},
                 "prompt_tokens": {"kind": "fixed", "tokens": 512},
                 "output_tokens": {"kind": "fixed", "tokens": 64}},
    "sla": {"ttft_ms": 2000, "tpot_ms": 100},
    "run": {"seed": 11, "requests": 10}
  })");
  j["model"] = moesim_test::toy_moe(32, 2);
  j["cluster"]["nodes"] = nodes;
  j["deployment"]["ep_size"] = ep;
  j["deployment"]["attention"] = Json{{"dp", ep}, {"tp", 1}};
  if (redundant) {
    j["experts"] = Json{{"placement", "eplb"}, {"redundant_slots_per_gpu", 1}};
    j["faults"] = Json{{"events", Json::array({Json{{"at_s", 1000}, {"gpu", 0}}})}, {"spread_copies", true}};
  }
  return parse_scenario(j, "").spec;
}

// One instance's requests per second from the plan's rows: 1 / (prompt / prefill + output / decode), the
// decode rate at the largest costed batch within the TPOT and the KV pools.
double instance_rate(const CapacityPlan& p, int gpus) {
  double decode = 0, prefill = 0;
  for (const ThroughputRow& t : p.throughput) {
    if (t.phase == "prefill") prefill = t.tokens_per_s_per_gpu * gpus;
    const bool fits = t.batch <= p.deployed_concurrency / p.attention_groups;  // the KV pools hold it
    if (t.phase == "decode" && t.ms_per_token <= 100 && fits)
      decode = std::max(decode, t.tokens_per_s_per_gpu * gpus);
  }
  REQUIRE(decode > 0);
  REQUIRE(prefill > 0);
  return 1.0 / (512 / prefill + 64 / decode);
}

}  // namespace

TEST_CASE(
    "at N-1 an EP32 instance without redundant experts is down while it re-shards, then keeps 31 of 32 "
    "ranks") {
  const ScenarioSpec s = toy(4, 32, false);
  const RooflineCostModel gpu(s.cluster.gpu);
  const CapacityPlan p = plan_capacity(s, gpu, PlanOptions{});
  const NMinusOne& n = p.n_minus_one;
  REQUIRE(n.computed);
  const double r = instance_rate(p, 32);
  CHECK(n.all_up_req_per_s == Approx(r).epsilon(1e-12));
  CHECK_FALSE(n.gpu_covered);
  CHECK(n.gpu_lost_req_per_s == Approx(r * 31 / 32).epsilon(1e-12));
  CHECK(n.gpu_lost_restart_req_per_s == 0);
  // A node holds 8 of its 32 ranks.
  CHECK(n.node_lost_req_per_s == Approx(r * 24 / 32).epsilon(1e-12));
  CHECK(n.node_lost_restart_req_per_s == 0);
}

TEST_CASE("at N-1 redundant experts spread over the GPUs keep the instance serving through a GPU loss") {
  const ScenarioSpec s = toy(4, 32, true);
  const RooflineCostModel gpu(s.cluster.gpu);
  const CapacityPlan p = plan_capacity(s, gpu, PlanOptions{});
  const NMinusOne& n = p.n_minus_one;
  const double r = instance_rate(p, 32);
  CHECK(n.gpu_covered);
  CHECK(n.gpu_lost_req_per_s == Approx(r * 31 / 32).epsilon(1e-12));
  CHECK(n.gpu_lost_restart_req_per_s == Approx(r * 31 / 32).epsilon(1e-12));
  // Spread copies pair neighbouring GPUs, on one node: a node takes both copies of some experts.
  CHECK_FALSE(n.node_covered);
  CHECK(n.node_lost_restart_req_per_s == 0);
}

TEST_CASE("at N-1 a node lost takes the instances inside it") {
  const ScenarioSpec s = toy(2, 8, false);  // two EP8 instances, one per node
  const RooflineCostModel gpu(s.cluster.gpu);
  const CapacityPlan p = plan_capacity(s, gpu, PlanOptions{});
  const NMinusOne& n = p.n_minus_one;
  const double r = instance_rate(p, 8);
  CHECK(n.all_up_req_per_s == Approx(2 * r).epsilon(1e-12));
  CHECK(n.gpu_lost_req_per_s == Approx(r + r * 7 / 8).epsilon(1e-12));
  CHECK(n.gpu_lost_restart_req_per_s == Approx(r).epsilon(1e-12));
  CHECK(n.node_lost_req_per_s == Approx(r).epsilon(1e-12));
  CHECK(n.node_lost_restart_req_per_s == Approx(r).epsilon(1e-12));
}
