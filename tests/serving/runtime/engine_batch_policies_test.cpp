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
