// One replica built by hand (its engine, request table, batch policy, recorder and a host that records what
// it is told): a request admitted and stepped takes one step per prompt chunk and one per further output
// token, back to back, and finishes at the end of the last; several requests share the steps.
#include "sim/serving/runtime/replica.h"

#include <catch2/catch.hpp>
#include <cstdint>
#include <memory>
#include <utility>
#include <vector>

#include "hwmodels/engine_profile.h"
#include "hwmodels/roofline_cost_model.h"
#include "sim/engine/simulator.h"
#include "sim/scenario/scenario_parser.h"
#include "sim/serving/experts/expert_loop.h"
#include "sim/serving/runtime/batch_policy.h"
#include "sim/serving/runtime/metrics_recorder.h"
#include "sim/serving/spec/memory_plan.h"
#include "sim/serving/step/serving_models.h"
#include "tests/support/toy_moe.h"

using namespace moesim;

namespace {

// The toy MoE (toy_moe.h) with four experts, top-4 (routing draws nothing), on one H100, one attention group,
// chunks of `budget` tokens.
ScenarioSpec one_gpu_with(std::int64_t budget, const Json& deployment_keys) {
  Json j = Json::parse(R"({
    "name": "tiny-replica",
    "precision": {"weights": "bf16", "kv_cache": "bf16"},
    "cluster": {"gpu": "h100-sxm", "nodes": 1, "gpus_per_node": 1},
    "deployment": {"ep_size": 1, "max_batch_size": 8},
    "workload": {"arrival": {"kind": "poisson", "rate_per_s": 1},
                 "prompt_tokens": {"kind": "fixed", "tokens": 16},
                 "output_tokens": {"kind": "fixed", "tokens": 4}},
    "run": {"seed": 1, "requests": 1}
  })");
  j["model"] = moesim_test::toy_moe(4, 4);
  j["deployment"]["max_batched_tokens"] = budget;
  j["deployment"].update(deployment_keys);
  return parse_scenario(j, "").spec;
}

ScenarioSpec one_gpu(std::int64_t budget) { return one_gpu_with(budget, Json::object()); }

// The toy MoE (toy_moe.h) with eight experts, top-2, over two GPUs (EP2, one attention group each), under
// EPLB with one redundant slot per GPU, rebalanced every `every_steps` steps.
ScenarioSpec eplb_pair(int every_steps) {
  Json j = moesim_test::toy_run(moesim_test::ToyRun{.experts = 8, .top_k = 2, .gpus_per_node = 2, .ep = 2});
  j["experts"] = Json{{"placement", "eplb"},
                      {"redundant_slots_per_gpu", 1},
                      {"rebalance", Json{{"every_steps", every_steps}}}};
  return parse_scenario(j, "").spec;
}

// Each step's start and length and its rebalances as the replica reports them.
struct Steps final : SimulationObserver {
  std::vector<double> start_s, length_s;
  std::vector<int> rebalances;
  std::vector<std::int64_t> prefill_tokens;
  std::vector<double> ttft_s;  // by request id
  void on_step(const StepRecord& s) override {
    start_s.push_back(s.start_s);
    length_s.push_back(s.plan->total.seconds());
    rebalances.push_back(s.plan->rebalances);
    prefill_tokens.push_back(s.prefill_tokens);
  }
  void on_request(const RequestRecord& r) override {
    if (ttft_s.size() <= static_cast<std::size_t>(r.id)) ttft_s.resize(static_cast<std::size_t>(r.id) + 1);
    ttft_s[static_cast<std::size_t>(r.id)] = r.ttft_s;
  }
};

// What the replica tells the cluster: the requests that finished, their tokens and when.
struct Host final : ReplicaHost {
  std::vector<std::int64_t> generated;
  std::vector<double> finished_s;
  void on_request_finished(const Request& r, Time now) override {
    generated.push_back(r.generated);
    finished_s.push_back(now.seconds());
  }
  void on_step_done() override {}
  void on_prefilled(RequestIdx, Time) override {}
  void on_migrated_out(RequestIdx, Time) override {}
};

// A replica wired as the cluster wires one (Cluster::add_pool), with the parts it needs beside it.
struct Bench {
  explicit Bench(std::int64_t budget) : Bench(one_gpu(budget)) {}
  explicit Bench(ScenarioSpec spec)
      : s(std::move(spec)),
        gpu(s.cluster.gpu),
        streams(s.run.seed),
        models(s, streams),
        policy(make_batch_policy(s.deployment, nullptr)),
        metrics(s, &steps) {
    const MemoryPlan memory = plan_memory(s);
    replica = std::make_unique<Replica>(0,
                                        ReplicaContext{.s = s,
                                                       .sim = sim,
                                                       .requests = requests,
                                                       .models = models,
                                                       .policy = *policy,
                                                       .metrics = metrics,
                                                       .host = host,
                                                       .streams = streams},
                                        models.make_expert_loop(s), gpu, streams.stream("routing", 0),
                                        memory.kv_blocks_per_group);
  }
  // A request of `prompt` and `output` tokens queued on group 0 now.
  void admit(std::int64_t prompt, std::int64_t output) {
    const RequestIdx idx = requests.add();
    Request& r = requests[idx];
    r.id = static_cast<std::int64_t>(idx);
    r.arrival = sim.now();
    r.prompt = prompt;
    r.output = output;
    r.target = prompt;
    metrics.on_arrival(sim.now());
    metrics.on_admitted(r);
    replica->enqueue(0, idx);
  }

  ScenarioSpec s;
  RooflineCostModel gpu;
  Simulator sim;
  RandomStreams streams;
  ServingModels models;
  RequestTable requests;
  std::unique_ptr<BatchPolicy> policy;
  Steps steps;
  MetricsRecorder metrics;
  Host host;
  std::unique_ptr<Replica> replica;
};

// one_gpu under TensorRT-LLM's profile, its overlap scheduler on or off (deployment.overlap_scheduler).
ScenarioSpec trtllm_one_gpu(bool overlap) {
  return one_gpu_with(256, {{"engine", "trtllm"}, {"overlap_scheduler", overlap}});
}

// Request A (a 16-token prompt, `a_output` tokens) queued at 0, then B (16 and 4) queued halfway through
// A's second step (its first decode step): the steps and both requests' TTFT.
struct TwoArrivals {
  Steps steps;
  double b_queued_s = 0;
};
TwoArrivals a_then_b(bool overlap, std::int64_t a_output) {
  Bench probe(trtllm_one_gpu(overlap));
  probe.admit(16, a_output);
  probe.sim.run();
  REQUIRE(probe.steps.start_s.size() >= 2);
  const double mid_s = probe.steps.start_s[1] + probe.steps.length_s[1] / 2;
  Bench b(trtllm_one_gpu(overlap));
  b.admit(16, a_output);
  b.sim.run_until(Time::at(Duration::from_seconds(mid_s)));
  b.admit(16, 4);
  b.sim.run();
  return {.steps = b.steps, .b_queued_s = mid_s};
}

double sum(const std::vector<double>& v) {
  double s = 0;
  for (const double x : v) s += x;
  return s;
}

}  // namespace

TEST_CASE("a request whose prompt fits one step finishes after one step per output token") {
  const std::int64_t prompt = 200;
  const std::int64_t output = 7;
  Bench b(256);
  b.admit(prompt, output);
  b.sim.run();
  // The prefill step samples the first token, each decode step one more.
  REQUIRE(b.steps.length_s.size() == static_cast<std::size_t>(output));
  REQUIRE(b.host.finished_s.size() == 1);
  CHECK(b.host.generated[0] == output);
  // Back to back from time 0: each step starts when the previous ends, and the request is out at the end
  // of the last.
  for (std::size_t i = 1; i < b.steps.start_s.size(); ++i)
    CHECK(b.steps.start_s[i] == Approx(b.steps.start_s[i - 1] + b.steps.length_s[i - 1]).epsilon(1e-12));
  CHECK(b.steps.start_s[0] == 0);
  CHECK(b.host.finished_s[0] == Approx(sum(b.steps.length_s)).epsilon(1e-12));
  CHECK(b.replica->in_system() == 0);
  CHECK(b.metrics.finished == 1);
  CHECK(b.metrics.output_tokens == output);
}

TEST_CASE("a prompt longer than the step budget is prefilled in chunks before its output steps") {
  const std::int64_t budget = 128;
  const std::int64_t prompt = 1000;
  const std::int64_t output = 5;
  Bench b(budget);
  b.admit(prompt, output);
  b.sim.run();
  // ceil(1000 / 128) = 8 chunks, the last sampling the first token; then output - 1 decode steps.
  const std::int64_t chunks = (prompt + budget - 1) / budget;
  CHECK(b.steps.length_s.size() == static_cast<std::size_t>(chunks + output - 1));
  REQUIRE(b.host.finished_s.size() == 1);
  CHECK(b.host.generated[0] == output);
  CHECK(b.host.finished_s[0] == Approx(sum(b.steps.length_s)).epsilon(1e-12));
}

TEST_CASE("requests admitted together share their steps: the longest answer sets the count") {
  // Three prompts of 50 tokens fit one step of 256; then one step per token until the longest is done.
  Bench b(256);
  const std::vector<std::int64_t> outputs = {3, 9, 5};
  for (const std::int64_t o : outputs) b.admit(50, o);
  b.sim.run();
  CHECK(b.steps.length_s.size() == 9);
  REQUIRE(b.host.finished_s.size() == outputs.size());
  // They finish in the order of their answers' lengths, the last at the end of the last step.
  CHECK(b.host.generated == std::vector<std::int64_t>{3, 5, 9});
  CHECK(b.host.finished_s.back() == Approx(sum(b.steps.length_s)).epsilon(1e-12));
  CHECK(b.metrics.output_tokens == 3 + 9 + 5);
}

TEST_CASE("a replica owns its expert loop, which publishes a new placement version at each rebalance") {
  // Without a mechanism the replica has no loop.
  CHECK(Bench(256).replica->expert_loop() == nullptr);
  // One request: a 512-token prompt in one step, then one step per further token (the first test): 64 steps.
  // The loop counts the replica's steps and rebalances at every `every`-th: floor(64 / every) of them, at
  // steps every, 2 every, ... (1-based); each moves the published version by one.
  const int every = 5;
  const std::int64_t output = 64;
  Bench b(eplb_pair(every));
  const ExpertLoop* loop = b.replica->expert_loop();
  REQUIRE(loop != nullptr);
  CHECK(loop->placement_version() == 0);
  b.admit(512, output);
  b.sim.run();
  REQUIRE(b.steps.rebalances.size() == static_cast<std::size_t>(output));
  for (std::size_t i = 0; i < b.steps.rebalances.size(); ++i) {
    INFO("step " << i + 1);
    CHECK(b.steps.rebalances[i] == ((i + 1) % every == 0 ? 1 : 0));
  }
  CHECK(loop->placement_version() == static_cast<std::uint64_t>(output / every));
  // The planner follows the published placement: the same experts in the same slots of every layer, where
  // the rebalances moved them away from the first placement (a fresh loop's).
  const auto slots = [](const Placement& p) {
    std::vector<int> out;
    for (int l = 0; l < p.layers(); ++l) out.insert(out.end(), p.phy2log(l).begin(), p.phy2log(l).end());
    return out;
  };
  CHECK(slots(loop->placement()) != slots(b.models.make_expert_loop(b.s)->placement()));
  CHECK(slots(b.replica->planner().placement()) == slots(loop->placement()));
}

TEST_CASE(
    "under TensorRT-LLM's overlap scheduler a request queued while a step runs joins the step after next") {
  // _executor_loop_overlap formed step 3's batch when step 2 began, before B was queued: B's context runs
  // in step 4 (index 3), which starts when step 3 ends; its first token comes at the end of that step.
  const TwoArrivals on = a_then_b(true, 10);
  const Steps& s = on.steps;
  REQUIRE(s.prefill_tokens.size() >= 4);
  CHECK(s.prefill_tokens[0] == 16);  // A, queued to an idle replica: at once
  CHECK(s.start_s[0] == 0);
  CHECK(s.prefill_tokens[1] == 0);
  CHECK(s.prefill_tokens[2] == 0);  // formed before B was queued
  CHECK(s.prefill_tokens[3] == 16);
  for (std::size_t i = 1; i < s.start_s.size(); ++i)
    CHECK(s.start_s[i] == Approx(s.start_s[i - 1] + s.length_s[i - 1]).epsilon(1e-12));
  REQUIRE(s.ttft_s.size() == 2);
  CHECK(s.ttft_s[1] == Approx(s.start_s[3] + s.length_s[3] - on.b_queued_s).epsilon(1e-9));
  // A's TTFT is its context step alone.
  CHECK(s.ttft_s[0] == Approx(s.length_s[0]).epsilon(1e-9));

  // Without it (disable_overlap_scheduler) the loop forms step 3 after step 2's results: B runs in step 3.
  const TwoArrivals off = a_then_b(false, 10);
  REQUIRE(off.steps.prefill_tokens.size() >= 3);
  CHECK(off.steps.prefill_tokens[2] == 16);
  REQUIRE(off.steps.ttft_s.size() == 2);
  CHECK(off.steps.ttft_s[1] ==
        Approx(off.steps.start_s[2] + off.steps.length_s[2] - off.b_queued_s).epsilon(1e-9));
}

TEST_CASE("an executor left with nothing to run fetches what was queued during its last step at once") {
  // A (2 tokens) ends in step 2, during which B is queued: with nothing else to run the executor takes B
  // into step 3 at once, as without the overlap scheduler.
  for (const bool overlap : {true, false}) {
    const TwoArrivals t = a_then_b(overlap, 2);
    REQUIRE(t.steps.prefill_tokens.size() == 2 + 4);  // A's 2 steps, B's context and 3 decode steps
    CHECK(t.steps.prefill_tokens[2] == 16);
    CHECK(t.steps.start_s[2] == Approx(t.steps.start_s[1] + t.steps.length_s[1]).epsilon(1e-12));
  }
}

TEST_CASE("only TensorRT-LLM's profile schedules a step ahead, and only with its overlap scheduler") {
  EngineProfile e = engine_profile(EngineKind::kTrtllm);
  CHECK(e.schedules_ahead);
  CHECK(fetches_at_step_start(e));
  e.overlap_scheduler = false;
  CHECK_FALSE(fetches_at_step_start(e));
  for (const EngineKind k :
       {EngineKind::kVllm, EngineKind::kSglang, EngineKind::kPytorchGraph, EngineKind::kPytorchLoop})
    CHECK_FALSE(fetches_at_step_start(engine_profile(k)));
}
