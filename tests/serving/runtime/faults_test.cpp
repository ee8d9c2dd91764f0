// Failures in the loop: redundant expert copies cover a lost GPU or they do not (from the placement), the
// failure schedule is the scenario's and the MTBF's, an EP32 group that loses a GPU goes on without its
// attention rank when copies cover it and else restarts after the weights' time over the named path plus
// the fixed costs, requests are conserved, recomputed or failed as the scenario says, and a degraded NIC
// slows the All-to-All that crosses it.
#include "sim/serving/runtime/faults.h"

#include <catch2/catch.hpp>
#include <cmath>
#include <string>
#include <vector>

#include "hwmodels/loader.h"
#include "hwmodels/roofline_cost_model.h"
#include "sim/scenario/scenario_parser.h"
#include "sim/serving/runtime/serving_simulation.h"
#include "sim/serving/spec/memory_plan.h"
#include "tests/support/toy_moe.h"

using namespace moesim;
using moesim_test::toy_run;
using moesim_test::ToyRun;

TEST_CASE("a lost GPU is covered when each of its experts has a copy on another GPU") {
  // Four experts on four GPUs, two slots each: GPU g holds experts g and g + 1 (mod 4), a ring.
  Placement ring(1, 4, 4, 2);
  auto slots = ring.mutable_phy2log(0);
  for (int g = 0; g < 4; ++g) {
    slots[static_cast<std::size_t>(2 * g)] = g;
    slots[static_cast<std::size_t>(2 * g + 1)] = (g + 1) % 4;
  }
  ring.finalize();
  for (int g = 0; g < 4; ++g) {
    std::vector<char> lost(4, 0);
    lost[static_cast<std::size_t>(g)] = 1;
    CHECK(experts_covered(ring, lost));
  }
  // Two neighbours lost: expert 1 was on GPUs 0 and 1 only.
  CHECK_FALSE(experts_covered(ring, std::vector<char>{1, 1, 0, 0}));
  // Both copies of an expert on one GPU cover nothing.
  Placement same(1, 2, 2, 2);
  auto s2 = same.mutable_phy2log(0);
  s2[0] = 0, s2[1] = 0, s2[2] = 1, s2[3] = 1;
  same.finalize();
  CHECK_FALSE(experts_covered(same, std::vector<char>{1, 0}));
  // No redundancy: every GPU's experts are its own.
  const Placement plain = contiguous_placement(3, 8, 4);
  CHECK_FALSE(experts_covered(plain, std::vector<char>{0, 0, 1, 0}));
  CHECK(experts_covered(plain, std::vector<char>{0, 0, 0, 0}));
}

TEST_CASE("spreading copies leaves no GPU with two copies of an expert and keeps every copy") {
  // EPLB with equal loads: experts 0..7 then their replicas, packed in order: GPU g gets expert g twice.
  const std::vector<double> weight(8, 1.0);
  Placement p =
      eplb_placement(weight, 1, 8, EplbSpec{.physical_slots = 16, .groups = 1, .nodes = 1, .gpus = 8});
  for (int g = 0; g < 8; ++g) {
    CHECK(p.phy2log(0)[static_cast<std::size_t>(2 * g)] == p.phy2log(0)[static_cast<std::size_t>(2 * g + 1)]);
  }
  spread_copies(p);
  std::vector<int> copies(8, 0);
  for (int g = 0; g < 8; ++g) {
    const int a = p.phy2log(0)[static_cast<std::size_t>(2 * g)];
    const int b = p.phy2log(0)[static_cast<std::size_t>(2 * g + 1)];
    CHECK(a != b);
    ++copies[static_cast<std::size_t>(a)];
    ++copies[static_cast<std::size_t>(b)];
  }
  for (const int c : copies) CHECK(c == 2);
  // Two copies of every expert on distinct GPUs: any one GPU lost is covered.
  for (int g = 0; g < 8; ++g) {
    std::vector<char> lost(8, 0);
    lost[static_cast<std::size_t>(g)] = 1;
    CHECK(experts_covered(p, lost));
  }
}

TEST_CASE("the failure schedule merges given failures with exponential draws at components over MTBF") {
  FaultsSpec f;
  FaultEvent node;
  node.kind = FaultKind::kNode;
  node.target = 1;
  node.at = Time{} + Duration::from_seconds(10.0);
  f.events.push_back(node);
  f.gpu_mtbf_s = 3600.0 * 1000;  // 1000 h per GPU; 64 GPUs: one every 1000/64 h = 56,250 s
  const RandomStreams streams(3);
  FaultSchedule a(f, 64, 8, streams);
  FaultSchedule b(f, 64, 8, streams);
  const double expected_gap_s = f.gpu_mtbf_s / 64;
  Time last;
  double gaps = 0;
  int n = 0;
  bool node_seen = false;
  while (auto e = a.next()) {
    const auto e2 = b.next();
    REQUIRE(e2);
    CHECK(e->at == e2->at);  // the same seed, the same failures
    CHECK(e->target == e2->target);
    CHECK(e->at >= last);
    if (e->kind == FaultKind::kNode) {
      node_seen = true;
      CHECK(e->target == 1);
      continue;
    }
    CHECK(e->target >= 0);
    CHECK(e->target < 64);
    gaps += (e->at - last).seconds();
    last = e->at;
    ++n;
  }
  CHECK(node_seen);
  // Draws stop at the clock's 1e6 s: about 1e6 / 56,250 = 17.8 failures; their mean gap is the
  // exponential's mean within a few standard errors (sd = mean / sqrt(n)).
  REQUIRE(n >= 5);
  const double mean = gaps / n;
  CHECK(std::abs(mean - expected_gap_s) < 4 * expected_gap_s / std::sqrt(n));
}

namespace {

// The toy MoE (toy_moe.h: two layers of 32 experts, top-2) at EP32 over four nodes of eight H100,
// data-parallel attention over the 32 GPUs, with `redundant` EPLB slots per GPU; GPU 5 fails at 3 s;
// Poisson arrivals for 12 s. The reload comes from NVMe with 4 s + 1 s of fixed costs after a 2 s detection.
Json ep32(int redundant, const std::string& in_flight, const std::string& recovery = "reshard") {
  Json j = toy_run(ToyRun{.name = "toy-ep32-faults", .nodes = 4, .ep = 32, .rate_per_s = 200});
  j["sla"] = Json{{"ttft_ms", 2000}, {"tpot_ms", 100}};
  j["faults"] = Json::parse(R"({"events": [{"at_s": 3, "gpu": 5}], "detect_s": 2, "weights_from": "nvme",
                                "engine_start_s": 4, "cuda_graph_capture_s": 1})");
  j["faults"]["in_flight"] = in_flight;
  j["faults"]["recovery"] = recovery;
  // With redundant slots the copies are spread (spread_copies) so that they cover a lost GPU.
  if (redundant > 0) {
    j["experts"] = Json{{"placement", "eplb"}, {"redundant_slots_per_gpu", redundant}};
    j["faults"]["spread_copies"] = true;
  }
  return j;
}

struct Spans final : SimulationObserver {
  std::vector<InstanceSpan> spans;
  void on_step(const StepRecord&) override {}
  void on_request(const RequestRecord&) override {}
  void on_instance(const InstanceSpan& s) override { spans.push_back(s); }
};

// The weights of one GPU of the instance from NVMe: the eight GPUs of a node read from its one array in
// turn (loader.h; operations_test derives the same), each behind the NVMe and host-link latencies.
double nvme_reload_s(const ScenarioSpec& s) {
  const double bytes = plan_memory(s).weights_per_gpu.total();
  const LoaderSpec& drives = s.experts.tiers.loader;
  REQUIRE(drives.gpus_per_nvme_array == 8);
  return 8 * bytes / (drives.nvme_drive_bytes_per_s * drives.nvme_drives) + drives.nvme_latency.seconds() +
         s.cluster.fabric.host_link_latency.seconds();
}

void check_conserved(const Report& r) {
  CHECK(r.requests_finished + r.faults.requests_failed + r.requests_dropped + r.requests_unfinished ==
        r.requests_arrived);
  CHECK(r.requests_unfinished == 0);  // no drain limit: every request is out at the end
}

}  // namespace

TEST_CASE("one GPU lost in an EP32 group with one redundant slot per GPU: the run goes on without a reload") {
  const LoadedScenario sc = parse_scenario(ep32(1, "recompute"), "");
  const ScenarioSpec& s = sc.spec;
  // The placement the run builds (uniform popularity): EPLB over 64 slots. Whether it covers GPU 5 is
  // decided here from the placement, independently of the run.
  const std::vector<double> weight(static_cast<std::size_t>(2 * 32), 1.0);
  Placement p =
      eplb_placement(weight, 2, 32, EplbSpec{.physical_slots = 64, .groups = 1, .nodes = 4, .gpus = 32});
  std::vector<char> lost(32, 0);
  lost[5] = 1;
  // EPLB alone packs both copies of each expert on one GPU (equal loads, lowest index first): no cover.
  CHECK_FALSE(experts_covered(p, lost));
  spread_copies(p);
  REQUIRE(experts_covered(p, lost));
  const RooflineCostModel gpu(s.cluster.gpu);
  Spans t;
  const Report r = simulate(s, gpu, &t);
  REQUIRE(r.faults.enabled);
  CHECK(r.faults.failures == 1);
  CHECK(r.faults.continued == 1);
  CHECK(r.faults.restarts == 0);
  CHECK(r.faults.recovery_max_s == 0);
  for (const InstanceSpan& sp : t.spans) CHECK(std::string(sp.what).find("reload") == std::string::npos);
  // Capacity reduced: one attention rank of 32 out from 3 s to the end.
  const double expected = 1.0 - (r.sim_end_s - 3.0) / 32.0 / r.sim_end_s;
  CHECK(r.faults.availability == Approx(expected).epsilon(1e-9));
  // The rank's requests were recomputed elsewhere: as many as it held.
  REQUIRE(r.faults.records.size() == 1);
  CHECK(r.faults.records[0].outcome == "continued");
  CHECK(r.faults.requests_recomputed == r.faults.records[0].requests_hit);
  CHECK(r.faults.requests_failed == 0);
  check_conserved(r);
  CHECK(r.requests_finished == r.requests_arrived);
}

TEST_CASE("one GPU lost in an EP32 group without redundant experts: it re-shards after the weights' reload") {
  const LoadedScenario sc = parse_scenario(ep32(0, "recompute"), "");
  const ScenarioSpec& s = sc.spec;
  const RooflineCostModel gpu(s.cluster.gpu);
  Spans t;
  const Report r = simulate(s, gpu, &t);
  REQUIRE(r.faults.records.size() == 1);
  const FaultRecord& e = r.faults.records[0];
  CHECK(e.outcome == "restarted");
  CHECK(r.faults.restarts == 1);
  // Downtime: detection + weights over NVMe + engine start and CUDA graphs.
  const double downtime = 2.0 + nvme_reload_s(s) + 4.0 + 1.0;
  CHECK(e.recovered_s - e.at_s == Approx(downtime).epsilon(1e-9));
  CHECK(r.faults.recovery_max_s == Approx(downtime).epsilon(1e-9));
  bool reload_span = false;
  for (const InstanceSpan& sp : t.spans) {
    if (std::string(sp.what) != "failure: reload weights") continue;
    reload_span = true;
    CHECK(sp.end_s - sp.start_s == Approx(nvme_reload_s(s)).epsilon(1e-9));
  }
  CHECK(reload_span);
  // The whole instance was down for the downtime, then 31 of 32 ranks served (re-sharded without GPU 5).
  const double out_rank_s = 32 * downtime + (r.sim_end_s - 3.0 - downtime);
  CHECK(r.faults.availability == Approx(1.0 - out_rank_s / (32 * r.sim_end_s)).epsilon(1e-9));
  CHECK(r.faults.requests_recomputed == e.requests_hit);
  CHECK(e.requests_hit > 0);
  check_conserved(r);
  CHECK(r.requests_finished == r.requests_arrived);
}

TEST_CASE("with replacement the group waits for spare GPUs, reloads and comes back whole") {
  Json j = ep32(0, "recompute", "replace");
  j["faults"]["replacement_s"] = 1.5;
  const LoadedScenario sc = parse_scenario(j, "");
  const RooflineCostModel gpu(sc.spec.cluster.gpu);
  const Report r = simulate(sc.spec, gpu);
  REQUIRE(r.faults.records.size() == 1);
  const double downtime = 2.0 + 1.5 + nvme_reload_s(sc.spec) + 5.0;
  CHECK(r.faults.records[0].recovered_s - 3.0 == Approx(downtime).epsilon(1e-9));
  CHECK(r.faults.availability == Approx(1.0 - downtime / r.sim_end_s).epsilon(1e-9));
  check_conserved(r);
}

TEST_CASE("failed in-flight requests are counted, not recomputed, and the balance holds") {
  const LoadedScenario sc = parse_scenario(ep32(0, "fail"), "");
  const RooflineCostModel gpu(sc.spec.cluster.gpu);
  const Report r = simulate(sc.spec, gpu);
  REQUIRE(r.faults.records.size() == 1);
  CHECK(r.faults.requests_failed == r.faults.records[0].requests_hit);
  CHECK(r.faults.requests_failed > 0);
  CHECK(r.faults.requests_recomputed == 0);
  CHECK(r.faults.tokens_lost > 0);
  check_conserved(r);
  CHECK(r.requests_finished + r.faults.requests_failed == r.requests_arrived);
  // Deterministic: the same scenario, the same run.
  const Report again = simulate(sc.spec, gpu);
  CHECK(again.fingerprint == r.fingerprint);
}

TEST_CASE("a degraded NIC slows the All-to-All across nodes and nothing inside one node") {
  const auto run = [](int nodes, bool degraded) {
    // Two layers of 16 experts, top-4, 2,048 wide, at EP8 over `nodes` nodes for 4 s.
    Json j = toy_run(ToyRun{.name = "toy-link",
                            .experts = 16,
                            .top_k = 4,
                            .hidden = 2048,
                            .gpus_per_node = 4,
                            .rate_per_s = 100,
                            .prompt = 256,
                            .output = 16,
                            .seed = 3,
                            .duration_s = 4});
    j["cluster"]["nodes"] = nodes;
    if (nodes == 1) j["cluster"]["gpus_per_node"] = 8;
    const double factor = degraded ? 0.25 : 1.0;
    j["faults"] = Json{
        {"events", Json::array({Json{
                       {"at_s", 0}, {"link_node", 0}, {"bandwidth_factor", factor}, {"duration_s", 1000}}})}};
    const LoadedScenario sc = parse_scenario(j, "");
    const RooflineCostModel gpu(sc.spec.cluster.gpu);
    return simulate(sc.spec, gpu);
  };
  const Report across = run(2, false);
  const Report slow = run(2, true);
  const auto dispatch = [](const Report& r) { return r.mean_step_s * r.share(StepPart::kDispatch); };
  CHECK(dispatch(slow) > dispatch(across));
  // Inside one node the NIC carries nothing: the same run.
  CHECK(run(1, true).fingerprint == run(1, false).fingerprint);
}

TEST_CASE("an alert says when the measured window does not hold a failure and its recovery") {
  const auto alert_of = [](const Report& r) {
    for (const std::string& a : r.alerts)
      if (a.find("outside the measured window") != std::string::npos) return true;
    return false;
  };
  for (const double warmup : {0.0, 5.0}) {  // the GPU fails at 3 s
    Json j = ep32(0, "recompute");
    j["run"]["warmup_s"] = warmup;
    j["run"]["duration_s"] = 30;
    const LoadedScenario sc = parse_scenario(j, "");
    const RooflineCostModel gpu(sc.spec.cluster.gpu);
    const Report r = simulate(sc.spec, gpu);
    REQUIRE(r.faults.records.size() == 1);
    const FaultRecord& e = r.faults.records[0];
    INFO("warm-up " << warmup << ", window " << r.window_from_s << " to " << r.window_to_s << ", failure "
                    << e.at_s << " to " << e.recovered_s);
    const bool inside = e.at_s >= r.window_from_s && e.recovered_s <= r.window_to_s;
    CHECK(inside == (warmup == 0.0));
    CHECK(alert_of(r) == !inside);
  }
}

namespace {

// Per step: each expert-parallel rank's routed pairs (over the MoE layers), the step's tokens, whether it
// was decode only, its duration and expert part, and the rebalances it paid for.
struct RankSteps final : SimulationObserver {
  struct Step {
    double start_s;
    double duration_s;
    double experts_s;
    std::int64_t tokens;
    bool decode_only;
    int rebalances;
    std::vector<double> pairs;
  };
  std::vector<Step> steps;
  void on_step(const StepRecord& s) override {
    steps.push_back(Step{.start_s = s.start_s,
                         .duration_s = s.plan->total.seconds(),
                         .experts_s = s.plan->part(StepPart::kExperts).seconds(),
                         .tokens = s.plan->tokens,
                         .decode_only = s.prefill_tokens == 0,
                         .rebalances = s.plan->rebalances,
                         .pairs = std::vector<double>(s.rank_pairs.begin(), s.rank_pairs.end())});
  }
  void on_request(const RequestRecord&) override {}
};

std::string ops_faults_ep32() {
  std::string path = MOESIM_SOURCE_DIR;
  path += "/scenarios/reference/ops_faults_dsv3_ep32.json";
  return path;
}

// The EP32 reference (ops_faults_dsv3_ep32.json: DeepSeek-V3 over four HGX H100 nodes) with redundancy that
// covers a lost GPU: eight redundant slots per GPU and uniform popularity give every expert two copies
// (EPLB), spread over two GPUs (faults.spread_copies). GPU 13 fails at 6 s of a 12 s run. The load is a
// steady decode batch: 256 users in a closed loop with 16-token prompts and 1,000-token outputs (none ends
// before the arrivals stop at 12 s; the run then drains), so decode steps of 256 tokens recur on both sides
// of the loss. The placement is
// rebalanced every `rebalance_steps` steps.
Report covered_ep32(int rebalance_steps, RankSteps& steps) {
  const LoadedScenario sc = load_scenario(
      ops_faults_ep32(),
      {"experts.redundant_slots_per_gpu=8", "faults.spread_copies=true",
       R"(workload.expert_popularity={"kind": "uniform"})", R"(faults.events=[{"at_s": 6, "gpu": 13}])",
       "experts.rebalance.every_steps=" + std::to_string(rebalance_steps),
       R"(workload.arrival={"kind": "closed_loop", "users": 256, "think_time_s": 0})",
       R"(workload.prompt_tokens={"kind": "fixed", "tokens": 16})",
       R"(workload.output_tokens={"kind": "fixed", "tokens": 1000})", "run.duration_s=12", "run.warmup_s=0"});
  const RooflineCostModel gpu(sc.spec.cluster.gpu);
  Report r = simulate(sc.spec, gpu, &steps);
  REQUIRE(r.faults.records.size() == 1);
  REQUIRE(r.faults.records[0].outcome == "continued");
  return r;
}

// Every step planned after the loss sends GPU 13 nothing, and its 31 survivors' pairs add up to the step's
// tokens x top_k x MoE layers (each token picks top_k experts per layer: conservation of pairs); returns how
// many steps were checked.
int check_survivors_carry(const RankSteps& steps, const ScenarioSpec& s) {
  const double per_token = double(s.model.top_k) * s.model.moe_layers();
  int after = 0;
  bool before_had_pairs = false;
  for (const RankSteps::Step& st : steps.steps) {
    REQUIRE(st.pairs.size() == 32);
    if (st.start_s <= 6.0) {
      before_had_pairs = before_had_pairs || st.pairs[13] > 0;
      continue;
    }
    ++after;
    double sum = 0;
    for (const double p : st.pairs) sum += p;
    CHECK(st.pairs[13] == 0);
    CHECK(sum == double(st.tokens) * per_token);
  }
  CHECK(before_had_pairs);
  return after;
}

}  // namespace

TEST_CASE("with covered redundancy the surviving copies carry a lost GPU's pairs, and steps take no less") {
  RankSteps steps;
  const Report r = covered_ep32(1000000, steps);  // no rebalance in the run
  const ScenarioSpec s = load_scenario(ops_faults_ep32(), {}).spec;
  CHECK(check_survivors_carry(steps, s) > 100);
  // The same decode batch of 256 tokens before the loss (from 1 s, after the first prefills) and after it
  // (from 7 s, after the lost rank's users were recomputed): the survivors hold GPU 13's pairs, so the
  // slowest rank's expert time is higher and the step no shorter.
  double before[3] = {}, after[3] = {};  // steps, seconds, expert seconds
  for (const RankSteps::Step& st : steps.steps) {
    const bool around_loss = st.start_s > 6.0 && st.start_s < 7.0;
    if (!st.decode_only || st.tokens != 256 || st.start_s < 1.0 || around_loss || st.start_s >= 12.0)
      continue;
    double* side = st.start_s <= 6.0 ? before : after;
    side[0] += 1;
    side[1] += st.duration_s;
    side[2] += st.experts_s;
  }
  REQUIRE(before[0] >= 50);
  REQUIRE(after[0] >= 50);
  INFO("mean step " << before[1] / before[0] << " s before, " << after[1] / after[0] << " s after; experts "
                    << before[2] / before[0] << " s, " << after[2] / after[0] << " s");
  CHECK(after[1] / after[0] >= before[1] / before[0]);
  CHECK(after[2] / after[0] > before[2] / before[0]);
  check_conserved(r);
}

TEST_CASE("a rebalance after a covered loss places copies on the survivors only") {
  RankSteps steps;
  (void)covered_ep32(250, steps);
  const ScenarioSpec s = load_scenario(ops_faults_ep32(), {}).spec;
  int rebalances_before = 0;
  int rebalances_after = 0;
  for (const RankSteps::Step& st : steps.steps)
    (st.start_s <= 6.0 ? rebalances_before : rebalances_after) += st.rebalances;
  REQUIRE(rebalances_before == 0);  // the initial placement covers the loss
  REQUIRE(rebalances_after >= 1);
  CHECK(check_survivors_carry(steps, s) > 100);
}
