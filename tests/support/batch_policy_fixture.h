// One attention group with hand-built queues and a small KV pool, for the batch policies' tests (vLLM,
// SGLang, TensorRT-LLM): requests already decoding or waiting, one step formed by a policy, its end.
#pragma once

#include <cstdint>
#include <vector>

#include "sim/serving/runtime/batch_policy.h"

namespace moesim_test {

struct BatchPolicyFixture {
  moesim::DeploymentSpec d;
  moesim::RequestTable requests;
  moesim::AttentionGroup group;
  std::vector<moesim::ScheduledWork> scheduled;
  explicit BatchPolicyFixture(std::int64_t blocks, std::int64_t budget = 50)
      : group(moesim::KvCacheManager(blocks, 16)) {
    d.max_batched_tokens = budget;
    d.max_batch_size = 8;
    d.kv_block_tokens = 16;
  }
  // A request already decoding: its prompt computed and `generated` tokens out.
  moesim::RequestIdx decoding(std::int64_t prompt, std::int64_t output = 10, std::int64_t generated = 1) {
    const moesim::RequestIdx i = requests.add();
    moesim::Request& r = requests[i];
    r.prompt = r.target = r.computed = prompt;
    r.output = output;
    r.generated = generated;
    group.kv.grow(r, prompt);
    group.running.push_back(i);
    return i;
  }
  moesim::RequestIdx waiting(std::int64_t prompt, std::int64_t output = 10) {
    const moesim::RequestIdx i = requests.add();
    moesim::Request& r = requests[i];
    r.prompt = r.target = prompt;
    r.output = output;
    group.waiting.push_back(i);
    group.waiting_tokens += prompt;
    return i;
  }
  // One step formed by `Policy` (no speculative drafts) at t = 5 ms.
  template <class Policy>
  moesim::FormedBatch form() {
    scheduled.clear();
    Policy p(d, 0);
    return p.form(group, requests, moesim::Time::at(moesim::Duration::from_ms(5)), scheduled);
  }
  // What the replica does when the step ends: computed tokens advance (no token bookkeeping needed here).
  void step_done() {
    for (const moesim::ScheduledWork& w : scheduled) requests[w.req].computed += w.tokens;
  }
};

}  // namespace moesim_test
