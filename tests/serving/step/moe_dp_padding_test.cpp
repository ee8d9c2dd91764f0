// TensorRT-LLM's attention-DP padding of the MoE input (deployment.moe_dp_padding): every attention-DP
// rank's MoE input padded to the largest rank's tokens, the padded rows routed to each layer's padded
// experts, dispatched, computed and combined like real rows.
#include <algorithm>
#include <catch2/catch.hpp>
#include <set>
#include <string>
#include <vector>

#include "hwmodels/roofline_cost_model.h"
#include "sim/scenario/scenario_parser.h"
#include "sim/serving/step/step_planner.h"
#include "tests/support/scenario_error.h"

using namespace moesim;

namespace {
// A tiny DeepSeek-like model: 16 routed experts, top 2, two MoE layers; two GPUs in one node, each its own
// attention-DP rank and expert-parallel rank; low-latency All-to-All (one message per (token, expert) pair).
Json base() {
  return Json::parse(R"({
    "model": {"num_layers": 2, "hidden": 2048, "vocab": 1000, "attention": "gqa", "num_heads": 16,
              "num_kv_heads": 8, "head_dim": 128, "routed_experts": 16, "top_k": 2, "expert_inter": 512},
    "cluster": {"gpu": "h100-sxm", "nodes": 1, "gpus_per_node": 2},
    "deployment": {"ep_size": 2, "attention": {"dp": 2, "tp": 1}, "max_batched_tokens": 8192,
                   "all_to_all": "low_latency"},
    "workload": {"arrival": {"kind": "poisson", "rate_per_s": 1},
                 "prompt_tokens": {"kind": "fixed", "tokens": 8}, "output_tokens": {"kind": "fixed", "tokens": 8}},
    "run": {"requests": 1}})");
}

ScenarioSpec spec(bool padding) {
  Json j = base();
  j["deployment"]["moe_dp_padding"] = padding;
  return parse_scenario(j, "").spec;
}

GroupBatch decode(std::int64_t seqs) {
  GroupBatch b;
  b.decode_seqs = seqs;
  b.decode_context_tokens = static_cast<double>(seqs) * 256;
  b.sampled_seqs = seqs;
  return b;
}

struct Planned {
  StepPlan plan;
  std::vector<double> rank_pairs;     // summed over the MoE layers
  std::vector<double> last_pairs;     // the last MoE layer's, per rank
  std::vector<std::vector<int>> pad;  // per MoE layer, its padded experts
  Placement placement;
};

// One step of `a` and `b` decode sequences on the two ranks, routing drawn expert by expert (not binned) so
// that padding on and off draw the same real counts from the same stream.
Planned plan(const ScenarioSpec& s, std::int64_t a, std::int64_t b, bool binned = false) {
  const RooflineCostModel gpu(s.cluster.gpu);
  const Fabric fabric(s.cluster.fabric);
  const ExpertPopularity pop(PopularitySpec{}, s.model.moe_layers(), 16, 2, Rng(1));
  StepPlanner planner(s, gpu, fabric, pop, Rng(2));
  if (!binned) planner.set_binned_routing(false);
  const std::vector<GroupBatch> groups{decode(a), decode(b)};
  Planned p{planner.plan(groups, Time{}), {}, {}, {}, planner.placement()};
  p.rank_pairs.assign(planner.rank_pairs().begin(), planner.rank_pairs().end());
  for (int r = 0; r < 2; ++r) p.last_pairs.push_back(planner.expert_cost().pairs(r));
  for (int l = 0; l < s.model.moe_layers(); ++l) {
    const auto e = planner.padded_experts(l);
    p.pad.emplace_back(e.begin(), e.end());
  }
  return p;
}

int experts_on(const Placement& placement, int layer, const std::vector<int>& experts, int rank) {
  int n = 0;
  for (const int e : experts) {
    for (const int slot : placement.slots_of(layer, e)) n += placement.gpu_of_slot(slot) == rank ? 1 : 0;
  }
  return n;
}
}  // namespace

TEST_CASE(
    "padding adds (largest rank's tokens - each rank's) x top_k pairs, all on the layer's padded experts") {
  const ScenarioSpec on = spec(true);
  const int k = on.model.top_k;
  const int layers = on.model.moe_layers();
  REQUIRE(layers == 2);
  const Planned off = plan(spec(false), 100, 10);
  const Planned pad = plan(on, 100, 10);
  // Rank 1 runs 10 real tokens and 100 - 10 = 90 padded rows; rank 0 none.
  const std::int64_t padded = 100 - 10;
  CHECK(off.plan.padded_rows == 0);
  CHECK(pad.plan.padded_rows == padded);
  CHECK(pad.plan.tokens == 110);  // real tokens only
  // Each layer's padded set: top_k distinct experts.
  REQUIRE(pad.pad.size() == static_cast<std::size_t>(layers));
  for (const auto& e : pad.pad) {
    REQUIRE(e.size() == static_cast<std::size_t>(k));
    CHECK(std::set<int>(e.begin(), e.end()).size() == e.size());
    for (const int x : e) CHECK((x >= 0 && x < 16));
  }
  // Every real token routes top_k pairs; every padded row top_k more.
  double off_sum = 0;
  double pad_sum = 0;
  for (int r = 0; r < 2; ++r) {
    off_sum += off.rank_pairs[static_cast<std::size_t>(r)];
    pad_sum += pad.rank_pairs[static_cast<std::size_t>(r)];
  }
  CHECK(off_sum == Approx(double(layers * 110 * k)));
  CHECK(pad_sum == Approx(double(layers * (110 + padded) * k)));
  // The same real draws (the same stream, drawn alike): each rank gains padded rows x its padded experts.
  for (int r = 0; r < 2; ++r) {
    int held = 0;
    for (int l = 0; l < layers; ++l)
      held += experts_on(pad.placement, l, pad.pad[static_cast<std::size_t>(l)], r);
    CHECK(pad.rank_pairs[static_cast<std::size_t>(r)] - off.rank_pairs[static_cast<std::size_t>(r)] ==
          Approx(double(padded * held)));
    const int last = experts_on(pad.placement, layers - 1, pad.pad.back(), r);
    CHECK(pad.last_pairs[static_cast<std::size_t>(r)] - off.last_pairs[static_cast<std::size_t>(r)] ==
          Approx(double(padded * last)));
  }
  CHECK(pad.plan.part(StepPart::kExperts) >= off.plan.part(StepPart::kExperts));
}

TEST_CASE("under padding the short rank dispatches and combines as many rows as the long one") {
  const ScenarioSpec on = spec(true);
  const Planned pad = plan(on, 100, 10);
  // Low-latency kernels send each (row, expert) pair to the expert's GPU: with both ranks sending 100 rows,
  // GPU s sends 100 x (its pairs' share of rank d) pairs to d, and summed over the two GPUs the pairs that
  // cross are 100 x top_k a layer (the shares of both ranks add up to top_k), each with its dispatch and its
  // combine bytes, whatever the draw.
  const double per_pair = double(on.model.hidden) * (activation_bytes_per_element(on.precision.dispatch) +
                                                     bytes_per_element(on.precision.combine));
  const double crossing = 100.0 * on.model.top_k * on.model.moe_layers() * per_pair;
  CHECK(pad.plan.dispatch_nvlink_bytes + pad.plan.dispatch_nic_bytes == Approx(crossing));
  // Without padding the short rank sends its own 10 rows: fewer bytes.
  const Planned off = plan(spec(false), 100, 10);
  CHECK(off.plan.dispatch_nvlink_bytes + off.plan.dispatch_nic_bytes < crossing);
  CHECK(pad.plan.part(StepPart::kDispatch) >= off.plan.part(StepPart::kDispatch));
}

TEST_CASE("padding changes nothing when every rank runs the same tokens") {
  for (const bool binned : {false, true}) {
    const Planned off = plan(spec(false), 64, 64, binned);
    const Planned pad = plan(spec(true), 64, 64, binned);
    CHECK(pad.plan.padded_rows == 0);
    CHECK(pad.plan.total == off.plan.total);
    for (std::size_t i = 0; i < kStepParts; ++i) CHECK(pad.plan.parts.d[i] == off.plan.parts.d[i]);
    CHECK(pad.plan.dispatch_nvlink_bytes == off.plan.dispatch_nvlink_bytes);
    CHECK(pad.plan.dispatch_nic_bytes == off.plan.dispatch_nic_bytes);
    CHECK(pad.rank_pairs == off.rank_pairs);
  }
}

TEST_CASE("deployment.moe_dp_padding is a boolean that needs attention DP") {
  using moesim_test::error_of;
  Json j = base();
  j["deployment"]["moe_dp_padding"] = 1;
  CHECK_THAT(error_of(j), Catch::Contains("deployment.moe_dp_padding"));
  j["deployment"]["moe_dp_padding"] = true;
  CHECK(error_of(j).empty());
  j["deployment"]["attention"] = {{"dp", 1}, {"tp", 2}};
  CHECK_THAT(error_of(j), Catch::Contains("deployment.moe_dp_padding") && Catch::Contains("dp is 1"));
  j["deployment"]["attention"] = {{"dp", 2}, {"tp", 1}};
  j["deployment"]["two_batch_overlap"] = true;
  CHECK_THAT(error_of(j),
             Catch::Contains("deployment.moe_dp_padding") && Catch::Contains("two_batch_overlap"));
  j["deployment"]["moe_dp_padding"] = false;
  CHECK(error_of(j).empty());
}
