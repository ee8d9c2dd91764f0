#include "sim/serving/serving_simulation.h"

#include <algorithm>
#include <cmath>
#include <deque>
#include <memory>
#include <optional>
#include <vector>

#include "sim/engine/check.h"
#include "sim/engine/simulator.h"
#include "sim/engine/version.h"
#include "sim/serving/latency_histogram.h"
#include "sim/serving/memory_plan.h"

namespace moesim {

namespace {

using Idx = std::uint32_t;

struct Request {
  std::int64_t id = 0;
  Time arrival;
  std::int64_t prompt = 0;
  std::int64_t output = 0;
  std::int64_t target = 0;    // tokens to compute before the next token can be sampled (prefill)
  std::int64_t computed = 0;  // tokens whose KV is in the cache
  std::int64_t generated = 0;
  std::int64_t blocks = 0;
  Time admitted = Time::never();
  Time first_token;
  Time last_token;
  int preemptions = 0;
  int replica = 0;
  int group = 0;
  bool measured = false;
};

struct Scheduled {
  Idx req;
  std::int64_t tokens;
  bool prefill;
};

struct Group {
  std::deque<Idx> waiting;
  std::vector<Idx> running;  // in admission order: the newest is preempted first
  std::int64_t free_blocks = 0;
  std::int64_t peak_used_blocks = 0;
};

struct Replica {
  std::vector<Group> groups;
  std::vector<GroupBatch> batches;
  std::vector<Scheduled> scheduled;
  std::unique_ptr<StepPlanner> planner;
  bool busy = false;
  bool decide_pending = false;
  Time step_start;
};

class Simulation {
 public:
  Simulation(const ScenarioSpec& s, const GpuCostModel& gpu, SimulationObserver* observer);
  Report run();

 private:
  void pull_arrival();
  void on_arrival(const RequestSpec& spec);
  int route() const;
  void wake(int replica);
  void on_decide(int replica);
  void on_step_done(int replica);
  bool form_batch(Replica& rep, int group_index);
  bool allocate(Group& g, Request& r, std::int64_t new_computed);
  void preempt(Group& g, Idx victim);
  void emit_token(Request& r);
  void finish(Idx idx);
  void record_drop(const RequestSpec& spec);
  Idx new_request();
  Report build_report() const;
  void fill_experts(Report& r) const;

  const ScenarioSpec& s_;
  const GpuCostModel& gpu_;
  SimulationObserver* observer_;
  MemoryPlan memory_;
  Simulator sim_;
  RandomStreams streams_;
  Fabric fabric_;
  ExpertPopularity popularity_;
  std::unique_ptr<DriftingPopularity> drift_;
  std::unique_ptr<CoactivationModel> coactivation_;
  std::unique_ptr<RequestSource> source_;
  std::vector<Replica> replicas_;
  std::vector<Request> requests_;
  std::vector<Idx> free_requests_;
  bool arrival_pending_ = false;
  mutable int rr_next_ = 0;
  std::int64_t next_id_ = 0;
  Time warmup_end_;
  std::int64_t max_request_tokens_ = 0;

  // Metrics.
  LatencyHistogram ttft_;
  LatencyHistogram tpot_;
  LatencyHistogram itl_;
  LatencyHistogram e2e_;
  LatencyHistogram queueing_;
  std::int64_t arrived_ = 0;
  std::int64_t finished_ = 0;
  std::int64_t dropped_ = 0;
  std::int64_t measured_ = 0;
  std::int64_t preemptions_ = 0;
  std::int64_t output_tokens_ = 0;
  std::int64_t output_tokens_asked_ = 0;
  std::int64_t window_output_tokens_ = 0;
  std::int64_t window_prompt_tokens_ = 0;
  std::int64_t window_finished_ = 0;
  std::int64_t sla_violations_ = 0;
  std::int64_t good_requests_ = 0;
  std::int64_t good_tokens_ = 0;
  std::int64_t steps_ = 0;
  double step_s_ = 0;
  double attention_s_ = 0;
  double dense_s_ = 0;
  double experts_s_ = 0;
  double dispatch_s_ = 0;
  double combine_s_ = 0;
  double comm_hidden_s_ = 0;
  double pipeline_bubble_s_ = 0;
  double pipeline_send_s_ = 0;
  double lm_head_s_ = 0;
  double batch_tokens_ = 0;
  double gpu_imbalance_ = 0;
  double expert_imbalance_ = 0;
  double nvlink_bytes_ = 0;
  double nic_bytes_ = 0;
  ExpertLoopReport loop_;           // window sums of the experts-in-the-loop counters
  std::vector<double> group_busy_;  // per attention group: EWMA of its GPUs' busy time per step
  std::vector<double> gpu_busy_;
  std::vector<double> gpu_flops_;
  std::vector<double> gpu_bytes_;
};

Simulation::Simulation(const ScenarioSpec& s, const GpuCostModel& gpu, SimulationObserver* observer)
    : s_(s),
      gpu_(gpu),
      observer_(observer),
      memory_(plan_memory(s)),
      streams_(s.run.seed),
      fabric_(s.cluster.fabric),
      popularity_(s.workload.popularity, s.model.moe_layers(), s.model.routed_experts, s.model.top_k,
                  streams_.stream("popularity")),
      warmup_end_(Time::at(s.run.warmup)) {
  if (s.workload.drift) {
    drift_ =
        std::make_unique<DriftingPopularity>(popularity_, s.workload.drift_spec, streams_.stream("drift"));
  }
  if (s.workload.coactivation) {
    coactivation_ =
        std::make_unique<CoactivationModel>(s.workload.coactivation_spec, s.model.moe_layers(),
                                            s.model.routed_experts, streams_.stream("coactivation"));
  }
  const RunLimits limits{.max_requests = s.run.requests, .max_arrival_time = s.run.duration};
  if (!s.workload.trace.empty()) {
    source_ = std::make_unique<TraceSource>(s.workload.trace, s.workload.trace_speedup, limits);
  } else {
    source_ = std::make_unique<SyntheticSource>(s.workload.arrivals, s.workload.prompt, s.workload.output,
                                                limits, streams_);
  }
  replicas_.resize(static_cast<std::size_t>(s.replicas()));
  for (std::size_t i = 0; i < replicas_.size(); ++i) {
    Replica& rep = replicas_[i];
    rep.groups.resize(static_cast<std::size_t>(s.deployment.attention_dp));
    rep.batches.resize(rep.groups.size());
    rep.planner = std::make_unique<StepPlanner>(s, gpu, fabric_, popularity_, streams_.stream("routing", i),
                                                drift_.get(), coactivation_.get());
  }
  // Per-expert precisions and replicas change the routed-expert weights: measured on the placement.
  if (s.experts.quantization && !replicas_.empty()) {
    memory_ = plan_memory(s, replicas_.front().planner->routed_expert_bytes_per_gpu());
  }
  check_fits(s, memory_);
  for (Replica& rep : replicas_) {
    for (Group& g : rep.groups) g.free_blocks = memory_.kv_blocks_per_group;
  }
  max_request_tokens_ = memory_.kv_tokens_per_group;
  group_busy_.assign(static_cast<std::size_t>(s.replicas() * s.deployment.attention_dp), 0.0);
  loop_.gpu_load_imbalance_weighted = 0;
  const auto gpus = static_cast<std::size_t>(s.replicas() * s.deployment.ep_size);
  gpu_busy_.assign(gpus, 0.0);
  gpu_flops_.assign(gpus, 0.0);
  gpu_bytes_.assign(gpus, 0.0);
}

Idx Simulation::new_request() {
  if (!free_requests_.empty()) {
    const Idx i = free_requests_.back();
    free_requests_.pop_back();
    requests_[i] = Request{};
    return i;
  }
  requests_.emplace_back();
  return static_cast<Idx>(requests_.size() - 1);
}

void Simulation::pull_arrival() {
  if (arrival_pending_) return;
  const std::optional<RequestSpec> next = source_->next();
  if (!next) return;
  arrival_pending_ = true;
  const RequestSpec spec = *next;
  sim_.schedule_at(std::max(spec.arrival, sim_.now()), Phase::kNormal, [this, spec] { on_arrival(spec); });
}

int Simulation::route() const {
  const int per_replica = s_.deployment.attention_dp;
  const int total = static_cast<int>(replicas_.size()) * per_replica;
  if (s_.deployment.router == RouterPolicy::kRoundRobin) return rr_next_++ % total;
  int best = 0;
  double best_load = 0;
  double min_busy = 0;
  if (s_.experts.load_aware_admission) {
    // Groups that have not stepped yet count as the least busy (ratio 1), never as idle.
    for (const double b : group_busy_) {
      if (b > 0 && (min_busy == 0 || b < min_busy)) min_busy = b;
    }
  }
  for (int i = 0; i < total; ++i) {
    const Group& g = replicas_[static_cast<std::size_t>(i / per_replica)]
                         .groups[static_cast<std::size_t>(i % per_replica)];
    double load = static_cast<double>(g.running.size() + g.waiting.size());
    if (s_.experts.load_aware_admission) {
      // Steer away from DP ranks whose GPUs were busiest in recent steps: (queue + 1) weighted by the
      // rank's busy time relative to the least busy one.
      const double busy = group_busy_[static_cast<std::size_t>(i)];
      load = (load + 1.0) * (min_busy > 0 && busy > 0 ? busy / min_busy : 1.0);
    }
    if (i == 0 || load < best_load) {
      best_load = load;
      best = i;
    }
  }
  return best;
}

void Simulation::record_drop(const RequestSpec& spec) {
  ++dropped_;
  if (observer_ != nullptr) {
    observer_->on_request(RequestRecord{.id = next_id_ - 1,
                                        .arrival_s = spec.arrival.seconds(),
                                        .prompt_tokens = spec.prompt_tokens,
                                        .output_tokens = spec.output_tokens,
                                        .dropped = true});
  }
  source_->on_finished(sim_.now());
}

void Simulation::on_arrival(const RequestSpec& spec) {
  arrival_pending_ = false;
  ++arrived_;
  ++next_id_;
  const int target = route();
  const int per_replica = s_.deployment.attention_dp;
  const int rep_index = target / per_replica;
  Group& g =
      replicas_[static_cast<std::size_t>(rep_index)].groups[static_cast<std::size_t>(target % per_replica)];
  // Too long for the KV cache, or (chunked prefill off) for one step's token budget.
  const bool too_long = spec.prompt_tokens + spec.output_tokens > max_request_tokens_ ||
                        (!s_.deployment.chunked_prefill &&
                         spec.prompt_tokens + spec.output_tokens > s_.deployment.max_batched_tokens);
  const bool queue_full = s_.deployment.max_waiting_requests > 0 &&
                          static_cast<std::int64_t>(g.waiting.size()) >= s_.deployment.max_waiting_requests;
  if (too_long || queue_full || spec.output_tokens <= 0 || spec.prompt_tokens <= 0) {
    record_drop(spec);
  } else {
    const Idx idx = new_request();
    Request& r = requests_[idx];
    r.id = next_id_ - 1;
    r.arrival = spec.arrival;
    r.prompt = spec.prompt_tokens;
    r.output = spec.output_tokens;
    r.target = r.prompt;
    output_tokens_asked_ += r.output;
    r.replica = rep_index;
    r.group = target % per_replica;
    r.measured = spec.arrival >= warmup_end_;
    g.waiting.push_back(idx);
    wake(rep_index);
  }
  pull_arrival();
}

void Simulation::wake(int replica) {
  Replica& rep = replicas_[static_cast<std::size_t>(replica)];
  if (rep.busy || rep.decide_pending) return;
  rep.decide_pending = true;
  sim_.schedule_in(Duration::zero(), Phase::kDecide, [this, replica] { on_decide(replica); });
}

bool Simulation::allocate(Group& g, Request& r, std::int64_t new_computed) {
  const std::int64_t b = s_.deployment.kv_block_tokens;
  const std::int64_t need = (new_computed + b - 1) / b - r.blocks;
  if (need <= 0) return true;
  while (need > g.free_blocks) {
    if (g.running.empty() || &requests_[g.running.back()] == &r) return false;
    const Idx victim = g.running.back();
    g.running.pop_back();
    preempt(g, victim);
  }
  g.free_blocks -= need;
  r.blocks += need;
  return true;
}

// vLLM's recompute preemption: drop the KV cache, keep the generated tokens, requeue at the front.
void Simulation::preempt(Group& g, Idx victim) {
  Request& v = requests_[victim];
  g.free_blocks += v.blocks;
  v.blocks = 0;
  v.computed = 0;
  v.target = v.prompt + v.generated;
  ++v.preemptions;
  ++preemptions_;
  g.waiting.push_front(victim);
}

bool Simulation::form_batch(Replica& rep, int group_index) {
  Group& g = rep.groups[static_cast<std::size_t>(group_index)];
  GroupBatch& batch = rep.batches[static_cast<std::size_t>(group_index)];
  batch = GroupBatch{};
  std::int64_t budget = s_.deployment.max_batched_tokens;
  bool preempted = false;
  auto add = [&](Idx idx, std::int64_t tokens, bool prefill) {
    Request& r = requests_[idx];
    const double p = static_cast<double>(r.computed);
    const double c = static_cast<double>(tokens);
    if (prefill) {
      batch.prefill_tokens += tokens;
      batch.prefill_pairs += c * p + c * (c + 1.0) / 2.0;
      batch.prefill_kv_tokens += p + c;
      if (r.computed + tokens == r.target) ++batch.sampled_seqs;
    } else {
      ++batch.decode_seqs;
      batch.decode_context_tokens += p + 1.0;
      ++batch.sampled_seqs;
    }
    budget -= tokens;
    rep.scheduled.push_back(Scheduled{idx, tokens, prefill});
  };
  // Running requests first, oldest first; the newest are preempted when blocks run out.
  for (std::size_t i = 0; i < g.running.size() && budget > 0; ++i) {
    const Idx idx = g.running[i];
    Request& r = requests_[idx];
    const bool prefill = r.computed < r.target;
    const std::int64_t tokens = prefill ? std::min(r.target - r.computed, budget) : 1;
    const std::size_t before = g.running.size();
    if (!allocate(g, r, r.computed + tokens)) {
      g.running.erase(g.running.begin() + static_cast<std::ptrdiff_t>(i));
      preempt(g, idx);
      preempted = true;
      break;
    }
    preempted = preempted || g.running.size() != before;
    add(idx, tokens, prefill);
  }
  // Then admit waiting requests while sequences, tokens and blocks allow (not after a preemption).
  while (!preempted && !g.waiting.empty() && budget > 0 &&
         static_cast<int>(g.running.size()) < s_.deployment.max_batch_size) {
    const Idx idx = g.waiting.front();
    Request& r = requests_[idx];
    const std::int64_t left = r.target - r.computed;
    if (!s_.deployment.chunked_prefill && left > budget) break;
    const std::int64_t tokens = std::min(left, budget);
    const std::int64_t b = s_.deployment.kv_block_tokens;
    if ((r.computed + tokens + b - 1) / b - r.blocks > g.free_blocks) break;
    g.waiting.pop_front();
    g.running.push_back(idx);
    allocate(g, r, r.computed + tokens);
    if (r.admitted == Time::never()) r.admitted = sim_.now();
    add(idx, tokens, true);
  }
  g.peak_used_blocks = std::max(g.peak_used_blocks, memory_.kv_blocks_per_group - g.free_blocks);
  return batch.tokens() > 0;
}

void Simulation::on_decide(int replica) {
  Replica& rep = replicas_[static_cast<std::size_t>(replica)];
  rep.decide_pending = false;
  if (rep.busy) return;
  rep.scheduled.clear();
  bool any = false;
  for (int gi = 0; gi < static_cast<int>(rep.groups.size()); ++gi) any = form_batch(rep, gi) || any;
  if (!any) return;
  if (drift_) drift_->advance_to(sim_.now().seconds());
  const StepPlan& plan = rep.planner->plan(rep.batches, sim_.now());
  if (s_.experts.load_aware_admission) {
    const auto busy = rep.planner->gpu_busy_s();
    const int tp = s_.deployment.attention_tp;
    for (std::size_t g = 0; g < busy.size(); ++g) {
      double& b = group_busy_[static_cast<std::size_t>(replica * s_.deployment.attention_dp) +
                              g / static_cast<std::size_t>(tp)];
      b += 0.1 * (busy[g] - b);  // EWMA over ~10 steps
    }
  }
  rep.busy = true;
  rep.step_start = sim_.now();
  if (rep.step_start >= warmup_end_) {
    ++steps_;
    step_s_ += plan.total.seconds();
    attention_s_ += plan.attention.seconds();
    dense_s_ += plan.dense_ffn.seconds();
    experts_s_ += plan.experts.seconds();
    dispatch_s_ += plan.dispatch.seconds();
    combine_s_ += plan.combine.seconds();
    comm_hidden_s_ += plan.comm_hidden.seconds();
    pipeline_bubble_s_ += plan.pipeline_bubble.seconds();
    pipeline_send_s_ += plan.pipeline_send.seconds();
    lm_head_s_ += plan.lm_head.seconds();
    batch_tokens_ += static_cast<double>(plan.tokens);
    gpu_imbalance_ += plan.gpu_imbalance;
    expert_imbalance_ += plan.expert_imbalance;
    nvlink_bytes_ += plan.dispatch_nvlink_bytes;
    nic_bytes_ += plan.dispatch_nic_bytes;
    if (s_.experts.any() || drift_ || coactivation_) {
      loop_.rebalances += plan.rebalances;
      loop_.rebalance_bytes += plan.rebalance_bytes;
      loop_.rebalance_s += plan.rebalance.seconds();
      loop_.expert_uses += plan.expert_uses;
      loop_.hbm_hits += plan.hbm_hits;
      loop_.host_loads += plan.host_loads;
      loop_.nvme_loads += plan.nvme_loads;
      loop_.prefetches += plan.prefetches;
      loop_.evictions += plan.evictions;
      loop_.host_bytes += plan.host_bytes;
      loop_.nvme_bytes += plan.nvme_bytes;
      loop_.stall_s += plan.expert_stall.seconds();
      loop_.rerouted_pairs += plan.rerouted;
      loop_.rerouted_share += static_cast<double>(plan.tokens) * s_.model.top_k * s_.model.moe_layers();
      loop_.gpu_load_imbalance_weighted += plan.gpu_imbalance * static_cast<double>(plan.tokens);
      loop_.dispatch_bytes_per_token += plan.dispatch_nvlink_bytes + plan.dispatch_nic_bytes;
    }
    const auto base = static_cast<std::size_t>(replica * s_.deployment.ep_size);
    const auto busy = rep.planner->gpu_busy_s();
    const auto flops = rep.planner->gpu_flops();
    const auto bytes = rep.planner->gpu_bytes();
    for (std::size_t g = 0; g < busy.size(); ++g) {
      gpu_busy_[base + g] += busy[g];
      gpu_flops_[base + g] += flops[g];
      gpu_bytes_[base + g] += bytes[g];
    }
  }
  if (observer_ != nullptr) {
    StepRecord rec{.replica = replica, .start_s = sim_.now().seconds(), .plan = &plan};
    for (const Group& g : rep.groups) {
      rec.running += static_cast<std::int64_t>(g.running.size());
      rec.waiting += static_cast<std::int64_t>(g.waiting.size());
    }
    for (const GroupBatch& b : rep.batches) {
      rec.decode_seqs += b.decode_seqs;
      rec.prefill_tokens += b.prefill_tokens;
    }
    observer_->on_step(rec);
  }
  sim_.schedule_in(plan.total, Phase::kNormal, [this, replica] { on_step_done(replica); });
}

void Simulation::emit_token(Request& r) {
  const Time now = sim_.now();
  ++r.generated;
  ++output_tokens_;
  if (now >= warmup_end_) ++window_output_tokens_;
  if (r.generated == 1) {
    r.first_token = now;
  } else if (r.measured) {
    itl_.add((now - r.last_token).seconds());
  }
  r.last_token = now;
}

void Simulation::on_step_done(int replica) {
  Replica& rep = replicas_[static_cast<std::size_t>(replica)];
  rep.busy = false;
  const Time now = sim_.now();
  bool any_finished = false;
  for (const Scheduled& sc : rep.scheduled) {
    Request& r = requests_[sc.req];
    r.computed += sc.tokens;
    if (sc.prefill && r.computed < r.target) continue;
    if (r.generated == 0 && now >= warmup_end_)
      window_prompt_tokens_ += r.prompt;  // first token: prompt done
    emit_token(r);
    if (r.generated >= r.output) {
      Group& g = rep.groups[static_cast<std::size_t>(r.group)];
      g.free_blocks += r.blocks;
      r.blocks = 0;
      r.target = -1;  // marks finished for the compaction below
      any_finished = true;
      finish(sc.req);
    }
  }
  if (any_finished) {
    for (Group& g : rep.groups) {
      std::erase_if(g.running, [this](Idx i) { return requests_[i].target < 0; });
    }
    for (const Scheduled& sc : rep.scheduled) {
      if (requests_[sc.req].target < 0) {
        requests_[sc.req].target = 0;
        free_requests_.push_back(sc.req);
      }
    }
  }
  rep.scheduled.clear();
  wake(replica);
  pull_arrival();
}

void Simulation::finish(Idx idx) {
  const Request& r = requests_[idx];
  const Time now = sim_.now();
  ++finished_;
  const double ttft = (r.first_token - r.arrival).seconds();
  const double e2e = (now - r.arrival).seconds();
  const double tpot =
      r.output > 1 ? (r.last_token - r.first_token).seconds() / static_cast<double>(r.output - 1) : 0.0;
  const double queueing = (r.admitted - r.arrival).seconds();
  if (now >= warmup_end_) ++window_finished_;
  if (r.measured) {
    ++measured_;
    ttft_.add(ttft);
    e2e_.add(e2e);
    queueing_.add(queueing);
    if (r.output > 1) tpot_.add(tpot);
    const bool violates = ttft > s_.sla.ttft.seconds() || (r.output > 1 && tpot > s_.sla.tpot.seconds());
    if (violates) {
      ++sla_violations_;
    } else {
      ++good_requests_;
      good_tokens_ += r.output;
    }
  }
  if (observer_ != nullptr) {
    observer_->on_request(RequestRecord{.id = r.id,
                                        .arrival_s = r.arrival.seconds(),
                                        .prompt_tokens = r.prompt,
                                        .output_tokens = r.output,
                                        .dropped = false,
                                        .queueing_s = queueing,
                                        .ttft_s = ttft,
                                        .tpot_s = tpot,
                                        .e2e_s = e2e,
                                        .preemptions = r.preemptions,
                                        .replica = r.replica,
                                        .group = r.group});
  }
  source_->on_finished(now);
}

LatencyStats stats_of(const LatencyHistogram& h) {
  return LatencyStats{.mean = h.mean(),
                      .p50 = h.percentile(50),
                      .p95 = h.percentile(95),
                      .p99 = h.percentile(99),
                      .max = h.max()};
}

Report Simulation::build_report() const {
  Report r;
  r.scenario = s_.name;
  r.version = std::string(version());
  r.seed = s_.run.seed;
  r.fingerprint = sim_.fingerprint();
  r.events = sim_.events_processed();
  r.cost_model = gpu_.source();
  r.replicas = static_cast<int>(replicas_.size());
  r.gpus = r.replicas * s_.gpus_per_replica();
  r.requests_arrived = arrived_;
  r.requests_finished = finished_;
  r.requests_dropped = dropped_;
  r.requests_measured = measured_;
  r.preemptions = preemptions_;
  r.output_tokens = output_tokens_;
  r.output_tokens_asked = output_tokens_asked_;
  r.sim_end_s = sim_.now().seconds();
  r.window_s = std::max(0.0, (sim_.now() - warmup_end_).seconds());
  const double w = r.window_s;
  if (w > 0) {
    r.output_tokens_per_s = static_cast<double>(window_output_tokens_) / w;
    r.total_tokens_per_s = static_cast<double>(window_output_tokens_ + window_prompt_tokens_) / w;
    r.requests_per_s = static_cast<double>(window_finished_) / w;
    r.goodput_requests_per_s = static_cast<double>(good_requests_) / w;
    r.goodput_tokens_per_s = static_cast<double>(good_tokens_) / w;
  }
  r.output_tokens_per_s_per_gpu = r.output_tokens_per_s / r.gpus;
  r.total_tokens_per_s_per_gpu = r.total_tokens_per_s / r.gpus;
  r.ttft = stats_of(ttft_);
  r.tpot = stats_of(tpot_);
  r.itl = stats_of(itl_);
  r.e2e = stats_of(e2e_);
  r.queueing = stats_of(queueing_);
  r.sla_ttft_s = s_.sla.ttft.seconds();
  r.sla_tpot_s = s_.sla.tpot.seconds();
  r.sla_percentile = s_.sla.percentile;
  r.sla_ttft_at_percentile = ttft_.percentile(s_.sla.percentile);
  r.sla_tpot_at_percentile = tpot_.percentile(s_.sla.percentile);
  r.sla_met =
      measured_ > 0 && r.sla_ttft_at_percentile <= r.sla_ttft_s && r.sla_tpot_at_percentile <= r.sla_tpot_s;
  r.sla_violation_rate =
      measured_ > 0 ? static_cast<double>(sla_violations_) / static_cast<double>(measured_) : 0.0;
  r.steps = steps_;
  if (steps_ > 0) {
    const double n = static_cast<double>(steps_);
    r.mean_step_s = step_s_ / n;
    r.mean_batch_tokens = batch_tokens_ / n;
    r.gpu_load_imbalance = gpu_imbalance_ / n;
    r.expert_load_imbalance = expert_imbalance_ / n;
    r.nvlink_bytes_per_step = nvlink_bytes_ / n;
    r.nic_bytes_per_step = nic_bytes_ / n;
  }
  if (step_s_ > 0) {
    r.attention_share = attention_s_ / step_s_;
    r.dense_ffn_share = dense_s_ / step_s_;
    r.experts_share = experts_s_ / step_s_;
    r.dispatch_share = dispatch_s_ / step_s_;
    r.combine_share = combine_s_ / step_s_;
    r.comm_hidden_share = comm_hidden_s_ / step_s_;
    r.pipeline_bubble_share = pipeline_bubble_s_ / step_s_;
    r.pipeline_send_share = pipeline_send_s_ / step_s_;
    r.lm_head_share = lm_head_s_ / step_s_;
  }
  const GpuSpec& gpu = s_.cluster.gpu;
  const double peak = gpu.peak_flops(s_.precision.routed_experts);
  for (std::size_t g = 0; g < gpu_busy_.size(); ++g) {
    GpuStats st;
    if (w > 0) {
      st.busy = std::min(1.0, gpu_busy_[g] / w);
      st.compute_util = gpu_flops_[g] / (w * peak);
      st.hbm_bw_util = gpu_bytes_[g] / (w * gpu.hbm_bytes_per_s);
    }
    r.gpu.push_back(st);
    r.gpu_mean.busy += st.busy / static_cast<double>(gpu_busy_.size());
    r.gpu_mean.compute_util += st.compute_util / static_cast<double>(gpu_busy_.size());
    r.gpu_mean.hbm_bw_util += st.hbm_bw_util / static_cast<double>(gpu_busy_.size());
  }
  std::int64_t peak_blocks = 0;
  for (const Replica& rep : replicas_) {
    for (const Group& g : rep.groups) peak_blocks = std::max(peak_blocks, g.peak_used_blocks);
  }
  r.memory.hbm = gpu.hbm_bytes;
  r.memory.weights = memory_.weights_per_gpu.total();
  r.memory.routed_expert_weights = memory_.weights_per_gpu.routed_experts;
  r.memory.activations_and_overhead = memory_.activation_bytes + memory_.overhead_bytes;
  r.memory.kv_pool = memory_.kv_pool_bytes_per_gpu;
  r.memory.kv_peak_used = memory_.kv_blocks_per_group > 0
                              ? memory_.kv_pool_bytes_per_gpu * static_cast<double>(peak_blocks) /
                                    static_cast<double>(memory_.kv_blocks_per_group)
                              : 0.0;
  fill_experts(r);
  r.alerts = evaluate_alerts(r);
  return r;
}

void Simulation::fill_experts(Report& r) const {
  const ExpertsSpec& x = s_.experts;
  const WorkloadSpec& w = s_.workload;
  if (!x.any() && !w.drift && !w.coactivation) return;
  ExpertLoopReport& e = r.experts;
  e = loop_;
  e.gpu_load_imbalance_weighted = 1;
  e.enabled = true;
  static constexpr const char* kNames[] = {"contiguous", "round_robin", "coactivation", "eplb"};
  e.placement = kNames[static_cast<int>(x.placement)];
  e.redundant_slots_per_gpu = x.redundant_slots_per_gpu;
  e.tiers = x.tiers.enabled;
  e.stall_share = step_s_ > 0 ? loop_.stall_s / step_s_ : 0.0;
  e.rerouting = x.reroute_threshold > 0;
  e.rerouted_share =
      loop_.rerouted_share > 0 ? static_cast<double>(loop_.rerouted_pairs) / loop_.rerouted_share : 0.0;
  e.admission = x.load_aware_admission;
  const double tokens = batch_tokens_;
  e.gpu_load_imbalance_weighted = tokens > 0 ? loop_.gpu_load_imbalance_weighted / tokens : 1.0;
  e.dispatch_bytes_per_token = tokens > 0 ? loop_.dispatch_bytes_per_token / tokens : 0.0;
  e.drift = w.drift;
  e.coactivation = w.coactivation;
  e.coactivation_rho = w.coactivation ? w.coactivation_spec.rho : 0.0;
  for (const Replica& rep : replicas_)
    e.drift_updates += static_cast<std::int64_t>(rep.planner->drift_updates());
  e.quantization = x.quantization;
  if (x.quantization) {
    QualityProxy all;
    for (std::size_t i = 0; i < kPrecisionCount; ++i) {
      const auto p = static_cast<Precision>(i);
      for (const Replica& rep : replicas_) {
        const QualityProxy& q = rep.planner->quality();
        all.add(p, static_cast<std::int64_t>(std::llround(q.share(p) * static_cast<double>(q.total()))));
      }
    }
    for (std::size_t i = 0; i < kPrecisionCount; ++i) {
      const auto p = static_cast<Precision>(i);
      if (all.share(p) > 0) e.precision_share.emplace_back(std::string(to_string(p)), all.share(p));
    }
    e.quality_proxy = all.value(x.quant);
  }
}

Report Simulation::run() {
  pull_arrival();
  sim_.run();
  MOESIM_CHECK(finished_ + dropped_ == arrived_, "every request must finish or be dropped");
  return build_report();
}

}  // namespace

Report simulate(const ScenarioSpec& s, const GpuCostModel& gpu, SimulationObserver* observer) {
  Simulation sim(s, gpu, observer);
  return sim.run();
}

}  // namespace moesim
