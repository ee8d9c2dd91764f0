// Topology physics at the simulation level: small scenarios (a 4-layer toy MoE on 16 H100s, EP16)
// built from JSON and simulated end to end. Expected directions come from the fabric's physics
// (NVLink 450 GB/s vs a 50 GB/s NIC, DeepEP kernel floors and byte counts), not from pasted numbers.
#include <catch2/catch.hpp>
#include <vector>

#include "hwmodels/roofline_cost_model.h"
#include "sim/scenario/scenario_parser.h"
#include "sim/serving/runtime/serving_simulation.h"

using namespace moesim;

namespace {

struct Shape {
  int nodes = 2;
  int gpus_per_node = 8;
  int users = 16;  // closed loop, think time 0: every step sequence is the same whatever the timing
  int prompt_tokens = 64;
  int output_tokens = 16;
  int requests = 48;
  const char* all_to_all = "high_throughput";
  double nic_gbit_per_s = 400;
};

// Toy MoE: 64 experts of 768, top-8, hidden 2048, so that every rank sends to most ranks.
Json scenario(const Shape& s) {
  const Json model = {{"num_layers", 4}, {"hidden", 2048},     {"vocab", 32000},  {"attention", "gqa"},
                      {"num_heads", 16}, {"num_kv_heads", 4},  {"head_dim", 128}, {"routed_experts", 64},
                      {"top_k", 8},      {"expert_inter", 768}};
  return Json{
      {"name", "topology-direction"},
      {"model", model},
      {"cluster",
       {{"gpu", "h100-sxm"},
        {"nodes", s.nodes},
        {"gpus_per_node", s.gpus_per_node},
        {"nic_gbit_per_s", s.nic_gbit_per_s}}},
      {"deployment", {{"ep_size", 16}, {"all_to_all", s.all_to_all}}},
      {"workload",
       {{"arrival", {{"kind", "closed_loop"}, {"users", s.users}}},
        {"prompt_tokens", {{"kind", "fixed"}, {"tokens", s.prompt_tokens}}},
        {"output_tokens", {{"kind", "fixed"}, {"tokens", s.output_tokens}}}}},
      {"run", {{"seed", 3}, {"requests", s.requests}}},
  };
}

struct Step {
  Duration total;
  Duration all_to_all;
  std::int64_t decode_seqs = 0;
  std::int64_t prefill_tokens = 0;
};

class StepLog final : public SimulationObserver {
 public:
  void on_step(const StepRecord& s) override {
    steps.push_back(Step{.total = s.plan->total,
                         .all_to_all = s.plan->part(StepPart::kDispatch) + s.plan->part(StepPart::kCombine),
                         .decode_seqs = s.decode_seqs,
                         .prefill_tokens = s.prefill_tokens});
  }
  void on_request(const RequestRecord&) override {}
  std::vector<Step> steps;
};

struct Run {
  Report report;
  std::vector<Step> steps;
};

Run simulate_shape(const Shape& shape) {
  const ScenarioSpec spec = parse_scenario(scenario(shape), "").spec;
  const RooflineCostModel gpu(spec.cluster.gpu);
  StepLog log;
  Report r = simulate(spec, gpu, &log);
  return Run{std::move(r), std::move(log.steps)};
}

// Two runs of the same closed loop see the same batches step by step; only their durations differ.
void require_same_batches(const Run& a, const Run& b) {
  REQUIRE(a.steps.size() == b.steps.size());
  for (std::size_t i = 0; i < a.steps.size(); ++i) {
    REQUIRE(a.steps[i].decode_seqs == b.steps[i].decode_seqs);
    REQUIRE(a.steps[i].prefill_tokens == b.steps[i].prefill_tokens);
  }
}

Duration all_to_all_total(const Run& r) {
  Duration sum = Duration::zero();
  for (const Step& s : r.steps) sum += s.all_to_all;
  return sum;
}

}  // namespace

TEST_CASE("spreading the same EP16 group over more nodes raises the All-to-All share") {
  // 16 GPUs as 1 x 16, 2 x 8 and 4 x 4: the share of peers behind a 50 GB/s NIC instead of 450 GB/s
  // NVLink goes 0 -> 1/2 -> 3/4 of the ranks, so each dispatch and combine takes longer once it is
  // bandwidth-bound (prefill-heavy steps; a few decode tokens per rank only see the kernels' floors).
  double last_share = -1;
  double last_nic_bytes = -1;
  for (const auto& [nodes, per_node] : {std::pair{1, 16}, std::pair{2, 8}, std::pair{4, 4}}) {
    const Run run = simulate_shape(Shape{.nodes = nodes,
                                         .gpus_per_node = per_node,
                                         .users = 32,
                                         .prompt_tokens = 2048,
                                         .output_tokens = 4,
                                         .requests = 48});
    INFO(nodes << " x " << per_node);
    REQUIRE(run.report.requests_finished == 48);
    CHECK(run.report.all_to_all_share() > last_share);
    CHECK(run.report.nic_bytes_per_step > last_nic_bytes);
    if (nodes == 1) CHECK(run.report.nic_bytes_per_step == 0.0);
    last_share = run.report.all_to_all_share();
    last_nic_bytes = run.report.nic_bytes_per_step;
  }
}

TEST_CASE("a faster NIC never makes a step slower") {
  for (const char* mode : {"high_throughput", "low_latency"}) {
    INFO(mode);
    const Shape base{
        .users = 32, .prompt_tokens = 512, .output_tokens = 8, .requests = 64, .all_to_all = mode};
    std::vector<Run> runs;
    for (const double gbit : {100.0, 200.0, 400.0, 800.0}) {
      Shape s = base;
      s.nic_gbit_per_s = gbit;
      runs.push_back(simulate_shape(s));
    }
    for (std::size_t k = 1; k < runs.size(); ++k) {
      require_same_batches(runs[k - 1], runs[k]);
      for (std::size_t i = 0; i < runs[k].steps.size(); ++i) {
        INFO("NIC step " << k << ", simulation step " << i);
        CHECK(runs[k].steps[i].total <= runs[k - 1].steps[i].total);
      }
    }
    // The NIC carries half of every rank's peers, so an 8x faster NIC must show somewhere.
    CHECK(all_to_all_total(runs.back()) < all_to_all_total(runs.front()));
  }
}

TEST_CASE("low-latency All-to-All wins at small batches and loses at large ones") {
  // Small: one decode token per rank; the normal kernels pay their ~50 us floor per phase while the
  // low-latency ones pay ~18 us of startup. Large: thousands of prefill tokens per rank; low-latency sends
  // one message per (token, expert) pair (top-8) where the normal kernels send one per destination node
  // or rank, so it moves several times the bytes over the NIC.
  auto pair_of = [](Shape s) {
    s.all_to_all = "high_throughput";
    const Run ht = simulate_shape(s);
    s.all_to_all = "low_latency";
    const Run ll = simulate_shape(s);
    require_same_batches(ht, ll);
    return std::pair{all_to_all_total(ht), all_to_all_total(ll)};
  };
  const auto [small_ht, small_ll] =
      pair_of(Shape{.users = 16, .prompt_tokens = 16, .output_tokens = 32, .requests = 16});
  CHECK(small_ll < small_ht);
  const auto [large_ht, large_ll] =
      pair_of(Shape{.users = 32, .prompt_tokens = 4096, .output_tokens = 2, .requests = 32});
  CHECK(large_ll > large_ht);
}

TEST_CASE("auto All-to-All is never slower than the better of the two kernel families, step by step") {
  Shape s{.users = 32, .prompt_tokens = 1024, .output_tokens = 16, .requests = 64};
  s.all_to_all = "high_throughput";
  const Run ht = simulate_shape(s);
  s.all_to_all = "low_latency";
  const Run ll = simulate_shape(s);
  s.all_to_all = "auto";
  const Run au = simulate_shape(s);
  require_same_batches(ht, au);
  require_same_batches(ll, au);
  bool used_ht = false;
  bool used_ll = false;
  for (std::size_t i = 0; i < au.steps.size(); ++i) {
    INFO("step " << i);
    CHECK(au.steps[i].all_to_all <= min(ht.steps[i].all_to_all, ll.steps[i].all_to_all));
    used_ht = used_ht || ht.steps[i].all_to_all < ll.steps[i].all_to_all;
    used_ll = used_ll || ll.steps[i].all_to_all < ht.steps[i].all_to_all;
  }
  // Prefill steps favour the normal kernels, decode steps the low-latency ones: both regimes occur.
  CHECK(used_ht);
  CHECK(used_ll);
}
