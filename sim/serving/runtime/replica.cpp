#include "sim/serving/runtime/replica.h"

#include <algorithm>

#include "sim/engine/check.h"

namespace moesim {

Replica::Replica(int index, ReplicaContext ctx, std::unique_ptr<ExpertLoop> loop, const GpuCostModel& gpu,
                 Rng routing, std::int64_t kv_blocks_per_group, int first_gpu)
    : index_(index),
      ctx_(ctx),
      loop_(std::move(loop)),
      planner_(ctx.models.make_planner(ctx.s, gpu, routing, loop_.get())),
      accept_rng_(ctx.streams.stream("speculative", static_cast<std::uint64_t>(index))),
      plan_job_([this] { planner_->finish_plan(); }),
      first_gpu_(first_gpu) {
  const auto groups = static_cast<std::size_t>(ctx_.s.deployment.attention_dp);
  groups_.reserve(groups);
  for (std::size_t g = 0; g < groups; ++g) {
    groups_.emplace_back(KvCacheManager(kv_blocks_per_group, ctx_.s.deployment.kv_block_tokens,
                                        ctx_.s.deployment.prefix_caching));
  }
  batches_.resize(groups);
  group_chunks_.resize(groups);
  evict_.assign(groups, 0);
}

void Replica::enqueue(int group, RequestIdx idx, bool front) {
  AttentionGroup& g = groups_[static_cast<std::size_t>(group)];
  auto& waiting = g.waiting;
  const Request& r = ctx_.requests[idx];
  g.waiting_tokens += r.target - r.computed;
  if (front) {
    waiting.push_front(idx);
  } else {
    waiting.push_back(idx);
    // Queued while a step runs, under an executor that has already formed the next batch: fetched for
    // the one after it (fetch_queued_before).
    if (busy_ && fetches_at_step_start(ctx_.s.deployment.engine)) g.unfetched_since.push_back(ctx_.sim.now());
  }
  ctx_.host.on_loads_changed(index_);
  wake();
}

std::int64_t Replica::running() const {
  std::int64_t n = 0;
  for (const AttentionGroup& g : groups_) n += static_cast<std::int64_t>(g.running.size());
  return n;
}

std::int64_t Replica::in_system() const {
  std::int64_t n = 0;
  for (const AttentionGroup& g : groups_) n += static_cast<std::int64_t>(g.running.size() + g.waiting.size());
  return n;
}

void Replica::request_migration(int n) {
  migrate_ = n;
  if (!busy_) migrate_out(ctx_.sim.now());
}

// Between steps: the newest running decode requests of the fullest groups leave with their KV cache.
void Replica::migrate_out(Time now) {
  while (migrate_ > 0) {
    AttentionGroup* from = nullptr;
    for (AttentionGroup& g : groups_) {
      if (!g.running.empty() && !ctx_.requests[g.running.back()].in_prefill() &&
          (from == nullptr || g.running.size() > from->running.size()))
        from = &g;
    }
    if (from == nullptr) break;
    const RequestIdx idx = from->running.back();
    from->running.pop_back();
    from->kv.release(ctx_.requests[idx]);
    --migrate_;
    ctx_.host.on_loads_changed(index_);
    ctx_.host.on_migrated_out(idx, now);
  }
  migrate_ = 0;
}

void Replica::evict(int group) {
  for (std::size_t g = 0; g < groups_.size(); ++g) {
    if (group < 0 || static_cast<int>(g) == group) evict_[g] = 1;
  }
  if (!busy_) evict_now(ctx_.sim.now());
}

// Between steps: the failed groups' running requests free their KV blocks; they and the waiting ones go
// to the host, oldest first.
void Replica::evict_now(Time now) {
  for (std::size_t g = 0; g < groups_.size(); ++g) {
    if (evict_[g] == 0) continue;
    evict_[g] = 0;
    AttentionGroup& group = groups_[g];
    std::vector<RequestIdx> out(group.running.begin(), group.running.end());
    out.insert(out.end(), group.waiting.begin(), group.waiting.end());
    group.running.clear();
    group.waiting.clear();
    group.unfetched_since.clear();
    group.waiting_tokens = 0;
    for (const RequestIdx idx : out) {
      Request& r = ctx_.requests[idx];
      group.kv.release(r);
      ctx_.host.on_evicted(idx, now);
    }
    ctx_.host.on_loads_changed(index_);
  }
}

// Batches are formed in the decide phase, after every arrival of the same instant is in.
void Replica::wake() {
  if (busy_ || decide_pending_ || halted_) return;
  decide_pending_ = true;
  ctx_.sim.schedule_in(Duration::zero(), Phase::kDecide, [this] { on_decide(); });
}

// An executor with nothing it may run does not wait for a step to fetch: it takes every queued request
// at once (TensorRT-LLM's loop blocks in its fetch while it has no active request).
void Replica::fetch_all_if_idle() {
  const bool runnable = std::any_of(groups_.begin(), groups_.end(), [](const AttentionGroup& g) {
    return !g.running.empty() || g.has_fetched_waiting();
  });
  if (runnable) return;
  for (AttentionGroup& g : groups_) g.unfetched_since.clear();
}

// At the end of a step that began at `start`: the requests queued up to `start` were fetched for the
// batch formed next (the executor fetched them while it formed that batch, as the step began).
void Replica::fetch_queued_before(Time start) {
  for (AttentionGroup& g : groups_) {
    while (!g.unfetched_since.empty() && g.unfetched_since.front() <= start) g.unfetched_since.pop_front();
  }
}

void Replica::on_decide() {
  decide_pending_ = false;
  if (busy_ || halted_) return;
  const Time now = ctx_.sim.now();
  fetch_all_if_idle();
  scheduled_.clear();
  for (std::size_t g = 0; g < groups_.size(); ++g) {
    const FormedBatch f = ctx_.policy.form(groups_[g], ctx_.requests, now, scheduled_);
    batches_[g] = f.batch;
    ctx_.metrics.on_preemptions(f.preemptions);
  }
  ctx_.policy.balance(batches_, ctx_.requests, scheduled_, adp_);
  if (ctx_.s.deployment.two_batch_overlap) attach_prefill_chunks();
  const bool any =
      std::any_of(batches_.begin(), batches_.end(), [](const GroupBatch& b) { return b.tokens() > 0; });
  ctx_.host.on_loads_changed(index_);
  if (!any) return;
  ctx_.models.advance_to(now);
  busy_ = true;
  step_start_ = now;
  step_ = StepRecord{.replica = index_, .pool = ctx_.pool, .start_s = now.seconds()};
  for (const AttentionGroup& g : groups_) {
    step_.running += static_cast<std::int64_t>(g.running.size());
    step_.waiting += static_cast<std::int64_t>(g.waiting.size());
  }
  for (const GroupBatch& b : batches_) {
    step_.decode_seqs += b.decode_seqs - b.padding_seqs;
    step_.prefill_tokens += b.prefill_tokens;
  }
  // The step's cheap half now; the rest (sampling and costing every MoE layer) may run on a worker while
  // the simulation goes on, up to the time the step cannot end before: the plan is joined there, always
  // (with or without workers), so the order of events, hence the report, does not depend on threads.
  // KV caches moving through this replica's NICs share them with the step's All-to-All.
  // The window is the previous step's duration, or on a first step (or after an empty one) this step's
  // lower bound: the share of it that KV still holds the NICs.
  const auto gpus = static_cast<std::size_t>(planner_->gpus());
  kv_out_.assign(gpus, 0.0);
  kv_in_.assign(gpus, 0.0);
  const Duration previous = planner_->last_plan().total;
  const Duration lower_bound = planner_->begin_plan(batches_, now);
  // The expert loop's step boundary: reclassification and a rebalance when due (the planner follows a new
  // placement as the plan goes on; the rebalance's pause is part of the step, beyond the lower bound).
  if (loop_) planner_->add_loop_events(loop_->begin_step());
  const Duration horizon = previous > Duration::zero() ? previous : lower_bound;
  const bool kv =
      horizon > Duration::zero() && ctx_.host.kv_on_nics(first_gpu_, now, horizon, kv_out_, kv_in_);
  planner_->set_nic_shared(kv ? std::span<const double>(kv_out_) : std::span<const double>{},
                           kv ? std::span<const double>(kv_in_) : std::span<const double>{});
  if (ctx_.plans != nullptr) {
    ctx_.plans->submit(plan_job_);
    plan_in_flight_ = true;
  } else {
    planner_->finish_plan();
  }
  ctx_.sim.schedule_in(lower_bound, Phase::kNormal, [this] { on_planned(); });
}

// Each group's prefill chunks, in the order its policy scheduled them, for the two-batch split
// (micro_batch_split.h): a chunk's prefix is its request's computed tokens, which advance when the step ends.
void Replica::attach_prefill_chunks() {
  prefill_chunks_.clear();
  std::fill(group_chunks_.begin(), group_chunks_.end(), 0);
  for (const ScheduledWork& sc : scheduled_) {
    if (!sc.prefill) continue;
    const Request& r = ctx_.requests[sc.req];
    prefill_chunks_.push_back({.tokens = sc.tokens, .prefix = r.computed});
    ++group_chunks_[static_cast<std::size_t>(r.group)];
  }
  // scheduled_ lists the work group by group (formed so, and kept in order by the policy's balance), so a
  // group's chunks are contiguous. Spans only once the vector has stopped growing.
  std::size_t at = 0;
  for (std::size_t g = 0; g < groups_.size(); ++g) {
    batches_[g].prefill_chunks = std::span<const PrefillChunk>(prefill_chunks_).subspan(at, group_chunks_[g]);
    at += group_chunks_[g];
  }
}

// Redundant slots come with an expert loop (experts.any()): a loss they cover is the loop's to publish.
// Without one no loss is ever covered, and the placement is always whole.
void Replica::set_lost_ranks(std::span<const char> lost) {
  if (!loop_) {
    MOESIM_CHECK(std::none_of(lost.begin(), lost.end(), [](char c) { return c != 0; }),
                 "a loss covered without redundant slots (no expert loop)");
    return;
  }
  settle();
  loop_->set_lost_ranks(lost);
}

void Replica::settle() {
  if (!plan_in_flight_) return;
  plan_in_flight_ = false;
  ctx_.plans->wait(plan_job_);
}

void Replica::on_planned() {
  settle();
  const StepPlan& plan = planner_->last_plan();
  // After the step: the imbalance the loop's rebalance threshold watches, prefetches from the step's end.
  if (loop_) planner_->add_loop_events(loop_->end_step(step_start_ + plan.total, plan.gpu_imbalance));
  if (ctx_.s.experts.load_aware_admission) {
    const auto busy = planner_->gpu_busy_s();
    const auto tp = static_cast<std::size_t>(ctx_.s.deployment.attention_tp);
    for (std::size_t g = 0; g < busy.size(); ++g) {
      double& b = groups_[g / tp].busy_ewma_s;
      b += 0.1 * (busy[g] - b);  // EWMA over ~10 steps
    }
  }
  step_.plan = &plan;
  step_.rank_pairs = planner_->rank_pairs();
  const Fabric& fabric = ctx_.models.fabric();
  const double nic_rate = std::min(fabric.spec().nic_bytes_per_s / fabric.topology().gpus_per_nic(),
                                   fabric.spec().pcie_bytes_per_s);
  const double nic_s = plan.dispatch_nic_bytes / planner_->gpus() / nic_rate;
  nic_busy_share_ = plan.total > Duration::zero() ? std::min(1.0, nic_s / plan.total.seconds()) : 0.0;
  ctx_.metrics.on_step(step_, *planner_, step_start_);
  ctx_.sim.schedule_at(step_start_ + plan.total, Phase::kNormal, [this] { on_step_done(); });
}

void Replica::emit_token(Request& r, Time now) {
  ++r.generated;
  if (r.generated <= r.delivered) return;  // generated again after a pause dropped it: the user has it
  r.delivered = static_cast<std::int32_t>(r.generated);
  ctx_.metrics.on_token(r, now);
  if (r.generated == 1) r.first_token = now;
  r.last_token = now;
}

void Replica::finish(RequestIdx idx, Time now) {
  Request& r = ctx_.requests[idx];
  groups_[static_cast<std::size_t>(r.group)].kv.release(r);
  r.target = -1;  // marks finished for the compaction in on_step_done
  ctx_.metrics.on_finished(r, now);
  ctx_.host.on_request_finished(r, now);
}

void Replica::on_step_done() {
  busy_ = false;
  const Time now = ctx_.sim.now();
  bool any_finished = false;
  ctx_.host.on_loads_changed(index_);
  // The batch's requests lie all over the request table (one cache miss each, across a cluster's replicas
  // more than the caches hold): ask for them a few iterations ahead.
  constexpr std::size_t kAhead = 6;
  for (std::size_t w = 0; w < std::min(kAhead, scheduled_.size()); ++w)
    ctx_.requests.prefetch(scheduled_[w].req);
  for (std::size_t w = 0; w < scheduled_.size(); ++w) {
    if (w + kAhead < scheduled_.size()) ctx_.requests.prefetch(scheduled_[w + kAhead].req);
    const ScheduledWork& sc = scheduled_[w];
    Request& r = ctx_.requests[sc.req];
    if (!sc.prefill && sc.tokens > 1) {
      // Speculative decoding: the verified drafts accepted in order plus the target's own token, at most
      // what the request still asks for; only their KV stays (the rejected positions are overwritten).
      const auto& spec = *ctx_.s.production.speculative;
      const int accepted = sample_tokens_per_step(spec, accept_rng_);
      const std::int64_t n = std::min<std::int64_t>(accepted, r.output - r.generated);
      ++speculative_.sequence_steps;
      speculative_.tokens += accepted;  // what the verification accepted, before the request's end cut it
      r.computed += n;
      for (std::int64_t i = 1; i < n; ++i) emit_token(r, now);
    } else {
      r.computed += sc.tokens;
    }
    if (sc.prefill && r.in_prefill()) continue;
    if (r.delivered == 0) ctx_.metrics.on_prompt_done(r, now);
    // Under disaggregation the first token (sampled by the prefill instance) reaches the user when the
    // decode instance takes the request into a batch: TTFT ends there.
    if (ctx_.role == PoolRole::kDecode && r.generated == 1) r.first_token = r.last_token = r.admitted;
    emit_token(r, now);
    if (r.generated >= r.output) {
      any_finished = true;
      finish(sc.req, now);
    } else if (ctx_.role == PoolRole::kPrefill) {
      // The prefill instance sampled the first token; the request decodes elsewhere.
      groups_[static_cast<std::size_t>(r.group)].kv.release(r);
      r.target = -2;  // leaves `running` below; the host takes it after the step
      any_finished = true;
      handoff_.push_back(sc.req);
    }
  }
  if (any_finished) {
    for (AttentionGroup& g : groups_) {
      std::erase_if(g.running, [this](RequestIdx i) { return ctx_.requests[i].target < 0; });
    }
    for (const ScheduledWork& sc : scheduled_) {
      Request& r = ctx_.requests[sc.req];
      if (r.target == -1) ctx_.requests.release(sc.req);  // finished; -2: handed off, still in the table
      if (r.target < 0) r.target = 0;
    }
  }
  scheduled_.clear();
  fetch_queued_before(step_start_);
  for (const RequestIdx idx : handoff_) ctx_.host.on_prefilled(idx, now);
  handoff_.clear();
  if (migrate_ > 0) migrate_out(now);
  if (std::find(evict_.begin(), evict_.end(), 1) != evict_.end()) evict_now(now);
  wake();
  ctx_.host.on_step_done();
}

}  // namespace moesim
