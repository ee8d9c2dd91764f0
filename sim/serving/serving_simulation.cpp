// The serving simulation: the cluster of replicas, the request source and the router, wired from a
// scenario; arrivals are pulled lazily and routed to an attention group. Report assembly at the end
// reads the metrics recorder.
#include "sim/serving/serving_simulation.h"

#include <algorithm>
#include <cmath>
#include <memory>
#include <optional>
#include <vector>

#include "sim/engine/check.h"
#include "sim/engine/simulator.h"
#include "sim/engine/version.h"
#include "sim/serving/memory_plan.h"
#include "sim/serving/metrics_recorder.h"
#include "sim/serving/replica.h"
#include "sim/serving/router.h"
#include "sim/serving/serving_models.h"
#include "workloads/prefixed_source.h"

namespace moesim {

namespace {

class Cluster final : public ReplicaHost {
 public:
  Cluster(const ScenarioSpec& s, const GpuCostModel& gpu, SimulationObserver* observer);
  Report run();

  void on_request_finished(Time now) override { source_->on_finished(now); }
  void on_step_done() override { pull_arrival(); }

 private:
  void pull_arrival();
  void on_arrival(const RequestSpec& spec);
  // Why `spec` cannot join group `g`, if it cannot.
  [[nodiscard]] std::optional<DropReason> refusal(const RequestSpec& spec, const AttentionGroup& g) const;
  void end_of_arrivals();
  Report build_report() const;
  void fill_window(Report& r) const;
  void fill_experts(Report& r) const;
  void fill_prefix(Report& r) const;
  // Prefix caching: the chained hashes of `spec`'s full prompt KV blocks into `out`.
  void prompt_hashes(const RequestSpec& spec, std::vector<BlockHash>& out);

  const ScenarioSpec& s_;
  const GpuCostModel& gpu_;
  MemoryPlan memory_;
  Simulator sim_;
  RandomStreams streams_;
  ServingModels models_;
  std::unique_ptr<RequestSource> source_;
  RequestTable requests_;
  MetricsRecorder metrics_;
  std::unique_ptr<BatchPolicy> policy_;
  std::unique_ptr<Router> router_;
  std::vector<std::unique_ptr<Replica>> replicas_;
  std::vector<GroupLoad> loads_;  // the router's view, refreshed per arrival
  bool arrival_pending_ = false;
  std::int64_t next_id_ = 0;
  std::int64_t max_request_tokens_ = 0;
  std::vector<std::uint64_t> keys_;  // scratch: a prompt's block keys from the source
};

Cluster::Cluster(const ScenarioSpec& s, const GpuCostModel& gpu, SimulationObserver* observer)
    : s_(s),
      gpu_(gpu),
      memory_(plan_memory(s)),
      streams_(s.run.seed),
      models_(s, streams_),
      metrics_(s, observer),
      policy_(
          make_batch_policy(s.deployment, s.production.speculative ? &*s.production.speculative : nullptr)),
      router_(make_router(s)) {
  const RunLimits limits{.max_requests = s.run.requests, .max_arrival_time = s.run.duration};
  if (!s.workload.trace.empty()) {
    source_ = std::make_unique<TraceSource>(s.workload.trace, s.production.trace_keys,
                                            s.workload.trace_speedup, limits);
  } else if (s.production.prefix) {
    source_ = std::make_unique<PrefixedSource>(*s.production.prefix, s.workload.arrivals, s.workload.prompt,
                                               s.workload.output, limits, streams_);
  } else {
    source_ = std::make_unique<SyntheticSource>(s.workload.arrivals, s.workload.prompt, s.workload.output,
                                                limits, streams_);
  }
  const int replicas = s.replicas();
  std::vector<std::unique_ptr<StepPlanner>> planners;
  for (int i = 0; i < replicas; ++i) {
    planners.push_back(models_.make_planner(gpu, streams_.stream("routing", static_cast<std::uint64_t>(i))));
  }
  // Per-expert precisions and replicas change the routed-expert weights: measured on the placement.
  if (s.experts.quantization && !planners.empty()) {
    memory_ = plan_memory(s, planners.front()->routed_expert_bytes_per_gpu());
  }
  check_fits(s, memory_);
  const ReplicaContext ctx{.s = s,
                           .sim = sim_,
                           .requests = requests_,
                           .models = models_,
                           .policy = *policy_,
                           .metrics = metrics_,
                           .host = *this,
                           .streams = streams_};
  for (int i = 0; i < replicas; ++i) {
    replicas_.push_back(std::make_unique<Replica>(i, ctx, std::move(planners[static_cast<std::size_t>(i)]),
                                                  memory_.kv_blocks_per_group));
  }
  loads_.resize(static_cast<std::size_t>(replicas * s.deployment.attention_dp));
  max_request_tokens_ = memory_.kv_tokens_per_group;
}

void Cluster::pull_arrival() {
  if (arrival_pending_) return;
  const std::optional<RequestSpec> next = source_->next();
  if (!next) {
    if (source_->exhausted() && !metrics_.arrivals_ended()) end_of_arrivals();
    return;
  }
  arrival_pending_ = true;
  const RequestSpec spec = *next;
  sim_.schedule_at(std::max(spec.arrival, sim_.now()), Phase::kNormal, [this, spec] { on_arrival(spec); });
}

std::optional<DropReason> Cluster::refusal(const RequestSpec& spec, const AttentionGroup& g) const {
  if (spec.output_tokens <= 0 || spec.prompt_tokens <= 0) return DropReason::kEmpty;
  // Too long for the KV cache or (chunked prefill off) for one step's token budget.
  const std::int64_t tokens = spec.prompt_tokens + spec.output_tokens;
  if (tokens > max_request_tokens_ ||
      (!s_.deployment.chunked_prefill && tokens > s_.deployment.max_batched_tokens))
    return DropReason::kTooLong;
  if (s_.deployment.max_waiting_requests > 0 &&
      static_cast<std::int64_t>(g.waiting.size()) >= s_.deployment.max_waiting_requests)
    return DropReason::kQueueFull;
  return std::nullopt;
}

// The last arrival is in: what follows is the drain, bounded by run.max_drain_s when set.
void Cluster::end_of_arrivals() {
  metrics_.on_arrivals_end(sim_.now());
  if (s_.run.max_drain > Duration::zero()) {
    sim_.schedule_in(s_.run.max_drain, Phase::kNormal, [this] { sim_.stop(); });
  }
}

void Cluster::prompt_hashes(const RequestSpec& spec, std::vector<BlockHash>& out) {
  out.clear();
  const std::int64_t keyed = source_->prefix_block_tokens();
  if (keyed == 0) return;
  source_->prompt_block_keys(spec, keys_);
  // A keyed block of `keyed` tokens (512 for Mooncake hash_ids) is `split` KV blocks; each KV block's key
  // is its keyed block's key and its position inside it. Only full KV blocks are cached.
  const std::int64_t block = s_.deployment.kv_block_tokens;
  MOESIM_CHECK(keyed % block == 0, "keyed prompt blocks must split into whole KV blocks");
  const std::int64_t split = keyed / block;
  const std::int64_t n =
      std::min(spec.prompt_tokens / block, static_cast<std::int64_t>(keys_.size()) * split);
  out.resize(static_cast<std::size_t>(n));
  BlockHash parent = 0;
  for (std::int64_t i = 0; i < n; ++i) {
    const std::uint64_t key = keys_[static_cast<std::size_t>(i / split)];
    const std::uint64_t sub = split == 1 ? key : splitmix64(key ^ static_cast<std::uint64_t>(i % split));
    out[static_cast<std::size_t>(i)] = parent = chain_block_hash(parent, sub);
  }
}

void Cluster::on_arrival(const RequestSpec& spec) {
  arrival_pending_ = false;
  metrics_.on_arrival(sim_.now());
  const std::int64_t id = next_id_++;
  const auto per_replica = static_cast<std::size_t>(s_.deployment.attention_dp);
  std::vector<BlockHash> hashes;
  if (s_.deployment.prefix_caching) prompt_hashes(spec, hashes);
  const bool cache_aware = s_.deployment.router == RouterPolicy::kCacheAware;
  for (std::size_t i = 0; i < loads_.size(); ++i) {
    const AttentionGroup& g = replicas_[i / per_replica]->groups()[i % per_replica];
    loads_[i] = GroupLoad{.running = static_cast<std::int64_t>(g.running.size()),
                          .waiting = static_cast<std::int64_t>(g.waiting.size()),
                          .busy_s = g.busy_ewma_s};
    if (cache_aware) {
      loads_[i].prompt_blocks = static_cast<std::int64_t>(hashes.size());
      loads_[i].cached_prefix_blocks = g.kv.cached_prefix_blocks(hashes);
      loads_[i].cached_blocks = g.kv.cached_blocks();
    }
  }
  const auto target = static_cast<std::size_t>(router_->route(loads_));
  Replica& rep = *replicas_[target / per_replica];
  const int group = static_cast<int>(target % per_replica);
  if (const auto why = refusal(spec, rep.groups()[static_cast<std::size_t>(group)])) {
    metrics_.on_drop(spec, id, *why);
    source_->on_finished(sim_.now());
  } else {
    const RequestIdx idx = requests_.add();
    Request& r = requests_[idx];
    r.id = id;
    r.arrival = spec.arrival;
    r.prompt = spec.prompt_tokens;
    r.output = spec.output_tokens;
    r.target = r.prompt;
    r.replica = rep.index();
    r.group = group;
    r.measured = spec.arrival >= metrics_.warmup_end();
    r.prompt_hashes = std::move(hashes);
    metrics_.on_admitted(r);
    rep.enqueue(group, idx);
  }
  pull_arrival();
}

LatencyStats stats_of(const LatencyHistogram& h) {
  return LatencyStats{.mean = h.mean(),
                      .p50 = h.percentile(50),
                      .p95 = h.percentile(95),
                      .p99 = h.percentile(99),
                      .max = h.max()};
}

Report Cluster::build_report() const {
  Report r;
  r.scenario = s_.name;
  r.version = std::string(version());
  r.seed = s_.run.seed;
  r.fingerprint = sim_.fingerprint();
  r.events = sim_.events_processed();
  r.cost_model = gpu_.source();
  r.engine = std::string(s_.deployment.engine.name);
  r.replicas = static_cast<int>(replicas_.size());
  r.gpus = r.replicas * s_.gpus_per_replica();
  r.requests_arrived = metrics_.arrived;
  r.requests_finished = metrics_.finished;
  r.requests_dropped = metrics_.dropped;
  r.dropped_queue_full = metrics_.dropped_by[static_cast<std::size_t>(DropReason::kQueueFull)];
  r.dropped_too_long = metrics_.dropped_by[static_cast<std::size_t>(DropReason::kTooLong)];
  r.dropped_empty = metrics_.dropped_by[static_cast<std::size_t>(DropReason::kEmpty)];
  r.requests_unfinished = metrics_.arrived - metrics_.finished - metrics_.dropped;
  r.requests_measured = metrics_.measured;
  r.preemptions = metrics_.preemptions;
  r.output_tokens = metrics_.output_tokens;
  r.output_tokens_asked = metrics_.output_tokens_asked;
  r.sim_end_s = sim_.now().seconds();
  fill_window(r);
  const double w = r.window_s;
  const bool steady = r.window_kind == "steady";
  if (w > 0) {
    const auto out = steady ? metrics_.window_output_tokens : metrics_.run_output_tokens;
    const auto in = steady ? metrics_.window_prompt_tokens : metrics_.run_prompt_tokens;
    r.output_tokens_per_s = static_cast<double>(out) / w;
    r.total_tokens_per_s = static_cast<double>(out + in) / w;
    r.requests_per_s = static_cast<double>(steady ? metrics_.window_finished : metrics_.run_finished) / w;
    r.goodput_requests_per_s = static_cast<double>(metrics_.good_requests) / w;
    r.goodput_tokens_per_s = static_cast<double>(metrics_.good_tokens) / w;
  }
  r.output_tokens_per_s_per_gpu = r.output_tokens_per_s / r.gpus;
  r.total_tokens_per_s_per_gpu = r.total_tokens_per_s / r.gpus;
  r.ttft = stats_of(metrics_.ttft);
  r.tpot = stats_of(metrics_.tpot);
  r.itl = stats_of(metrics_.itl);
  r.e2e = stats_of(metrics_.e2e);
  r.queueing = stats_of(metrics_.queueing);
  r.sla_ttft_s = s_.sla.ttft.seconds();
  r.sla_tpot_s = s_.sla.tpot.seconds();
  r.sla_percentile = s_.sla.percentile;
  r.sla_ttft_at_percentile = metrics_.ttft.percentile(s_.sla.percentile);
  r.sla_tpot_at_percentile = metrics_.tpot.percentile(s_.sla.percentile);
  r.sla_met = metrics_.measured > 0 && r.sla_ttft_at_percentile <= r.sla_ttft_s &&
              r.sla_tpot_at_percentile <= r.sla_tpot_s;
  r.sla_violation_rate = metrics_.measured > 0 ? static_cast<double>(metrics_.sla_violations) /
                                                     static_cast<double>(metrics_.measured)
                                               : 0.0;
  r.steps = metrics_.steps;
  if (metrics_.steps > 0) {
    const double n = static_cast<double>(metrics_.steps);
    r.mean_step_s = metrics_.step_s / n;
    r.mean_batch_tokens = metrics_.batch_tokens / n;
    if (metrics_.batch_tokens > 0) {
      r.gpu_load_imbalance = metrics_.gpu_imbalance / metrics_.batch_tokens;
      r.expert_load_imbalance = metrics_.expert_imbalance / metrics_.batch_tokens;
    }
    r.nvlink_bytes_per_step = metrics_.nvlink_bytes / n;
    r.nic_bytes_per_step = metrics_.nic_bytes / n;
  }
  if (metrics_.step_s > 0) {
    const double total = metrics_.step_s;
    r.comm_hidden_share = metrics_.comm_hidden_s / total;
    r.comm_sm_contention_share = metrics_.comm_sm_contention_s / total;
    for (std::size_t p = 0; p < kStepParts; ++p) r.part_share[p] = metrics_.part_s.s[p] / total;
  }
  const GpuSpec& gpu = s_.cluster.gpu;
  const double peak = gpu.peak_flops(s_.precision.routed_experts);
  for (std::size_t g = 0; g < metrics_.gpu_busy.size(); ++g) {
    GpuStats st;
    if (w > 0) {
      st.busy = std::min(1.0, metrics_.gpu_busy[g] / w);
      st.compute_util = metrics_.gpu_flops[g] / (w * peak);
      st.hbm_bw_util = metrics_.gpu_bytes[g] / (w * gpu.hbm_bytes_per_s);
    }
    r.gpu.push_back(st);
    r.gpu_mean.busy += st.busy / static_cast<double>(metrics_.gpu_busy.size());
    r.gpu_mean.compute_util += st.compute_util / static_cast<double>(metrics_.gpu_busy.size());
    r.gpu_mean.hbm_bw_util += st.hbm_bw_util / static_cast<double>(metrics_.gpu_busy.size());
  }
  std::int64_t peak_blocks = 0;
  for (const auto& rep : replicas_) {
    for (const AttentionGroup& g : rep->groups())
      peak_blocks = std::max(peak_blocks, g.kv.peak_used_blocks());
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
  fill_prefix(r);
  if (const auto& sp = s_.production.speculative) {
    SpeculativeReport& x = r.speculative;
    x.enabled = true;
    x.draft = sp->draft == DraftKind::kMtp ? "mtp" : sp->draft_model_name;
    x.draft_tokens = sp->draft_tokens;
    x.expected_tokens_per_step = expected_tokens_per_step(*sp);
    x.acceptance_rate = mean_acceptance_rate(*sp);
    std::int64_t tokens = 0;
    for (const auto& rep : replicas_) {
      x.sequence_steps += rep->speculative_counts().sequence_steps;
      tokens += rep->speculative_counts().tokens;
    }
    if (x.sequence_steps > 0) {
      x.mean_tokens_per_step = double(tokens) / double(x.sequence_steps);
      x.measured_acceptance_rate = (x.mean_tokens_per_step - 1.0) / x.draft_tokens;
    }
  }
  r.alerts = evaluate_alerts(r);
  r.limit = limiting_resource(r);
  return r;
}

// Queue growth through the arrivals and the window throughput is measured over (see Report::window_kind).
void Cluster::fill_window(Report& r) const {
  const Time end = sim_.now();
  const Time from = metrics_.warmup_end();
  const Time last = metrics_.arrivals_ended() ? metrics_.arrivals_end() : end;
  r.arrivals_end_s = last.seconds();
  r.drain_s = std::max(0.0, (end - last).seconds());
  const auto [first, final] = metrics_.in_system_first_last_quarter();
  r.in_system_first_quarter = first;
  r.in_system_last_quarter = final;
  // Grown by half and by more than a few requests: a stable queue fluctuates around its mean, an
  // overloaded one grows linearly (its last quarter then holds about 3x its first).
  r.overloaded = final > 1.5 * first + 8.0;
  const double steady_s = std::max(0.0, (last - from).seconds());
  const double run_s = std::max(0.0, (end - from).seconds());
  // Mostly drain: a burst (arrivals over in a few steps) is measured over the whole run; an overloaded
  // run keeps the steady window, whose throughput is then the service rate.
  const double mean_step_s = metrics_.steps > 0 ? metrics_.step_s / static_cast<double>(metrics_.steps) : 0.0;
  const bool burst = steady_s < 0.5 * run_s && (!r.overloaded || steady_s < 10.0 * mean_step_s);
  r.window_kind = burst ? "whole run" : "steady";
  r.window_s = burst ? run_s : steady_s;
}

void Cluster::fill_experts(Report& r) const {
  const ExpertsSpec& x = s_.experts;
  const WorkloadSpec& w = s_.workload;
  if (!x.any() && !w.drift && !w.coactivation) return;
  ExpertLoopReport& e = r.experts;
  e = metrics_.loop;
  e.gpu_load_imbalance_weighted = 1;
  e.enabled = true;
  static constexpr const char* kNames[] = {"contiguous", "round_robin", "coactivation", "eplb"};
  e.placement = kNames[static_cast<int>(x.placement)];
  e.redundant_experts = x.redundant_experts;
  e.slots_per_gpu = x.slots_per_gpu(s_.model.routed_experts, s_.deployment.expert_ranks());
  e.tiers = x.tiers.enabled;
  e.stall_share = metrics_.step_s > 0 ? metrics_.loop.stall_s / metrics_.step_s : 0.0;
  e.rerouting = x.reroute_threshold > 0;
  e.rerouted_share = metrics_.loop.rerouted_share > 0
                         ? static_cast<double>(metrics_.loop.rerouted_pairs) / metrics_.loop.rerouted_share
                         : 0.0;
  e.admission = x.load_aware_admission;
  const double tokens = metrics_.batch_tokens;
  e.gpu_load_imbalance_weighted = tokens > 0 ? metrics_.loop.gpu_load_imbalance_weighted / tokens : 1.0;
  e.dispatch_bytes_per_token = tokens > 0 ? metrics_.loop.dispatch_bytes_per_token / tokens : 0.0;
  e.drift = w.drift;
  e.coactivation = w.coactivation;
  e.coactivation_rho = w.coactivation ? w.coactivation_spec.rho : 0.0;
  for (const auto& rep : replicas_)
    e.drift_updates += static_cast<std::int64_t>(rep->planner().drift_updates());
  e.quantization = x.quantization;
  if (x.quantization) {
    QualityProxy all;
    for (std::size_t i = 0; i < kPrecisionCount; ++i) {
      const auto p = static_cast<Precision>(i);
      for (const auto& rep : replicas_) {
        const QualityProxy& q = rep->planner().quality();
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

void Cluster::fill_prefix(Report& r) const {
  if (!s_.deployment.prefix_caching) return;
  PrefixCacheStats all;
  for (const auto& rep : replicas_) {
    for (const AttentionGroup& g : rep->groups()) all += g.kv.prefix_stats();
  }
  PrefixCacheReport& p = r.prefix_cache;
  p.enabled = true;
  p.lookups = all.lookups;
  p.lookup_blocks = all.lookup_blocks;
  p.hit_blocks = all.hit_blocks;
  p.lookup_tokens = all.lookup_tokens;
  p.hit_tokens = all.hit_tokens;
  p.prefill_tokens_saved = all.saved_tokens;
  p.evicted_blocks = all.evicted_blocks;
  p.block_hit_rate = all.lookup_blocks > 0 ? double(all.hit_blocks) / double(all.lookup_blocks) : 0.0;
  p.token_hit_rate = all.lookup_tokens > 0 ? double(all.hit_tokens) / double(all.lookup_tokens) : 0.0;
}

Report Cluster::run() {
  pull_arrival();
  sim_.run();
  // Every request finishes or is dropped, unless run.max_drain_s cut the drain short.
  MOESIM_CHECK(
      metrics_.finished + metrics_.dropped == metrics_.arrived || s_.run.max_drain > Duration::zero(),
      "every request must finish or be dropped");
  return build_report();
}

}  // namespace

MemoryPlan deployed_memory_plan(const ScenarioSpec& s, const GpuCostModel& gpu) {
  if (!s.experts.quantization || s.replicas() == 0) return plan_memory(s);
  const RandomStreams streams(s.run.seed);
  const ServingModels models(s, streams);
  const auto planner = models.make_planner(gpu, streams.stream("routing", 0));
  return plan_memory(s, planner->routed_expert_bytes_per_gpu());
}

Report simulate(const ScenarioSpec& s, const GpuCostModel& gpu, SimulationObserver* observer) {
  Cluster cluster(s, gpu, observer);
  return cluster.run();
}

}  // namespace moesim
