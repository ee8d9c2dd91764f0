// The SGLang and TensorRT-LLM schedulers as batch policies (deployment.engine picks them; docs/engines.md
// gives their rules with sources). vLLM's is in batch_policy.h.
#pragma once

#include "sim/serving/runtime/batch_policy.h"

namespace moesim {

// SGLang's scheduler (python/sglang/srt/managers/scheduler.py get_next_batch_to_run,
// get_new_batch_prefill and update_running_batch; schedule_policy.py PrefillAdder; schedule_batch.py
// retract_decode), default flags (no mixed chunk): prefill first. A step is either a prefill batch or a
// decode batch. The prefill batch continues the request being chunked, then admits waiting requests first
// come first served within chunked_prefill_size tokens (max_batched_tokens; only the last admitted is
// chunked) and max_running_requests (max_batch_size), and only while the KV pool, less a reserve of
// min(remaining output, 4096) x new_token_ratio tokens for every running request, holds the request's
// input plus its remaining output. With no prefill to run, every running request decodes. When the pool
// cannot take one more token of each, requests are retracted (recompute) fewest output tokens first,
// longest prompt on ties, at least one and until the pool holds retract_decode_steps (20) tokens of each
// one left; new_token_ratio then becomes (tokens they generated + 20 each) / their maximum outputs, at
// most 1. Each decode batch without a retraction lowers it by (0.7 - 0.098) / 600 down to 0.098
// (SGLANG_INIT_NEW_TOKEN_RATIO 0.7, SGLANG_MIN_NEW_TOKEN_RATIO_FACTOR 0.14, decay over
// SGLANG_NEW_TOKEN_RATIO_DECAY_STEPS 600), and an idle scheduler starts again from 0.7. The ratio is
// each attention group's own (one scheduler per data-parallel rank).
class SglangBatchPolicy final : public BatchPolicy {
 public:
  static constexpr double kInitNewTokenRatio = 0.7;
  static constexpr double kMinNewTokenRatio = kInitNewTokenRatio * 0.14;
  static constexpr double kNewTokenRatioDecay = (kInitNewTokenRatio - kMinNewTokenRatio) / 600.0;
  static constexpr std::int64_t kRetractDecodeSteps = 20;  // global_config.retract_decode_steps
  static constexpr std::int64_t kClipMaxNewTokens = 4096;  // CLIP_MAX_NEW_TOKENS_ESTIMATION
  SglangBatchPolicy(const DeploymentSpec& d, int draft_tokens) : d_(d), draft_tokens_(draft_tokens) {}
  FormedBatch form(AttentionGroup& g, RequestTable& requests, Time now,
                   std::vector<ScheduledWork>& scheduled) override;

 private:
  // The decode batch: retracts while the pool is short (updating g.new_token_ratio), then decodes.
  void decode(AttentionGroup& g, RequestTable& requests, FormedBatch& out,
              std::vector<ScheduledWork>& scheduled) const;
  DeploymentSpec d_;
  int draft_tokens_;
};

// TensorRT-LLM's CUDA-graph padding (CUDAGraphRunner._get_padded_batch, tensorrt_llm/_torch/pyexecutor/
// cuda_graph_runner.py): under attention DP the ranks allgather (generation-only, batch size); when every
// rank is generation-only each pads to the largest rank's batch rounded up to the smallest captured size
// (`sizes`, ascending), else a generation-only rank pads its own; none beyond the largest captured size or
// past `max_batch_size`. A dummy is a generation request of a one-token context that verifies
// `draft_tokens` drafts, as every sequence of the step does.
void pad_to_cuda_graph(std::span<GroupBatch> batches, const std::vector<int>& sizes, int max_batch_size,
                       int draft_tokens);

// TensorRT-LLM's in-flight batching (docs: "Inflight Batching", "Scheduler" in the TensorRT-LLM user guide;
// cpp/tensorrt_llm/batch_manager capacityScheduler.cpp and microBatchScheduler.cpp): the capacity scheduler
// with the default GUARANTEED_NO_EVICT policy admits a request only when the KV blocks of its whole
// prompt plus its maximum output fit beside what the running requests may still need to finish, so no
// request is ever evicted; the micro-batch scheduler then fills max_num_tokens (max_batched_tokens) with
// the active requests in arrival order, generation steps and context chunks in one batch (chunked context
// when chunked_prefill), within max_batch_size sequences. With chunking off (enable_chunked_context False)
// a context is its whole prompt in one step, and the first that does not fit the tokens left ends the
// batch (microBatchScheduler: `break`); a request preempted all the same is recomputed in chunks. Under
// attention DP with deployment.adp_balance, `balance` holds every rank's contexts as
// PyExecutor._balance_adp_requests does (adp_contexts_run).
class TrtllmBatchPolicy final : public BatchPolicy {
 public:
  TrtllmBatchPolicy(const DeploymentSpec& d, int draft_tokens) : d_(d), draft_tokens_(draft_tokens) {}
  FormedBatch form(AttentionGroup& g, RequestTable& requests, Time now,
                   std::vector<ScheduledWork>& scheduled) override;
  void balance(std::span<GroupBatch> batches, RequestTable& requests, std::vector<ScheduledWork>& scheduled,
               AdpBalanceCounters& counters) override;

 private:
  DeploymentSpec d_;
  int draft_tokens_;
};

}  // namespace moesim
