// Prefill/decode disaggregation and KV migration: the queueing of a 1P1D pipeline
// against a timeline computed by hand from the step costs, KV bytes from the model shape, the pools' GPU
// ranges and refusals, migration's bytes, and determinism.
#include <catch2/catch.hpp>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <map>
#include <string>
#include <vector>

#include "hwmodels/roofline_cost_model.h"
#include "sim/scenario/scenario_parser.h"
#include "sim/serving/runtime/serving_simulation.h"
#include "sim/serving/step/serving_models.h"
#include "tests/support/scenario_error.h"

using namespace moesim;
using moesim_test::error_of;

namespace {

// The toy model of scenarios/tiny/tiny_model_closed_loop.json (every token picks all 4 experts: routing
// is deterministic), on one node of `gpus` H100s, one prefill and one decode instance of one GPU each.
Json one_p_one_d(int users, std::int64_t prompt, std::int64_t output, int gpus = 2) {
  return Json::parse(R"({
    "name": "tiny-1p1d",
    "model": {"num_layers": 2, "num_dense_layers": 0, "hidden": 1024, "vocab": 1000, "attention": "gqa",
              "num_heads": 8, "num_kv_heads": 8, "head_dim": 128, "routed_experts": 4, "shared_experts": 0,
              "top_k": 4, "expert_inter": 512},
    "precision": {"weights": "bf16", "kv_cache": "bf16"},
    "cluster": {"gpu": "h100-sxm", "nodes": 1, "gpus_per_node": )" +
                     std::to_string(gpus) + R"(},
    "deployment": {"ep_size": 1, "max_batched_tokens": )" +
                     std::to_string(prompt) + R"(,
                   "pools": [{"role": "prefill", "instances": 1},
                             {"role": "decode", "instances": 1, "max_batch_size": 1, "router": "kv_aware"}]},
    "workload": {"arrival": {"kind": "closed_loop", "users": )" +
                     std::to_string(users) + R"(, "think_time_s": 0},
                 "prompt_tokens": {"kind": "fixed", "tokens": )" +
                     std::to_string(prompt) + R"(},
                 "output_tokens": {"kind": "fixed", "tokens": )" +
                     std::to_string(output) + R"(}},
    "run": {"seed": 3, "requests": )" +
                     std::to_string(users) +
                     R"(}
  })");
}

struct Records final : SimulationObserver {
  std::map<std::int64_t, RequestRecord> by_id;
  void on_step(const StepRecord&) override {}
  void on_request(const RequestRecord& r) override { by_id[r.id] = r; }
};

Report run(const Json& j, SimulationObserver* observer = nullptr) {
  const LoadedScenario sc = parse_scenario(j, "");
  const RooflineCostModel gpu(sc.spec.cluster.gpu);
  return simulate(sc.spec, gpu, observer);
}

}  // namespace

TEST_CASE("a 1P1D pipeline queues two requests as the timeline computed by hand from the step costs") {
  const std::int64_t prompt = 512;
  const std::int64_t output = 64;
  const Json j = one_p_one_d(2, prompt, output);
  const LoadedScenario sc = parse_scenario(j, "");
  const ScenarioSpec& s = sc.spec;
  REQUIRE(s.pools.size() == 2);
  const RooflineCostModel gpu(s.cluster.gpu);

  // Step costs of each pool's instance, from planners wired as a run wires them (the routing of top-4 of
  // 4 experts draws nothing).
  const RandomStreams streams(s.run.seed);
  const ServingModels models(s, streams);
  const ScenarioSpec prefill_view = s.pool_view(s.pools[0]);
  const ScenarioSpec decode_view = s.pool_view(s.pools[1]);
  auto prefill_planner = models.make_standalone(prefill_view, gpu, streams.stream("routing", 0));
  auto decode_planner = models.make_standalone(decode_view, gpu, streams.stream("routing", 1));
  const double p = static_cast<double>(prompt);
  // One prompt alone per step (max_batched_tokens = prompt): causal pairs p(p+1)/2.
  const GroupBatch prefill_batch{
      .prefill_tokens = prompt, .prefill_pairs = p * (p + 1) / 2, .prefill_kv_tokens = p, .sampled_seqs = 1};
  const Duration prefill = prefill_planner.plan(std::span(&prefill_batch, 1), Time{}).total;
  // On the decode instance: first the sampled token's KV (one token over the prompt's context), then one
  // token per step over a growing context; output - 1 steps in all (the prefill sampled token 1).
  Duration decode;
  for (std::int64_t k = 1; k < output; ++k) {
    const double ctx = p + static_cast<double>(k);  // tokens attended to, the new one included
    const GroupBatch b = k == 1
                             ? GroupBatch{.prefill_tokens = 1,
                                          .prefill_pairs = ctx,
                                          .prefill_kv_tokens = ctx,
                                          .sampled_seqs = 1}
                             : GroupBatch{.decode_seqs = 1, .decode_context_tokens = ctx, .sampled_seqs = 1};
    decode += decode_planner.plan(std::span(&b, 1), Time{}).total;
  }
  // KV of the prompt from the model shape: K and V of 8 heads of 128 over 2 layers in BF16, per token.
  const double kv_bytes = 2.0 * 8 * 128 * 2 * 2.0 * p;
  const Duration transfer = models.fabric().transfer(kv_bytes, 0, 1);

  // A arrives at 0: prefill [0, P], KV over the link [P, P + T], decoded at once. B arrives at 0 too,
  // waits for A's prefill, prefills [P, 2P]; its KV leaves GPU 0 when the link is free of A's; the decode
  // instance (one sequence at a time) takes it when A is done.
  const Time a_kv = Time{} + prefill + transfer;
  const Time a_done = a_kv + decode;
  const Time b_prefilled = Time{} + prefill + prefill;
  const Time b_kv = std::max(b_prefilled, a_kv) + transfer;
  const Time b_first = std::max(b_kv, a_done);
  REQUIRE(a_done > b_kv);  // the case exercises the decode queue

  Records rec;
  const Report r = run(j, &rec);
  REQUIRE(r.requests_finished == 2);
  REQUIRE(rec.by_id.size() == 2);
  const RequestRecord& a = rec.by_id.at(0);
  const RequestRecord& b = rec.by_id.at(1);
  CHECK(a.ttft_s == Approx(a_kv.seconds()).epsilon(1e-12));
  CHECK(b.ttft_s == Approx(b_first.seconds()).epsilon(1e-12));
  CHECK(a.e2e_s == Approx(a_done.seconds()).epsilon(1e-12));
  CHECK(b.e2e_s == Approx((b_first + decode).seconds()).epsilon(1e-12));
  CHECK(b.queueing_s == Approx((prefill + (b_first - b_kv)).seconds()).epsilon(1e-12));

  // The split adds up to TTFT: means over A and B.
  const DisaggregationReport& d = r.disaggregation;
  REQUIRE(d.enabled);
  CHECK(d.prefill_queue.mean == Approx(prefill.seconds() / 2).epsilon(1e-12));
  CHECK(d.prefill.mean == Approx(prefill.seconds()).epsilon(1e-12));
  CHECK(d.kv_transfer.mean == Approx((transfer + (b_kv - b_prefilled)).seconds() / 2).epsilon(1e-12));
  CHECK(d.decode_queue.mean == Approx((b_first - b_kv).seconds() / 2).epsilon(1e-12));
  CHECK(d.prefill_queue.mean + d.prefill.mean + d.kv_transfer.mean + d.decode_queue.mean ==
        Approx(r.ttft.mean).epsilon(1e-12));
  CHECK(d.kv_transfers == 2);
  CHECK(d.kv_bytes == 2 * kv_bytes);

  // Per pool: the GPU ranges, and the prefill pool computed the prompts, the decode pool the rest.
  REQUIRE(r.pools.size() == 2);
  CHECK(r.pools[0].role == "prefill");
  CHECK(r.pools[0].first_gpu == 0);
  CHECK(r.pools[1].role == "decode");
  CHECK(r.pools[1].first_gpu == 1);
  CHECK(r.pools[0].steps == 2);
  CHECK(r.pools[1].steps == 2 * (output - 1));
  CHECK(r.gpus == 2);
  CHECK(r.output_tokens == 2 * output);
}

TEST_CASE("the KV bytes moved are requests x prompt tokens x KV bytes per token of the model shape") {
  // Twenty requests, decode attention TP 2: GQA's 8 KV heads split 4 and 4, nothing sent twice.
  // The decode pool first: its instance of 2 GPUs starts on an even GPU.
  Json j = one_p_one_d(20, 300, 5, 4);
  j["deployment"]["pools"] = Json::array(
      {Json{{"role", "decode"}, {"instances", 1}, {"ep_size", 2}, {"attention", {{"dp", 1}, {"tp", 2}}}},
       Json{{"role", "prefill"}, {"instances", 1}, {"max_batched_tokens", 4096}}});
  j["workload"]["arrival"] = Json{{"kind", "poisson"}, {"rate_per_s", 200}};
  const Report r = run(j);
  REQUIRE(r.requests_finished == 20);
  const double per_token = 2.0 * 8 * 128 * 2 * 2.0;  // K and V, 8 heads x 128, 2 layers, BF16
  CHECK(r.disaggregation.kv_transfers == 20);
  CHECK(r.disaggregation.kv_bytes == Approx(20 * 300 * per_token).epsilon(1e-12));
  CHECK(r.pools[0].gpus == 2);
  CHECK(r.pools[0].first_gpu == 0);
  CHECK(r.pools[1].first_gpu == 2);
  // Each pool's memory from its own plan: routed experts of 2 layers x 4 experts x 3 x 1024 x 512 BF16
  // weights, over EP2 in the decode pool and EP1 in the prefill pool.
  const double routed = 2.0 * 4 * 3 * 1024 * 512 * 2;
  CHECK(r.pools[0].routed_expert_bytes_per_gpu == Approx(routed / 2).epsilon(1e-12));
  CHECK(r.pools[1].routed_expert_bytes_per_gpu == Approx(routed).epsilon(1e-12));
  CHECK(r.pools[0].weights_bytes_per_gpu < r.pools[1].weights_bytes_per_gpu);
}

TEST_CASE("a KV cache crossing nodes shares the NIC with the prefill instance's All-to-All") {
  // Four nodes of one GPU: prefill EP2 on nodes 0-1, decode EP2 on nodes 2-3, so every All-to-All byte
  // and the KV cache cross NICs. Three requests arrive together; each prefill attention group takes one per
  // step. The first two KV caches leave right after the first prefill step, whose All-to-All kept each
  // GPU's NIC path busy for share = NIC bytes per GPU / NIC rate / step time, while the third waits for the
  // next step; the decode instance has not stepped yet. Fair sharing stretches those transfers' data time
  // by 1 + share. The third leaves a prefill instance with nothing left to run and meets a decode instance
  // whose steps carry a token per sequence: a shorter transfer, and no shorter than unshared.
  const std::int64_t prompt = 2048;
  Json j = one_p_one_d(3, prompt, 4, 1);
  j["cluster"]["nodes"] = 4;
  j["deployment"]["ep_size"] = 2;
  j["deployment"]["attention"] = Json{{"dp", 2}, {"tp", 1}};
  const LoadedScenario sc = parse_scenario(j, "");
  const ScenarioSpec& s = sc.spec;
  const RooflineCostModel gpu(s.cluster.gpu);
  const RandomStreams streams(s.run.seed);
  const ServingModels models(s, streams);
  const ScenarioSpec prefill_view = s.pool_view(s.pools[0]);  // the planner keeps a reference
  auto planner = models.make_standalone(prefill_view, gpu, streams.stream("routing", 0));
  const double p = static_cast<double>(prompt);
  const std::vector<GroupBatch> batch = {GroupBatch{.prefill_tokens = prompt,
                                                    .prefill_pairs = p * (p + 1) / 2,
                                                    .prefill_kv_tokens = p,
                                                    .sampled_seqs = 1},
                                         GroupBatch{.prefill_tokens = prompt,
                                                    .prefill_pairs = p * (p + 1) / 2,
                                                    .prefill_kv_tokens = p,
                                                    .sampled_seqs = 1}};
  const StepPlan plan = planner.plan(batch, Time{});
  REQUIRE(plan.dispatch_nic_bytes > 0);
  const FabricSpec& f = models.fabric().spec();
  const double nic_rate =
      std::min(f.nic_bytes_per_s / models.fabric().topology().gpus_per_nic(), f.pcie_bytes_per_s);
  const double share = plan.dispatch_nic_bytes / 2 / nic_rate / plan.total.seconds();
  REQUIRE(share > 0.01);
  REQUIRE(share < 1);
  const double kv_bytes = 2.0 * 8 * 128 * 2 * 2.0 * p;  // K and V, 8 heads x 128, 2 layers, BF16
  const Report r = run(j);
  REQUIRE(r.requests_finished == 3);
  REQUIRE(r.pools.size() == 2);
  REQUIRE(r.pools[1].first_gpu == 2);
  // Each GPU's send crosses its own NIC (GPU 0 or 1 to GPU 2 or 3): the same route cost.
  const Duration alone = models.fabric().transfer(kv_bytes, 0, 2);
  const Duration shared = models.fabric().transfer(kv_bytes, 0, 2, share);
  CHECK(shared > alone);
  CHECK(r.disaggregation.kv_transfer.max == Approx(shared.seconds()).epsilon(1e-9));
  const double third = 3 * r.disaggregation.kv_transfer.mean - 2 * r.disaggregation.kv_transfer.max;
  CHECK(third >= alone.seconds() * (1 - 1e-9));
  CHECK(third < shared.seconds());

  SECTION("one request: no step follows at either end, nothing shares the NICs") {
    j = one_p_one_d(1, prompt, 4, 1);
    j["cluster"]["nodes"] = 4;
    j["deployment"]["ep_size"] = 2;
    j["deployment"]["attention"] = Json{{"dp", 2}, {"tp", 1}};
    const Report one = run(j);
    REQUIRE(one.requests_finished == 1);
    CHECK(one.disaggregation.kv_transfer.mean == Approx(alone.seconds()).epsilon(1e-9));
  }
}

TEST_CASE("pools take consecutive GPUs and refuse what does not fit, with the JSON path") {
  Json j = one_p_one_d(2, 64, 4, 8);
  j["deployment"]["pools"] = Json::array({Json{{"role", "prefill"}, {"instances", 2}, {"ep_size", 2}},
                                          Json{{"role", "decode"}, {"instances", 1}, {"ep_size", 4}}});
  const LoadedScenario ok = parse_scenario(j, "");
  REQUIRE(ok.spec.pools.size() == 2);
  CHECK(ok.spec.pools[0].first_gpu == 0);
  CHECK(ok.spec.pools[0].gpus() == 4);
  CHECK(ok.spec.pools[1].first_gpu == 4);
  CHECK(ok.spec.pools[1].deployment.ep_size == 4);
  CHECK(ok.spec.pools[1].deployment.attention_dp == 4);  // inherited default dp = ep / tp

  SECTION("one instance unless told") {
    j["deployment"]["pools"][1].erase("instances");
    CHECK(parse_scenario(j, "").spec.pools[1].instances == 1);
  }
  SECTION("more GPUs than the cluster") {
    j["deployment"]["pools"][1]["instances"] = 2;
    const std::string e = error_of(j);
    CHECK(e.find("deployment.pools[1]") != std::string::npos);
    CHECK(e.find("cluster has 8 GPUs") != std::string::npos);
  }
  SECTION("an unknown role") {
    j["deployment"]["pools"][0]["role"] = "prefil";
    CHECK(error_of(j).find("deployment.pools[0].role: unknown role \"prefil\"") != std::string::npos);
  }
  SECTION("an unknown key") {
    j["deployment"]["pools"][1]["ep_sise"] = 4;
    CHECK(error_of(j).find("deployment.pools[1].ep_sise: unknown key") != std::string::npos);
  }
  SECTION("a prefill pool without a decode pool") {
    j["deployment"]["pools"][1]["role"] = "prefill";
    CHECK(error_of(j).find("deployment.pools: a prefill pool needs a decode pool") != std::string::npos);
  }
  SECTION("an instance across two nodes") {
    j["cluster"]["nodes"] = 2;
    j["cluster"]["gpus_per_node"] = 4;
    j["deployment"]["pools"][0] = Json{{"role", "prefill"}, {"instances", 1}, {"ep_size", 2}};
    const std::string e = error_of(j);
    CHECK(e.find("deployment.pools[1]") != std::string::npos);
    CHECK(e.find("straddle nodes") != std::string::npos);
  }
  SECTION("a pool whose attention does not match its EP size") {
    j["deployment"]["pools"][1]["attention"] = Json{{"dp", 2}, {"tp", 1}};
    CHECK(error_of(j).find("deployment.pools[1].attention.dp") != std::string::npos);
  }
  SECTION("a migration ratio of 1 or less") {
    j["deployment"]["kv_migration"] = Json{{"imbalance_ratio", 1.0}};
    CHECK(error_of(j).find("deployment.kv_migration.imbalance_ratio") != std::string::npos);
  }
}

TEST_CASE("KV migration moves running requests to the idle instance and moves their KV bytes") {
  // Two colocated instances, round-robin: every other request is long, so instance 0 gets all the long
  // ones and instance 1 runs dry.
  const auto dir = std::filesystem::temp_directory_path() / "moesim-migration-test";
  std::filesystem::create_directories(dir);
  const auto trace = dir / "trace.jsonl";
  const std::int64_t prompt = 128;
  {
    std::ofstream f(trace);
    for (int i = 0; i < 16; ++i) {
      f << "{\"timestamp\": " << i << ", \"input_length\": " << prompt
        << ", \"output_length\": " << (i % 2 == 0 ? 400 : 2) << "}\n";
    }
  }
  Json j = one_p_one_d(1, prompt, 2);
  j["deployment"] = Json{{"ep_size", 1}, {"router", "round_robin"}};
  j["workload"] =
      Json{{"arrival", {{"kind", "trace"}, {"format", "mooncake_jsonl"}, {"file", trace.string()}}}};
  j["run"] = Json{{"seed", 3}};
  const Report off = run(j);
  j["deployment"]["kv_migration"] = Json{{"imbalance_ratio", 2.0}, {"check_every_s", 0.01}};
  const Report on = run(j);
  REQUIRE(off.requests_finished == 16);
  REQUIRE(on.requests_finished == 16);
  CHECK(off.migration.count == 0);
  REQUIRE(on.migration.count > 0);
  // Each moved request carried the KV of its prompt and of the tokens it had generated but the last:
  // between prompt and prompt + 399 tokens, a whole number of tokens.
  const double per_token = 2.0 * 8 * 128 * 2 * 2.0;
  const double tokens = on.migration.bytes / per_token;
  CHECK(tokens == Approx(std::round(tokens)).margin(1e-6));
  CHECK(tokens >= static_cast<double>(on.migration.count * prompt));
  CHECK(tokens <= static_cast<double>(on.migration.count * (prompt + 399)));
  // Instance 1 took over work from instance 0.
  CHECK(on.gpu[1].busy > off.gpu[1].busy);
  std::filesystem::remove_all(dir);
}

TEST_CASE("a disaggregated run is deterministic and its seed matters") {
  Json j = one_p_one_d(8, 200, 20);
  j["workload"]["arrival"] = Json{{"kind", "poisson"}, {"rate_per_s", 50}};
  j["workload"]["output_tokens"] = Json{{"kind", "uniform"}, {"min", 2}, {"max", 40}};
  j["run"]["requests"] = 30;
  const Report a = run(j);
  const Report b = run(j);
  CHECK(a.fingerprint == b.fingerprint);
  CHECK(a.ttft.mean == b.ttft.mean);
  CHECK(a.disaggregation.kv_bytes == b.disaggregation.kv_bytes);
  j["run"]["seed"] = 4;
  CHECK(run(j).fingerprint != a.fingerprint);
}

TEST_CASE("a pool that does not fit is refused by validate's check and by run alike, naming the pool") {
  // DeepSeek-V3 in FP8 (about 671 GB of weights) on one 8 x H800 decode instance (80 GB each) cannot fit.
  Json j = load_json_file(std::string(MOESIM_SOURCE_DIR) + "/scenarios/reference/dsv3_pd_disagg.json");
  j["deployment"]["pools"][1]["ep_size"] = 8;
  j["deployment"]["pools"][1]["attention"] = Json{{"dp", 8}, {"tp", 1}};
  const LoadedScenario sc = parse_scenario(j, "");
  const RooflineCostModel gpu(sc.spec.cluster.gpu);
  const std::vector<MemoryPlan> plans = deployed_memory_plans(sc.spec, gpu);
  REQUIRE(plans.size() == 2);
  CHECK(plans[0].fits());
  CHECK_FALSE(plans[1].fits());
  std::string validate_error;
  std::string run_error;
  try {
    check_deployment_fits(sc.spec, gpu);
  } catch (const InputError& e) {
    validate_error = e.what();
  }
  try {
    (void)simulate(sc.spec, gpu);
  } catch (const InputError& e) {
    run_error = e.what();
  }
  CHECK(validate_error.rfind("deployment.pools[1]: ", 0) == 0);
  CHECK(validate_error.find("does not fit") != std::string::npos);
  CHECK(run_error == validate_error);
}
