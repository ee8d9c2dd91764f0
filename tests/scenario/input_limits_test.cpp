// The one place where inputs get a range the arithmetic downstream can hold: non-finite and huge numbers,
// int narrowing, nesting depth, trace timestamps past the picosecond clock, sizes beyond the machine.
#include <catch2/catch.hpp>
#include <filesystem>
#include <fstream>
#include <string>

#include "sim/scenario/json_reader.h"
#include "sim/scenario/scenario_parser.h"
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
  const auto p = std::filesystem::temp_directory_path() / ("moesim_limits_" + name);
  std::ofstream(p) << text;
  return p.string();
}

std::string nested(std::size_t depth) { return std::string(depth, '[') + "1" + std::string(depth, ']'); }

}  // namespace

TEST_CASE("numbers no double holds are refused with the file or --set that holds them") {
  // 1e309 overflows a double: nlohmann throws out_of_range, which must become an InputError.
  const std::string file = temp_file("huge.json", R"({"run": {"requests": 1e309}})");
  REQUIRE_THROWS_WITH(load_json_file(file), Catch::StartsWith(file + ": unreadable JSON"));
  Json j = base();
  REQUIRE_THROWS_WITH(apply_override(j, "run.duration_s=1e309"), Catch::StartsWith("--set run.duration_s: "));
  // A value that is not JSON at all stays a string (and then fails as a wrong type, by its path).
  REQUIRE(starts_with(error_of({"run.duration_s=nan"}), "run.duration_s: expected a number"));
}

TEST_CASE("JSON nested deeper than the bound is refused before any recursive walk") {
  REQUIRE_NOTHROW(parse_json_value(nested(kMaxJsonDepth), "x"));
  REQUIRE_THROWS_WITH(parse_json_value(nested(kMaxJsonDepth + 1), "x"),
                      Catch::StartsWith("x:1:" + std::to_string(kMaxJsonDepth + 1) + ": JSON nested deeper"));
  // 100,000 levels used to overflow the stack; brackets inside strings do not count.
  REQUIRE_THROWS_WITH(parse_json_value(nested(100000), "deep.json"), Catch::StartsWith("deep.json:1:"));
  REQUIRE_NOTHROW(parse_json_value("{\"a\": \"" + std::string(1000, '[') + "\"}", "x"));
  Json j = base();
  REQUIRE_THROWS_WITH(apply_override(j, "experts=" + nested(100000)), Catch::StartsWith("--set experts:1:"));
}

TEST_CASE("every number is held to a magnitude and every integer to exactness, by its path") {
  REQUIRE(starts_with(error_of({"sla.percentile=1e300"}), "sla.percentile: 1e+300 is out of range"));
  REQUIRE(starts_with(error_of({"run.requests=18446744073709551615"}),
                      "run.requests: 18446744073709551615 is out"));
  REQUIRE(starts_with(error_of({"run.seed=9007199254740993"}), "run.seed: 9007199254740993 is out of range"));
  // Unsigned JSON integers above INT64_MAX used to wrap negative.
  REQUIRE(starts_with(error_of({"deployment.max_waiting_requests=18446744073709551615"}),
                      "deployment.max_waiting_requests: "));
}

TEST_CASE("values narrowed to int or multiplied downstream get the range their consumers hold") {
  REQUIRE(starts_with(error_of({"experts={\"placement\":\"eplb\",\"eplb_groups\":4294967296}"}),
                      "experts.eplb_groups: must be an integer in [1, 128]"));
  REQUIRE(starts_with(error_of({"workload.expert_popularity={\"kind\":\"zipf\",\"exponent\":1,"
                                "\"coactivation\":{\"group_size\":4294967296}}"}),
                      "workload.expert_popularity.coactivation.group_size: must be an integer in [1, 128]"));
  REQUIRE(starts_with(error_of({"experts={\"placement\":\"eplb\",\"redundant_slots_per_gpu\":4294967297}"}),
                      "experts.redundant_slots_per_gpu: must be an integer in [0, 128]"));
  REQUIRE(starts_with(error_of({"experts={\"stats\":{\"window_batches\":1e15}}"}),
                      "experts.stats.window_batches: must be an integer in"));
  REQUIRE(starts_with(error_of({"workload.output_tokens.tokens=9223372036854775000"}),
                      "workload.output_tokens.tokens: "));
  REQUIRE(starts_with(error_of({"workload.output_tokens.tokens=100000001"}),
                      "workload.output_tokens.tokens: must be an integer in [1, 100000000]"));
}

TEST_CASE("work that would keep validate busy for hours is refused") {
  const std::string e =
      error_of({"workload.expert_popularity={\"kind\":\"calibrated\",\"imbalance_ratio\":2,"
                "\"iterations\":100000000}"});
  REQUIRE(starts_with(e, "workload.expert_popularity.iterations: must be an integer in [1, 10000]"));
  // The product matters too: 10,000 iterations over 1024 experts is more than 2^22 draws per bisection step.
  const std::string p = error_of({"model.routed_experts=1024",
                                  "workload.expert_popularity={\"kind\":\"calibrated\","
                                  "\"imbalance_ratio\":2,\"iterations\":10000}"});
  REQUIRE(starts_with(p, "workload.expert_popularity.iterations: 10000 iterations over 1024 experts"));
}

TEST_CASE("clusters and EP groups whose tables would not fit in memory are refused") {
  REQUIRE(starts_with(error_of({"cluster.nodes=2147483647", "deployment.ep_size=4"}),
                      "cluster.nodes: must be an integer in [1, 16384]"));
  // 4000 x 8 = 32,000 GPUs: each count alone is fine, the product is not (and never overflows int).
  REQUIRE(starts_with(error_of({"cluster.nodes=4000", "cluster.gpus_per_node=8", "deployment.ep_size=4"}),
                      "cluster.nodes: 4000 nodes x 8 GPUs is more than the 16384"));
  // 1,024 nodes of 8 (a fleet of 8,192 GPUs) is a legal cluster; one EP group over all of it is not.
  REQUIRE(starts_with(error_of({"cluster.nodes=1024", "cluster.gpus_per_node=8", "deployment.ep_size=8192"}),
                      "deployment.ep_size: 8192 is more than the 4096 GPUs"));
}

TEST_CASE("GPU and link figures outside physical ranges are refused, not turned into overflowing times") {
  REQUIRE(starts_with(error_of({"cluster.gpu.bf16_tflops=1e-12"}),
                      "cluster.gpu.bf16_tflops: must be in [0.1, 1e+06]"));
  REQUIRE(starts_with(error_of({"cluster.nvlink_latency_us=1e300"}),
                      "cluster.nvlink_latency_us: must be in [0, 1e+06], got 1e+300"));
  REQUIRE(starts_with(error_of({"cluster.nvlink_latency_us=1e7"}),
                      "cluster.nvlink_latency_us: must be in [0, 1e+06]"));
  REQUIRE(starts_with(error_of({"cluster.gpu.hbm_tb_per_s=1e-9"}), "cluster.gpu.hbm_tb_per_s: must be in"));
}

TEST_CASE("trace timestamps beyond the picosecond clock are refused at their line, never wrapped") {
  // The clock holds 2^63 ps = 106.75 days; a row 107 days after the first cannot be represented.
  const std::string far = temp_file("far.csv",
                                    "TIMESTAMP,ContextTokens,GeneratedTokens\n"
                                    "2023-11-16 18:15:46.0,10,5\n"
                                    "2023-11-17 18:15:46.0,10,5\n"
                                    "2024-03-03 18:15:46.0,10,5\n");
  REQUIRE_THROWS_WITH(read_trace(far, "azure_csv", "f"),
                      Catch::StartsWith(far + ":4: this row is 9.3312e+06 s"));
  // 100 days fit the clock and keep their order (the row is not wrapped to t = 0).
  const std::string ok = temp_file("ok.csv",
                                   "TIMESTAMP,ContextTokens,GeneratedTokens\n"
                                   "2023-11-16 18:15:46.0,10,5\n"
                                   "2024-02-24 18:15:46.0,10,5\n");
  const auto rows = read_trace(ok, "azure_csv", "f");
  REQUIRE(rows.back().arrival.seconds() == Approx(100 * 86400.0));
  const std::string moon = temp_file("far.jsonl",
                                     "{\"timestamp\": 0, \"input_length\": 5, \"output_length\": 2}\n"
                                     "{\"timestamp\": 1e10, \"input_length\": 5, \"output_length\": 2}\n");
  REQUIRE_THROWS_WITH(read_trace(moon, "mooncake_jsonl", "f"),
                      Catch::StartsWith(moon + ":2: this row is 1e+07 s"));
}

TEST_CASE("non-finite and overflowing trace fields are refused at their line") {
  const std::string nan_s = temp_file("nan.csv",
                                      "TIMESTAMP,ContextTokens,GeneratedTokens\n"
                                      "2023-11-16 18:15:46.0,10,5\n"
                                      "2023-11-16 18:15:nan,10,5\n");
  REQUIRE_THROWS_WITH(read_trace(nan_s, "azure_csv", "f"), Catch::StartsWith(nan_s + ":3: bad TIMESTAMP"));
  const std::string big = temp_file("big.csv",
                                    "TIMESTAMP,ContextTokens,GeneratedTokens\n"
                                    "2023-11-16 18:15:46.0,10,9223372036854775807\n");
  REQUIRE_THROWS_WITH(read_trace(big, "azure_csv", "f"),
                      Catch::StartsWith(big + ":2: token counts must be in"));
  const std::string inf =
      temp_file("inf.jsonl", "{\"timestamp\": 1e309, \"input_length\": 5, \"output_length\": 2}\n");
  REQUIRE_THROWS_WITH(read_trace(inf, "mooncake_jsonl", "f"), Catch::StartsWith(inf + ":1: unreadable JSON"));
}

TEST_CASE("a slow-motion trace replay must fit the simulated horizon unless the run is cut") {
  const std::string trace = temp_file("span.csv",
                                      "TIMESTAMP,ContextTokens,GeneratedTokens\n"
                                      "2023-11-16 18:15:46.0,10,5\n"
                                      "2023-11-16 19:15:46.0,10,5\n");
  Json j = base();
  j["workload"] = Json::parse(R"({"arrival": {"kind": "trace", "format": "azure_csv", "speedup": 1e-3}})");
  j["workload"]["arrival"]["file"] = trace;
  j["run"] = Json::object();
  // One hour at speedup 1e-3 is 3.6e6 s, beyond the 1e6 s a run simulates.
  REQUIRE(starts_with(error_of({}, j), "workload.arrival.speedup: the trace spans 3.6e+06 s"));
  REQUIRE(error_of({"run.duration_s=1000"}, j).empty());
  REQUIRE(error_of({"workload.arrival.speedup=0.01"}, j).empty());
}
