// Conservation as a checked invariant: the ledgers' balances refuse a leaked request or KV block, and random
// small scenarios over every mechanism that moves requests or blocks (PD pools and their KV hand-off,
// migration, prefix caching, preemption under a small KV pool, drops from a bounded queue, speculative
// decoding, drains cut short) run to their end with both balances held (simulate checks them there).
#include "sim/serving/runtime/conservation.h"

#include <catch2/catch.hpp>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <string>

#include "hwmodels/roofline_cost_model.h"
#include "sim/engine/random.h"
#include "sim/scenario/scenario_parser.h"
#include "sim/serving/runtime/serving_simulation.h"
#include "sim/serving/spec/memory_plan.h"

using namespace moesim;

TEST_CASE("the request ledger balances only when every arrival is finished, dropped, failed or in flight") {
  RequestLedger l{.arrived = 10, .finished = 6, .dropped = 3, .dropped_by = {2, 1, 0}, .in_flight = 1};
  REQUIRE_NOTHROW(check_request_ledger(l));
  RequestLedger lost = l;
  lost.in_flight = 0;  // a request leaked by a mechanism: neither finished nor still held
  REQUIRE_THROWS_WITH(
      check_request_ledger(lost),
      Catch::Contains("10 requests arrived but 6 finished + 3 dropped + 0 failed + 0 in flight = 9"));
  RequestLedger reasons = l;
  reasons.dropped_by = {2, 0, 0};  // a drop counted without its reason
  REQUIRE_THROWS_AS(check_request_ledger(reasons), InternalError);
}

TEST_CASE("the KV ledger balances only when every block is free, cached or held") {
  REQUIRE_NOTHROW(
      check_kv_ledger(KvPoolLedger{.replica = 1, .group = 2, .total = 100, .available = 60, .held = 40}));
  REQUIRE_THROWS_WITH(
      check_kv_ledger(KvPoolLedger{.replica = 1, .group = 2, .total = 100, .available = 60, .held = 39}),
      Catch::Contains("replica 1 group 2 has 100 KV blocks but 60 free or cached + 39 held"));
  REQUIRE_THROWS_AS(check_kv_ledger(KvPoolLedger{.total = 100, .available = 61, .held = 40}), InternalError);
}

TEST_CASE("the KV-transfer ledger balances only when every cache sent is received or on the way") {
  // 5 caches of 1,000 B sent: 3 received, 2 on the way.
  KvTransferLedger l{.sent = 5,
                     .received = 3,
                     .in_transit = 2,
                     .bytes_sent = 5000,
                     .bytes_received = 3000,
                     .bytes_in_transit = 2000};
  REQUIRE_NOTHROW(check_kv_transfer_ledger(l));
  // A transfer whose arrival was lost (neither received nor on the way).
  KvTransferLedger lost = l;
  lost.in_transit = 1;
  lost.bytes_in_transit = 1000;
  REQUIRE_THROWS_WITH(check_kv_transfer_ledger(lost),
                      Catch::Contains("5 KV caches sent (5000 B) but 3 received (3000 B) + 1 on the way"));
  // Bytes that changed on the way.
  KvTransferLedger bytes = l;
  bytes.bytes_received = 2999;
  REQUIRE_THROWS_AS(check_kv_transfer_ledger(bytes), InternalError);
}

namespace {

// The toy model of scenarios/tiny (2 layers, 4 experts, hidden 1024; a token's KV is 8 KiB) on H100s.
Json toy_model() {
  return Json::parse(R"({"num_layers": 2, "num_dense_layers": 0, "hidden": 1024, "vocab": 1000,
    "attention": "gqa", "num_heads": 8, "num_kv_heads": 8, "head_dim": 128, "routed_experts": 4,
    "shared_experts": 0, "top_k": 4, "expert_inter": 512})");
}

// A random scenario over the mechanisms; `rng` draws every choice, so a case is named by its index.
Json random_scenario(Rng& rng) {
  const auto pick = [&](std::uint64_t n) { return static_cast<int>(rng.below(n)); };
  const int gpus = 1 << pick(3);  // 1, 2 or 4
  const bool pd = gpus >= 2 && pick(2) == 0;
  const bool prefix = pick(2) == 0;
  Json d{{"ep_size", 1},
         {"max_batch_size", 2 + pick(30)},
         {"chunked_prefill", true},
         {"kv_block_tokens", 16 << pick(3)}};
  // The KV pool's size in tokens (with_kv_pool turns it into framework_overhead_gib): a few requests'
  // worth, so that bursts preempt.
  d["kv_cache_memory_fraction"] = 0.9;
  d["activation_gib"] = 0.0;
  d["framework_overhead_gib"] = 1500 + pick(6000);
  if (pick(3) == 0) d["max_waiting_requests"] = 1 + pick(8);
  if (pick(4) == 0)
    d["speculative"] = Json{{"draft_tokens", 2}, {"acceptance", {0.8, 0.5}}, {"draft", "mtp"}};
  if (pd) {
    const int prefill = 1 + pick(static_cast<std::uint64_t>(gpus - 1));
    Json p{{"role", "prefill"}, {"instances", prefill}};
    if (prefix) p["prefix_caching"] = true;
    Json dec{{"role", "decode"}, {"instances", gpus - prefill}};
    if (gpus - prefill >= 2 && pick(2) == 0)
      dec["kv_migration"] = Json{{"imbalance_ratio", 1.5}, {"check_every_s", 0.05}};
    d["pools"] = Json::array({p, dec});
  } else {
    d["prefix_caching"] = prefix;
    if (gpus >= 2 && pick(2) == 0)
      d["kv_migration"] = Json{{"imbalance_ratio", 1.5}, {"check_every_s", 0.05}};
  }
  Json w{{"arrival", {{"kind", "poisson"}, {"rate_per_s", 5.0 + pick(400)}}},
         {"prompt_tokens", {{"kind", "uniform"}, {"min", 16}, {"max", 200 + pick(1000)}}},
         {"output_tokens", {{"kind", "uniform"}, {"min", 1}, {"max", 10 + pick(200)}}}};
  if (prefix) {
    w["prefix"] = pick(2) == 0 ? Json{{"system_prompt_tokens", 64 + pick(256)}}
                               : Json{{"conversation", {{"turns_mean", 2.5}, {"think_time_s", 0.2}}}};
  }
  Json run{{"seed", pick(1000)}, {"requests", 20 + pick(80)}};
  if (pick(5) == 0) {
    run["duration_s"] = 0.5;
    run["max_drain_s"] = 0.001 * (1 + pick(4));  // a drain cut short: requests and blocks still held
  }
  return Json{{"name", "conservation"},
              {"model", toy_model()},
              {"precision", {{"weights", "bf16"}, {"kv_cache", "bf16"}}},
              {"cluster", {{"gpu", "h100-sxm"}, {"nodes", 1}, {"gpus_per_node", gpus}}},
              {"deployment", d},
              {"workload", w},
              {"run", run}};
}

// The scenario with a KV pool of `framework_overhead_gib` tokens per GPU (as random_scenario wrote it): the
// overhead is set to what the HBM leaves after the weights (from the memory plan) and those tokens' KV.
LoadedScenario with_kv_pool(Json j) {
  const double tokens = j["deployment"]["framework_overhead_gib"].get<double>();
  j["deployment"]["framework_overhead_gib"] = 0.0;
  const LoadedScenario first = parse_scenario(j, "");
  const ScenarioSpec& s = first.spec;
  const MemoryPlan m = plan_memory(s.disaggregated() ? s.pool_view(s.pools[0]) : s);
  const double overhead = m.usable_bytes - m.weights_per_gpu.total() - tokens * m.kv_bytes_per_token;
  j["deployment"]["framework_overhead_gib"] = overhead / kGiB;
  return parse_scenario(j, "");
}

std::size_t cases() {
  const char* env = std::getenv("MOESIM_CONSERVATION_CASES");
  return env != nullptr ? static_cast<std::size_t>(std::strtoul(env, nullptr, 10)) : 1000;
}

}  // namespace

TEST_CASE(
    "random scenarios over PD, migration, prefix caching, preemption and drops conserve requests and "
    "blocks") {
  const std::size_t n = cases();
  std::size_t ran = 0;
  std::int64_t preempted = 0;
  std::int64_t dropped = 0;
  std::int64_t unfinished = 0;
  std::int64_t prefix_hits = 0;
  for (std::size_t i = 0; i < n; ++i) {
    Rng rng(0xC0115E4ULL + i);
    const Json j = random_scenario(rng);
    INFO("case " << i << ": " << j.dump());
    LoadedScenario sc;
    try {
      sc = with_kv_pool(j);
    } catch (const InputError& e) {
      // The generator aims at valid scenarios; a refusal is fine but must stay rare (checked below).
      if (std::getenv("MOESIM_CONSERVATION_VERBOSE") != nullptr)
        std::fprintf(stderr, "parse: %s\n", e.what());
      continue;
    }
    const RooflineCostModel gpu(sc.spec.cluster.gpu);
    Report r;
    try {
      r = simulate(sc.spec, gpu);
    } catch (const InputError& e) {
      // A deployment that does not fit (the KV pool against the longest request).
      if (std::getenv("MOESIM_CONSERVATION_VERBOSE") != nullptr) std::fprintf(stderr, "run: %s\n", e.what());
      continue;
    }
    ++ran;
    // The report's own balance, from its counters.
    REQUIRE(r.requests_arrived == r.requests_finished + r.requests_dropped + r.requests_unfinished);
    REQUIRE(r.requests_dropped == r.dropped_queue_full + r.dropped_too_long + r.dropped_empty);
    preempted += r.preemptions;
    dropped += r.requests_dropped;
    unfinished += r.requests_unfinished;
    prefix_hits += r.prefix_cache.hit_blocks;
  }
  // Most cases ran, and the mechanisms the property is about were exercised.
  CHECK(ran * 10 >= n * 9);
  CHECK(preempted > 0);
  CHECK(dropped > 0);
  CHECK(unfinished > 0);
  CHECK(prefix_hits > 0);
}

// TensorRT-LLM's MAX_UTILIZATION pauses under a small KV pool, where a pause keeps the generated tokens only
// up to max_input_len (LlmRequest::pause): the dropped tokens are generated again but reach the user once,
// so every run emits exactly the tokens its requests asked for, and the run that regenerates takes longer.
TEST_CASE("a pause past max_input_len regenerates the dropped tokens without delivering them twice") {
  auto run = [](int max_input_len) {
    Json d{{"ep_size", 1},
           {"engine", "trtllm"},
           {"capacity_scheduler_policy", "max_utilization"},
           {"max_batch_size", 16},
           {"kv_block_tokens", 16},
           {"kv_cache_memory_fraction", 0.9},
           {"activation_gib", 0.0},
           {"framework_overhead_gib", 1600}};  // the pool in tokens (with_kv_pool)
    if (max_input_len > 0) d["max_input_len"] = max_input_len;
    const Json j{{"name", "pause"},
                 {"model", toy_model()},
                 {"precision", {{"weights", "bf16"}, {"kv_cache", "bf16"}}},
                 {"cluster", {{"gpu", "h100-sxm"}, {"nodes", 1}, {"gpus_per_node", 1}}},
                 {"deployment", d},
                 {"workload",
                  {{"arrival", {{"kind", "closed_loop"}, {"users", 16}, {"think_time_s", 0}}},
                   {"prompt_tokens", {{"kind", "fixed"}, {"tokens", 64}}},
                   {"output_tokens", {{"kind", "fixed"}, {"tokens", 300}}}}},
                 {"run", {{"seed", 3}, {"requests", 40}}}};
    const LoadedScenario sc = with_kv_pool(j);
    const RooflineCostModel gpu(sc.spec.cluster.gpu);
    return simulate(sc.spec, gpu);
  };
  const Report whole = run(0);
  const Report cut = run(128);
  for (const Report* r : {&whole, &cut}) {
    CHECK(r->requests_finished == 40);
    CHECK(r->preemptions > 0);
    CHECK(r->output_tokens == 40 * 300);
    CHECK(r->output_tokens_asked == 40 * 300);
  }
  CHECK(cut.sim_end_s > whole.sim_end_s);
}
