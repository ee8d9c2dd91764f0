// Bad input gets one clear error naming the JSON path (or file:line); good input parses into SI units.
#include "sim/scenario/scenario_parser.h"

#include <catch2/catch.hpp>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <string>

#include "sim/scenario/trace_reader.h"

using namespace moesim;

namespace {
Json base() {
  return Json::parse(R"({
    "model": "qwen3-30b-a3b",
    "cluster": {"gpu": "h100-sxm", "nodes": 1, "gpus_per_node": 4},
    "deployment": {"ep_size": 4},
    "workload": {"arrival": {"kind": "poisson", "rate_per_s": 5},
                 "prompt_tokens": {"kind": "fixed", "tokens": 100},
                 "output_tokens": {"kind": "fixed", "tokens": 10}},
    "run": {"requests": 10}})");
}

// Applies overrides to the base scenario and returns the error it raises ("" if none).
std::string error_of(const std::vector<std::string>& overrides, Json j = base()) {
  try {
    for (const auto& o : overrides) apply_override(j, o);
    (void)parse_scenario(j, "");
    return "";
  } catch (const InputError& e) {
    return e.what();
  }
}

bool starts_with(const std::string& s, const std::string& prefix) { return s.rfind(prefix, 0) == 0; }

std::string temp_file(const std::string& name, const std::string& text) {
  const auto p = std::filesystem::temp_directory_path() / ("moesim_test_" + name);
  std::ofstream(p) << text;
  return p.string();
}
}  // namespace

TEST_CASE("a valid scenario parses with units converted once") {
  const ScenarioSpec s = parse_scenario(base(), "").spec;
  REQUIRE(s.model.routed_experts == 128);
  REQUIRE(s.cluster.gpu.hbm_bytes == 80e9);
  REQUIRE(s.cluster.gpu.hbm_bytes_per_s == 3.35e12);
  REQUIRE(s.cluster.fabric.nic_bytes_per_s == Approx(400e9 / 8));
  REQUIRE(s.sla.ttft == Duration::from_ms(2000));
  REQUIRE(s.deployment.attention_dp == 4);
}

// A bounded mean is the mean drawn inside [min, max]; the lognormal's own mean is solved from it. For a
// cap far above every draw the two agree; under a cap that cuts the tail the lognormal's is the larger.
TEST_CASE("a lognormal length given by its bounded mean parses into the lognormal's own mean") {
  Json j = base();
  apply_override(
      j, R"(workload.output_tokens={"kind":"lognormal","bounded_mean":300,"sigma":0.5,"max":1000000})");
  apply_override(
      j, R"(workload.prompt_tokens={"kind":"lognormal","bounded_mean":800,"sigma":0.8,"min":16,"max":3136})");
  const ScenarioSpec s = parse_scenario(j, "").spec;
  const auto& out = std::get<LognormalLength>(s.workload.output);
  CHECK(out.mean == Approx(300).epsilon(1e-6));
  const auto& in = std::get<LognormalLength>(s.workload.prompt);
  CHECK(in.mean > 800);
  CHECK(lognormal_bounded_mean(in.mean, 0.8, 15.5, 3136.5) == Approx(800).epsilon(1e-9));
  CHECK(in.min == 16);
  CHECK(in.max == 3136);
}

TEST_CASE("an unknown key is an error naming its path and the known keys") {
  const std::string e = error_of({"deployment.max_batch_sise=12"});
  REQUIRE(starts_with(e, "deployment.max_batch_sise: unknown key"));
  REQUIRE(e.find("max_batch_size") != std::string::npos);
  REQUIRE(starts_with(error_of({"worklaod.x=1"}), "worklaod: unknown key"));
  REQUIRE(starts_with(error_of({"model.base=qwen3-30b-a3b", "model.num_layrs=3"}),
                      "model.num_layrs: unknown key"));
}

TEST_CASE("a wrong type is an error naming its path and the value") {
  REQUIRE(starts_with(error_of({"deployment.ep_size=\"four\""}), "deployment.ep_size: expected an integer"));
  REQUIRE(starts_with(error_of({"deployment.ep_size=2.5"}), "deployment.ep_size: expected an integer"));
  REQUIRE(starts_with(error_of({"deployment.chunked_prefill=1"}),
                      "deployment.chunked_prefill: expected true or false"));
  REQUIRE(starts_with(error_of({"workload.arrival.rate_per_s=fast"}),
                      "workload.arrival.rate_per_s: expected a number"));
  REQUIRE(starts_with(error_of({"cluster=[1,2]"}), "cluster: expected an object"));
}

TEST_CASE("impossible values are errors naming their path") {
  REQUIRE(
      starts_with(error_of({"cluster.nodes=3", "deployment.ep_size=12"}),
                  "deployment.ep_size: 12 does not divide 128 experts; with placement \"eplb\", "
                  "experts.redundant_experts can make experts + redundant slots a multiple of it (e.g. 4)"));
  // 132 = 11 x 12 is the next multiple of 12 above 128. An EP group of 6 on nodes of 4 would split one.
  REQUIRE(starts_with(error_of({"cluster.nodes=3", "deployment.ep_size=6"}),
                      "deployment.ep_size: 6 GPUs would split a node of 4 (cluster.gpus_per_node)"));
  REQUIRE(starts_with(error_of({"cluster.nodes=3", "deployment.ep_size=3"}),
                      "deployment.ep_size: 3 GPUs would split a node of 4"));
  REQUIRE(starts_with(error_of({"deployment.ep_size=3"}),
                      "deployment.ep_size: 3 does not divide the cluster's 4 GPUs"));
  REQUIRE(starts_with(error_of({"workload.arrival.rate_per_s=-2"}),
                      "workload.arrival.rate_per_s: must be positive"));
  REQUIRE(starts_with(error_of({"deployment.kv_cache_memory_fraction=1.5"}),
                      "deployment.kv_cache_memory_fraction: must be in (0, 1]"));
  REQUIRE(starts_with(error_of({"deployment.attention.dp=3"}), "deployment.attention.dp: dp x tp = 3"));
  REQUIRE(starts_with(error_of({"workload.prompt_tokens={\"kind\":\"uniform\",\"min\":10,\"max\":5}"}),
                      "workload.prompt_tokens.max: must be >= min"));
  REQUIRE(starts_with(error_of({"workload.output_tokens={\"kind\":\"quantiles\",\"points\":[5]}"}),
                      "workload.output_tokens.points: must be an array of at least 2 token counts"));
  REQUIRE(starts_with(error_of({"workload.output_tokens={\"kind\":\"quantiles\",\"points\":[5,9,7]}"}),
                      "workload.output_tokens.points: [2] (7) is below the one before (9)"));
  REQUIRE(starts_with(error_of({"workload.output_tokens={\"kind\":\"quantiles\",\"points\":[0,9]}"}),
                      "workload.output_tokens.points: [0] must be an integer in [1, "));
  REQUIRE(starts_with(
      error_of({"workload.output_tokens={\"kind\":\"lognormal\",\"sigma\":0.8,\"max\":900}"}),
      "workload.output_tokens.mean: required key is missing: give mean (the lognormal's) or bounded_mean"));
  REQUIRE(starts_with(error_of({"workload.output_tokens={\"kind\":\"lognormal\",\"mean\":100,"
                                "\"bounded_mean\":100,\"sigma\":0.8,\"max\":900}"}),
                      "workload.output_tokens.bounded_mean: give mean or bounded_mean, not both"));
  REQUIRE(starts_with(error_of({"workload.output_tokens={\"kind\":\"lognormal\",\"bounded_mean\":900,"
                                "\"sigma\":0.8,\"max\":900}"}),
                      "workload.output_tokens.bounded_mean: must lie strictly between min and max"));
  REQUIRE(starts_with(error_of({"run.requests=0"}), "run: give run.requests or run.duration_s"));
  REQUIRE(starts_with(error_of({"run.duration_s=10", "run.warmup_s=20"}), "run.warmup_s: must be shorter"));
  REQUIRE(starts_with(error_of({"precision.weights=int3"}), "precision.weights: unknown precision \"int3\""));
  REQUIRE(starts_with(error_of({"model=gpt-5"}), "model: unknown name \"gpt-5\""));
  REQUIRE(starts_with(error_of({"workload.expert_popularity={\"kind\":\"pareto\",\"top_share\":0.1}"}),
                      "workload.expert_popularity.top_share: must exceed top_fraction"));
}

TEST_CASE("a required key that is missing is named") {
  Json j = base();
  j["workload"].erase("arrival");
  REQUIRE(error_of({}, j) == "workload.arrival: required key is missing");
  Json k = base();
  k.erase("model");
  REQUIRE(error_of({}, k) == "model: required key is missing");
}

TEST_CASE("missing, empty and malformed files are errors naming the file and position") {
  const auto missing = std::string("/nonexistent/moesim/scenario.json");
  REQUIRE_THROWS_WITH(load_scenario(missing, {}), Catch::StartsWith(missing + ": cannot open"));
  const std::string empty = temp_file("empty.json", "  \n");
  REQUIRE_THROWS_WITH(load_scenario(empty, {}), Catch::Contains("the file is empty"));
  const std::string bad = temp_file("bad.json", "{\n  \"model\": \"deepseek-v3\",\n  \"cluster\": {,}\n}\n");
  REQUIRE_THROWS_WITH(load_scenario(bad, {}),
                      Catch::StartsWith(bad + ":3:") && Catch::Contains("malformed JSON"));
  const std::string array = temp_file("array.json", "[1, 2]");
  REQUIRE_THROWS_WITH(load_scenario(array, {}), Catch::Contains("must be a JSON object"));
}

TEST_CASE("a --set that does not name a key is refused") {
  Json j = base();
  REQUIRE_THROWS_WITH(apply_override(j, "no_equals_sign"), Catch::Contains("expected path.to.key=value"));
  REQUIRE_THROWS_WITH(apply_override(j, "run..seed=3"), Catch::Contains("empty key"));
  REQUIRE_THROWS_WITH(apply_override(j, "run.requests.x=3"), Catch::Contains("not an object"));
}

TEST_CASE("a model too large for the cluster is refused when loading with the memory check") {
  const std::string e = error_of({"model=deepseek-v3", "deployment.ep_size=4"});
  // Parsing succeeds (the check is the simulation's); the memory check names what does not fit.
  REQUIRE(e.empty());
}

TEST_CASE("traces parse and their errors name file:line") {
  const std::string azure = temp_file("azure.csv",
                                      "TIMESTAMP,ContextTokens,GeneratedTokens\n"
                                      "2023-11-16 18:15:46.6805900,374,44\n"
                                      "2023-11-16 18:15:50.9951690,396,109\n");
  const auto rows = read_trace(azure, "azure_csv", "workload.arrival.format");
  REQUIRE(rows.size() == 2);
  REQUIRE(rows[1].arrival.seconds() == Approx(50.9951690 - 46.6805900));
  REQUIRE(rows[0].prompt_tokens == 374);
  REQUIRE(rows[1].output_tokens == 109);
  const std::string bad = temp_file("azure_bad.csv",
                                    "TIMESTAMP,ContextTokens,GeneratedTokens\n"
                                    "2023-11-16 18:15:46.6805900,374,44\n"
                                    "2023-11-16 18:15:50.9951690,lots,109\n");
  REQUIRE_THROWS_WITH(read_trace(bad, "azure_csv", "f"), Catch::StartsWith(bad + ":3:"));
  const std::string mooncake = temp_file("mc.jsonl",
                                         "{\"timestamp\": 0, \"input_length\": 6955, \"output_length\": 52}\n"
                                         "{\"timestamp\": 1500, \"input_length\": 10, \"output_length\": 5}\n"
                                         "{\"timestamp\": 1600, \"input_length\": 10}\n");
  REQUIRE_THROWS_WITH(read_trace(mooncake, "mooncake_jsonl", "f"), Catch::StartsWith(mooncake + ":3:"));
  REQUIRE_THROWS_WITH(read_trace(mooncake, "csv", "workload.arrival.format"),
                      Catch::StartsWith("workload.arrival.format: unknown trace format"));
}

TEST_CASE("the shared Azure conversation trace replays in full") {
  const std::string file =
      std::string(MOESIM_SHARED_DIR) + "/data/traces/azure_llm_2023_conv/AzureLLMInferenceTrace_conv.csv";
  if (!std::filesystem::exists(file)) {
    WARN("shared traces not present: " << file);
    return;
  }
  const auto rows = read_trace(file, "azure_csv", "f");
  // Its README: 19,366 requests over 3,502 s.
  REQUIRE(rows.size() == 19366);
  REQUIRE(rows.back().arrival.seconds() == Approx(3502).margin(1.0));
}

TEST_CASE("values that would overflow or never end are refused, not wrapped or saturated") {
  REQUIRE(starts_with(error_of({"deployment.ep_size=4294967300"}),
                      "deployment.ep_size: must be at most 2147483647"));
  REQUIRE(starts_with(error_of({"deployment.max_batched_tokens=2000000000"}),
                      "deployment.max_batched_tokens: must be at most"));
  REQUIRE(starts_with(error_of({"workload.arrival.rate_per_s=1e-300"}),
                      "workload.arrival.rate_per_s: must be at least"));
  REQUIRE(starts_with(error_of({"run.duration_s=2e7"}), "run.duration_s: must be in [0, 1e+06], got 2e+07"));
  REQUIRE(starts_with(error_of({"sla.ttft_ms=1e20"}), "sla.ttft_ms: must be in"));
  REQUIRE(starts_with(error_of({"model.base=qwen3-30b-a3b", "model.shared_experts=-3"}),
                      "model.shared_experts: must be an integer in [0, 1024], got -3"));
  REQUIRE(starts_with(error_of({"model.base=qwen3-30b-a3b", "model.default_weights=bf17"}),
                      "model.default_weights: unknown precision"));
  REQUIRE(starts_with(error_of({"cluster.gpu.kernel_overhead_us=-100"}),
                      "cluster.gpu.kernel_overhead_us: must be in"));
}

TEST_CASE("rules across sections are checked") {
  Json closed = base();
  closed["workload"]["arrival"] = Json{{"kind", "closed_loop"}, {"users", 8}};
  REQUIRE(starts_with(error_of({"deployment.max_waiting_requests=1"}, closed),
                      "deployment.max_waiting_requests: a closed loop cannot drop"));
  REQUIRE(starts_with(error_of({"deployment.chunked_prefill=false", "deployment.max_batched_tokens=64"}),
                      "deployment.max_batched_tokens: 64 is smaller than the longest request (110 tokens"));
  REQUIRE(error_of({"deployment.chunked_prefill=false", "deployment.max_batched_tokens=110"}).empty());
}

TEST_CASE("deployment.engine picks an engine profile and an unknown engine is named with the known ones") {
  Json j = base();
  apply_override(j, "deployment.engine=\"pytorch_loop\"");
  CHECK(parse_scenario(j, "").spec.deployment.engine.experts == ExpertKernel::kPerExpert);
  CHECK(parse_scenario(base(), "").spec.deployment.engine.kind == EngineKind::kVllm);
  const std::string e = error_of({"deployment.engine=\"vllm2\""});
  CHECK(starts_with(e, "deployment.engine: unknown engine \"vllm2\""));
  CHECK(e.find("pytorch_graph") != std::string::npos);
}

namespace {
// The base scenario on two nodes (two instances of 4 GPUs) with a planner.
Json autoscaled() {
  Json j = base();
  apply_override(j, "cluster.nodes=2");
  apply_override(j, R"(deployment.autoscale={"interval_s": 30, "predictor": "holt", "alpha": 0.4,
      "weights_from": "host_dram", "engine_start_s": 20, "cuda_graph_capture_s": 15, "usd_per_gpu_hour": 2.5,
      "pools": [{"min_instances": 1, "max_instances": 2, "capacity_req_per_s": 4}]})");
  return j;
}
}  // namespace

TEST_CASE("deployment.autoscale parses into the planner's interval, predictor, bounds and scale-up costs") {
  const ScenarioSpec s = parse_scenario(autoscaled(), "").spec;
  const AutoscaleSpec& a = s.autoscale;
  REQUIRE(a.enabled);
  CHECK(a.interval == Duration::from_seconds(30));
  CHECK(a.predictor.kind == PredictorKind::kHolt);
  CHECK(a.predictor.alpha == 0.4);
  CHECK(a.predictor.beta == PredictorSpec{}.beta);
  CHECK(a.weights_from == WeightSource::kHostDram);
  CHECK(a.engine_start == Duration::from_seconds(20));
  CHECK(a.cuda_graph_capture == Duration::from_seconds(15));
  CHECK(a.usd_per_gpu_hour == 2.5);
  CHECK(a.gpu_budget == 8);  // the cluster by default
  REQUIRE(a.pools.size() == 1);
  CHECK(a.pools[0].min_instances == 1);
  CHECK(a.pools[0].max_instances == 2);
  CHECK(a.pools[0].initial_instances == 1);  // the minimum by default
  CHECK(a.pools[0].capacity_req_per_s == 4);
  CHECK_FALSE(parse_scenario(base(), "").spec.autoscale.enabled);
}

TEST_CASE("deployment.autoscale errors name the key") {
  const auto err = [](const std::string& o) { return error_of({o}, autoscaled()); };
  CHECK(starts_with(err("deployment.autoscale.predictor=\"arima\""),
                    "deployment.autoscale.predictor: unknown predictor \"arima\""));
  CHECK(starts_with(err("deployment.autoscale.weights_from=\"s3\""),
                    "deployment.autoscale.weights_from: unknown source \"s3\""));
  CHECK(starts_with(err("deployment.autoscale.interval_s=-1"), "deployment.autoscale.interval_s"));
  CHECK(starts_with(err("deployment.autoscale.alpha=1.5"), "deployment.autoscale.alpha"));
  CHECK(starts_with(err("deployment.autoscale.intervall_s=1"),
                    "deployment.autoscale.intervall_s: unknown key"));
  CHECK(starts_with(err("deployment.autoscale.pools=[]"),
                    "deployment.autoscale.pools: expected an array of 1 pool bounds"));
  // One key of pools[0] set to a value.
  const auto pool_err = [](const std::string& key, const Json& value) {
    Json j = autoscaled();
    j["deployment"]["autoscale"]["pools"][0][key] = value;
    return error_of({}, j);
  };
  const std::string at = "deployment.autoscale.pools[0].";
  CHECK(starts_with(pool_err("max_instances", 3), at + "max_instances"));  // the pool holds 2 instances
  CHECK(starts_with(pool_err("min_instances", 0), at + "min_instances"));
  CHECK(starts_with(pool_err("initial_instances", 3), at + "initial_instances"));
  CHECK(starts_with(pool_err("capacity_req_per_s", 0), at + "capacity_req_per_s"));
  CHECK(starts_with(pool_err("max_instanse", 1), at + "max_instanse: unknown key"));
  Json j = autoscaled();
  j["deployment"]["autoscale"]["pools"][0]["min_instances"] = 2;
  j["deployment"]["autoscale"]["gpu_budget"] = 4;
  CHECK(
      starts_with(error_of({}, j), "deployment.autoscale.gpu_budget: 4 GPUs cannot hold the pools' minimum"));
}

TEST_CASE("a diurnal arrival parses as a sinusoid or a piecewise day, and its errors name the key") {
  Json j = base();
  apply_override(j, R"(workload.arrival={"kind": "diurnal", "mean_rate_per_s": 3, "amplitude": 0.6,
                                         "period_s": 3600, "peak_s": 1800})");
  const LoadedScenario sine = parse_scenario(j, "");
  const auto* d = std::get_if<DiurnalArrivals>(&sine.spec.workload.arrivals);
  REQUIRE(d != nullptr);
  CHECK(d->mean_rate_per_s == 3);
  CHECK(d->amplitude == 0.6);
  CHECK(d->period_s == 3600);
  CHECK(d->peak_s == 1800);
  apply_override(j, R"(workload.arrival={"kind": "diurnal", "rates_per_s": [1, 0, 4]})");
  const LoadedScenario piecewise = parse_scenario(j, "");
  const auto* p = std::get_if<DiurnalArrivals>(&piecewise.spec.workload.arrivals);
  REQUIRE(p != nullptr);
  CHECK(p->rates_per_s == std::vector<double>{1, 0, 4});
  CHECK(p->period_s == 86400);
  const auto err = [](const std::string& arrival) { return error_of({"workload.arrival=" + arrival}); };
  CHECK(starts_with(err(R"({"kind": "diurnal", "mean_rate_per_s": 3, "amplitude": 1.5})"),
                    "workload.arrival.amplitude"));
  CHECK(starts_with(err(R"({"kind": "diurnal"})"), "workload.arrival.mean_rate_per_s"));
  CHECK(
      starts_with(err(R"({"kind": "diurnal", "rates_per_s": [1, -2]})"), "workload.arrival.rates_per_s[1]"));
  CHECK(starts_with(err(R"({"kind": "diurnal", "rates_per_s": [0, 0]})"), "workload.arrival.rates_per_s"));
  CHECK(starts_with(err(R"({"kind": "diurnal", "rates_per_s": [1], "amplitude": 0.5})"),
                    "workload.arrival.amplitude: a piecewise day"));
}
