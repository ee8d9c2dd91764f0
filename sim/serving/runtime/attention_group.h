// One attention group of a replica (a data-parallel attention rank): its waiting queue, its running
// requests in admission order, and its KV-cache manager.
#pragma once

#include <algorithm>
#include <deque>
#include <vector>

#include "sim/engine/time.h"
#include "sim/serving/runtime/kv_cache_manager.h"
#include "sim/serving/runtime/request.h"

namespace moesim {

struct AttentionGroup {
  explicit AttentionGroup(KvCacheManager cache) : kv(cache) {}
  std::deque<RequestIdx> waiting;
  std::vector<RequestIdx> running;  // in admission order: the newest is preempted first
  KvCacheManager kv;
  std::int64_t waiting_tokens = 0;  // tokens the waiting requests have to compute (what routers weigh)
  double busy_ewma_s = 0;           // its GPUs' busy time per step, EWMA (load-aware admission)
  // SGLang's estimate of the share of its maximum output a running request will still generate
  // (Scheduler.new_token_ratio; negative until the SGLang policy first forms a step here).
  double new_token_ratio = -1.0;
  // When each of the newest `waiting` requests was queued, for those the executor has not fetched yet: an
  // executor that forms step n + 1's batch while step n runs (TensorRT-LLM's overlap scheduler) fetched
  // its requests when step n began, so what was queued after that waits a step more. Policies admit only
  // the fetched front of `waiting` (has_fetched_waiting); the replica keeps this list. Empty otherwise.
  std::deque<Time> unfetched_since;

  // Whether the executor has fetched a waiting request it may admit (the front of `waiting`).
  [[nodiscard]] bool has_fetched_waiting() const { return waiting.size() > unfetched_since.size(); }

  // vLLM's recompute preemption: drop the KV cache, keep the generated tokens, requeue at the front.
  // The caller has removed `victim` from `running`. With `max_prompt` > 0 (TensorRT-LLM's pause,
  // LlmRequest::pause(maxInputLen)) the new prompt keeps the generated tokens only up to that length; the
  // rest are generated again, and reach the user only past what it already has (Request::delivered).
  void preempt(RequestTable& requests, RequestIdx victim, std::int64_t max_prompt = 0) {
    Request& v = requests[victim];
    kv.release(v);
    v.computed = 0;
    if (max_prompt > 0) v.generated = std::clamp<std::int64_t>(max_prompt - v.prompt, 0, v.generated);
    v.target = v.prompt + v.generated;
    ++v.preemptions;
    waiting.push_front(victim);
    waiting_tokens += v.target;
  }
};

}  // namespace moesim
