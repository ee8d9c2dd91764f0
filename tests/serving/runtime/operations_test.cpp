// Operations in the loop: a scale-up costs the weight bytes over the named path's bandwidth plus the fixed
// costs (computed here from the model's bytes and the catalog's bandwidths), the cluster starts instances
// no sooner than that and shows it on the timeline, requests are conserved, and the router sees only the
// instances that take requests.
#include "sim/serving/runtime/operations.h"

#include <catch2/catch.hpp>
#include <map>
#include <string>
#include <vector>

#include "hwmodels/loader.h"
#include "hwmodels/roofline_cost_model.h"
#include "sim/scenario/scenario_parser.h"
#include "sim/serving/runtime/serving_simulation.h"
#include "sim/serving/spec/memory_plan.h"

using namespace moesim;

namespace {

std::string reference(const std::string& name) {
  return std::string(MOESIM_SOURCE_DIR) + "/scenarios/reference/" + name;
}

// DeepSeek-V3 FP8 on one HGX H200 board, EP8, brought up from `from` with 20 s + 10 s of fixed costs.
ScenarioSpec dsv3_ep8(const std::string& from) {
  return load_scenario(reference("topology_dsv3_1x8xh200_ep8.json"),
                       {"deployment.autoscale={\"weights_from\": \"" + from +
                        "\", \"engine_start_s\": 20, \"cuda_graph_capture_s\": 10,"
                        " \"pools\": [{\"capacity_req_per_s\": 5}]}"})
      .spec;
}

}  // namespace

TEST_CASE("a scale-up from NVMe takes the board's weight bytes over one drive array plus the fixed costs") {
  const ScenarioSpec s = dsv3_ep8("nvme");
  const Fabric fabric(s.cluster.fabric);
  const double bytes = plan_memory(s).weights_per_gpu.total();  // per GPU
  const LoaderSpec& drives = s.experts.tiers.loader;
  // The 8 GPUs read from the node's one array (gpus_per_nvme_array 8), one after another at the array's
  // bandwidth; each copy streams behind its read over the host link (faster than the array), so the last
  // GPU is done 8 x bytes / array bandwidth after the start, plus the NVMe and host-link latencies.
  REQUIRE(drives.gpus_per_nvme_array == 8);
  const double array_bytes_per_s = drives.nvme_drive_bytes_per_s * drives.nvme_drives;
  REQUIRE(array_bytes_per_s < s.cluster.fabric.host_link_bytes_per_s);
  const double expected = 8 * bytes / array_bytes_per_s + drives.nvme_latency.seconds() +
                          s.cluster.fabric.host_link_latency.seconds();
  const ScaleUpCost c = scale_up_cost(s, fabric, bytes, 0, 8, -1);
  CHECK(c.weights.seconds() == Approx(expected).epsilon(1e-9));
  CHECK(c.fixed.seconds() == 30);
  CHECK(c.total().seconds() == Approx(expected + 30).epsilon(1e-9));
  // The board holds at least DeepSeek-V3's 671 GB of FP8 weights (more: attention and dense layers are
  // replicated per GPU under data-parallel attention), all read from one array.
  CHECK(c.weights.seconds() > 671e9 / array_bytes_per_s);
}

TEST_CASE("a scale-up from host DRAM takes the weights of the GPUs sharing a host link over its bandwidth") {
  const ScenarioSpec s = dsv3_ep8("host_dram");
  const Fabric fabric(s.cluster.fabric);
  const double bytes = plan_memory(s).weights_per_gpu.total();
  const FabricSpec& f = s.cluster.fabric;
  const int sharing = host_link_of(f).gpus_per_link;  // GPUs behind one PCIe switch
  const double expected = sharing * bytes / f.host_link_bytes_per_s + f.host_link_latency.seconds();
  const ScaleUpCost c = scale_up_cost(s, fabric, bytes, 0, 8, -1);
  CHECK(c.weights.seconds() == Approx(expected).epsilon(1e-9));
  CHECK(c.total().seconds() == Approx(expected + 30).epsilon(1e-9));
}

TEST_CASE("a scale-up from a peer over NVLink takes the weights over one GPU's NVLink bandwidth") {
  const ScenarioSpec s = dsv3_ep8("peer_nvlink");
  const Fabric fabric(s.cluster.fabric);
  const double bytes = plan_memory(s).weights_per_gpu.total();
  const FabricSpec& f = s.cluster.fabric;
  // Every GPU receives from one neighbour at the achieved bulk-copy rate; the microseconds of latency
  // and copy overhead are below the tolerance of a load of seconds.
  const double expected = bytes / (f.nvlink_bytes_per_s * f.efficiency);
  const ScaleUpCost c = scale_up_cost(s, fabric, bytes, 0, 8, -1);
  CHECK(c.weights.seconds() == Approx(expected).epsilon(1e-4));
  CHECK(c.weights.seconds() <
        scale_up_cost(dsv3_ep8("host_dram"), fabric, bytes, 0, 8, -1).weights.seconds());
}

TEST_CASE("the accepting router routes among open groups with the pool's router and returns full indices") {
  AcceptingRouter r(std::make_unique<RoundRobinRouter>());
  std::vector<GroupLoad> g(5);
  g[0].accepting = g[2].accepting = false;
  std::vector<int> picks;
  for (int i = 0; i < 4; ++i) picks.push_back(r.route(g));
  CHECK(picks == std::vector<int>{1, 3, 4, 1});
  AcceptingRouter least(std::make_unique<LeastLoadedRouter>());
  g[0].running = 0;  // the least loaded of all, but not accepting
  g[1].running = g[3].running = 5;
  g[4].running = 2;
  CHECK(least.route(g) == 4);
}

namespace {

// A toy MoE (two layers, four experts) on four GPUs, one instance per GPU, under a planner that starts
// with one instance and sizes for 5 req/s per instance: 15 req/s of Poisson arrivals for 20 s.
Json toy_autoscaled(const std::string& predictor) {
  return Json::parse(R"({
    "name": "toy-autoscale",
    "model": {"num_layers": 2, "num_dense_layers": 0, "hidden": 1024, "vocab": 1000, "attention": "gqa",
              "num_heads": 8, "num_kv_heads": 8, "head_dim": 128, "routed_experts": 4, "shared_experts": 0,
              "top_k": 2, "expert_inter": 512},
    "precision": {"weights": "bf16", "kv_cache": "bf16"},
    "cluster": {"gpu": "h100-sxm", "nodes": 1, "gpus_per_node": 4},
    "deployment": {"ep_size": 1, "max_batch_size": 8,
                   "autoscale": {"interval_s": 2, "predictor": ")" +
                     predictor + R"(", "weights_from": "nvme",
                                 "engine_start_s": 0.5, "cuda_graph_capture_s": 0.25,
                                 "pools": [{"min_instances": 1, "max_instances": 4, "capacity_req_per_s": 5}]}},
    "workload": {"arrival": {"kind": "poisson", "rate_per_s": 15},
                 "prompt_tokens": {"kind": "fixed", "tokens": 256},
                 "output_tokens": {"kind": "fixed", "tokens": 32}},
    "sla": {"ttft_ms": 2000, "tpot_ms": 100},
    "run": {"seed": 7, "duration_s": 20}
  })");
}

struct Timeline final : SimulationObserver {
  std::map<int, double> first_step_s;  // per replica
  std::vector<InstanceSpan> spans;
  void on_step(const StepRecord& s) override { first_step_s.try_emplace(s.replica, s.start_s); }
  void on_request(const RequestRecord&) override {}
  void on_instance(const InstanceSpan& s) override { spans.push_back(s); }
};

}  // namespace

TEST_CASE("instances started by the planner take requests only after their weights and fixed costs") {
  const LoadedScenario sc = parse_scenario(toy_autoscaled("last"), "");
  const ScenarioSpec& s = sc.spec;
  const RooflineCostModel gpu(s.cluster.gpu);
  Timeline t;
  const Report r = simulate(s, gpu, &t);
  // One GPU per instance on the node's array: bytes / array bandwidth + NVMe and host-link latencies.
  const double bytes = plan_memory(s).weights_per_gpu.total();
  const LoaderSpec& drives = s.experts.tiers.loader;
  const double weights_s = bytes / (drives.nvme_drive_bytes_per_s * drives.nvme_drives) +
                           drives.nvme_latency.seconds() + s.cluster.fabric.host_link_latency.seconds();
  int loads = 0;
  std::map<int, double> first_ready_s;
  for (const InstanceSpan& sp : t.spans) {
    const std::string what = sp.what;
    if (what == "load weights") {
      ++loads;
      CHECK(sp.end_s - sp.start_s == Approx(weights_s).margin(1e-9));
      first_ready_s.try_emplace(sp.replica, sp.end_s + 0.75);
    } else if (what == "start") {
      CHECK(sp.end_s - sp.start_s == Approx(0.75).margin(1e-9));
    }
  }
  // 15 req/s over 5 per instance: the first decision (at 2 s) asks for about three instances.
  CHECK(loads >= 2);
  CHECK(r.operations.scale_ups == loads);
  REQUIRE(r.operations.enabled);
  CHECK(r.operations.scale_up_s.at(0) == Approx(weights_s + 0.75).margin(1e-9));
  // Replicas 1..3 start idle: none steps before its first load and start are over.
  CHECK(t.first_step_s.at(0) < 2.0);
  int checked = 0;
  for (const auto& [replica, first_s] : t.first_step_s) {
    if (replica == 0) continue;
    REQUIRE(first_ready_s.count(replica) == 1);
    CHECK(first_s >= first_ready_s.at(replica) - 1e-9);
    ++checked;
  }
  CHECK(checked >= 1);  // the least-loaded router fills the first instances first
  // Requests are conserved: every arrival finished (no drain limit, nothing too long).
  CHECK(r.requests_finished + r.requests_dropped == r.requests_arrived);
  CHECK(r.requests_unfinished == 0);
  // Fewer GPU-hours than holding all four GPUs all along, more than holding one.
  CHECK(r.operations.gpu_hours < r.operations.gpu_hours_static);
  CHECK(r.operations.gpu_hours > r.sim_end_s / 3600.0);
  // The rows cover the run, interval after interval, and count every finished request once.
  const auto& rows = r.operations.intervals;
  REQUIRE(!rows.empty());
  std::int64_t finished = 0;
  for (std::size_t i = 0; i < rows.size(); ++i) {
    finished += rows[i].finished;
    if (i > 0) CHECK(rows[i].start_s == rows[i - 1].end_s);
  }
  CHECK(finished == r.requests_finished);
  CHECK(rows.back().end_s == Approx(r.sim_end_s));
}

TEST_CASE("a run under the planner is deterministic and every predictor conserves requests") {
  for (const char* predictor : {"last", "moving_average", "holt"}) {
    const LoadedScenario sc = parse_scenario(toy_autoscaled(predictor), "");
    const RooflineCostModel gpu(sc.spec.cluster.gpu);
    const Report a = simulate(sc.spec, gpu);
    const Report b = simulate(sc.spec, gpu);
    CHECK(a.fingerprint == b.fingerprint);
    CHECK(a.operations.gpu_hours == b.operations.gpu_hours);
    CHECK(a.requests_finished == a.requests_arrived);
  }
}

TEST_CASE("under disaggregation each pool is charged its own part of the TTFT, a colocated pool the whole") {
  const ScenarioSpec s = dsv3_ep8("nvme");  // SLA percentile 99 or its default: one request per pool here
  OperationsLog log(s, {PoolRole::kPrefill, PoolRole::kDecode, PoolRole::kBoth});
  Request r;
  r.arrival = Time::at(Duration::from_seconds(10));
  r.prefill_done = Time::at(Duration::from_seconds(11.5));  // 1.5 s in the prefill pool (queue and prefill)
  r.first_token = Time::at(Duration::from_seconds(14.5));   // 3 s more: KV transfer, decode queue, first step
  r.last_token = Time::at(Duration::from_seconds(15.5));
  r.output = 11;
  log.on_finished(r, 0, 1);
  // A histogram reads one sample back within its bucket's resolution.
  CHECK(log.pool_ttft_s(0) == Approx(1.5).epsilon(0.02));
  CHECK(log.pool_ttft_s(1) == Approx(3.0).epsilon(0.02));
  CHECK(log.pool_tpot_s(1) == Approx(0.1).epsilon(0.02));  // 1 s over 10 tokens
  log.on_finished(r, 2, 2);
  CHECK(log.pool_ttft_s(2) == Approx(4.5).epsilon(0.02));
}

TEST_CASE("an instance restarting after a failure counts as loading for the planner, not as serving") {
  // Two instances of one GPU, the planner asking for its minimum of two (100 req/s each against 15); GPU 0
  // fails at 3 s and is back after 2 s of detection, its weights and 0.75 s of fixed costs.
  Json j = toy_autoscaled("last");
  j["deployment"]["autoscale"]["pools"][0]["min_instances"] = 2;
  j["deployment"]["autoscale"]["pools"][0]["initial_instances"] = 2;
  j["deployment"]["autoscale"]["pools"][0]["capacity_req_per_s"] = 100;
  j["faults"] = Json::parse(R"({"events": [{"at_s": 3, "gpu": 0}], "detect_s": 2, "weights_from": "nvme",
                                "engine_start_s": 0.5, "cuda_graph_capture_s": 0.25})");
  const LoadedScenario sc = parse_scenario(j, "");
  const RooflineCostModel gpu(sc.spec.cluster.gpu);
  const Report r = simulate(sc.spec, gpu);
  REQUIRE(r.faults.records.size() == 1);
  const double up_s = r.faults.records[0].recovered_s;
  REQUIRE(up_s > 4.0);
  int checked = 0;
  for (const OperationsRow& row : r.operations.intervals) {
    const OperationsPoolRow& p = row.pools[0];
    // Observed at the interval's end: down from 3 s until up_s.
    const bool down = row.end_s > 3.0 && row.end_s < up_s;
    CHECK(p.active + p.loading == 2);
    CHECK(p.active == (down ? 1 : 2));
    checked += down ? 1 : 0;
  }
  CHECK(checked >= 1);
}
