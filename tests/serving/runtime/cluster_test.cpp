// The cluster built on a scenario and driven by hand: an arrival goes to the group a least-loaded router
// must pick from loads queued by hand, a request too long for the KV cache is dropped, a PD hand-off's KV
// cache takes the time the fabric spec gives its bytes, and a short run conserves requests, tokens and
// KV blocks.
#include "sim/serving/runtime/cluster.h"

#include <algorithm>
#include <catch2/catch.hpp>
#include <cstdint>
#include <string>
#include <vector>

#include "hwmodels/roofline_cost_model.h"
#include "sim/scenario/scenario_parser.h"
#include "tests/support/toy_moe.h"

using namespace moesim;

namespace {

// A request of `prompt` and `output` tokens in `c`'s table, waiting on group `group` of replica `replica`.
void queue_by_hand(Cluster& c, int replica, int group, std::int64_t prompt, std::int64_t output) {
  const RequestIdx idx = c.requests().add();
  Request& r = c.requests()[idx];
  r.prompt = prompt;
  r.output = output;
  r.target = prompt;
  r.replica = replica;
  r.group = group;
  c.replicas()[static_cast<std::size_t>(replica)]->enqueue(group, idx);
}

// The newest request in the table (nothing released yet): the one the last arrival admitted.
const Request& newest(Cluster& c) { return c.requests()[static_cast<RequestIdx>(c.requests().live() - 1)]; }

// The toy MoE (toy_moe.h) with four experts, top-4, one prefill and one decode instance of one
// GPU each on one node, one request of `prompt` tokens.
Json one_p_one_d(std::int64_t prompt) {
  Json j = Json::parse(R"({
    "name": "tiny-1p1d",
    "precision": {"weights": "bf16", "kv_cache": "bf16"},
    "cluster": {"gpu": "h100-sxm", "nodes": 1, "gpus_per_node": 2},
    "deployment": {"ep_size": 1, "pools": [{"role": "prefill", "instances": 1},
                                           {"role": "decode", "instances": 1}]},
    "workload": {"arrival": {"kind": "poisson", "rate_per_s": 1},
                 "output_tokens": {"kind": "fixed", "tokens": 4}},
    "run": {"seed": 3, "requests": 1}
  })");
  j["model"] = moesim_test::toy_moe(4, 4);
  j["workload"]["prompt_tokens"] = Json{{"kind", "fixed"}, {"tokens", prompt}};
  return j;
}

struct Records final : SimulationObserver {
  std::vector<RequestRecord> requests;
  void on_step(const StepRecord&) override {}
  void on_request(const RequestRecord& r) override { requests.push_back(r); }
};

}  // namespace

TEST_CASE("an arrival goes to the first attention group with the fewest requests, over every replica") {
  // Two replicas of EP4 with four data-parallel attention groups each: eight groups, replica-major.
  const LoadedScenario sc = load_scenario("scenarios/tiny/tiny_poisson_ep4.json", {"cluster.nodes=2"});
  const RooflineCostModel gpu(sc.spec.cluster.gpu);
  Cluster c(sc.spec, gpu, nullptr, 1);
  REQUIRE(sc.spec.deployment.router == "least_loaded");
  REQUIRE(c.replicas().size() == 2);
  const auto dp = static_cast<int>(c.replicas()[0]->groups().size());
  REQUIRE(dp == 4);
  std::vector<std::int64_t> queued = {2, 3, 1, 2, 3, 1, 2, 2};
  for (std::size_t i = 0; i < queued.size(); ++i) {
    for (std::int64_t k = 0; k < queued[i]; ++k)
      queue_by_hand(c, static_cast<int>(i) / dp, static_cast<int>(i) % dp, 100, 10);
  }
  // Each arrival joins the least loaded group (running + waiting), the lower index on ties; then that
  // group has one more. Six arrivals: groups 2 and 5 (one each), then the twos, in order.
  for (int a = 0; a < 6; ++a) {
    const auto expected =
        static_cast<std::size_t>(std::min_element(queued.begin(), queued.end()) - queued.begin());
    c.on_arrival(RequestSpec{.arrival = c.sim().now(), .prompt_tokens = 100, .output_tokens = 10});
    const Request& r = newest(c);
    CHECK(r.replica * dp + r.group == static_cast<int>(expected));
    CHECK(c.replicas()[static_cast<std::size_t>(r.replica)]
              ->groups()[static_cast<std::size_t>(r.group)]
              .waiting.back() == static_cast<RequestIdx>(c.requests().live() - 1));
    ++queued[expected];
  }
  CHECK(c.metrics().arrived == 6);
  CHECK(c.metrics().dropped == 0);
}

TEST_CASE("an arrival longer than an attention group's KV cache is dropped as too long") {
  const LoadedScenario sc = load_scenario("scenarios/tiny/tiny_poisson_ep4.json", {});
  const RooflineCostModel gpu(sc.spec.cluster.gpu);
  Cluster c(sc.spec, gpu, nullptr, 1);
  const std::int64_t room = c.pools()[0].memory.kv_tokens_per_group;
  // Prompt and answer exactly fill the cache: kept; one token more: dropped.
  c.on_arrival(RequestSpec{.arrival = c.sim().now(), .prompt_tokens = room - 10, .output_tokens = 10});
  c.on_arrival(RequestSpec{.arrival = c.sim().now(), .prompt_tokens = room - 10, .output_tokens = 11});
  CHECK(c.metrics().arrived == 2);
  CHECK(c.metrics().dropped == 1);
  CHECK(c.metrics().dropped_by[static_cast<std::size_t>(DropReason::kTooLong)] == 1);
  CHECK(c.requests().live() == 1);
}

TEST_CASE("a prefilled request's KV cache reaches the decode GPU after its bytes at the NVLink copy rate") {
  const std::int64_t prompt = 512;
  const LoadedScenario sc = parse_scenario(one_p_one_d(prompt), "");
  const ScenarioSpec& s = sc.spec;
  const RooflineCostModel gpu(s.cluster.gpu);
  Records rec;
  Cluster c(s, gpu, &rec, 1);
  REQUIRE(c.pools().size() == 2);
  REQUIRE(c.replicas()[0]->first_gpu() == 0);
  REQUIRE(c.replicas()[1]->first_gpu() == 1);
  const Report r = c.run();
  REQUIRE(r.requests_finished == 1);
  // K and V of 8 heads of 128 over 2 layers in BF16, per prompt token; GPU 0 -> NVSwitch -> GPU 1.
  const double bytes = 2.0 * 8 * 128 * 2 * 2.0 * static_cast<double>(prompt);
  const FabricSpec& f = s.cluster.fabric;
  const double expected_s = f.nvlink_latency.seconds() + f.collectives.p2p_nvlink_overhead.seconds() +
                            bytes / (f.nvlink_bytes_per_s * f.efficiency);
  CHECK(r.disaggregation.kv_transfers == 1);
  CHECK(r.disaggregation.kv_bytes == bytes);
  // Whole picoseconds: the latency halves, overhead and data time round by half a picosecond each at most.
  CHECK(r.disaggregation.kv_transfer_s == Approx(expected_s).epsilon(0).margin(5e-12));
  // GPU 0's send engine was busy until the cache was in, when the first token counts as delivered.
  REQUIRE(rec.requests.size() == 1);
  CHECK(c.kv_links().link_free(0).seconds() ==
        Approx(rec.requests[0].arrival_s + rec.requests[0].ttft_s).epsilon(1e-12));
}

TEST_CASE("after a short run every request finished or was dropped and the KV caches are empty") {
  const LoadedScenario sc = load_scenario("scenarios/tiny/tiny_two_nodes.json", {"run.requests=80"});
  const RooflineCostModel gpu(sc.spec.cluster.gpu);
  Cluster c(sc.spec, gpu, nullptr, 1);
  const Report r = c.run();
  CHECK(c.metrics().arrived == sc.spec.run.requests);
  CHECK(c.metrics().finished + c.metrics().dropped == c.metrics().arrived);
  // Every admitted request's answer came out whole.
  CHECK(c.metrics().output_tokens == c.metrics().output_tokens_asked);
  CHECK(r.output_tokens == r.output_tokens_asked);
  CHECK(c.requests().live() == 0);
  for (const auto& rep : c.replicas()) {
    CHECK(rep->in_system() == 0);
    for (const AttentionGroup& g : rep->groups()) CHECK(g.kv.used_blocks() == 0);
  }
}
