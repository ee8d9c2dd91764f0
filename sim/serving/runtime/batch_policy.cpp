#include "sim/serving/runtime/batch_policy.h"

#include <algorithm>
#include <string>

#include "sim/engine/check.h"
#include "sim/serving/runtime/engine_batch_policies.h"

namespace moesim {

namespace {

template <class P>
std::unique_ptr<BatchPolicy> make(const DeploymentSpec& d, int draft_tokens) {
  return std::make_unique<P>(d, draft_tokens);
}

// The schedulers a scenario can name; a new one adds its line here.
constexpr SchedulerEntry kSchedulers[] = {
    {"vllm", "vLLM's continuous batching: whole-sequence admission, last-in preempted",
     make<VllmBatchPolicy>},
    {"sglang", "SGLang's new_token_ratio admission and decode retraction", make<SglangBatchPolicy>},
    {"trtllm", "TensorRT-LLM's guaranteed-no-evict capacity scheduler", make<TrtllmBatchPolicy>, false},
};

}  // namespace

std::span<const SchedulerEntry> schedulers() { return kSchedulers; }

const SchedulerEntry* find_scheduler(std::string_view name) {
  for (const SchedulerEntry& e : kSchedulers)
    if (e.name == name) return &e;
  return nullptr;
}

std::int64_t unchunked_step_tokens(const DeploymentSpec& d, std::int64_t prompt, std::int64_t output) {
  const SchedulerEntry* e = find_scheduler(d.scheduler);
  return e != nullptr && !e->evicts ? prompt : prompt + output;
}

bool adp_contexts_run(const AdpBalanceSpec& spec, int max_batch_size, std::span<const GroupBatch> batches,
                      AdpBalanceCounters& c) {
  bool free_slots = true, all_ctx = true, all_gen = true;
  for (const GroupBatch& b : batches) {
    free_slots = free_slots && b.decode_seqs < max_batch_size;
    all_ctx = all_ctx && b.prefill_tokens > 0;
    all_gen = all_gen && b.decode_seqs > 0;
  }
  if (free_slots && all_ctx) {
    c.waiting_iters = 0;
    if (!all_gen) return true;
    if (c.batching_iters < spec.batching_wait_iters) {
      ++c.batching_iters;
      return false;
    }
    c.batching_iters = 0;
    return true;
  }
  ++c.waiting_iters;
  if (c.waiting_iters >= spec.timeout_iters || !all_gen) {
    c.waiting_iters = 0;
    return true;
  }
  return false;
}

void hold_contexts(std::span<GroupBatch> batches, RequestTable& requests,
                   std::vector<ScheduledWork>& scheduled) {
  for (GroupBatch& b : batches) b = GroupBatch{};
  std::vector<ScheduledWork> kept;
  kept.reserve(scheduled.size());
  for (const ScheduledWork& w : scheduled) {
    if (w.prefill) continue;
    const Request& r = requests[w.req];
    add_work(batches[static_cast<std::size_t>(r.group)], r, w, kept);
  }
  scheduled.swap(kept);
}

std::unique_ptr<BatchPolicy> make_batch_policy(const DeploymentSpec& d, const SpeculativeSpec* speculative) {
  const SchedulerEntry* e = find_scheduler(d.scheduler);
  MOESIM_CHECK(e != nullptr, "deployment.scheduler \"" + d.scheduler + "\" is not in the scheduler table");
  return e->make(d, speculative ? speculative->draft_tokens : 0);
}

void add_work(GroupBatch& batch, const Request& r, ScheduledWork w, std::vector<ScheduledWork>& scheduled) {
  const double p = static_cast<double>(r.computed);
  const double c = static_cast<double>(w.tokens);
  batch.request_token_pairs += c * (c - 1.0);
  if (w.prefill) {
    batch.prefill_tokens += w.tokens;
    batch.prefill_pairs += c * p + c * (c + 1.0) / 2.0;
    batch.prefill_kv_tokens += p + c;
    if (r.computed + w.tokens == r.target) ++batch.sampled_seqs;
  } else {
    // tokens = 1 + k: the sequence's token and k drafts, each attending to the context before it.
    const double k = c - 1.0;
    ++batch.decode_seqs;
    batch.decode_context_tokens += p + 1.0;
    batch.decode_draft_tokens += w.tokens - 1;
    batch.decode_draft_pairs += k * (p + 1.0) + k * (k + 1.0) / 2.0;
    batch.sampled_seqs += w.tokens;
  }
  scheduled.push_back(w);
}

bool preempt_newest_for(AttentionGroup& g, RequestTable& requests, Request& r, std::int64_t computed,
                        int& preempted, std::int64_t max_prompt) {
  while (!g.kv.can_hold(r, computed)) {
    if (g.running.empty() || &requests[g.running.back()] == &r) return false;
    const RequestIdx victim = g.running.back();
    g.running.pop_back();
    g.preempt(requests, victim, max_prompt);
    ++preempted;
  }
  g.kv.grow(r, computed);
  return true;
}

WaitingFront waiting_front(AttentionGroup& g, RequestTable& requests) {
  const RequestIdx idx = g.waiting.front();
  Request& r = requests[idx];
  const std::int64_t hit = g.kv.lookup_prefix(r);
  return {.idx = idx, .r = &r, .hit = hit, .left = r.target - r.computed - hit};
}

std::int64_t admit_front(AttentionGroup& g, const WaitingFront& f, std::int64_t budget, bool chunked_prefill,
                         Time now, AdmitReserve reserve) {
  Request& r = *f.r;
  if (!chunked_prefill && f.left > budget) return 0;
  const std::int64_t tokens = std::min(f.left, budget);
  const std::int64_t computed = r.computed + f.hit + tokens;
  const std::int64_t held = reserve.whole_prompt ? std::max(computed, r.target) : computed;
  if (!g.kv.can_admit(r, held, reserve.keep_free)) return 0;
  g.waiting.pop_front();
  g.waiting_tokens -= r.target - r.computed;
  g.running.push_back(f.idx);
  g.kv.admit(r, computed, held);
  if (r.admitted == Time::never()) r.admitted = now;
  return tokens;
}

bool VllmBatchPolicy::allocate(AttentionGroup& g, RequestTable& requests, Request& r, std::int64_t computed,
                               int& preempted) {
  return preempt_newest_for(g, requests, r, computed, preempted);
}

FormedBatch VllmBatchPolicy::form(AttentionGroup& g, RequestTable& requests, Time now,
                                  std::vector<ScheduledWork>& scheduled) {
  FormedBatch out;
  GroupBatch& batch = out.batch;
  std::int64_t budget = d_.max_batched_tokens;
  bool preempted = false;
  auto add = [&](RequestIdx idx, std::int64_t tokens, bool prefill) {
    add_work(batch, requests[idx], ScheduledWork{idx, tokens, prefill}, scheduled);
    budget -= tokens;
  };
  // Running requests first, oldest first; the newest are preempted when blocks run out.
  for (std::size_t i = 0; i < g.running.size() && budget > 0; ++i) {
    const RequestIdx idx = g.running[i];
    Request& r = requests[idx];
    const bool prefill = r.in_prefill();
    const std::int64_t tokens = prefill ? std::min(r.target - r.computed, budget) : 1 + draft_tokens_;
    const int before = out.preemptions;
    if (!allocate(g, requests, r, r.computed + tokens, out.preemptions)) {
      g.running.erase(g.running.begin() + static_cast<std::ptrdiff_t>(i));
      g.preempt(requests, idx);
      ++out.preemptions;
      preempted = true;
      break;
    }
    preempted = preempted || out.preemptions != before;
    add(idx, tokens, prefill);
  }
  // Then admit waiting requests while sequences, tokens and blocks allow (not after a preemption): the
  // whole sequence's blocks and the watermark must fit.
  const AdmitReserve reserve{
      .whole_prompt = true,
      .keep_free = static_cast<std::int64_t>(kWatermark * static_cast<double>(g.kv.total_blocks()))};
  while (!preempted && g.has_fetched_waiting() && budget > 0 &&
         static_cast<int>(g.running.size()) < d_.max_batch_size) {
    // Prefix caching: the cached leading blocks are not recomputed (0 hit tokens without it).
    const WaitingFront f = waiting_front(g, requests);
    const std::int64_t tokens = admit_front(g, f, budget, d_.chunked_prefill, now, reserve);
    if (tokens == 0) break;
    add(f.idx, tokens, true);
  }
  g.kv.note_peak();
  return out;
}

}  // namespace moesim
