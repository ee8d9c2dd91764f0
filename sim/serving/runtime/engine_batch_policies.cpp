#include "sim/serving/runtime/engine_batch_policies.h"

#include <algorithm>

namespace moesim {

namespace {

std::int64_t blocks_for(std::int64_t tokens, std::int64_t block_tokens) {
  return (tokens + block_tokens - 1) / block_tokens;
}

}  // namespace

FormedBatch SglangBatchPolicy::form(AttentionGroup& g, RequestTable& requests, Time now,
                                    std::vector<ScheduledWork>& scheduled) {
  FormedBatch out;
  GroupBatch& batch = out.batch;
  const std::int64_t bt = g.kv.block_tokens();
  std::int64_t budget = d_.max_batched_tokens;
  // An idle scheduler (or one never run) starts from the initial ratio.
  if (g.running.empty() || g.new_token_ratio < 0) g.new_token_ratio = kInitNewTokenRatio;
  const double ratio = g.new_token_ratio;
  // Prefill batch. The reserve for running requests' remaining output, in tokens (PrefillAdder's
  // rem_total_token_offset).
  double reserve = 0;
  for (const RequestIdx idx : g.running) {
    const Request& r = requests[idx];
    reserve += static_cast<double>(std::min(r.output - r.generated, kClipMaxNewTokens)) * ratio;
  }
  double rem_total = static_cast<double>(g.kv.free_blocks() * bt) - reserve;
  // The request being chunked continues first (its blocks were accounted for when it was admitted).
  for (const RequestIdx idx : g.running) {
    Request& r = requests[idx];
    if (!r.in_prefill() || budget <= 0) continue;
    const std::int64_t tokens = std::min(r.target - r.computed, budget);
    if (!g.kv.can_hold(r, r.computed + tokens)) break;
    g.kv.grow(r, r.computed + tokens);
    add_work(batch, r, ScheduledWork{idx, tokens, true}, scheduled);
    budget -= tokens;
    rem_total -= static_cast<double>(tokens);
  }
  while (g.has_fetched_waiting() && budget > 0 && static_cast<int>(g.running.size()) < d_.max_batch_size) {
    const WaitingFront f = waiting_front(g, requests);
    Request& r = *f.r;
    const std::int64_t new_tokens = std::min(r.output - r.generated, kClipMaxNewTokens);
    if (static_cast<double>(f.left + new_tokens) >= rem_total) break;  // NO_TOKEN
    const std::int64_t tokens = admit_front(g, f, budget, d_.chunked_prefill, now);
    if (tokens == 0) break;
    add_work(batch, r, ScheduledWork{f.idx, tokens, true}, scheduled);
    budget -= tokens;
    // A whole prompt reserves its output; a chunked one only its chunk (it reserves when it completes).
    rem_total -=
        static_cast<double>(tokens) + (tokens == f.left ? static_cast<double>(new_tokens) * ratio : 0.0);
  }
  if (batch.tokens() == 0 && !g.running.empty()) decode(g, requests, out, scheduled);
  g.kv.note_peak();
  return out;
}

void SglangBatchPolicy::decode(AttentionGroup& g, RequestTable& requests, FormedBatch& out,
                               std::vector<ScheduledWork>& scheduled) const {
  const std::int64_t step = 1 + draft_tokens_;
  auto short_of_blocks = [&] {
    std::int64_t need = 0;
    for (const RequestIdx idx : g.running) {
      const Request& r = requests[idx];
      if (!r.in_prefill()) need += g.kv.blocks_needed(r, r.computed + step);
    }
    return need > g.kv.free_blocks();
  };
  // check_decode_mem failed: retract at least one, then until 20 steps of each request left fit.
  if (g.running.size() > 1 && short_of_blocks()) {
    const auto headroom = [&] {
      return g.kv.free_blocks() * g.kv.block_tokens() >=
             static_cast<std::int64_t>(g.running.size()) * kRetractDecodeSteps;
    };
    do {
      auto victim = g.running.begin();
      for (auto it = g.running.begin(); it != g.running.end(); ++it) {
        const Request& a = requests[*it];
        const Request& v = requests[*victim];
        if (a.generated < v.generated || (a.generated == v.generated && a.prompt > v.prompt)) victim = it;
      }
      const RequestIdx v = *victim;
      g.running.erase(victim);
      g.preempt(requests, v);
      ++out.preemptions;
    } while (g.running.size() > 1 && (!headroom() || short_of_blocks()));
    // The estimate the retraction teaches: what the requests left generated so far, plus 20 steps each.
    double decoded = 0, max_new = 0;
    for (const RequestIdx idx : g.running) {
      decoded += static_cast<double>(requests[idx].generated + kRetractDecodeSteps);
      max_new += static_cast<double>(requests[idx].output);
    }
    g.new_token_ratio = max_new > 0 ? std::min(1.0, decoded / max_new) : kInitNewTokenRatio;
  } else {
    g.new_token_ratio = std::max(g.new_token_ratio - kNewTokenRatioDecay, kMinNewTokenRatio);
  }
  for (std::size_t i = 0; i < g.running.size(); ++i) {
    const RequestIdx idx = g.running[i];
    Request& r = requests[idx];
    if (r.in_prefill()) continue;                     // a chunked prompt the pool could not grow this step
    if (!g.kv.can_hold(r, r.computed + step)) break;  // one request that alone outgrows the pool waits
    g.kv.grow(r, r.computed + step);
    add_work(out.batch, r, ScheduledWork{idx, step, false}, scheduled);
  }
}

FormedBatch TrtllmBatchPolicy::form(AttentionGroup& g, RequestTable& requests, Time now,
                                    std::vector<ScheduledWork>& scheduled) {
  FormedBatch out;
  GroupBatch& batch = out.batch;
  const std::int64_t bt = g.kv.block_tokens();
  std::int64_t budget = d_.max_batched_tokens;
  const std::int64_t step = 1 + draft_tokens_;
  // Blocks a request may still need to finish: those of its prompt and whole output and the verify
  // lookahead, less those it holds (its generated tokens are in both).
  auto to_finish = [&](const Request& r, std::int64_t held) {
    return std::max<std::int64_t>(0, blocks_for(r.prompt + r.output + draft_tokens_, bt) - held);
  };
  // Chunking off, a context is one step; a request preempted all the same recomputes in chunks.
  auto chunks = [&](const Request& r) { return d_.chunked_prefill || r.preemptions > 0; };
  // GUARANTEED_NO_EVICT reserves for every running request the blocks it may still need; MAX_UTILIZATION
  // reserves nothing, and its pauses keep a request's generated tokens only up to max_input_len
  // (LlmRequest::pause).
  const bool max_util = d_.capacity_policy == CapacitySchedulerPolicy::kMaxUtilization;
  const std::int64_t pause_prompt = max_util ? d_.max_input_len : 0;
  std::int64_t reserved = 0;
  if (!max_util) {
    for (const RequestIdx idx : g.running) reserved += to_finish(requests[idx], requests[idx].blocks);
  }
  // Active requests in arrival order: generation steps and context chunks within max_num_tokens.
  for (std::size_t i = 0; i < g.running.size() && budget > 0; ++i) {
    const RequestIdx idx = g.running[i];
    Request& r = requests[idx];
    const bool prefill = r.in_prefill();
    if (prefill && !chunks(r) && r.target - r.computed > budget) break;
    const std::int64_t tokens = prefill ? std::min(r.target - r.computed, budget) : step;
    const std::int64_t before = r.blocks;
    if (!preempt_newest_for(g, requests, r, r.computed + tokens, out.preemptions, pause_prompt)) break;
    if (!max_util) reserved -= std::min(r.blocks - before, to_finish(r, before));
    add_work(batch, r, ScheduledWork{idx, tokens, prefill}, scheduled);
    budget -= tokens;
  }
  // Admission in arrival order. GUARANTEED_NO_EVICT: the new request's whole prompt and output beside every
  // reservation. MAX_UTILIZATION: its whole prompt's blocks beside what this step's requests took
  // (KVCacheManager::getNeededBlocksOneStep of a first context chunk).
  while (g.has_fetched_waiting() && budget > 0 && static_cast<int>(g.running.size()) < d_.max_batch_size) {
    const WaitingFront f = waiting_front(g, requests);
    Request& r = *f.r;
    const std::int64_t hit_blocks = f.hit / bt;
    const std::int64_t need = max_util ? 0 : to_finish(r, hit_blocks);
    if (!max_util && need > g.kv.free_blocks() - reserved) break;
    const std::int64_t tokens =
        admit_front(g, f, budget, chunks(r), now, AdmitReserve{.whole_prompt = max_util});
    if (tokens == 0) break;
    if (!max_util) reserved += need - (r.blocks - hit_blocks);
    add_work(batch, r, ScheduledWork{f.idx, tokens, true}, scheduled);
    budget -= tokens;
  }
  g.kv.note_peak();
  return out;
}

void TrtllmBatchPolicy::balance(std::span<GroupBatch> batches, RequestTable& requests,
                                std::vector<ScheduledWork>& scheduled, AdpBalanceCounters& counters) {
  if (d_.adp_balance.enabled && batches.size() >= 2 &&
      !adp_contexts_run(d_.adp_balance, d_.max_batch_size, batches, counters))
    hold_contexts(batches, requests, scheduled);
  if (!d_.cuda_graph_batch_sizes.empty())
    pad_to_cuda_graph(batches, d_.cuda_graph_batch_sizes, d_.max_batch_size, draft_tokens_);
}

void pad_to_cuda_graph(std::span<GroupBatch> batches, const std::vector<int>& sizes, int max_batch_size,
                       int draft_tokens) {
  std::int64_t largest = 0;
  bool all_generation = true;
  for (const GroupBatch& b : batches) {
    largest = std::max(largest, b.decode_seqs);
    all_generation = all_generation && b.prefill_tokens == 0;
  }
  if (largest == 0) return;  // an idle instance runs no step
  const double k = draft_tokens;
  for (GroupBatch& b : batches) {
    if (b.prefill_tokens > 0) continue;  // a rank with a context runs without a graph
    const std::int64_t want = all_generation && batches.size() > 1 ? largest : b.decode_seqs;
    const auto it = std::lower_bound(sizes.begin(), sizes.end(), want);
    if (it == sizes.end() || *it > max_batch_size) continue;
    const std::int64_t pad = *it - b.decode_seqs;
    if (pad <= 0) continue;
    const auto n = static_cast<double>(pad);
    b.decode_seqs += pad;
    b.padding_seqs += pad;
    b.decode_context_tokens += 2.0 * n;  // one context token and its own
    b.decode_draft_tokens += pad * draft_tokens;
    b.decode_draft_pairs += n * (2.0 * k + k * (k + 1.0) / 2.0);
    b.sampled_seqs += pad * (1 + draft_tokens);
  }
}

}  // namespace moesim
