// The vLLM batch policy on small hand-built queues and KV pools.
#include "sim/serving/runtime/batch_policy.h"

#include <catch2/catch.hpp>
#include <vector>

#include "tests/support/batch_policy_fixture.h"

using namespace moesim;

namespace {

using Fixture = moesim_test::BatchPolicyFixture;

}  // namespace

TEST_CASE("running requests decode first, then a waiting prompt takes the rest of the budget as a chunk") {
  Fixture f(100);
  f.decoding(20);
  f.decoding(30);
  const RequestIdx w = f.waiting(100);
  const FormedBatch b = f.form<VllmBatchPolicy>();
  // Budget 50: two decode tokens, then a 48-token chunk of the 100-token prompt.
  REQUIRE(b.batch.decode_seqs == 2);
  REQUIRE(b.batch.decode_context_tokens == Approx(21 + 31));
  REQUIRE(b.batch.prefill_tokens == 48);
  REQUIRE(b.batch.prefill_pairs == Approx(48.0 * 49.0 / 2.0));  // c p + c (c + 1) / 2 with p = 0
  REQUIRE(b.batch.sampled_seqs == 2);                           // the chunk does not finish the prompt
  REQUIRE(f.scheduled.size() == 3);
  REQUIRE(f.requests[w].admitted == Time::at(Duration::from_ms(5)));
  // The whole prompt's blocks are held from admission (ceil(100 / 16) = 7), not the chunk's 3.
  REQUIRE(f.requests[w].blocks == 7);
  REQUIRE(f.group.running.size() == 3);
}

TEST_CASE("without chunked prefill a prompt longer than the budget left waits") {
  Fixture f(100);
  f.d.chunked_prefill = false;
  f.decoding(20);
  f.waiting(100);
  const FormedBatch b = f.form<VllmBatchPolicy>();
  REQUIRE(b.batch.prefill_tokens == 0);
  REQUIRE(f.group.waiting.size() == 1);
}

TEST_CASE("admission stops at the sequence limit") {
  Fixture f(100, 1000);
  f.d.max_batch_size = 2;
  for (int i = 0; i < 4; ++i) f.waiting(10);
  const FormedBatch b = f.form<VllmBatchPolicy>();
  REQUIRE(f.group.running.size() == 2);
  REQUIRE(b.batch.prefill_tokens == 20);
  REQUIRE(b.batch.sampled_seqs == 2);  // both prompts complete
}

TEST_CASE("when blocks run out the newest running request is preempted and nothing new is admitted") {
  Fixture f(2);  // two blocks of 16 tokens
  const RequestIdx old_req = f.decoding(16);
  const RequestIdx new_req = f.decoding(16);
  f.waiting(4);
  // Each needs a second block for its 17th token: the oldest gets it by preempting the newest.
  const FormedBatch b = f.form<VllmBatchPolicy>();
  REQUIRE(b.preemptions == 1);
  REQUIRE(b.batch.decode_seqs == 1);
  REQUIRE(f.group.running == std::vector<RequestIdx>{old_req});
  REQUIRE(f.requests[old_req].blocks == 2);
  const Request& v = f.requests[new_req];
  REQUIRE(v.blocks == 0);
  REQUIRE(v.computed == 0);
  REQUIRE(v.target == 16 + 1);  // recompute the prompt and the generated token
  REQUIRE(v.preemptions == 1);
  REQUIRE(f.group.waiting.front() == new_req);
  REQUIRE(f.group.waiting.size() == 2);  // the waiting prompt was not admitted after the preemption
  REQUIRE(f.group.kv.free_blocks() == 0);
  REQUIRE(f.group.waiting_tokens == 4 + 17);  // what routers see queued: both requests' tokens to compute
  // Once the survivor finishes the preempted request is readmitted: only the waiting prompt's 4 remain.
  f.group.running.clear();
  f.group.kv.release(f.requests[old_req]);
  f.form<VllmBatchPolicy>();
  REQUIRE(f.group.waiting.front() != new_req);
  REQUIRE(f.group.waiting_tokens == 4);
}

TEST_CASE("vLLM admits a prompt only when all its blocks and the watermark fit, not just its first chunk") {
  // 200 blocks: watermark floor(0.01 x 200) = 2. A running request of 3,040 tokens (190 blocks) decodes its
  // 3,041st token into a 191st block: 9 blocks free. Budget 50: its token, then a chunk of 49.
  Fixture f(200);
  f.decoding(190 * 16);
  const RequestIdx fits = f.waiting(7 * 16);  // 7 blocks + 2 = 9 <= 9: admitted
  FormedBatch b = f.form<VllmBatchPolicy>();
  CHECK(b.batch.prefill_tokens == 49);
  CHECK(f.requests[fits].blocks == 7);
  CHECK(f.group.kv.free_blocks() == 2);
  // One token more is an 8th block: 8 + 2 > 9. Its first chunk (49 tokens, 4 blocks) would fit, and
  // without the reservation it would be admitted, then preempted by the decode's next block.
  Fixture g(200);
  g.decoding(190 * 16);
  g.waiting(7 * 16 + 1);
  b = g.form<VllmBatchPolicy>();
  CHECK(b.batch.prefill_tokens == 0);
  CHECK(b.batch.decode_seqs == 1);
  CHECK(g.group.waiting.size() == 1);
  CHECK(g.group.kv.free_blocks() == 9);
}

TEST_CASE("vLLM readmits a preempted request with the blocks of its prompt and generated tokens") {
  // A request preempted after 20 tokens out of a 40-token prompt recomputes 60 tokens: 4 blocks.
  Fixture f(10);
  const RequestIdx w = f.waiting(40);
  Request& r = f.requests[w];
  r.generated = 20;
  r.target = 60;
  r.preemptions = 1;
  f.form<VllmBatchPolicy>();
  CHECK(r.blocks == 4);
  CHECK(f.scheduled.size() == 1);
  CHECK(f.scheduled[0].tokens == 50);  // the budget: the rest of the 60 next step, in blocks it holds
}
