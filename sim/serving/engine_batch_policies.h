// The SGLang and TensorRT-LLM schedulers as batch policies (deployment.engine picks them; docs/engines.md
// gives their rules with sources). vLLM's is in batch_policy.h.
#pragma once

#include "sim/serving/batch_policy.h"

namespace moesim {

// SGLang's scheduler (python/sglang/srt/managers/scheduler.py get_next_batch_to_run and
// get_new_batch_prefill; schedule_policy.py PrefillAdder), default flags (no mixed chunk): prefill first.
// A step is either a prefill batch or a decode batch. The prefill batch continues the request being
// chunked, then admits waiting requests first come first served within chunked_prefill_size tokens
// (max_batched_tokens; only the last admitted is chunked) and max_running_requests (max_batch_size), and
// only while the KV pool, less a reserve of min(remaining output, 4096) x new_token_ratio tokens for every
// running request, holds the request's input plus its remaining output (new_token_ratio 0.7:
// SGLANG_INIT_NEW_TOKEN_RATIO; its decay towards 0.14 over 600 decode steps is not modelled). With no
// prefill to run, every running request decodes; when blocks run out, requests are retracted (recompute)
// fewest output tokens first, longest prompt on ties (ScheduleBatch.retract_decode).
class SglangBatchPolicy final : public BatchPolicy {
 public:
  static constexpr double kNewTokenRatio = 0.7;
  static constexpr std::int64_t kClipMaxNewTokens = 4096;  // CLIP_MAX_NEW_TOKENS_ESTIMATION
  SglangBatchPolicy(const DeploymentSpec& d, int draft_tokens) : d_(d), draft_tokens_(draft_tokens) {}
  FormedBatch form(AttentionGroup& g, RequestTable& requests, Time now,
                   std::vector<ScheduledWork>& scheduled) override;

 private:
  DeploymentSpec d_;
  int draft_tokens_;
};

// TensorRT-LLM's in-flight batching (docs: "Inflight Batching", "Scheduler" in the TensorRT-LLM user guide;
// cpp/tensorrt_llm/batch_manager capacityScheduler.cpp and microBatchScheduler.cpp): the capacity scheduler
// with the default GUARANTEED_NO_EVICT policy admits a request only when the KV blocks of its whole
// prompt plus its maximum output fit beside what the running requests may still need to finish, so no
// request is ever evicted; the micro-batch scheduler then fills max_num_tokens (max_batched_tokens) with
// the active requests in arrival order, generation steps and context chunks in one batch (chunked context
// when chunked_prefill), within max_batch_size sequences.
class TrtllmBatchPolicy final : public BatchPolicy {
 public:
  TrtllmBatchPolicy(const DeploymentSpec& d, int draft_tokens) : d_(d), draft_tokens_(draft_tokens) {}
  FormedBatch form(AttentionGroup& g, RequestTable& requests, Time now,
                   std::vector<ScheduledWork>& scheduled) override;

 private:
  DeploymentSpec d_;
  int draft_tokens_;
};

}  // namespace moesim
