// Prefix caching in the runtime (deployment.prefix_caching): the hits a run counts on a hand-built
// Mooncake trace and on a shared system prompt, against the ideal hit rate computed from the keys alone.
#include <catch2/catch.hpp>
#include <filesystem>
#include <fstream>
#include <map>
#include <string>
#include <vector>

#include "hwmodels/roofline_cost_model.h"
#include "sim/scenario/scenario_parser.h"
#include "sim/scenario/trace_reader.h"
#include "sim/serving/offline/prefix_hit_analysis.h"
#include "sim/serving/runtime/serving_simulation.h"
#include "sim/serving/spec/memory_plan.h"
#include "workloads/prefixed_source.h"

using namespace moesim;

namespace {

// Six prompts of whole 512-token blocks, 100 s apart (each is served alone): shared heads, a full repeat
// (row 2) and a second family (rows 3 and 5).
const std::vector<std::vector<int>> kRows = {{0, 1, 2}, {0, 1, 3},    {0, 1, 2},
                                             {4, 5},    {0, 1, 3, 6}, {4, 5, 7}};

std::string write_trace() {
  const auto path = std::filesystem::temp_directory_path() / "moesim_prefix_caching_test.jsonl";
  std::ofstream f(path);
  for (std::size_t i = 0; i < kRows.size(); ++i) {
    f << "{\"timestamp\": " << i * 100000 << ", \"input_length\": " << kRows[i].size() * 512
      << ", \"output_length\": 2, \"hash_ids\": [";
    for (std::size_t j = 0; j < kRows[i].size(); ++j) f << (j ? ", " : "") << kRows[i][j];
    f << "]}\n";
  }
  return path.string();
}

Json tiny_model() {
  std::ifstream f(std::string(MOESIM_SOURCE_DIR) + "/scenarios/tiny/tiny_model_closed_loop.json");
  Json j = Json::parse(f);
  j["deployment"]["chunked_prefill"] = true;
  j["run"] = Json::object();
  return j;
}

Report run(const Json& j) {
  const LoadedScenario sc = parse_scenario(j, MOESIM_SOURCE_DIR);
  const RooflineCostModel gpu(sc.spec.cluster.gpu);
  return simulate(sc.spec, gpu);
}

Json trace_scenario(const std::string& file) {
  Json j = tiny_model();
  j["workload"] = Json{{"arrival", {{"kind", "trace"}, {"format", "mooncake_jsonl"}, {"file", file}}}};
  j["deployment"]["prefix_caching"] = true;
  return j;
}

}  // namespace

TEST_CASE("with a pool larger than the trace, the runtime hits the ideal prefix hits of the hash ids") {
  const std::string file = write_trace();
  const KeyedTrace t = read_mooncake_keyed(file);
  const Report r = run(trace_scenario(file));
  REQUIRE(r.requests_finished == 6);
  REQUIRE(r.preemptions == 0);
  // Per row, the ideal hits (an infinite cache, from the keys alone), less what vLLM recomputes: a
  // prompt found whole still computes its last token, so its hit stops at the last full 16-token block
  // before that token.
  std::int64_t expected_tokens = 0;
  std::int64_t ideal_before = 0;
  for (std::size_t i = 0; i < t.rows.size(); ++i) {
    const std::int64_t ideal =
        ideal_prefix_hits(std::span<const RequestSpec>(t.rows).first(i + 1), t.keys).hit_tokens;
    const std::int64_t row_hit = ideal - ideal_before;
    ideal_before = ideal;
    expected_tokens += std::min(row_hit, (t.rows[i].prompt_tokens - 1) / 16 * 16);
  }
  const PrefixHitResult ideal = ideal_prefix_hits(t.rows, t.keys);
  // Rows 1..5 hit 2, 3 (less one 16-token block), 0, 3 and 2 blocks of 512.
  REQUIRE(ideal.hit_tokens == 10 * 512);
  CHECK(expected_tokens == 10 * 512 - 16);
  CHECK(r.prefix_cache.hit_tokens == expected_tokens);
  CHECK(r.prefix_cache.prefill_tokens_saved == expected_tokens);  // no preemption: no readmission
  CHECK(r.prefix_cache.hit_blocks == expected_tokens / 16);
  CHECK(r.prefix_cache.lookup_tokens == ideal.tokens);
  CHECK(r.prefix_cache.lookup_blocks == ideal.blocks * 512 / 16);
  CHECK(r.prefix_cache.lookups == 6);
  CHECK(r.prefix_cache.evicted_blocks == 0);
  CHECK(r.prefix_cache.token_hit_rate == Approx(double(expected_tokens) / double(ideal.tokens)));
}

TEST_CASE("with a pool smaller than the trace's blocks, evictions cost hits") {
  const std::string file = write_trace();
  const KeyedTrace t = read_mooncake_keyed(file);
  Json j = trace_scenario(file);
  // Size the pool to 120 blocks of 16 tokens: 1,920 tokens, just over the longest request (2,048 + 2).
  const LoadedScenario big = parse_scenario(j, MOESIM_SOURCE_DIR);
  const MemoryPlan m = plan_memory(big.spec);
  const double block_bytes = m.kv_pool_bytes_per_gpu / static_cast<double>(m.kv_blocks_per_group);
  const double hbm = big.spec.cluster.gpu.hbm_bytes;
  const double fixed = 0.9 * hbm - m.kv_pool_bytes_per_gpu;  // what the pool does not get at fraction 0.9
  j["deployment"]["kv_cache_memory_fraction"] = (fixed + 130.5 * block_bytes) / hbm;
  const LoadedScenario small = parse_scenario(j, MOESIM_SOURCE_DIR);
  const std::int64_t blocks = plan_memory(small.spec).kv_blocks_per_group;
  REQUIRE(blocks == 130);
  const Report r = run(j);
  REQUIRE(r.requests_finished == 6);
  const PrefixHitResult ideal = ideal_prefix_hits(t.rows, t.keys);
  CHECK(r.prefix_cache.evicted_blocks > 0);
  REQUIRE(r.preemptions == 0);
  CHECK(r.prefix_cache.hit_tokens < ideal.hit_tokens - 16);
  // An LRU cache replayed offline over whole 512-token blocks: 130 KV blocks hold 4 of them.
  const PrefixHitResult lru = lru_prefix_hits(t.rows, t.keys, 4);
  CHECK(r.prefix_cache.hit_tokens >= lru.hit_tokens - 16);
}

TEST_CASE("a system prompt shared by every request is computed once when requests come one at a time") {
  Json j = tiny_model();
  j["workload"] = Json::parse(R"({"arrival": {"kind": "poisson", "rate_per_s": 0.05},
      "prompt_tokens": {"kind": "fixed", "tokens": 40}, "output_tokens": {"kind": "fixed", "tokens": 3},
      "prefix": {"system_prompt_tokens": 1000}})");
  j["deployment"]["prefix_caching"] = true;
  j["run"] = Json{{"requests", 20}, {"seed", 3}};
  const Report r = run(j);
  REQUIRE(r.requests_finished == 20);
  // 1,000 tokens of system prompt = 62 full blocks of 16 shared; the 63rd block mixes the system prompt's
  // tail with the user's message and is the request's own.
  CHECK(r.prefix_cache.hit_tokens == 19 * 62 * 16);
  CHECK(r.prefix_cache.lookup_tokens == 20 * 1040);
  CHECK(r.prefix_cache.lookup_blocks == 20 * 65);  // ceil(1040 / 16)
  // Off, the same run computes every prompt token and reports no prefix section.
  j["deployment"]["prefix_caching"] = false;
  CHECK_FALSE(run(j).prefix_cache.enabled);
}

TEST_CASE("a conversation's next turn finds the full blocks of its previous turn's prompt and answer") {
  Json j = tiny_model();
  j["workload"] = Json::parse(R"({"arrival": {"kind": "poisson", "rate_per_s": 0.02},
      "prompt_tokens": {"kind": "fixed", "tokens": 40}, "output_tokens": {"kind": "fixed", "tokens": 20},
      "prefix": {"conversation": {"turns_mean": 3, "think_time_s": 200}}})");
  j["deployment"]["prefix_caching"] = true;
  j["run"] = Json{{"requests", 30}, {"seed", 5}};
  const LoadedScenario sc = parse_scenario(j, MOESIM_SOURCE_DIR);
  const Report r = run(j);
  REQUIRE(r.requests_finished == 30);
  // The same requests, from the same source and seed; arrivals tens of seconds apart are served alone.
  // A follow-up's prompt extends its previous turn's prompt and answer. The previous turn computed the KV
  // of its prompt and of all its answer but the last token (the last sampled token is never fed back), and
  // its full 16-token blocks stay cached, generated ones included (vLLM V1, SGLang); the follow-up
  // computes at least its last token.
  PrefixedSource src(*sc.spec.production.prefix, sc.spec.workload.arrivals, sc.spec.workload.prompt,
                     sc.spec.workload.output, RunLimits{.max_requests = 30}, RandomStreams(5));
  std::map<std::uint32_t, std::int64_t> last_computed;
  std::int64_t expected = 0;
  std::int64_t prompt_only = 0;  // what caching the prompts alone would hit
  std::map<std::uint32_t, std::int64_t> last_prompt;
  std::int64_t follow_ups = 0;
  while (const auto q = src.next()) {
    const auto it = last_computed.find(q->prefix_ref);
    if (it != last_computed.end()) {
      expected += std::min(it->second / 16, (q->prompt_tokens - 1) / 16) * 16;
      prompt_only += std::min(last_prompt[q->prefix_ref] / 16, (q->prompt_tokens - 1) / 16) * 16;
      ++follow_ups;
    }
    last_computed[q->prefix_ref] = q->prompt_tokens + q->output_tokens - 1;
    last_prompt[q->prefix_ref] = q->prompt_tokens;
  }
  REQUIRE(follow_ups > 5);
  CHECK(r.prefix_cache.hit_tokens == expected);
  CHECK(expected > prompt_only);  // the answers' blocks add hits
}

TEST_CASE("prefix caching off leaves a trace replay's results unchanged by the hash ids") {
  const std::string file = write_trace();
  Json on = trace_scenario(file);
  Json off = on;
  off["deployment"]["prefix_caching"] = false;
  const Report a = run(off);
  const Report b = run(on);
  CHECK_FALSE(a.prefix_cache.enabled);
  // The cache saves prefill: the mean TTFT drops.
  CHECK(b.ttft.mean < a.ttft.mean);
}

TEST_CASE("a trace without prompt identity gets a declared shared system prompt, and only that") {
  // An Azure 2023 CSV (token counts only), five prompts 100 s apart (each served alone), all longer than
  // the declared 1,000-token system prompt: each after the first finds its 62 full 16-token blocks.
  const auto path = std::filesystem::temp_directory_path() / "moesim_prefix_azure_test.csv";
  const std::vector<int> prompts = {1200, 1040, 2000, 1500, 1100};
  {
    std::ofstream f(path);
    f << "TIMESTAMP,ContextTokens,GeneratedTokens\n";
    for (std::size_t i = 0; i < prompts.size(); ++i)
      f << "2023-11-16 18:" << (10 + i * 2) << ":" << (i % 2 ? "40" : "00") << ".0000000," << prompts[i]
        << ",3\n";
  }
  Json j = tiny_model();
  j["workload"] = Json{{"arrival", {{"kind", "trace"}, {"format", "azure_csv"}, {"file", path.string()}}},
                       {"prefix", {{"system_prompt_tokens", 1000}}}};
  j["deployment"]["prefix_caching"] = true;
  const Report r = run(j);
  REQUIRE(r.requests_finished == 5);
  CHECK(r.prefix_cache.hit_tokens == 4 * 62 * 16);
  CHECK(r.prefix_cache.lookup_tokens == 1200 + 1040 + 2000 + 1500 + 1100);
  CHECK(r.prefix_cache.lookups == 5);

  // A trace that carries its own prefixes, or conversations over a replay, are refused with the path.
  Json keyed = trace_scenario(write_trace());
  keyed["workload"]["prefix"] = Json{{"system_prompt_tokens", 100}};
  CHECK_THROWS_WITH(parse_scenario(keyed, MOESIM_SOURCE_DIR),
                    Catch::Contains("workload.prefix") && Catch::Contains("hash_ids"));
  j["workload"]["prefix"]["conversation"] = Json{{"turns_mean", 2}};
  CHECK_THROWS_WITH(parse_scenario(j, MOESIM_SOURCE_DIR), Catch::Contains("workload.prefix.conversation"));
}
