// The production serving keys parse strictly with JSON paths (workload.prefix, deployment.speculative
// and its catalog entry), and a --set that mixes a trace replay with a synthetic arrival says what to remove.
#include "sim/scenario/production_parser.h"

#include <catch2/catch.hpp>
#include <string>

#include "sim/scenario/scenario_parser.h"

namespace moesim {
namespace {

Json synthetic() {
  return Json::parse(R"({
    "model": "qwen3-30b-a3b",
    "cluster": {"gpu": "h100-sxm", "nodes": 1, "gpus_per_node": 4},
    "deployment": {"ep_size": 4},
    "workload": {"arrival": {"kind": "poisson", "rate_per_s": 5},
                 "prompt_tokens": {"kind": "fixed", "tokens": 100},
                 "output_tokens": {"kind": "fixed", "tokens": 10}},
    "run": {"requests": 10}})");
}

Json trace() {
  Json j = synthetic();
  j["workload"] = Json::parse(R"({"arrival": {"kind": "trace", "format": "mooncake_jsonl",
      "file": "../shared/data/traces/mooncake_fast25_conversation/conversation_trace.jsonl"}})");
  return j;
}

LoadedScenario load(Json j, const std::vector<std::string>& overrides) {
  for (const auto& o : overrides) apply_override(j, o);
  return parse_scenario(j, MOESIM_SOURCE_DIR);
}

std::string error_of(Json j, const std::vector<std::string>& overrides) {
  try {
    (void)load(std::move(j), overrides);
    return "";
  } catch (const InputError& e) {
    return e.what();
  }
}

bool starts_with(const std::string& s, const std::string& p) { return s.rfind(p, 0) == 0; }
bool contains(const std::string& s, const std::string& p) { return s.find(p) != std::string::npos; }

}  // namespace

TEST_CASE("a --set of a synthetic arrival key on a trace replay says to remove it, not unknown key") {
  const std::string e = error_of(trace(), {"workload.arrival.rate_per_s=12"});
  CHECK(
      starts_with(e, "workload.arrival.rate_per_s: belongs to a poisson arrival, not to this \"trace\" one"));
  CHECK(contains(e, "remove workload.arrival.rate_per_s"));
  CHECK(contains(e, "workload.arrival.speedup"));
  CHECK_FALSE(contains(e, "unknown key"));
  const std::string lengths = error_of(trace(), {"workload.prompt_tokens={\"kind\":\"fixed\",\"tokens\":5}"});
  CHECK(starts_with(lengths,
                    "workload.prompt_tokens: a trace replay takes prompt and output lengths from its file; "
                    "remove workload.prompt_tokens"));
}

TEST_CASE("switching a trace scenario to a synthetic arrival by --set says which trace keys remain") {
  const std::string e = error_of(trace(), {"workload.arrival.kind=poisson", "workload.arrival.rate_per_s=3"});
  CHECK(starts_with(e, "workload.arrival.file: belongs to a trace arrival, not to this \"poisson\" one"));
  CHECK(contains(e, "--set 'workload.arrival={\"kind\":\"poisson\", ...}'"));
  // Replacing the whole arrival leaves the lengths to give.
  const std::string lengths = error_of(trace(), {"workload.arrival={\"kind\":\"poisson\",\"rate_per_s\":3}"});
  CHECK(starts_with(lengths, "workload.prompt_tokens: required with a \"poisson\" arrival"));
  CHECK(error_of(trace(), {"workload.arrival={\"kind\":\"poisson\",\"rate_per_s\":3}",
                           "workload.prompt_tokens={\"kind\":\"fixed\",\"tokens\":5}",
                           "workload.output_tokens={\"kind\":\"fixed\",\"tokens\":5}"})
            .empty());
  CHECK(starts_with(error_of(synthetic(), {"workload.arrival.cv=2"}),
                    "workload.arrival.cv: belongs to a gamma arrival, not to this \"poisson\" one"));
}

TEST_CASE("workload.prefix gives a shared system prompt and conversations with the KV block size") {
  const LoadedScenario s =
      load(synthetic(), {"deployment.kv_block_tokens=32",
                         "workload.prefix={\"system_prompt_tokens\":2000,\"conversation\":"
                         "{\"turns_mean\":3.5,\"think_time_s\":30}}"});
  REQUIRE(s.spec.production.prefix);
  const PrefixWorkloadSpec& p = *s.spec.production.prefix;
  CHECK(p.system_prompt_tokens == 2000);
  CHECK(p.block_tokens == 32);
  CHECK(p.conversations);
  CHECK(p.conversation.turns_mean == 3.5);
  CHECK(p.conversation.think_time_s == 30);
  CHECK(p.conversation.max_prompt_tokens == 32768);
  CHECK_FALSE(load(synthetic(), {}).spec.production.prefix);
  CHECK(starts_with(error_of(synthetic(), {"workload.prefix.system_prompt_tokns=5"}),
                    "workload.prefix.system_prompt_tokns: unknown key"));
  CHECK(starts_with(error_of(synthetic(), {"workload.prefix.conversation.turns_mean=0.5"}),
                    "workload.prefix.conversation.turns_mean: must be in [1, 10000]"));
  CHECK(starts_with(error_of(trace(), {"workload.prefix.system_prompt_tokens=5"}),
                    "workload.prefix: this trace carries its own prefixes (Mooncake hash_ids)"));
  CHECK(starts_with(error_of(synthetic(), {"workload.prefix.conversation.max_prompt_tokens=50"}),
                    "workload.prefix.conversation.max_prompt_tokens: must hold the longest first turn"));
}

TEST_CASE("deployment.speculative takes the DeepSeek-V3 MTP catalog entry or explicit acceptance rates") {
  const LoadedScenario mtp = load(synthetic(), {"deployment.speculative=deepseek-v3-mtp"});
  REQUIRE(mtp.spec.production.speculative);
  CHECK(mtp.spec.production.speculative->draft == DraftKind::kMtp);
  CHECK(mtp.spec.production.speculative->draft_tokens == 1);
  CHECK(mtp.spec.production.speculative->acceptance == std::vector<double>{0.85});
  const LoadedScenario two =
      load(synthetic(),
           {"deployment.speculative={\"draft_tokens\":2,\"acceptance\":[0.8,0.6],\"draft\":{\"model\":"
            "\"qwen3-30b-a3b\"}}"});
  REQUIRE(two.spec.production.speculative);
  CHECK(two.spec.production.speculative->draft == DraftKind::kModel);
  CHECK(two.spec.production.speculative->draft_model.num_layers == 48);
  CHECK(two.spec.production.speculative->draft_model_name == "qwen3-30b-a3b");
  CHECK(starts_with(error_of(synthetic(), {"deployment.speculative={\"draft_tokens\":2,\"acceptance\":[0.8],"
                                           "\"draft\":\"mtp\"}"}),
                    "deployment.speculative.acceptance: expected an array of 2 acceptance rates"));
  CHECK(starts_with(
      error_of(synthetic(), {"deployment.speculative={\"base\":\"deepseek-v3-mtp\",\"acceptance\":[1.5]}"}),
      "deployment.speculative.acceptance: entry 0 must be a number in [0, 1]"));
  CHECK(starts_with(error_of(synthetic(), {"deployment.speculative=eagle"}),
                    "deployment.speculative: unknown name \"eagle\""));
}

}  // namespace moesim

namespace moesim {

TEST_CASE("a model with no routed experts is a legal dense model, and expert keys on it say what to remove") {
  Json j = Json::parse(R"({
    "model": {"num_layers": 8, "hidden": 1024, "vocab": 1000, "attention": "gqa", "num_heads": 8,
              "num_kv_heads": 8, "head_dim": 128, "routed_experts": 0, "dense_inter": 4096},
    "cluster": {"gpu": "h100-sxm", "nodes": 1, "gpus_per_node": 1},
    "deployment": {},
    "workload": {"arrival": {"kind": "poisson", "rate_per_s": 5},
                 "prompt_tokens": {"kind": "fixed", "tokens": 100},
                 "output_tokens": {"kind": "fixed", "tokens": 10}},
    "run": {"requests": 10}})");
  const LoadedScenario s = parse_scenario(j, "");
  CHECK(s.spec.model.routed_experts == 0);
  CHECK(s.spec.model.top_k == 0);
  CHECK(s.spec.model.num_dense_layers == 8);
  CHECK(s.spec.model.moe_layers() == 0);
  auto error = [&](const std::string& o) {
    Json k = j;
    apply_override(k, o);
    try {
      (void)parse_scenario(k, "");
    } catch (const InputError& e) {
      return std::string(e.what());
    }
    return std::string();
  };
  CHECK(
      error("model.top_k=2").rfind("model.top_k: a dense model (routed_experts 0) routes to no expert", 0) ==
      0);
  CHECK(error("model.num_dense_layers=3").rfind("model.num_dense_layers: a dense model", 0) == 0);
  CHECK(error("model.routed_experts=-1").rfind("model.routed_experts: must be in [0, 1048576]", 0) == 0);
  CHECK(error("workload.expert_popularity.kind=zipf")
            .rfind("workload.expert_popularity: the model is dense", 0) == 0);
  CHECK(error("experts.placement=eplb").rfind("experts: the model is dense", 0) == 0);
  // A MoE model still needs a MoE layer.
  CHECK(error("model={\"base\":\"mixtral-8x7b\",\"num_dense_layers\":32}")
            .rfind("model.num_dense_layers: must be in [0, num_layers) for a MoE model", 0) == 0);
}

}  // namespace moesim

namespace moesim {

TEST_CASE("a Mooncake trace replay carries each request's hash ids in the loaded scenario") {
  Json j = Json::parse(R"({
    "model": "qwen3-30b-a3b",
    "cluster": {"gpu": "h100-sxm", "nodes": 1, "gpus_per_node": 4},
    "deployment": {"ep_size": 4},
    "workload": {"arrival": {"kind": "trace", "format": "mooncake_jsonl",
      "file": "../shared/data/traces/mooncake_fast25_conversation/conversation_trace.jsonl"}},
    "run": {}})");
  const LoadedScenario s = parse_scenario(j, MOESIM_SOURCE_DIR);
  const TraceBlockKeys& k = s.spec.production.trace_keys;
  CHECK(k.block_tokens == 512);
  CHECK(k.keys.size() == 288500);  // the blocks of every prompt (trace README: 36.6% of them reused)
  const RequestSpec& first = s.spec.workload.trace.front();
  // First line: input_length 6758 -> 14 blocks, ids 0..13.
  CHECK(first.prefix_blocks == 14);
  TraceSource src(s.spec.workload.trace, k, 1.0, {});
  std::vector<std::uint64_t> keys;
  src.prompt_block_keys(first, keys);
  CHECK(keys.front() == 0);
  CHECK(keys.back() == 13);
}

}  // namespace moesim

namespace moesim {

TEST_CASE("prefix caching, the cache-aware router and speculative decoding refuse what they cannot model") {
  CHECK(load(synthetic(), {"deployment.prefix_caching=true"}).spec.deployment.prefix_caching);
  CHECK_FALSE(load(synthetic(), {}).spec.deployment.prefix_caching);
  CHECK(starts_with(error_of(synthetic(), {"deployment.prefix_caching=3"}), "deployment.prefix_caching: "));
  CHECK(starts_with(error_of(synthetic(), {"deployment.router=cache_aware"}),
                    "deployment.router: cache_aware routes by the groups' prefix caches: set "
                    "deployment.prefix_caching true"));
  CHECK(load(synthetic(), {"deployment.router=cache_aware", "deployment.prefix_caching=true"})
            .spec.deployment.router == "cache_aware");
  // An unknown router is refused with every name of the router table.
  CHECK(starts_with(
      error_of(synthetic(), {"deployment.router=nearest"}),
      "deployment.router: unknown router \"nearest\" (known: least_loaded, round_robin, kv_aware, "
      "cache_aware)"));
  // 48-token KV blocks do not split the Mooncake trace's 512-token hash blocks.
  CHECK(starts_with(error_of(trace(), {"deployment.prefix_caching=true", "deployment.kv_block_tokens=48"}),
                    "deployment.kv_block_tokens: 48 does not divide the trace's 512-token hash blocks"));
  CHECK(error_of(trace(), {"deployment.kv_block_tokens=48"}).empty());  // no prefix caching: no constraint
  CHECK(
      starts_with(error_of(synthetic(), {"deployment.speculative=deepseek-v3-mtp", "deployment.ep_size=2",
                                         "deployment.pipeline={\"stages\":2}"}),
                  "deployment.speculative: speculative decoding is not modelled with pipeline parallelism"));
}

}  // namespace moesim
