// The SGLang and TensorRT-LLM batch policies on small hand-built queues and KV pools; each expectation is
// worked out by hand from the rules in sim/serving/runtime/engine_batch_policies.h.
#include "sim/serving/runtime/engine_batch_policies.h"

#include <catch2/catch.hpp>
#include <memory>
#include <string>
#include <vector>

#include "sim/engine/check.h"
#include "sim/scenario/scenario_parser.h"
#include "tests/support/batch_policy_fixture.h"

using namespace moesim;

namespace {

using Fixture = moesim_test::BatchPolicyFixture;

// The error loading `path` with `sets` gives ("" when it loads).
std::string load_error(const std::string& path, const std::vector<std::string>& sets) {
  try {
    (void)load_scenario(path, sets);
  } catch (const InputError& e) {
    return e.what();
  }
  return "";
}

}  // namespace

TEST_CASE("SGLang runs a prefill batch alone, continues its chunked request, then decodes everyone") {
  Fixture f(100);
  f.decoding(20);
  f.decoding(30);
  const RequestIdx w = f.waiting(100);
  // Reserve (10 - 1) x 0.7 x 2 = 12.6 tokens; 96 free blocks = 1,536 tokens; 100 + 10 < 1,523.4: admitted,
  // chunked to the 50-token budget; no decode rides along (prefill first, no mixed chunk).
  FormedBatch b = f.form<SglangBatchPolicy>();
  REQUIRE(b.batch.decode_seqs == 0);
  REQUIRE(b.batch.prefill_tokens == 50);
  REQUIRE(b.batch.sampled_seqs == 0);
  REQUIRE(f.scheduled.size() == 1);
  REQUIRE(f.scheduled[0].req == w);
  f.step_done();
  // The chunk continues: 50 more tokens after 50, a prefill batch again, now sampling the first token.
  b = f.form<SglangBatchPolicy>();
  REQUIRE(b.batch.decode_seqs == 0);
  REQUIRE(b.batch.prefill_tokens == 50);
  REQUIRE(b.batch.prefill_pairs == Approx(50.0 * 50.0 + 50.0 * 51.0 / 2.0));
  REQUIRE(b.batch.sampled_seqs == 1);
  f.step_done();
  // Nothing left to prefill: the three running requests decode together.
  b = f.form<SglangBatchPolicy>();
  REQUIRE(b.batch.prefill_tokens == 0);
  REQUIRE(b.batch.decode_seqs == 3);
  REQUIRE(b.batch.decode_context_tokens == Approx(21 + 31 + 101));
}

TEST_CASE("SGLang holds a new request back when the pool less the output reserve cannot take it") {
  // 10 blocks = 160 tokens; the two decoding requests hold 2 blocks each: 96 tokens free, less the reserve
  // (10 - 1) x 0.7 x 2 = 12.6: 83.4 tokens.
  Fixture f(10);
  f.decoding(20);
  f.decoding(30);
  f.waiting(70, 20);  // 70 + 20 = 90 >= 83.4: NO_TOKEN
  FormedBatch b = f.form<SglangBatchPolicy>();
  CHECK(b.batch.prefill_tokens == 0);
  CHECK(b.batch.decode_seqs == 2);
  // vLLM, which reserves nothing, admits a 48-token chunk (budget 50 less the two decode tokens) into the
  // 6 free blocks.
  Fixture v(10);
  v.decoding(20);
  v.decoding(30);
  v.waiting(70, 20);
  VllmBatchPolicy vllm(v.d);
  const FormedBatch vb = vllm.form(v.group, v.requests, Time{}, v.scheduled);
  CHECK(vb.batch.prefill_tokens == 48);
  // With 10 tokens of output the request fits: 70 + 10 = 80 < 83.4.
  Fixture g(10);
  g.decoding(20);
  g.decoding(30);
  g.waiting(70, 10);
  CHECK(g.form<SglangBatchPolicy>().batch.prefill_tokens == 50);
}

TEST_CASE("SGLang retracts the running requests with the fewest output tokens until 20 steps of each fit") {
  // Three requests of 16 computed tokens hold a block each; the next token needs a second block each.
  // 4 blocks: 1 free for 3 needed. Retract the one with 1 output token (the others have 3 and 2): 2 blocks
  // free = 32 tokens < 2 x 20. Retract the one with 2: 3 blocks = 48 tokens >= 1 x 20. One decodes.
  Fixture f(4);
  const RequestIdx a = f.decoding(16, 100, 3);
  const RequestIdx b = f.decoding(16, 10, 1);
  const RequestIdx c = f.decoding(16, 10, 2);
  const FormedBatch out = f.form<SglangBatchPolicy>();
  CHECK(out.preemptions == 2);
  CHECK(out.batch.decode_seqs == 1);
  REQUIRE(f.group.waiting.size() == 2);
  CHECK(f.group.waiting[0] == c);  // each retracted request goes to the queue's front
  CHECK(f.group.waiting[1] == b);
  CHECK(f.group.running == std::vector<RequestIdx>{a});
  // The new estimate: (3 generated + 20) / 100 maximum output.
  CHECK(f.group.new_token_ratio == Approx(0.23));
}

TEST_CASE("SGLang's new-token ratio decays each decode batch, resets when idle and sets the reserve") {
  Fixture f(100);
  f.decoding(20);
  // A decode batch without retraction: 0.7 - (0.7 - 0.7 x 0.14) / 600.
  f.form<SglangBatchPolicy>();
  CHECK(f.group.new_token_ratio == Approx(0.7 - 0.7 * 0.86 / 600.0));
  // It never falls under 0.7 x 0.14 = 0.098.
  f.group.new_token_ratio = 0.0985;
  f.form<SglangBatchPolicy>();
  CHECK(f.group.new_token_ratio == Approx(0.098));
  // An idle scheduler starts again from 0.7.
  Fixture idle(100);
  idle.group.new_token_ratio = 0.2;
  idle.form<SglangBatchPolicy>();
  CHECK(idle.group.new_token_ratio == Approx(0.7));
  // The reserve follows the ratio: the request that 0.7 holds back (90 >= 96 - 12.6, the test above) is
  // admitted at 0.098: 96 - (10 - 1) x 0.098 x 2 = 94.24 > 90.
  Fixture g(10);
  g.decoding(20);
  g.decoding(30);
  g.waiting(70, 20);
  g.group.new_token_ratio = 0.098;
  CHECK(g.form<SglangBatchPolicy>().batch.prefill_tokens == 50);
}

TEST_CASE("TensorRT-LLM batches generation steps and a context chunk within max_num_tokens") {
  Fixture f(100);
  f.decoding(20);
  f.decoding(30);
  f.waiting(100);
  const FormedBatch b = f.form<TrtllmBatchPolicy>();
  // Budget 50: two generation tokens, then a 48-token context chunk in the same batch.
  CHECK(b.batch.decode_seqs == 2);
  CHECK(b.batch.prefill_tokens == 48);
  CHECK(b.preemptions == 0);
}

TEST_CASE("TensorRT-LLM admits a request only when its prompt and whole output fit beside the reservations") {
  // 20 blocks. Running: prompt 20, output 100, 1 out: ceil((20 + 99) / 16) = 8 blocks to finish, 2 held:
  // 6 reserved; prompt 30: ceil(129 / 16) = 9, 2 held: 7 reserved. Free 16 - 13 = 3 blocks.
  Fixture f(20);
  f.decoding(20, 100);
  f.decoding(30, 100);
  f.waiting(40, 10);  // ceil(50 / 16) = 4 > 3: waits (GUARANTEED_NO_EVICT)
  FormedBatch b = f.form<TrtllmBatchPolicy>();
  CHECK(b.batch.prefill_tokens == 0);
  CHECK(b.batch.decode_seqs == 2);
  CHECK(f.group.waiting.size() == 1);
  // A request of 16 + 16 tokens needs 2 blocks <= 3: admitted.
  Fixture g(20);
  g.decoding(20, 100);
  g.decoding(30, 100);
  g.waiting(16, 16);
  b = g.form<TrtllmBatchPolicy>();
  CHECK(b.batch.prefill_tokens == 16);
  CHECK(g.group.waiting.empty());
}

TEST_CASE("TensorRT-LLM reserves a decoding request's whole output, its generated tokens included") {
  // 10 blocks. A request with a 20-token prompt has 50 of its 100 tokens out: 69 computed, 5 blocks held;
  // it may need ceil((20 + 100) / 16) = 8, so 3 more are reserved. Free 5, so 2 blocks are left to admit.
  auto fixture = [] {
    auto f = std::make_unique<Fixture>(10);
    const RequestIdx i = f->decoding(20, 100, 50);
    Request& r = f->requests[i];
    r.computed = 69;
    f->group.kv.grow(r, 69);
    return f;
  };
  auto f = fixture();
  f->waiting(16, 16);  // ceil(32 / 16) = 2 <= 2: admitted
  CHECK(f->form<TrtllmBatchPolicy>().batch.prefill_tokens == 16);
  auto g = fixture();
  g->waiting(16, 17);  // 3 > 2: waits
  CHECK(g->form<TrtllmBatchPolicy>().batch.prefill_tokens == 0);
  CHECK(g->group.waiting.size() == 1);
}

TEST_CASE(
    "TensorRT-LLM's MAX_UTILIZATION admits what this step's blocks allow, reserving nothing for later") {
  // The no-evict case above: 20 blocks, two requests of 100 tokens decoding hold 2 blocks each and reserve
  // 13; a 40-token prompt with 10 to generate needs ceil(50 / 16) = 4 > 3 and waits. MAX_UTILIZATION asks
  // only for this step's blocks: the two generation tokens need no new block (21 and 31 tokens in 2 blocks
  // each) and the prompt ceil(40 / 16) = 3 of the 16 free, so it runs whole in the 48 tokens left.
  Fixture f(20);
  f.d.capacity_policy = CapacitySchedulerPolicy::kMaxUtilization;
  f.decoding(20, 100);
  f.decoding(30, 100);
  f.waiting(40, 10);
  const FormedBatch b = f.form<TrtllmBatchPolicy>();
  CHECK(b.batch.decode_seqs == 2);
  CHECK(b.batch.prefill_tokens == 40);
  CHECK(f.group.waiting.empty());
  CHECK(f.group.kv.free_blocks() == 20 - 2 - 2 - 3);
}

TEST_CASE("TensorRT-LLM's MAX_UTILIZATION needs a first context chunk's whole prompt in free blocks") {
  // KVCacheManager::getNeededBlocksOneStep counts a first chunk's whole prompt. 10 blocks, 4 held: 6 free.
  // A 100-token prompt needs ceil(100 / 16) = 7 and waits although its 48-token chunk would take 3; a
  // 96-token prompt needs 6 and runs its 48-token chunk, holding all 6.
  auto fixture = [](std::int64_t prompt) {
    auto f = std::make_unique<Fixture>(10);
    f->d.capacity_policy = CapacitySchedulerPolicy::kMaxUtilization;
    f->decoding(20);
    f->decoding(30);
    f->waiting(prompt);
    return f;
  };
  auto f = fixture(100);
  CHECK(f->form<TrtllmBatchPolicy>().batch.prefill_tokens == 0);
  CHECK(f->group.waiting.size() == 1);
  auto g = fixture(96);
  CHECK(g->form<TrtllmBatchPolicy>().batch.prefill_tokens == 48);
  CHECK(g->group.kv.free_blocks() == 0);
}

TEST_CASE("TensorRT-LLM's MAX_UTILIZATION pauses the newest started request when a running one cannot grow") {
  // 4 blocks, both full: two requests of 32-token prompts (2 blocks each) with one token out. The first
  // needs a third block for its 33rd token: the newest is paused (its blocks freed, its prompt and
  // generated token to recompute, first in the queue) and the first decodes alone. The paused one needs
  // ceil(33 / 16) = 3 blocks of the 1 left and waits.
  Fixture f(4);
  f.d.capacity_policy = CapacitySchedulerPolicy::kMaxUtilization;
  const RequestIdx first = f.decoding(32, 100);
  const RequestIdx newest = f.decoding(32, 100);
  const FormedBatch b = f.form<TrtllmBatchPolicy>();
  CHECK(b.preemptions == 1);
  CHECK(b.batch.decode_seqs == 1);
  REQUIRE(f.scheduled.size() == 1);
  CHECK(f.scheduled[0].req == first);
  REQUIRE(f.group.waiting.size() == 1);
  CHECK(f.group.waiting.front() == newest);
  CHECK(f.requests[newest].target == 33);
  CHECK(f.requests[newest].computed == 0);
  CHECK(f.group.kv.free_blocks() == 1);
}

TEST_CASE("a MAX_UTILIZATION pause keeps generated tokens only up to max_input_len, as LlmRequest::pause") {
  // 4 blocks, full: a 32-token prompt with one token out (2 blocks), and the newest, a 20-token prompt with
  // 30 tokens out whose KV holds 20 (2 blocks; its user has all 30). The first needs a third block: the
  // newest is paused. Unbounded it keeps all 30 (50 tokens to recompute); with max_input_len 40 it keeps
  // min(40, 20 + 30) - 20 = 20, so 10 are generated again, and the user still has 30.
  auto paused = [](std::int64_t max_input_len) {
    auto f = std::make_unique<Fixture>(4);
    f->d.capacity_policy = CapacitySchedulerPolicy::kMaxUtilization;
    f->d.max_input_len = max_input_len;
    f->decoding(32, 100);
    const RequestIdx newest = f->decoding(20, 100, 30);
    f->requests[newest].delivered = 30;
    const FormedBatch b = f->form<TrtllmBatchPolicy>();
    REQUIRE(b.preemptions == 1);
    REQUIRE(f->group.waiting.front() == newest);
    return f->requests[newest];
  };
  const Request whole = paused(0);
  CHECK(whole.generated == 30);
  CHECK(whole.target == 50);
  const Request cut = paused(40);
  CHECK(cut.generated == 20);
  CHECK(cut.target == 40);
  CHECK(cut.delivered == 30);
  // A prompt already at max_input_len keeps none of its output.
  CHECK(paused(20).generated == 0);
}

TEST_CASE("deployment.capacity_scheduler_policy is TensorRT-LLM's and names one of its policies") {
  static const std::string path = std::string(MOESIM_SOURCE_DIR) + "/scenarios/default.json";
  const LoadedScenario sc = load_scenario(
      path, {"deployment.engine=\"trtllm\"", "deployment.capacity_scheduler_policy=\"max_utilization\""});
  CHECK(sc.spec.deployment.capacity_policy == CapacitySchedulerPolicy::kMaxUtilization);
  CHECK(load_scenario(path, {"deployment.engine=\"trtllm\""}).spec.deployment.capacity_policy ==
        CapacitySchedulerPolicy::kGuaranteedNoEvict);
  CHECK_THAT(load_error(path, {"deployment.engine=\"trtllm\"",
                               "deployment.capacity_scheduler_policy=\"static_batch\""}),
             Catch::Contains("deployment.capacity_scheduler_policy") &&
                 Catch::Contains("known: guaranteed_no_evict, max_utilization"));
  CHECK(load_scenario(path, {"deployment.engine=\"trtllm\"", "deployment.max_input_len=100000"})
            .spec.deployment.max_input_len == 100000);
  CHECK_THAT(load_error(path, {"deployment.max_input_len=3000"}),
             Catch::Contains("deployment.max_input_len") && Catch::Contains("scheduler \"trtllm\""));
  // TensorRT-LLM refuses a prompt longer than max_input_len: so does the scenario, naming the longest.
  CHECK_THAT(load_error(path, {"deployment.engine=\"trtllm\"", "deployment.max_input_len=10"}),
             Catch::Contains("deployment.max_input_len") && Catch::Contains("longest prompt (16384"));
  CHECK_THAT(
      load_error(path, {"deployment.capacity_scheduler_policy=\"max_utilization\""}),
      Catch::Contains("deployment.capacity_scheduler_policy") && Catch::Contains("scheduler \"trtllm\""));
}

TEST_CASE("the deployment's scheduler picks the batch policy") {
  DeploymentSpec d;
  d.scheduler = "sglang";
  CHECK(dynamic_cast<SglangBatchPolicy*>(make_batch_policy(d).get()) != nullptr);
  d.scheduler = "trtllm";
  CHECK(dynamic_cast<TrtllmBatchPolicy*>(make_batch_policy(d).get()) != nullptr);
  d.scheduler = "vllm";
  CHECK(dynamic_cast<VllmBatchPolicy*>(make_batch_policy(d).get()) != nullptr);
  // Every entry of the table builds and is found by its name.
  for (const SchedulerEntry& e : schedulers()) {
    INFO(e.name);
    d.scheduler = std::string(e.name);
    CHECK(make_batch_policy(d) != nullptr);
    CHECK(find_scheduler(e.name) == &e);
  }
  CHECK(find_scheduler("orca") == nullptr);
}

TEST_CASE("deployment.scheduler picks the batch policy apart from the engine's kernels") {
  static const std::string path = std::string(MOESIM_SOURCE_DIR) + "/scenarios/default.json";
  const auto policy_of = [&](std::vector<std::string> sets) {
    const LoadedScenario sc = load_scenario(path, sets);
    return make_batch_policy(sc.spec.deployment);
  };
  // By default each engine's own scheduler; vLLM's for the PyTorch profiles.
  CHECK(dynamic_cast<TrtllmBatchPolicy*>(policy_of({"deployment.engine=\"trtllm\""}).get()) != nullptr);
  CHECK(dynamic_cast<SglangBatchPolicy*>(policy_of({"deployment.engine=\"sglang\""}).get()) != nullptr);
  CHECK(dynamic_cast<VllmBatchPolicy*>(policy_of({"deployment.engine=\"pytorch_graph\""}).get()) != nullptr);
  // TensorRT-LLM's kernels under vLLM's scheduler, and the reverse.
  const LoadedScenario mixed =
      load_scenario(path, {"deployment.engine=\"trtllm\"", "deployment.scheduler=\"vllm\""});
  CHECK(mixed.spec.deployment.engine.kind == EngineKind::kTrtllm);
  CHECK(dynamic_cast<VllmBatchPolicy*>(make_batch_policy(mixed.spec.deployment).get()) != nullptr);
  CHECK(dynamic_cast<TrtllmBatchPolicy*>(
            policy_of({"deployment.engine=\"vllm\"", "deployment.scheduler=\"trtllm\""}).get()) != nullptr);
  try {
    (void)load_scenario(path, {"deployment.scheduler=\"orca\""});
    FAIL("an unknown scheduler was accepted");
  } catch (const InputError& e) {
    CHECK_THAT(e.what(),
               Catch::Contains("deployment.scheduler") && Catch::Contains("known: vllm, sglang, trtllm"));
  }
}

TEST_CASE("TensorRT-LLM with chunked context off runs a whole prompt in one step or not at all") {
  // Budget 100, two generation tokens: 98 left. A 60-token prompt runs whole (60 x 61 / 2 pairs); the
  // next 60-token prompt does not fit the 38 left and waits, where chunking would run 38 of it.
  auto two_prompts = [](bool chunked) {
    auto f = std::make_unique<Fixture>(100, 100);
    f->d.chunked_prefill = chunked;
    f->decoding(20);
    f->decoding(30);
    f->waiting(60);
    f->waiting(60);
    return f;
  };
  auto off = two_prompts(false);
  const FormedBatch b = off->form<TrtllmBatchPolicy>();
  CHECK(b.batch.decode_seqs == 2);
  CHECK(b.batch.prefill_tokens == 60);
  CHECK(b.batch.prefill_pairs == Approx(60.0 * 61.0 / 2.0));
  CHECK(off->group.waiting.size() == 1);
  auto on = two_prompts(true);
  CHECK(on->form<TrtllmBatchPolicy>().batch.prefill_tokens == 60 + 38);
}

TEST_CASE("TensorRT-LLM with chunked context off ends the batch at the first context that does not fit") {
  // Active requests in order: a generation (1 token), a 60-token context (admitted, not yet run), another
  // generation. Budget 50: 49 left after the first, the context needs 60: the batch ends there
  // (microBatchScheduler's `break`), so the second generation waits too.
  Fixture f(100);
  f.d.chunked_prefill = false;
  f.decoding(20);
  const RequestIdx ctx = f.requests.add();
  Request& r = f.requests[ctx];
  r.prompt = r.target = 60;
  r.output = 10;
  f.group.running.push_back(ctx);
  f.decoding(30);
  const FormedBatch b = f.form<TrtllmBatchPolicy>();
  CHECK(b.batch.decode_seqs == 1);
  CHECK(b.batch.prefill_tokens == 0);
}

TEST_CASE("attention-DP balancing holds contexts until every rank has one, then batching_wait_iters more") {
  // TensorRT-LLM's MLPerf Server setting: adp_balancing_batching_wait_iters 3, adp_balancing_timeout_iters 9.
  const AdpBalanceSpec spec{.enabled = true, .batching_wait_iters = 3, .timeout_iters = 9};
  GroupBatch gen_ctx;
  gen_ctx.decode_seqs = 4;
  gen_ctx.prefill_tokens = 100;
  GroupBatch gen;
  gen.decode_seqs = 4;
  GroupBatch idle;
  AdpBalanceCounters c;
  // Both ranks have a context and generation requests: held 3 iterations, run on the 4th.
  const std::vector<GroupBatch> both{gen_ctx, gen_ctx};
  for (int i = 1; i <= 3; ++i) {
    CHECK_FALSE(adp_contexts_run(spec, 8, both, c));
    CHECK(c.batching_iters == i);
  }
  CHECK(adp_contexts_run(spec, 8, both, c));
  CHECK(c.batching_iters == 0);
  // Only rank 0 has a context: held, each iteration counting, until the 9th (the timeout).
  const std::vector<GroupBatch> one{gen_ctx, gen};
  for (int i = 1; i <= 8; ++i) CHECK_FALSE(adp_contexts_run(spec, 8, one, c));
  CHECK(c.waiting_iters == 8);
  CHECK(adp_contexts_run(spec, 8, one, c));
  CHECK(c.waiting_iters == 0);
  // A rank without generation requests: contexts run at once (nothing to hold them for).
  CHECK(adp_contexts_run(spec, 8, std::vector<GroupBatch>{gen_ctx, idle}, c));
  CHECK(adp_contexts_run(spec, 8, std::vector<GroupBatch>{gen_ctx, gen_ctx, idle}, c));
  // A rank whose generation requests fill max_batch_size has no free slot: held as if it had no context.
  AdpBalanceCounters full;
  GroupBatch full_ctx = gen_ctx;
  full_ctx.decode_seqs = 8;
  CHECK_FALSE(adp_contexts_run(spec, 8, std::vector<GroupBatch>{gen_ctx, full_ctx}, full));
  CHECK(full.waiting_iters == 1);
  // Iterations without any context count towards the timeout too (PyExecutor counts every iteration).
  AdpBalanceCounters quiet;
  for (int i = 1; i <= 8; ++i)
    CHECK_FALSE(adp_contexts_run(spec, 8, std::vector<GroupBatch>{gen, gen}, quiet));
  CHECK(adp_contexts_run(spec, 8, one, quiet));
}

TEST_CASE("held contexts leave the step's batch and run in a later one") {
  Fixture f(100);
  f.decoding(20);
  f.decoding(30);
  const RequestIdx w = f.waiting(40);
  FormedBatch b = f.form<TrtllmBatchPolicy>();
  REQUIRE(b.batch.prefill_tokens == 40);
  std::vector<GroupBatch> batches{b.batch};
  hold_contexts(batches, f.requests, f.scheduled);
  // What is left is the two generation steps, costed as if the context had never been scheduled.
  CHECK(batches[0].prefill_tokens == 0);
  CHECK(batches[0].decode_seqs == 2);
  CHECK(batches[0].decode_context_tokens == Approx(21 + 31));
  CHECK(batches[0].sampled_seqs == 2);
  CHECK(f.scheduled.size() == 2);
  f.step_done();
  CHECK(f.requests[w].computed == 0);
  // Admitted, it runs whole in the next step.
  b = f.form<TrtllmBatchPolicy>();
  CHECK(b.batch.prefill_tokens == 40);
  CHECK(b.batch.decode_seqs == 2);
}

TEST_CASE("chunked prefill off needs only the longest prompt in one step under TensorRT-LLM's scheduler") {
  // The default scenario's prompts reach 16,384 tokens and its outputs 2,048.
  static const std::string path = std::string(MOESIM_SOURCE_DIR) + "/scenarios/default.json";
  const std::vector<std::string> trtllm{"deployment.engine=\"trtllm\"", "deployment.chunked_prefill=false",
                                        "deployment.max_batched_tokens=16384"};
  const LoadedScenario sc = load_scenario(path, trtllm);
  CHECK_FALSE(sc.spec.deployment.chunked_prefill);
  CHECK(unchunked_step_tokens(sc.spec.deployment, 16384, 2048) == 16384);
  auto error = [&](const std::vector<std::string>& sets) { return load_error(path, sets); };
  // A scheduler that evicts recomputes prompt and output in one step: 18,432 > 16,384.
  std::vector<std::string> vllm = trtllm;
  vllm.push_back("deployment.scheduler=\"vllm\"");
  CHECK_THAT(error(vllm), Catch::Contains("deployment.max_batched_tokens") && Catch::Contains("18432"));
  // Under TensorRT-LLM's a prompt longer than the budget is refused: 16,384 > 16,000.
  std::vector<std::string> short_budget = trtllm;
  short_budget.push_back("deployment.max_batched_tokens=16000");
  CHECK_THAT(error(short_budget),
             Catch::Contains("deployment.max_batched_tokens") && Catch::Contains("16384 tokens of prompt"));
}

TEST_CASE("deployment.adp_balance is TensorRT-LLM's, under attention DP, and needs its timeout") {
  static const std::string path = std::string(MOESIM_SOURCE_DIR) + "/scenarios/default.json";
  const std::string trtllm = "deployment.engine=\"trtllm\"";
  const LoadedScenario sc =
      load_scenario(path, {trtllm, R"(deployment.adp_balance={"batching_wait_iters":3,"timeout_iters":9})"});
  const AdpBalanceSpec& b = sc.spec.deployment.adp_balance;
  CHECK(b.enabled);
  CHECK(b.batching_wait_iters == 3);
  CHECK(b.timeout_iters == 9);
  CHECK_FALSE(load_scenario(path, {trtllm}).spec.deployment.adp_balance.enabled);
  auto error = [&](const std::vector<std::string>& sets) { return load_error(path, sets); };
  CHECK_THAT(error({R"(deployment.adp_balance={"timeout_iters":9})"}),
             Catch::Contains("deployment.adp_balance") && Catch::Contains("trtllm"));
  CHECK_THAT(error({trtllm, R"(deployment.adp_balance={"batching_wait_iters":3})"}),
             Catch::Contains("deployment.adp_balance.timeout_iters"));
  CHECK_THAT(error({trtllm, R"(deployment.adp_balance={"timeout_iters":9,"wait":3})"}),
             Catch::Contains("deployment.adp_balance.wait"));
  CHECK_THAT(error({trtllm, "deployment.attention.dp=1", "deployment.attention.tp=8",
                    R"(deployment.adp_balance={"timeout_iters":9})"}),
             Catch::Contains("deployment.adp_balance") && Catch::Contains("dp is 1"));
}

TEST_CASE("CUDA-graph padding: every rank generation-only pads to the largest rank's batch rounded up") {
  const std::vector<int> sizes{1, 2, 4, 8, 16, 32, 64, 128, 256, 384, 512};
  std::vector<GroupBatch> b(3);
  b[0].decode_seqs = 130;
  b[1].decode_seqs = 100;
  pad_to_cuda_graph(b, sizes, 512, 0);
  // Largest 130 -> the 256 graph: pads 126, 156 and 256 (the idle rank too).
  CHECK(b[0].decode_seqs == 256);
  CHECK(b[0].padding_seqs == 126);
  CHECK(b[1].padding_seqs == 156);
  CHECK(b[2].decode_seqs == 256);
  CHECK(b[2].decode_context_tokens == 2.0 * 256);  // one context token and its own, per dummy
  CHECK(b[2].sampled_seqs == 256);
  // A rank with a context runs eagerly; the others pad their own batch (130 -> 256, 3 -> 4).
  std::vector<GroupBatch> c(3);
  c[0].decode_seqs = 130;
  c[1].decode_seqs = 50;
  c[1].prefill_tokens = 1000;
  c[2].decode_seqs = 3;
  pad_to_cuda_graph(c, sizes, 512, 2);
  CHECK(c[0].padding_seqs == 126);
  CHECK(c[1].padding_seqs == 0);
  CHECK(c[2].padding_seqs == 1);
  CHECK(c[2].decode_draft_tokens == 2);  // the dummy verifies k = 2 drafts like every sequence
  CHECK(c[2].sampled_seqs == 3);
  // No graph beyond the largest captured size or past max_batch_size.
  std::vector<GroupBatch> d(2);
  d[0].decode_seqs = 130;
  d[1].decode_seqs = 10;
  pad_to_cuda_graph(d, {128, 256}, 200, 0);
  CHECK(d[0].padding_seqs == 0);
  CHECK(d[1].padding_seqs == 0);
  std::vector<GroupBatch> e(2);
  e[0].decode_seqs = 600;
  pad_to_cuda_graph(e, sizes, 1024, 0);
  CHECK(e[1].padding_seqs == 0);
}

TEST_CASE("deployment.cuda_graph_batch_sizes is TensorRT-LLM's and must ascend") {
  static const std::string path = std::string(MOESIM_SOURCE_DIR) + "/scenarios/default.json";
  CHECK_THAT(load_error(path, {"deployment.cuda_graph_batch_sizes=[128,256]"}),
             Catch::Contains("deployment.cuda_graph_batch_sizes") && Catch::Contains("trtllm"));
  CHECK_THAT(
      load_error(path, {"deployment.engine=\"trtllm\"", "deployment.cuda_graph_batch_sizes=[256,128]"}),
      Catch::Contains("deployment.cuda_graph_batch_sizes") && Catch::Contains("ascending"));
  const LoadedScenario ok =
      load_scenario(path, {"deployment.engine=\"trtllm\"", "deployment.cuda_graph_batch_sizes=[1,8]"});
  CHECK(ok.spec.deployment.cuda_graph_batch_sizes == std::vector<int>{1, 8});
}
