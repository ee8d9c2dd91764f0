// Text and files as a hostile user gives them: invalid UTF-8, NUL bytes in keys, duplicate keys, --set paths
// deeper than the nesting bound, FIFOs and /dev/zero as files, and values of the newer keys that are legal
// JSON but break the arithmetic downstream (Zipf exponents, link efficiencies, arrival rates, prefix-cache
// sizes, ServeGen windows and rates, draft models' weights). Each is refused naming its key or file.
#include <sys/stat.h>

#include <catch2/catch.hpp>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <string>
#include <thread>

#include "hwmodels/roofline_cost_model.h"
#include "sim/scenario/json_reader.h"
#include "sim/scenario/line_reader.h"
#include "sim/scenario/scenario_parser.h"
#include "sim/scenario/servegen_reader.h"
#include "sim/scenario/trace_reader.h"
#include "sim/serving/runtime/serving_simulation.h"
#include "sim/serving/spec/memory_plan.h"
#include "tests/support/scenario_error.h"

using namespace moesim;

namespace {

namespace fs = std::filesystem;

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

// The toy model of scenarios/tiny (2 layers, 4 experts, hidden 1024) on one H100.
Json tiny() {
  return Json::parse(R"({
    "name": "tiny",
    "model": {"num_layers": 2, "num_dense_layers": 0, "hidden": 1024, "vocab": 1000, "attention": "gqa",
              "num_heads": 8, "num_kv_heads": 8, "head_dim": 128, "routed_experts": 4, "shared_experts": 0,
              "top_k": 4, "expert_inter": 512},
    "cluster": {"gpu": "h100-sxm", "nodes": 1, "gpus_per_node": 1},
    "deployment": {"ep_size": 1},
    "workload": {"arrival": {"kind": "poisson", "rate_per_s": 5},
                 "prompt_tokens": {"kind": "fixed", "tokens": 100},
                 "output_tokens": {"kind": "fixed", "tokens": 10}},
    "run": {"requests": 10}})");
}

// The message a scenario with `overrides` applied is refused with (an override's own or the parser's), empty
// when it parses.
std::string error_of(const std::vector<std::string>& overrides, Json j = base()) {
  try {
    for (const auto& o : overrides) apply_override(j, o);
  } catch (const InputError& e) {
    return e.what();
  }
  return moesim_test::error_of(j);
}

std::string fits_error(const Json& j) {
  try {
    const LoadedScenario sc = parse_scenario(j, "");
    const RooflineCostModel gpu(sc.spec.cluster.gpu);
    check_deployment_fits(sc.spec, gpu);
    return "";
  } catch (const InputError& e) {
    return e.what();
  }
}

bool starts_with(const std::string& s, const std::string& prefix) { return s.rfind(prefix, 0) == 0; }

fs::path temp_path(const std::string& name) { return fs::temp_directory_path() / ("moesim_hostile_" + name); }

std::string temp_file(const std::string& name, const std::string& text) {
  const fs::path p = temp_path(name);
  std::ofstream(p, std::ios::binary) << text;
  return p.string();
}

}  // namespace

TEST_CASE("UTF-8 is checked by RFC 3629: shortest forms, no surrogates, nothing past U+10FFFF") {
  CHECK(is_valid_utf8("plain ascii"));
  CHECK(is_valid_utf8("h\xC3\xA9llo \xE2\x82\xAC \xF0\x9F\x98\x80"));  // e acute, euro sign, an emoji
  CHECK(is_valid_utf8(std::string("nul\0inside", 10)));                // U+0000 is a character
  CHECK_FALSE(is_valid_utf8("\xFF"));
  CHECK_FALSE(is_valid_utf8("\xC0\xAF"));          // overlong '/'
  CHECK_FALSE(is_valid_utf8("\xE0\x80\xAF"));      // overlong, three bytes
  CHECK_FALSE(is_valid_utf8("\xED\xA0\x80"));      // UTF-16 surrogate D800
  CHECK_FALSE(is_valid_utf8("\xF4\x90\x80\x80"));  // U+110000
  CHECK_FALSE(is_valid_utf8("\xE2\x82"));          // truncated
  CHECK_FALSE(is_valid_utf8("\x80"));              // a lone continuation byte
  // Messages quote such text escaped: every byte visible, nothing cut at a NUL.
  CHECK(printable(std::string("a\0b\xFF\xC3\xA9", 6)) == "a\\x00b\\xFF\xC3\xA9");
}

TEST_CASE("invalid UTF-8 in a --set path or value is refused where it is read, with its path") {
  Json j = base();
  REQUIRE_THROWS_WITH(apply_override(j, "name=\xFF"),
                      Catch::StartsWith("--set name: \"\\xFF\" is not valid UTF-8"));
  REQUIRE_THROWS_WITH(apply_override(j, "na\xC0\xAFme=x"), Catch::StartsWith("--set na\\xC0\\xAFme: "));
  // Inside a JSON value the parser refuses it (line:column of the value).
  REQUIRE_THROWS_WITH(apply_override(j, "workload={\"a\": \"\xFF\"}"),
                      Catch::StartsWith("--set workload: ") && Catch::Contains("is not valid UTF-8"));
  // Valid UTF-8 passes unchanged.
  apply_override(j, "name=caf\xC3\xA9");
  CHECK(j["name"] == "caf\xC3\xA9");
}

TEST_CASE("a NUL byte in a key is reported escaped, the message whole") {
  Json j = base();
  j["sla"] = Json::parse("{\"na\\u0000me\": 1}");
  const std::string e = error_of({}, j);
  REQUIRE(starts_with(e, "sla.na\\x00me: unknown key (known keys here: "));
  CHECK(e.find('\0') == std::string::npos);
  // A NUL in a value that a message quotes (an unknown name) is escaped too.
  Json model = base();
  model["model"] = std::string("qwen\0x", 6);
  REQUIRE(starts_with(error_of({}, model), "model: unknown name \"qwen\\x00x\" (known: "));
  Json engine = base();
  engine["deployment"]["engine"] = std::string("v\0", 2);
  REQUIRE(starts_with(error_of({}, engine), "deployment.engine: unknown engine \"v\\x00\""));
  // The C string the CLI prints is the whole message.
  try {
    (void)parse_scenario(j, "");
  } catch (const InputError& err) {
    CHECK(std::string(err.what()) == e);
  }
}

TEST_CASE("a key given twice in one object is refused with its JSON path, in files, --set and traces") {
  REQUIRE_THROWS_WITH(parse_json_text(R"({"deployment": {"ep_size": 4, "ep_size": 2}})", "s.json"),
                      Catch::StartsWith("s.json: deployment.ep_size: this key appears twice"));
  REQUIRE_THROWS_WITH(parse_json_text(R"({"a": [{"x": 1}, {"y": 1, "x": 2, "y": 3}]})", "s.json"),
                      Catch::StartsWith("s.json: a[1].y: this key appears twice"));
  REQUIRE_THROWS_WITH(parse_json_text(R"({"a": [[1, 2], {"k": {"z": 1, "z": 1}}]})", "s.json"),
                      Catch::StartsWith("s.json: a[1].k.z: this key appears twice"));
  // Equal keys in different objects are fine.
  CHECK_NOTHROW(parse_json_text(R"({"a": {"x": 1}, "b": {"x": 1}, "x": [{"x": 1}, {"x": 2}]})", "s.json"));
  Json j = base();
  REQUIRE_THROWS_WITH(apply_override(j, "deployment={\"ep_size\": 4, \"ep_size\": 2}"),
                      Catch::StartsWith("--set deployment: ep_size: this key appears twice"));
  const std::string trace = temp_file(
      "dup.jsonl", "{\"timestamp\": 0, \"input_length\": 5, \"output_length\": 5, \"output_length\": 6}\n");
  REQUIRE_THROWS_WITH(read_trace(trace, "mooncake_jsonl", "f"),
                      Catch::StartsWith(trace + ":1: output_length: this key appears twice"));
}

TEST_CASE("a --set path nests at most 64 levels with its value, refused before anything is built") {
  auto path_of = [](int segments) {
    std::string p = "a";
    for (int i = 1; i < segments; ++i) p += ".a";
    return p;
  };
  // The root object is level 1; a path of n keys to a scalar nests n levels.
  Json j = Json::object();
  CHECK_NOTHROW(apply_override(j, path_of(kMaxJsonDepth) + "=1"));
  Json k = Json::object();
  REQUIRE_THROWS_WITH(apply_override(k, path_of(kMaxJsonDepth + 1) + "=1"),
                      Catch::Contains("nests the scenario 65 levels deep, more than the 64"));
  // The value's own nesting counts: 63 keys and [[1]] are 65 levels.
  REQUIRE_THROWS_WITH(apply_override(k, path_of(kMaxJsonDepth - 1) + "=[[1]]"),
                      Catch::Contains("65 levels deep"));
  // A path of 200,000 keys is refused at once, without a recursion over it (no stack overflow).
  REQUIRE_THROWS_WITH(apply_override(k, path_of(200000) + "=1"), Catch::Contains("200000 levels deep"));
  CHECK(k.empty());
}

TEST_CASE("dp x tp is computed in 64 bits and an EP group larger than the cluster is refused") {
  const std::int64_t product = std::int64_t{65536} * 65536;  // wraps to 0 in 32 bits
  const std::string e = error_of({"deployment.attention={\"dp\": 65536, \"tp\": 65536}"});
  REQUIRE(starts_with(e, "deployment.attention.dp: dp x tp = " + std::to_string(product) + " must equal"));
  Json pools = tiny();
  pools["cluster"]["gpus_per_node"] = 2;
  pools["deployment"] =
      Json::parse(R"({"ep_size": 1, "pools": [{"role": "both", "instances": 1, "ep_size": 4}]})");
  REQUIRE(
      starts_with(error_of({}, pools), "deployment.pools[0].ep_size: 4 is more than the cluster's 2 GPUs"));
}

TEST_CASE("in-range values that break the arithmetic of newer keys are refused by their path") {
  // A Zipf exponent past 20: the tail's weights i^-s underflow a double (4^-800 = 0).
  REQUIRE(std::pow(4.0, -800.0) == 0.0);
  REQUIRE(starts_with(error_of({"workload.expert_popularity={\"kind\":\"zipf\",\"exponent\":800}"}),
                      "workload.expert_popularity.exponent: must be in [0, 20], got 800"));
  CHECK(error_of({"workload.expert_popularity={\"kind\":\"zipf\",\"exponent\":20}"}).empty());
  // A link efficiency of 1e-12 would make a 1 GB transfer take 1e13 s at 0.1 GB/s.
  REQUIRE(starts_with(
      error_of({"cluster.fabric={\"base\":\"hgx-h100-8x400g\",\"all_to_all_kernels\":{\"high_throughput\":"
                "{\"nvlink_efficiency\":1e-12}}}",
                "cluster.gpus_per_node=8", "deployment.ep_size=8"}),
      "cluster.fabric.all_to_all_kernels.high_throughput.nvlink_efficiency: must be in [0.01, 1], got "
      "1e-12"));
  REQUIRE(starts_with(error_of({"cluster.gpu.mem_efficiency=1e-12"}),
                      "cluster.gpu.mem_efficiency: must be in [0.01, 1]"));
  // An arrival rate of 1e12 for 60 s plans 6e13 requests: refused by the rate, not grown into memory.
  REQUIRE(starts_with(error_of({"workload.arrival.rate_per_s=1e12", "run.duration_s=60", "run.requests=0"}),
                      "workload.arrival.rate_per_s: rate x run.duration_s plans 6e+13 requests"));
  // With run.requests the count bounds it, and a count past the bound is refused by its own key.
  CHECK(error_of({"workload.arrival.rate_per_s=1e12", "run.duration_s=60", "run.requests=1000"}).empty());
  REQUIRE(starts_with(error_of({"run.requests=100000000"}), "run.requests: 1e+08 requests are more than"));
}

TEST_CASE("prefix caching that would index more KV blocks than the simulator holds is refused") {
  Json j = tiny();
  j["model"]["num_kv_heads"] = 1;
  j["model"]["head_dim"] = 16;
  j["deployment"]["prefix_caching"] = true;
  j["deployment"]["kv_block_tokens"] = 1;
  // A token's KV: K and V over 2 layers x 1 head x 16 dims in BF16 = 128 bytes, so an H100's pool holds
  // hundreds of millions of one-token blocks.
  const LoadedScenario sc = parse_scenario(j, "");
  const MemoryPlan m = plan_memory(sc.spec);
  REQUIRE(m.kv_bytes_per_token == Approx(2.0 * 2 * 1 * 16 * 2));
  REQUIRE(m.kv_blocks_per_group > kMaxPrefixCacheBlocks);
  REQUIRE(starts_with(fits_error(j), "deployment.kv_block_tokens: prefix caching indexes every KV block"));
  // With blocks of 512 tokens the same pool is indexable, and without prefix caching nothing is indexed.
  j["deployment"]["kv_block_tokens"] = 512;
  CHECK(m.kv_blocks_per_group / 512 <= kMaxPrefixCacheBlocks);
  CHECK(fits_error(j).empty());
  j["deployment"]["kv_block_tokens"] = 1;
  j["deployment"]["prefix_caching"] = false;
  CHECK(fits_error(j).empty());
}

TEST_CASE("each pool's kv_block_tokens must split the trace's hash blocks when it caches prefixes") {
  const std::string trace =
      temp_file("pool_keys.jsonl",
                "{\"timestamp\": 0, \"input_length\": 600, \"output_length\": 5, \"hash_ids\": [1, 2]}\n");
  Json j = tiny();
  j["cluster"]["gpus_per_node"] = 2;
  j["workload"] = Json{{"arrival", {{"kind", "trace"}, {"format", "mooncake_jsonl"}, {"file", trace}}}};
  j["deployment"] = Json::parse(R"({"ep_size": 1, "pools": [
      {"role": "prefill", "instances": 1, "prefix_caching": true, "kv_block_tokens": 24},
      {"role": "decode", "instances": 1}]})");
  REQUIRE(512 % 24 != 0);
  REQUIRE(starts_with(error_of({}, j),
                      "deployment.pools[0].kv_block_tokens: 24 does not divide the trace's "
                      "512-token hash blocks"));
  j["deployment"]["pools"][0]["kv_block_tokens"] = 32;
  CHECK(error_of({}, j).empty());
}

TEST_CASE("a trace is read once, so a FIFO works, and a file without newlines is refused, not read whole") {
  const fs::path fifo = temp_path("trace.fifo");
  fs::remove(fifo);
  REQUIRE(::mkfifo(fifo.c_str(), 0600) == 0);
  const std::string rows =
      "{\"timestamp\": 0, \"input_length\": 1024, \"output_length\": 5, \"hash_ids\": [7, 8]}\n"
      "{\"timestamp\": 10, \"input_length\": 512, \"output_length\": 5, \"hash_ids\": [7]}\n";
  std::thread writer([&] { std::ofstream(fifo) << rows; });
  const KeyedTrace t = read_trace_with_keys(fifo.string(), "mooncake_jsonl", "f");
  writer.join();
  REQUIRE(t.rows.size() == 2);
  CHECK(t.rows[0].prefix_blocks == 2);
  CHECK(t.rows[1].prefix_ref == 2);
  CHECK(t.keys.keys == std::vector<std::uint64_t>{7, 8, 7});
  fs::remove(fifo);
  // /dev/zero is one endless line: refused at its line once it passes the line bound.
  REQUIRE_THROWS_WITH(read_trace("/dev/zero", "azure_csv", "f"),
                      Catch::StartsWith("/dev/zero:1: the line is longer than 16 MiB"));
  REQUIRE_THROWS_WITH(read_trace("/dev/null", "mooncake_jsonl", "f"),
                      Catch::StartsWith("/dev/null: the trace has no requests"));
  REQUIRE_THROWS_WITH(read_trace(fs::temp_directory_path().string(), "azure_csv", "f"),
                      Catch::Contains("is a folder, not a trace file"));
  // A JSON file is bounded too: a scenario of /dev/zero stops at its first byte (NUL, not text), and a
  // text larger than the cap at the cap.
  REQUIRE_THROWS_WITH(load_json_file("/dev/zero"), Catch::StartsWith("/dev/zero: byte 1 is a NUL byte"));
  const fs::path big = temp_path("big.json");
  std::ofstream(big) << std::string((std::size_t{3} << 20) - 1, ' ') << "{}";
  REQUIRE_THROWS_WITH(read_file_bounded(big.string(), std::size_t{2} << 20, "the JSON file"),
                      Catch::StartsWith(big.string() + ": the JSON file is larger than 2 MiB"));
  REQUIRE(read_file_bounded(big.string(), std::size_t{4} << 20, "the JSON file").size() ==
          (std::size_t{3} << 20) + 1);
  fs::remove(big);
}

TEST_CASE("a scenario file is read once: the loaders take its document, so a FIFO scenario loads") {
  const fs::path fifo = temp_path("scenario.fifo");
  fs::remove(fifo);
  REQUIRE(::mkfifo(fifo.c_str(), 0600) == 0);
  std::thread writer([&] { std::ofstream(fifo) << base().dump(); });
  const LoadedScenario sc = load_scenario(fifo.string(), {"run.requests=7"});
  writer.join();
  CHECK(sc.spec.run.requests == 7);
  fs::remove(fifo);
}

TEST_CASE("ServeGen windows past the horizon, absurd rates and replays too large to sample are refused") {
  const fs::path d = temp_path("servegen");
  fs::remove_all(d);
  fs::create_directories(d);
  const auto client = [&](const std::string& trace) {
    std::ofstream(d / "chunk-1-trace.csv") << trace;
    std::ofstream(d / "chunk-1-dataset.json")
        << R"({"0": {"input_tokens": "{100: 1.0}", "output_tokens": "{10: 1.0}"}})";
    return (d / "chunk-1-trace.csv").string();
  };
  // Windows 1e7 s apart would put arrivals 1e7 s into the run.
  const std::string far = client("0,1,1,Gamma,1,1\n10000000,1,1,Gamma,1,1\n");
  REQUIRE_THROWS_WITH(read_servegen(far), Catch::StartsWith(far + ":2: the window starts past 1e6 s"));
  const std::string rate = client("0,1e300,1,Gamma,1,1\n");
  REQUIRE_THROWS_WITH(read_servegen(rate), Catch::StartsWith(rate + ":1: rate must be at most 1e6"));
  const std::string shape = client("0,1,1,Weibull,1e-300,1\n");
  REQUIRE_THROWS_WITH(read_servegen(shape), Catch::Contains("shape must be in [1e-4, 1e4]"));
  // 1 req/s x rate_scale 1e6 x a 600 s window is 6e8 requests to sample: refused by rate_scale.
  const std::string ok = client("0,1,1,Gamma,1,1\n600,1,1,Gamma,1,1\n");
  Json j = base();
  j["workload"] =
      Json{{"arrival", {{"kind", "trace"}, {"format", "servegen"}, {"file", ok}, {"rate_scale", 1e6}}}};
  j["run"] = Json{{"duration_s", 600}};
  REQUIRE(starts_with(error_of({}, j), "workload.arrival.rate_scale: the replay would sample about 6e+08"));
  j["workload"]["arrival"]["rate_scale"] = 2;
  CHECK(error_of({}, j).empty());
  // Token counts past a trace row's bound.
  REQUIRE_THROWS_WITH(parse_token_pmf("{1000000000: 1.0}", "f"), Catch::Contains("integers in [0, 1e8]"));
}

TEST_CASE("a speculative draft model's weights are in the memory plan, so a 1T draft does not fit") {
  Json j = tiny();
  const double without = plan_memory(parse_scenario(j, "").spec).weights_per_gpu.total();
  // The draft is the target's own shape: on one GPU (EP1, TP1) it adds exactly the target's weights.
  j["deployment"]["speculative"] =
      Json{{"draft_tokens", 1}, {"acceptance", {0.7}}, {"draft", {{"model", j["model"]}}}};
  const MemoryPlan with = plan_memory(parse_scenario(j, "").spec);
  CHECK(with.weights_per_gpu.draft_model == Approx(without));
  CHECK(with.weights_per_gpu.total() == Approx(2 * without));
  // A 1,040B draft beside a 30B target on 8 H100s: even at one byte a parameter, 1,040e9 / 8 GPUs is
  // 130 GB per GPU, more than an H100's 80 GB.
  Json big = base();
  big["cluster"]["gpus_per_node"] = 8;
  big["deployment"]["ep_size"] = 8;
  big["deployment"]["speculative"] =
      Json{{"draft_tokens", 1}, {"acceptance", {0.7}}, {"draft", {{"model", "kimi-k2"}}}};
  REQUIRE(starts_with(fits_error(big), "deployment: model qwen3-30b-a3b does not fit"));
  big["deployment"].erase("speculative");
  CHECK(fits_error(big).empty());
}

TEST_CASE("a --set path reaches into an array by index, and a bad index names the path") {
  Json j = Json::parse(R"({"deployment": {"pools": [{"role": "prefill", "instances": 2},
                                                    {"role": "decode", "instances": 1}]}})");
  apply_override(j, "deployment.pools[0].instances=3");
  apply_override(j, "deployment.pools[1].attention={\"dp\": 8}");
  CHECK(j["deployment"]["pools"][0]["instances"] == 3);
  CHECK(j["deployment"]["pools"][1]["attention"]["dp"] == 8);
  CHECK(j["deployment"]["pools"][1]["role"] == "decode");
  apply_override(j, "deployment.pools[1]={\"role\": \"decode\", \"instances\": 4}");  // a whole entry
  CHECK(j["deployment"]["pools"][1]["instances"] == 4);
  REQUIRE_THROWS_WITH(apply_override(j, "deployment.pools[2].instances=1"),
                      Catch::Contains("deployment.pools[2]: pools has 2 entries (indices from 0)"));
  REQUIRE_THROWS_WITH(apply_override(j, "deployment.ep[0]=1"),
                      Catch::Contains("deployment.ep[0]: ep is not an array in the scenario"));
  for (const char* bad : {"deployment.pools[x].instances=1", "deployment.pools[].instances=1",
                          "deployment.pools[1.instances=1", "deployment.[1].instances=1"}) {
    INFO(bad);
    REQUIRE_THROWS_WITH(apply_override(j, bad), Catch::Contains("expected name[index] with a decimal index"));
  }
}

TEST_CASE("a scenario with a NUL byte is refused at that byte, and /dev/zero at once") {
  const std::filesystem::path p = std::filesystem::temp_directory_path() / "moesim_nul_scenario.json";
  {
    std::ofstream f(p, std::ios::binary);
    f << "{\"name\": \"x\"";
    f.put('\0');
    f << "}\n";
  }
  REQUIRE_THROWS_WITH(load_scenario(p.string(), {}), Catch::Contains("byte 13 is a NUL byte"));
  std::filesystem::remove(p);
  REQUIRE_THROWS_WITH(load_scenario("/dev/zero", {}), Catch::Contains("/dev/zero: byte 1 is a NUL byte"));
}
