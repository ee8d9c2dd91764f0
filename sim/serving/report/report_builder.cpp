// Report assembly (report_builder.h): the window, rates, steps, intervals, experts, prefix cache, pools and
// operations of a finished run, each from the recorder's series and the run's replicas and pools.
#include "sim/serving/report/report_builder.h"

#include <algorithm>
#include <cmath>
#include <string>
#include <vector>

#include "sim/engine/version.h"

namespace moesim {

namespace {

// Batches of the within-run confidence intervals (Law & Kelton 5th ed. 9.5.3 suggest 10 to 30).
constexpr int kCiBatches = 20;
constexpr double kMaxLag1 = 0.2;
constexpr int kMinCiBatches = 5;

LatencyStats stats_of(const LatencyHistogram& h) {
  return LatencyStats{.mean = h.mean(),
                      .p50 = h.percentile(50),
                      .p95 = h.percentile(95),
                      .p99 = h.percentile(99),
                      .max = h.max()};
}

// The report of one run, from a const view of what it recorded (RunRecord).
class ReportBuilder {
 public:
  explicit ReportBuilder(const RunRecord& run)
      : run_(run),
        s_(run.s),
        gpu_(run.gpu),
        sim_(run.sim),
        metrics_(run.metrics),
        pools_(run.pools),
        decode_pools_(run.decode_pools),
        replicas_(run.replicas),
        ops_(run.ops),
        faults_(run.faults) {}
  [[nodiscard]] Report build_report() const;

 private:
  // The window (measurement.h) and the figures summed over it.
  WindowChoice fill_window(Report& r) const;
  void fill_rates(Report& r, const WindowTotals& m) const;
  void fill_steps(Report& r, const WindowTotals& m) const;
  void fill_all_to_all(Report& r, const WindowTotals& m) const;
  void fill_intervals(Report& r, const WindowChoice& c) const;
  void fill_intervals(Report& r, const WindowChoice& c, int batches) const;
  static void fill_sla_counts(Report& r, const std::vector<WindowTotals>& batches);
  void fill_experts(Report& r, const WindowTotals& m) const;
  void fill_prefix(Report& r) const;
  void fill_pools(Report& r, const WindowTotals& m) const;
  void fill_operations(Report& r) const;
  [[nodiscard]] std::int64_t failed() const { return metrics_.failed; }

  const RunRecord& run_;
  const ScenarioSpec& s_;
  const GpuCostModel& gpu_;
  const Simulator& sim_;
  const MetricsRecorder& metrics_;
  const std::vector<ServingPool>& pools_;
  const std::vector<int>& decode_pools_;
  const std::vector<std::unique_ptr<Replica>>& replicas_;
  const OperationsLog* ops_;
  const FaultTracker* faults_;
};

Report ReportBuilder::build_report() const {
  Report r;
  r.scenario = s_.name;
  r.version = std::string(version());
  r.seed = s_.run.seed;
  r.fingerprint = sim_.fingerprint();
  r.events = sim_.events_processed();
  r.cost_model = gpu_.source();
  r.engine = std::string(s_.deployment.engine.name);
  r.replicas = static_cast<int>(replicas_.size());
  r.gpus = 0;
  for (const ServingPool& p : pools_) r.gpus += p.spec.gpus();
  r.requests_arrived = metrics_.arrived;
  r.requests_finished = metrics_.finished;
  r.requests_dropped = metrics_.dropped;
  r.dropped_queue_full = metrics_.dropped_by[static_cast<std::size_t>(DropReason::kQueueFull)];
  r.dropped_too_long = metrics_.dropped_by[static_cast<std::size_t>(DropReason::kTooLong)];
  r.dropped_empty = metrics_.dropped_by[static_cast<std::size_t>(DropReason::kEmpty)];
  r.requests_unfinished = metrics_.arrived - metrics_.finished - metrics_.dropped - failed();
  r.preemptions = metrics_.preemptions;
  r.output_tokens = metrics_.output_tokens;
  r.output_tokens_asked = metrics_.output_tokens_asked;
  r.sim_end_s = sim_.now().seconds();
  const WindowChoice c = fill_window(r);
  const WindowTotals m = metrics_.series().sum(c.first_segment, c.with_drain);
  fill_rates(r, m);
  fill_steps(r, m);
  fill_intervals(r, c);
  // Memory of the first pool's GPUs (every pool's KV pool and peak in Report::pools).
  const ServingPool& first = pools_.front();
  const MemoryPlan& memory = first.memory;
  std::int64_t peak_blocks = 0;
  for (int i = first.first_replica; i < first.first_replica + first.spec.instances; ++i) {
    for (const AttentionGroup& g : replicas_[static_cast<std::size_t>(i)]->groups())
      peak_blocks = std::max(peak_blocks, g.kv.peak_used_blocks());
  }
  r.memory.hbm = s_.cluster.gpu.hbm_bytes;
  r.memory.weights = memory.weights_per_gpu.total();
  r.memory.routed_expert_weights = memory.weights_per_gpu.routed_experts;
  r.memory.activations_and_overhead = memory.activation_bytes + memory.overhead_bytes;
  r.memory.kv_pool = memory.kv_pool_bytes_per_gpu;
  r.memory.kv_peak_used = memory.kv_blocks_per_group > 0
                              ? memory.kv_pool_bytes_per_gpu * static_cast<double>(peak_blocks) /
                                    static_cast<double>(memory.kv_blocks_per_group)
                              : 0.0;
  fill_pools(r, m);
  fill_experts(r, m);
  fill_prefix(r);
  fill_operations(r);
  if (faults_) r.faults = faults_->report(sim_.now());
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
  if (s_.run.measure != RunMeasure::kWindow) {
    const LoadgenSettings ls{
        s_.run.measure == RunMeasure::kMlperfServer ? LoadgenScenario::kServer : LoadgenScenario::kOffline,
        s_.sla.ttft.seconds(), s_.sla.tpot.seconds(), s_.sla.percentile / 100};
    r.loadgen = loadgen_summary(metrics_.loadgen_queries(), metrics_.arrived, ls);
  }
  r.alerts = evaluate_alerts(r);
  r.limit = limiting_resource(r);
  return r;
}

// The window every figure is measured over (measurement.h): its bounds, why, and the overload test.
WindowChoice ReportBuilder::fill_window(Report& r) const {
  const double end = sim_.now().seconds();
  const MeasurementSeries& series = metrics_.series();
  const double last = series.arrivals_ended() ? series.arrivals_end() : end;
  r.arrivals_end_s = last;
  r.drain_s = std::max(0.0, end - last);
  const double mean_step_s = metrics_.steps > 0 ? metrics_.step_s / static_cast<double>(metrics_.steps) : 0.0;
  // An open arrival process fills a run that starts empty for as long as its requests stay; a closed loop
  // holds its users from the start.
  const bool open = !std::holds_alternative<ClosedLoop>(s_.workload.arrivals) || !s_.workload.trace.empty();
  const double in_system_s = open ? series.sum(0, true).e2e.percentile(s_.sla.percentile) : 0.0;
  const WindowChoice c = choose_window(series, metrics_.warmup_override(), end, mean_step_s, in_system_s);
  r.window_kind = c.kind;
  r.window_why = c.why;
  r.window_from_s = c.from_s;
  r.window_to_s = c.to_s;
  r.window_s = std::max(0.0, c.to_s - c.from_s);
  r.warmup_method = c.warmup_method;
  r.mser_s = c.mser_s;
  r.mser_at_bound = c.mser_at_bound;
  r.mser_batches = c.mser_batches;
  // The trend's levels per batch; its slope per second.
  const double batch_s = c.trend.n > 0 ? (last - c.trend_from_s) / c.trend.n : 0.0;
  r.trend.from_s = c.trend_from_s;
  r.trend.batches = c.trend.n;
  r.trend.slope_per_s = batch_s > 0 ? c.trend.slope / batch_s : 0.0;
  r.trend.arrival_rate = c.arrival_rate;
  r.trend.waiting_slope_per_s = batch_s > 0 ? c.waiting_trend.slope / batch_s : 0.0;
  r.trend.waiting_p_growth = c.waiting_trend.p_growth;
  r.trend.t = c.trend.t;
  r.trend.df = c.trend.df;
  r.trend.lag1 = c.trend.lag1;
  r.trend.p_growth = c.trend.p_growth;
  // The fitted line estimates a mean count: where it dips below zero (a series rising from an empty
  // system) the estimate is zero.
  r.in_system_start = std::max(0.0, c.trend.start);
  r.in_system_end = std::max(0.0, c.trend.end);
  r.overloaded = c.overloaded;
  return c;
}

// Rates and the population's latencies: tokens emitted and requests finished inside the window, over it.
void ReportBuilder::fill_rates(Report& r, const WindowTotals& m) const {
  const double w = r.window_s;
  r.requests_measured = m.finished;
  if (w > 0) {
    r.output_tokens_per_s = static_cast<double>(m.output_tokens) / w;
    r.total_tokens_per_s = static_cast<double>(m.output_tokens + m.prompt_tokens) / w;
    r.requests_per_s = static_cast<double>(m.finished) / w;
    r.goodput_requests_per_s = static_cast<double>(m.good) / w;
    // The good requests' share of the finished requests' tokens, of the tokens emitted in the window:
    // never above the throughput, and equal to it when every request meets the SLA.
    const double good_share = m.finished_output_tokens > 0 ? static_cast<double>(m.good_output_tokens) /
                                                                 static_cast<double>(m.finished_output_tokens)
                                                           : 0.0;
    r.goodput_tokens_per_s = r.output_tokens_per_s * good_share;
  }
  r.output_tokens_per_s_per_gpu = r.output_tokens_per_s / r.gpus;
  r.total_tokens_per_s_per_gpu = r.total_tokens_per_s / r.gpus;
  r.ttft = stats_of(m.ttft);
  r.tpot = stats_of(m.tpot);
  r.itl = stats_of(m.itl);
  r.e2e = stats_of(m.e2e);
  r.queueing = stats_of(m.queueing);
  r.sla_ttft_s = s_.sla.ttft.seconds();
  r.sla_tpot_s = s_.sla.tpot.seconds();
  r.sla_percentile = s_.sla.percentile;
  r.sla_ttft_at_percentile = m.ttft.percentile(s_.sla.percentile);
  r.sla_tpot_at_percentile = m.tpot.percentile(s_.sla.percentile);
  r.sla_met =
      m.finished > 0 && r.sla_ttft_at_percentile <= r.sla_ttft_s && r.sla_tpot_at_percentile <= r.sla_tpot_s;
  r.sla_violation_rate =
      m.finished > 0 ? static_cast<double>(m.finished - m.good) / static_cast<double>(m.finished) : 0.0;
}

// Steps that started in the window; utilisation from the step time inside it.
void ReportBuilder::fill_all_to_all(Report& r, const WindowTotals& m) const {
  for (std::size_t i = 0; i < pools_.size(); ++i) {
    const WindowTotals::Pool& p = m.pools[i];
    if (p.steps == 0 || p.layer_a2a_s.empty()) continue;
    AllToAllReport a;
    a.role = to_string(pools_[i].spec.role);
    a.pool = static_cast<int>(i);
    a.steps = p.steps;
    a.first_moe_layer = s_.model.num_dense_layers;
    const double ms = 1e3 / static_cast<double>(p.steps);
    for (std::size_t k = 0; k + 1 < p.layer_a2a_s.size(); k += 2) {
      a.layer_dispatch_ms.push_back(p.layer_a2a_s[k] * ms);
      a.layer_combine_ms.push_back(p.layer_a2a_s[k + 1] * ms);
    }
    double collectives = 0;
    for (const double x : p.gpu_slowest) collectives += x;
    for (std::size_t g = 0; g + 1 < p.gpu_a2a_s.size(); g += 2) {
      a.gpu_dispatch_ms.push_back(p.gpu_a2a_s[g] * ms);
      a.gpu_combine_ms.push_back(p.gpu_a2a_s[g + 1] * ms);
      a.gpu_slowest_share.push_back(collectives > 0 ? p.gpu_slowest[g / 2] / collectives : 0.0);
    }
    r.all_to_all.push_back(std::move(a));
  }
}

void ReportBuilder::fill_steps(Report& r, const WindowTotals& m) const {
  const double w = r.window_s;
  r.steps = m.steps;
  r.moe_layers = s_.model.moe_layers();
  r.moe_layer_sample = s_.run.moe_layer_sample;
  if (m.steps > 0) {
    const double n = static_cast<double>(m.steps);
    r.mean_step_s = m.step_s / n;
    r.mean_batch_tokens = m.batch_tokens / n;
    if (s_.deployment.moe_dp_padding) r.padded_rows_per_step = m.padded_rows / n;
    if (m.batch_tokens > 0) {
      r.gpu_load_imbalance = m.gpu_imbalance / m.batch_tokens;
      r.expert_load_imbalance =
          m.expert_imbalance_tokens > 0 ? m.expert_imbalance / m.expert_imbalance_tokens : 1.0;
    }
    r.rank_load_share = stats_of(m.rank_load_share);
    r.layer_max_over_mean = stats_of(m.layer_max_over_mean);
    r.nvlink_bytes_per_step = m.nvlink_bytes / n;
    r.nic_bytes_per_step = m.nic_bytes / n;
  }
  fill_all_to_all(r, m);
  if (m.step_s > 0) {
    r.comm_hidden_share = m.comm_hidden_s / m.step_s;
    r.comm_sm_contention_share = m.comm_sm_contention_s / m.step_s;
    r.first_gpu_dispatch_wait_share = m.first_gpu_dispatch_wait_s / m.step_s;
    r.first_gpu_combine_wait_share = m.first_gpu_combine_wait_s / m.step_s;
    for (std::size_t p = 0; p < kStepParts; ++p) r.part_share[p] = m.part_s.s[p] / m.step_s;
  }
  const GpuSpec& gpu = s_.cluster.gpu;
  const double peak = gpu.peak_flops(s_.precision.routed_experts);
  const auto gpus = static_cast<double>(m.gpu_busy_s.size());
  for (std::size_t g = 0; g < m.gpu_busy_s.size(); ++g) {
    GpuStats st;
    if (w > 0) {
      st.busy = m.gpu_busy_s[g] / w;
      st.compute_util = m.gpu_flops[g] / (w * peak);
      st.hbm_bw_util = m.gpu_bytes[g] / (w * gpu.hbm_bytes_per_s);
    }
    r.gpu.push_back(st);
    r.gpu_mean.busy += st.busy / gpus;
    r.gpu_mean.compute_util += st.compute_util / gpus;
    r.gpu_mean.hbm_bw_util += st.hbm_bw_util / gpus;
  }
}

// Within-run 95% intervals by batch means over the steady window's segments.
void ReportBuilder::fill_intervals(Report& r, const WindowChoice& c) const {
  if (c.with_drain) {  // a burst: no steady window to batch, the counts over the whole run
    fill_sla_counts(r, {metrics_.series().sum(c.first_segment, true)});
    return;
  }
  // Batches long enough to be nearly independent: 20, or 10 when a lag-1 autocorrelation of 20 is above
  // kMaxLag1 (Law & Kelton 5th ed. 9.5.3); the lag-1 values stay in the report. A batch is also at least
  // as long as the requests' time in system at the SLA percentile (a request's latency depends on the
  // queue it met, which lasts about that long): fewer batches where the window is short, none below
  // kMinCiBatches (the window is too short for an interval; Report::ci_too_short).
  const double window = c.to_s - c.from_s;
  const int fit = c.time_in_system_s > 0 ? static_cast<int>(window / c.time_in_system_s) : kCiBatches;
  if (fit < kMinCiBatches) {
    r.ci_too_short = true;
    // The counts alone (a binomial bound can still tell a share far over its limit).
    fill_sla_counts(r, batch_segments(metrics_.series(), c.first_segment, 1));
    return;
  }
  for (const int batches : {std::min(kCiBatches, fit), std::min(kCiBatches / 2, fit)}) {
    fill_intervals(r, c, batches);
    const double lag1 =
        std::max({r.ci_output_tokens_per_s.lag1, r.ci_ttft_over_share.lag1, r.ci_tpot_over_share.lag1});
    if (lag1 <= kMaxLag1) return;
  }
}

// The SLA counts under the shares' intervals, summed over the window's batches.
void ReportBuilder::fill_sla_counts(Report& r, const std::vector<WindowTotals>& batches) {
  r.sla_requests = r.sla_ttft_over = r.sla_tpot_requests = r.sla_tpot_over = 0;
  for (const WindowTotals& t : batches) {
    r.sla_requests += t.finished;
    r.sla_ttft_over += t.ttft_over;
    r.sla_tpot_requests += t.tpot_counted;
    r.sla_tpot_over += t.tpot_over;
  }
}

void ReportBuilder::fill_intervals(Report& r, const WindowChoice& c, int batches) const {
  const std::vector<WindowTotals> b = batch_segments(metrics_.series(), c.first_segment, batches);
  if (b.size() < 2) return;
  const double batch_s =
      metrics_.series().width() *
      static_cast<double>((metrics_.series().full_segments() - c.first_segment) / b.size());
  fill_sla_counts(r, b);
  std::vector<double> tokens, ttft_over, tpot_over, finished, tpot_counted;
  for (const WindowTotals& t : b) {
    tokens.push_back(static_cast<double>(t.output_tokens) / batch_s);
    ttft_over.push_back(static_cast<double>(t.ttft_over));
    tpot_over.push_back(static_cast<double>(t.tpot_over));
    finished.push_back(static_cast<double>(t.finished));
    tpot_counted.push_back(static_cast<double>(t.tpot_counted));
  }
  r.ci_output_tokens_per_s = batch_means(tokens);
  r.ci_ttft_over_share = batch_ratio(ttft_over, finished);
  r.ci_tpot_over_share = batch_ratio(tpot_over, tpot_counted);
}

void ReportBuilder::fill_experts(Report& r, const WindowTotals& m) const {
  const ExpertsSpec& x = s_.experts;
  const WorkloadSpec& w = s_.workload;
  if (!x.any() && !w.drift && !w.coactivation) return;
  ExpertLoopReport& e = r.experts;
  e = m.loop;
  e.gpu_load_imbalance_weighted = 1;
  e.enabled = true;
  static constexpr const char* kNames[] = {"contiguous", "round_robin", "coactivation", "eplb"};
  e.placement = kNames[static_cast<int>(x.placement)];
  e.redundant_experts = x.redundant_experts;
  e.slots_per_gpu = x.slots_per_gpu(s_.model.routed_experts, s_.deployment.expert_ranks());
  e.tiers = x.tiers.enabled;
  e.stall_share = m.step_s > 0 ? m.loop.stall_s / m.step_s : 0.0;
  e.rerouting = x.reroute_threshold > 0;
  e.rerouted_share =
      m.loop.rerouted_share > 0 ? static_cast<double>(m.loop.rerouted_pairs) / m.loop.rerouted_share : 0.0;
  e.admission = x.load_aware_admission;
  const double tokens = m.batch_tokens;
  e.gpu_load_imbalance_weighted = tokens > 0 ? m.loop.gpu_load_imbalance_weighted / tokens : 1.0;
  e.dispatch_bytes_per_token = tokens > 0 ? m.loop.dispatch_bytes_per_token / tokens : 0.0;
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

void ReportBuilder::fill_prefix(Report& r) const {
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

// Per pool (disaggregation or several pools): utilisation, throughput and its own SLA figure; the TTFT
// split and the KV moved. Nothing for the single colocated pool (its figures are the report's).
void ReportBuilder::fill_pools(Report& r, const WindowTotals& m) const {
  const double w = r.window_s;
  for (std::size_t i = 0; i < pools_.size() && s_.disaggregated(); ++i) {
    const ServingPool& p = pools_[i];
    const WindowTotals::Pool& c = m.pools[i];
    PoolReport pr;
    pr.role = to_string(p.spec.role);
    pr.instances = p.spec.instances;
    pr.gpus = p.spec.gpus();
    pr.first_gpu = p.spec.first_gpu;
    pr.ep_size = p.spec.deployment.ep_size;
    pr.steps = c.steps;
    pr.mean_step_s = c.steps > 0 ? c.step_s / static_cast<double>(c.steps) : 0.0;
    const auto first = static_cast<std::size_t>(metrics_.pool_first_slot[i]);
    const auto slots = static_cast<std::size_t>(metrics_.pool_slots[i]);
    for (std::size_t g = first; g < first + slots && w > 0; ++g)
      pr.busy += m.gpu_busy_s[g] / w / static_cast<double>(slots);
    pr.tokens_per_s = w > 0 ? c.tokens / w : 0.0;
    const bool decode = p.spec.role == PoolRole::kDecode;
    pr.sla_metric = decode ? "tpot" : "ttft";
    pr.sla_limit_s = decode ? s_.sla.tpot.seconds() : s_.sla.ttft.seconds();
    const LatencyHistogram& h = decode ? c.tpot : c.ttft;
    pr.sla_at_percentile_s = h.percentile(s_.sla.percentile);
    pr.sla_met = h.count() > 0 && pr.sla_at_percentile_s <= pr.sla_limit_s;
    pr.weights_bytes_per_gpu = p.memory.weights_per_gpu.total();
    pr.routed_expert_bytes_per_gpu = p.memory.weights_per_gpu.routed_experts;
    pr.activations_and_overhead_bytes = p.memory.activation_bytes + p.memory.overhead_bytes;
    pr.kv_pool_bytes_per_gpu = p.memory.kv_pool_bytes_per_gpu;
    std::int64_t peak = 0;
    for (int k = p.first_replica; k < p.first_replica + p.spec.instances; ++k) {
      for (const AttentionGroup& g : replicas_[static_cast<std::size_t>(k)]->groups())
        peak = std::max(peak, g.kv.peak_used_blocks());
    }
    pr.kv_peak_used_share =
        p.memory.kv_blocks_per_group > 0
            ? static_cast<double>(peak) / static_cast<double>(p.memory.kv_blocks_per_group)
            : 0.0;
    r.pools.push_back(pr);
  }
  DisaggregationReport& d = r.disaggregation;
  d.enabled = !decode_pools_.empty();
  if (d.enabled) {
    d.prefill_queue = stats_of(m.prefill_queue);
    d.prefill = stats_of(m.prefill);
    d.kv_transfer = stats_of(m.kv_transfer);
    d.decode_queue = stats_of(m.decode_queue);
    d.kv_transfers = metrics_.kv_transfers;
    d.kv_bytes = metrics_.kv_transfer_bytes;
    d.kv_transfer_s = metrics_.kv_transfer_s;
  }
  MigrationReport& mig = r.migration;
  for (const ServingPool& p : pools_) mig.enabled = mig.enabled || p.spec.deployment.kv_migration.enabled();
  mig.count = metrics_.migrations;
  mig.bytes = metrics_.migration_bytes;
  mig.seconds = metrics_.migration_s;
}
// GPU-hours held against every pool's instances held all along, per million output tokens and in money.
void ReportBuilder::fill_operations(Report& r) const {
  if (!ops_) return;
  OperationsReport& o = r.operations;
  o.enabled = true;
  o.interval_s = s_.autoscale.interval.seconds();
  static constexpr const char* kPredictors[] = {"last", "moving_average", "holt"};
  o.predictor = kPredictors[static_cast<int>(s_.autoscale.predictor.kind)];
  o.weights_from = to_string(s_.autoscale.weights_from);
  o.gpu_hours = ops_->gpu_seconds(sim_.now()) / 3600.0;
  o.gpu_hours_static = static_cast<double>(r.gpus) * sim_.now().seconds() / 3600.0;
  const double millions = static_cast<double>(metrics_.output_tokens) / 1e6;
  o.gpu_hours_per_million_output_tokens = millions > 0 ? o.gpu_hours / millions : 0.0;
  o.usd_per_million_output_tokens = o.gpu_hours_per_million_output_tokens * s_.autoscale.usd_per_gpu_hour;
  o.scale_ups = run_.scale_ups;
  o.scale_downs = run_.scale_downs;
  o.scale_up_s = run_.scale_up_s;
  o.intervals = *run_.ops_rows;
}

}  // namespace

Report build_report(const RunRecord& run) { return ReportBuilder(run).build_report(); }

}  // namespace moesim
