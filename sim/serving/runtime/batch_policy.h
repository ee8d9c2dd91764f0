// Batch policies (docs/architecture.md "The serving runtime"): each step, a policy picks one attention
// group's work from its queues and KV state: which running requests continue, which waiting ones are
// admitted, how many tokens of each prefill, whom to preempt. One implementation per engine's rules; a new
// policy is its class (a file of its own) plus its line in kSchedulers (batch_policy.cpp), which the
// scenario parser (deployment.scheduler), its error messages and make_batch_policy read.
#pragma once

#include <cstdint>
#include <memory>
#include <span>
#include <string_view>
#include <vector>

#include "sim/serving/runtime/attention_group.h"
#include "sim/serving/spec/scenario_spec.h"
#include "sim/serving/step/group_batch.h"

namespace moesim {

// One request's share of a step.
struct ScheduledWork {
  RequestIdx req;
  std::int64_t tokens;
  bool prefill;
};

struct FormedBatch {
  GroupBatch batch;     // what the step planner costs
  int preemptions = 0;  // requests preempted to make room
};

// What an instance-wide decision over its groups' batches carries from step to step (one per replica:
// TensorRT-LLM's ranks all see the same allgather, so their counters move together).
struct AdpBalanceCounters {
  int waiting_iters = 0;   // PyExecutor.adp_ctx_waiting_iters_count
  int batching_iters = 0;  // PyExecutor.adp_ctx_batching_wait_iters_count
};

class BatchPolicy {
 public:
  virtual ~BatchPolicy() = default;
  // Forms `g`'s work for a step starting at `now`: appends to `scheduled` (and grows KV allocations),
  // admits and preempts through `g`.
  virtual FormedBatch form(AttentionGroup& g, RequestTable& requests, Time now,
                           std::vector<ScheduledWork>& scheduled) = 0;
  // After every group of an instance formed its batch (`batches`, by group; `scheduled`, all groups'
  // work): a decision over all of them, which may take work back out. None by default.
  virtual void balance(std::span<GroupBatch> batches, RequestTable& requests,
                       std::vector<ScheduledWork>& scheduled, AdpBalanceCounters& counters) {
    (void)batches, (void)requests, (void)scheduled, (void)counters;
  }
};

// TensorRT-LLM's attention-DP context balancing (PyExecutor._balance_adp_requests in
// tensorrt_llm/_torch/pyexecutor/py_executor.py): each rank's scheduled context requests (prefill work) and
// generation requests (decode sequences) are allgathered; when every rank has a context and a free slot
// (generation requests below `max_batch_size`) the contexts run, after `batching_wait_iters` more
// iterations while every rank also has generation requests; otherwise they are held, every iteration
// counting towards `timeout_iters`, and run once it is reached or when some rank has no generation
// request. True: this step's contexts run.
bool adp_contexts_run(const AdpBalanceSpec& spec, int max_batch_size, std::span<const GroupBatch> batches,
                      AdpBalanceCounters& c);

// Takes every prefill (context) work out of `scheduled` and rebuilds each group's batch from what is left
// (decode work; the held requests keep their blocks and run in a later step).
void hold_contexts(std::span<GroupBatch> batches, RequestTable& requests,
                   std::vector<ScheduledWork>& scheduled);

// Appends `w` to `scheduled` and its work to `batch`: a prefill chunk of w.tokens after r.computed
// tokens ((query, key) pairs c p + c (c + 1) / 2, KV p + c, a sampled row when it ends the prompt), or a
// decode step of 1 + k tokens (k verified drafts; k + 1 sampled rows). Call before r.computed advances.
void add_work(GroupBatch& batch, const Request& r, ScheduledWork w, std::vector<ScheduledWork>& scheduled);

// Grows `r` to `computed` tokens, preempting (recompute) the newest running requests while blocks are
// short; false when `r` itself would be next. `max_prompt`: AttentionGroup::preempt's (0: keep every
// generated token).
bool preempt_newest_for(AttentionGroup& g, RequestTable& requests, Request& r, std::int64_t computed,
                        int& preempted, std::int64_t max_prompt = 0);

// The waiting queue's front request as an admission sees it: its prefix-cache hit (0 without prefix
// caching; KvCacheManager::lookup_prefix, called once here) and the prompt tokens left after it.
struct WaitingFront {
  RequestIdx idx;
  Request* r;
  std::int64_t hit;
  std::int64_t left;
};
WaitingFront waiting_front(AttentionGroup& g, RequestTable& requests);

// What an engine's allocator demands of an admission beyond the first chunk's blocks.
struct AdmitReserve {
  bool whole_prompt = false;   // allocate the blocks of the whole sequence to compute (r.target) at once
  std::int64_t keep_free = 0;  // blocks that must stay free after the allocation (a watermark)
};

// Every policy's admission once its own gates have passed: a prefill chunk of up to `budget` tokens,
// refused when chunked prefill is off and the prompt is longer than the budget or when its blocks (all
// of them under `reserve.whole_prompt`) and `reserve.keep_free` do not fit; else `f` moves to running
// with its blocks (its cached head pinned) and the time of its first admission. Returns the chunk's
// tokens (0: not admitted). Call add_work next.
std::int64_t admit_front(AttentionGroup& g, const WaitingFront& f, std::int64_t budget, bool chunked_prefill,
                         Time now, AdmitReserve reserve = {});

// A scheduler a scenario can name: deployment.scheduler = `name` (by default the engine's own).
struct SchedulerEntry {
  std::string_view name;
  std::string_view what;  // one line for error messages
  std::unique_ptr<BatchPolicy> (*make)(const DeploymentSpec& d, int draft_tokens) = nullptr;
  // Whether it preempts running requests (recompute: the prompt and generated tokens in one prefill).
  bool evicts = true;
};
// Every scheduler, in the order error messages list them.
[[nodiscard]] std::span<const SchedulerEntry> schedulers();
// The entry named `name`, or nullptr.
[[nodiscard]] const SchedulerEntry* find_scheduler(std::string_view name);
// With chunked prefill off, the tokens a request of `prompt` + `output` tokens computes in one step at
// most: its prompt under a scheduler that never evicts, else prompt and output (a preempted request
// recomputes both).
[[nodiscard]] std::int64_t unchunked_step_tokens(const DeploymentSpec& d, std::int64_t prompt,
                                                 std::int64_t output);

// The scheduler the deployment names (docs/engines.md). `speculative` when deployment.speculative is set:
// each decode sequence then verifies its drafts.
std::unique_ptr<BatchPolicy> make_batch_policy(const DeploymentSpec& d,
                                               const SpeculativeSpec* speculative = nullptr);

// vLLM's continuous batching (vllm/core/scheduler.py, V0 default with chunked prefill; V1's
// vllm/v1/core/sched/scheduler.py keeps the same order): running requests first, oldest first, each one
// decode token or the next prefill chunk within the step's token budget; when blocks run out the last
// running request (the newest admitted, which the loop reaches last) is preempted and recomputed
// (`self.running.pop()`), and the request itself when it is the last; then waiting requests are admitted
// first come first served while sequences, tokens and blocks allow, none after a preemption in the step.
// Admission reserves what the allocator reserves: the blocks of the whole sequence to compute (prompt
// plus any generated tokens of a preempted request) less its prefix-cache hit, with a watermark of 1% of
// the pool left free (V0 BlockSpaceManager.can_allocate with watermark 0.01 allocates the whole prompt at
// admission even when its prefill is chunked; V1's KVCacheManager.allocate_slots checks the same with
// full_sequence_must_fit, scheduler_reserve_full_isl). Without it a chunk-sized admission is preempted
// as soon as the running requests' decode grows into its blocks, which thrashes a pool near full.
// Under speculative decoding a decode sequence takes k + 1 tokens of the budget and of KV slots (vLLM's
// num_lookahead_slots) and verifies k drafts.
class VllmBatchPolicy final : public BatchPolicy {
 public:
  static constexpr double kWatermark = 0.01;  // BlockSpaceManager(watermark=0.01); Vidur's default too
  explicit VllmBatchPolicy(const DeploymentSpec& d, int draft_tokens = 0)
      : d_(d), draft_tokens_(draft_tokens) {}
  FormedBatch form(AttentionGroup& g, RequestTable& requests, Time now,
                   std::vector<ScheduledWork>& scheduled) override;

 private:
  // Grows `r` to `computed` tokens, preempting the newest running requests while blocks are short;
  // false when `r` itself would be next.
  bool allocate(AttentionGroup& g, RequestTable& requests, Request& r, std::int64_t computed, int& preempted);
  DeploymentSpec d_;
  int draft_tokens_;
};

}  // namespace moesim
