// What a run produces: every metric of the serving report, in SI units (seconds, bytes), plus the
// human-readable summary. JSON output lives in the scenario module.
#pragma once

#include <array>
#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "sim/serving/report/loadgen.h"
#include "sim/serving/spec/fault_spec.h"
#include "sim/serving/step/step_breakdown.h"

namespace moesim {

// Why a request was not admitted.
enum class DropReason : std::size_t { kQueueFull, kTooLong, kEmpty, kCount };
inline constexpr std::size_t kDropReasons = static_cast<std::size_t>(DropReason::kCount);

struct LatencyStats {
  double mean = 0;
  double p50 = 0;
  double p95 = 0;
  double p99 = 0;
  double max = 0;
};

struct GpuStats {
  double compute_util = 0;  // achieved FLOP/s over peak (MFU)
  double hbm_bw_util = 0;   // achieved HBM bytes/s over peak
  double busy = 0;          // share of wall time executing kernels (what nvidia-smi calls utilisation)
};

// What limits the deployment at this load (limiting_resource): a short name (`kv_cache`, `gpu_time`,
// `step_time`, `first_token`, `none`) and a sentence with the figures that say so.
struct LimitingResource {
  std::string name;
  std::string why;
};

struct MemoryStats {  // per GPU, bytes
  double hbm = 0;
  double weights = 0;
  double routed_expert_weights = 0;
  double activations_and_overhead = 0;
  double kv_pool = 0;
  double kv_peak_used = 0;
  [[nodiscard]] double used() const { return weights + activations_and_overhead + kv_peak_used; }
  [[nodiscard]] double headroom() const { return hbm - weights - activations_and_overhead - kv_pool; }
};

// Experts in the loop: what each mechanism bought and cost, over the measurement window (the
// quality proxy over the whole run). Every field is zero when its mechanism is off.
struct ExpertLoopReport {
  bool enabled = false;
  std::string placement;      // contiguous, round_robin, coactivation, eplb
  int redundant_experts = 0;  // redundant slots over the EP group
  int slots_per_gpu = 0;
  std::int64_t rebalances = 0;
  double rebalance_bytes = 0;  // expert weights moved between GPUs
  double rebalance_s = 0;      // replica time paused for rebalances (summed over replicas)
  bool tiers = false;
  std::int64_t expert_uses = 0;  // (GPU, expert copy) uses with tokens
  std::int64_t hbm_hits = 0;
  std::int64_t host_loads = 0;
  std::int64_t nvme_loads = 0;
  std::int64_t prefetches = 0;
  std::int64_t evictions = 0;
  double host_bytes = 0;
  double nvme_bytes = 0;
  double stall_s = 0;      // step time spent waiting for expert loads (summed over steps)
  double stall_share = 0;  // of step time
  bool quantization = false;
  std::vector<std::pair<std::string, double>> precision_share;  // routed tokens served at each precision
  double quality_proxy = 0;  // PROXY: token-weighted scenario penalties, not a measured accuracy
  bool rerouting = false;
  std::int64_t rerouted_pairs = 0;
  double rerouted_share = 0;  // of routed (token, expert) pairs
  bool admission = false;
  bool drift = false;
  std::int64_t drift_updates = 0;  // popularity changes the planners re-prepared for
  bool coactivation = false;
  double coactivation_rho = 0;
  // Max/mean routed pairs per GPU weighted by the step's tokens: the imbalance the work sees (the
  // plain step mean is dominated by small steps, e.g. a draining tail, where sampling noise rules).
  double gpu_load_imbalance_weighted = 1;
  double dispatch_bytes_per_token = 0;  // NVLink + NIC dispatch bytes per token of a step
};

// Prefix caching (deployment.prefix_caching), summed over every attention group's pool: lookups and hits
// at each request's first admission (comparable with a trace's ideal hit rate), and the prefill saved by
// every admission (a preempted request readmitted finds its own blocks again).
struct PrefixCacheReport {
  bool enabled = false;
  std::int64_t lookups = 0;
  std::int64_t lookup_blocks = 0;         // prompt KV blocks asked for (the last may be partial)
  std::int64_t hit_blocks = 0;            // leading blocks found cached
  std::int64_t lookup_tokens = 0;         // prompt tokens asked for
  std::int64_t hit_tokens = 0;            // tokens of the hit blocks
  std::int64_t prefill_tokens_saved = 0;  // prefill not computed, readmissions included
  std::int64_t evicted_blocks = 0;
  double block_hit_rate = 0;
  double token_hit_rate = 0;  // hit_tokens / lookup_tokens
};

// Speculative decoding (deployment.speculative): the drafts verified per decode step and what was accepted.
struct SpeculativeReport {
  bool enabled = false;
  std::string draft;  // "mtp" or the draft model's name
  int draft_tokens = 0;
  double expected_tokens_per_step = 0;  // 1 + sum_i prod_{j<=i} a_j, from the acceptance rates
  double acceptance_rate = 0;           // the rates' mean acceptance, (expected - 1) / k
  std::int64_t sequence_steps = 0;      // decode steps of one sequence that verified drafts
  double mean_tokens_per_step = 0;      // tokens those steps emitted, per sequence-step (measured)
  double measured_acceptance_rate = 0;  // (mean - 1) / k
};

// The All-to-All of one pool's instances over the measurement window, as the collectives ran before
// two-batch overlap hides any of them (the exposed rest is in part_share): milliseconds per step, per MoE
// layer (dispatch, combine; with expert TP the combine holds the partial outputs' all-reduce) and per GPU of
// an instance by its index (its own dispatch and combine, summed over the layers; a collective ends with its
// slowest GPU), and each GPU's share of the layer collectives it was the slowest of.
struct AllToAllReport {
  std::string role;  // the pool's (prefill, decode, both)
  int pool = 0;
  std::int64_t steps = 0;
  int first_moe_layer = 0;  // the model layer of MoE layer 0 (dense layers come first)
  std::vector<double> layer_dispatch_ms, layer_combine_ms;
  std::vector<double> gpu_dispatch_ms, gpu_combine_ms, gpu_slowest_share;
};

// One pool of a deployment with pools (deployment.pools), over the measurement window.
struct PoolReport {
  std::string role;  // prefill, decode, both
  int instances = 0;
  int gpus = 0;
  int first_gpu = 0;
  int ep_size = 0;
  std::int64_t steps = 0;
  double mean_step_s = 0;
  double busy = 0;  // mean over its GPUs of the share of the window spent in steps
  double tokens_per_s =
      0;  // tokens its steps computed (prompt tokens in a prefill pool, decode tokens in a decode pool)
  // Its own SLA figure: TTFT of the requests it prefilled (prefill, both) or TPOT of those it decoded
  // (decode), at the SLA percentile.
  std::string sla_metric;
  double sla_limit_s = 0;
  double sla_at_percentile_s = 0;
  bool sla_met = false;
  double weights_bytes_per_gpu = 0;  // its own memory plan (its deployment's EP and attention TP)
  double routed_expert_bytes_per_gpu = 0;
  double activations_and_overhead_bytes = 0;
  double kv_pool_bytes_per_gpu = 0;
  double kv_peak_used_share = 0;  // of an attention group's KV blocks, the fullest group
};

// Prefill/decode disaggregation. TTFT is the time from arrival until the decode instance takes the request
// into a batch and streams its first token (sampled by the prefill instance); it splits exactly into the
// four parts below (measured requests with more than one output token; a one-token request finishes on
// its prefill instance).
struct DisaggregationReport {
  bool enabled = false;
  LatencyStats prefill_queue;  // arrival -> admitted by the prefill instance
  LatencyStats prefill;  // -> prefill done, first token sampled (chunks and other requests' steps included)
  LatencyStats kv_transfer;       // -> KV cache in at the decode instance
  LatencyStats decode_queue;      // -> admitted by the decode instance (first token delivered)
  std::int64_t kv_transfers = 0;  // over the whole run
  double kv_bytes = 0;            // on the wire
  double kv_transfer_s = 0;       // summed over transfers
};

// KV migration between the instances of a pool (deployment.kv_migration), over the whole run.
struct MigrationReport {
  bool enabled = false;
  std::int64_t count = 0;  // requests moved
  double bytes = 0;        // their KV caches on the wire
  double seconds = 0;      // summed transfer time (each request pauses for its own)
};

// Operations under the autoscaling planner (deployment.autoscale): one row per planner interval and the
// run's GPU-hours. Rates are per second of the interval; latencies the SLA percentile of the requests that
// finished in it; GPUs those held (active, loading or draining) at the interval's end.
struct OperationsPoolRow {
  int active = 0;
  int loading = 0;
  int draining = 0;
  int target = 0;                  // the planner's decision at the interval's end
  double arrival_req_per_s = 0;    // observed (a decode pool: prefilled requests handed to it)
  double predicted_req_per_s = 0;  // for the next interval
};
struct OperationsRow {
  double start_s = 0;
  double end_s = 0;
  int gpus = 0;
  double offered_req_per_s = 0;
  double served_req_per_s = 0;
  double ttft_p_s = 0;
  double tpot_p_s = 0;
  std::int64_t finished = 0;
  std::int64_t sla_violations = 0;  // finished requests over either SLA limit
  std::vector<OperationsPoolRow> pools;
};
struct OperationsReport {
  bool enabled = false;
  double interval_s = 0;
  std::string predictor;
  std::string weights_from;
  double gpu_hours = 0;         // GPUs held x time, over the whole run
  double gpu_hours_static = 0;  // every pool's instances held over the whole run, for comparison
  double gpu_hours_per_million_output_tokens = 0;
  double usd_per_million_output_tokens = 0;  // with autoscale.usd_per_gpu_hour, else 0
  std::int64_t scale_ups = 0;
  std::int64_t scale_downs = 0;
  std::vector<double> scale_up_s;  // per pool: weights + fixed costs of one scale-up, uncontended
  std::vector<OperationsRow> intervals;
};

// A 95% confidence interval by batch means (measurement.h): mean +- half_width, from `batches` batch
// means whose lag-1 autocorrelation is lag1 (near zero when the batches are nearly independent).
struct BatchMeans {
  int batches = 0;
  double mean = 0;
  double half_width = 0;
  double lag1 = 0;
};

// Trend of the number in system over the window (batch means of it against time): the overload test.
struct TrendReport {
  double from_s = 0;  // the test's stretch: from the end of the transient to the last arrival
  int batches = 0;
  double slope_per_s = 0;  // requests per second
  double t = 0;            // slope / its standard error (OLS, batches - 2 degrees of freedom)
  double df = 0;
  double lag1 = 0;                 // of the residuals
  double p_growth = 1;             // one-sided p value of growth
  double arrival_rate = 0;         // per second over the stretch
  double waiting_slope_per_s = 0;  // of the requests waiting for a batch
  double waiting_p_growth = 1;
};

struct Report {
  std::string scenario;
  std::string version;
  std::uint64_t seed = 0;
  std::uint64_t fingerprint = 0;
  std::uint64_t events = 0;
  std::string cost_model;
  std::string engine;  // deployment.engine: whose kernels a layer runs (docs/engines.md)
  int gpus = 0;
  int replicas = 0;

  std::int64_t requests_arrived = 0;
  std::int64_t requests_finished = 0;
  std::int64_t requests_dropped = 0;
  // Of the dropped: the waiting queue was full (deployment.max_waiting_requests), prompt + output did
  // not fit the KV cache (or one step without chunked prefill), an empty prompt or output.
  std::int64_t dropped_queue_full = 0;
  std::int64_t dropped_too_long = 0;
  std::int64_t dropped_empty = 0;
  std::int64_t requests_unfinished = 0;  // still in the system when run.max_drain_s stopped the drain
  std::int64_t requests_measured = 0;
  std::int64_t preemptions = 0;
  std::int64_t output_tokens = 0;        // emitted over the whole run
  std::int64_t output_tokens_asked = 0;  // by the requests that were admitted (not dropped)
  double sim_end_s = 0;
  // The measurement window (measurement.h): every rate and utilisation is over [window_from_s,
  // window_to_s), every latency over the requests that finished in it. "steady": from the end of warm-up
  // to the last arrival (the drain is left out); "whole run": a burst (arrivals over within a few steps, or
  // fewer than 20 requests finished before the last arrival), from the start to the end of the run.
  double window_s = 0;
  double window_from_s = 0;
  double window_to_s = 0;
  std::string window_kind;
  std::string window_why;
  // Warm-up: "mser-5" (the window starts where MSER-5 on the number in system ends the transient) or
  // "run.warmup_s" (the scenario's override). mser_s is the end of the transient either way: MSER-5's
  // point, or the requests' time in system at the SLA percentile when later (choose_window); mser_at_bound:
  // the number in system did not settle in the first half of the arrivals (a run too short, or
  // overloaded).
  std::string warmup_method;
  double mser_s = 0;
  bool mser_at_bound = false;
  int mser_batches = 0;
  double arrivals_end_s = 0;
  double drain_s = 0;  // from the last arrival to the end of the run
  // The number in system over the window: its fitted level at the window's start and end (at least 0), and
  // the trend.
  double in_system_start = 0;
  double in_system_end = 0;
  TrendReport trend;
  // The number in system grows significantly (p < 1%) by more than 10% of the arrival rate past the
  // transient (measurement.cpp says how a run too short to settle is judged): the offered load exceeds
  // what the deployment serves, and the latency figures depend on the run length.
  bool overloaded = false;
  // Within-run 95% intervals by batch means over the steady window: output tokens per second, and the
  // share of the finished requests over the SLA's TTFT and TPOT limits (the SLA at percentile p holds when
  // these shares are at most 1 - p / 100).
  BatchMeans ci_output_tokens_per_s;
  BatchMeans ci_ttft_over_share;
  BatchMeans ci_tpot_over_share;
  // A steady window shorter than five times the requests' time in system at the SLA percentile: no
  // batches long enough to be nearly independent, so no intervals (a capacity probe runs longer).
  bool ci_too_short = false;
  // The counts under those shares, over the batches: requests, those over the TTFT limit, those with a
  // TPOT (more than one output token) and those over its limit.
  std::int64_t sla_requests = 0;
  std::int64_t sla_ttft_over = 0;
  std::int64_t sla_tpot_requests = 0;
  std::int64_t sla_tpot_over = 0;

  double output_tokens_per_s = 0;
  double total_tokens_per_s = 0;
  double requests_per_s = 0;
  double output_tokens_per_s_per_gpu = 0;
  double total_tokens_per_s_per_gpu = 0;

  LatencyStats ttft;
  LatencyStats tpot;
  LatencyStats itl;
  LatencyStats e2e;
  LatencyStats queueing;

  double sla_ttft_s = 0;
  double sla_tpot_s = 0;
  double sla_percentile = 99;
  double sla_ttft_at_percentile = 0;
  double sla_tpot_at_percentile = 0;
  bool sla_met = false;
  double sla_violation_rate = 0;  // share of measured requests over either limit
  double goodput_requests_per_s = 0;
  double goodput_tokens_per_s = 0;

  std::int64_t steps = 0;
  double mean_step_s = 0;
  double mean_batch_tokens = 0;
  // deployment.moe_dp_padding: rows each MoE layer runs beyond the step's tokens, per step (-1: off).
  double padded_rows_per_step = -1;
  int moe_layers = 0;        // the model's MoE layers
  int moe_layer_sample = 0;  // of them costed a step (run.moe_layer_sample; 0: all)
  // Share of step time by part (step_breakdown.h; the shares add up to 1). Communication hidden by
  // two-batch overlap is not a part: comm_hidden_share gives it, against the same step time.
  std::array<double, kStepParts> part_share{};
  [[nodiscard]] double share(StepPart p) const { return part_share[static_cast<std::size_t>(p)]; }
  double comm_hidden_share = 0;
  // Of the exposed All-to-All under two-batch overlap: compute slowed by the SMs communication held.
  double comm_sm_contention_share = 0;
  // The step as a profiler on the first GPU shows it (StepPlan::first_gpu_dispatch_wait): of the critical
  // path's attention side and experts, the shares that GPU waits for the slowest group and rank inside the
  // dispatch and combine kernels. Its view: attention side less the first, dispatch plus it, experts less
  // the second, combine plus it.
  double first_gpu_dispatch_wait_share = 0;
  double first_gpu_combine_wait_share = 0;
  // Exposed All-to-All: dispatch and combine time on the critical path.
  [[nodiscard]] double all_to_all_share() const {
    return share(StepPart::kDispatch) + share(StepPart::kCombine);
  }
  double nvlink_bytes_per_step = 0;
  double nic_bytes_per_step = 0;
  // Max/mean routed tokens per GPU and per expert: mean over layers, and over steps weighted by their
  // tokens (small drain steps, where sampling noise rules, weigh little).
  double gpu_load_imbalance = 1;
  double expert_load_imbalance = 1;
  // The distributions under those means, over the window's steps: each expert-parallel rank's routed pairs
  // over the step's mean per rank (a sample per rank and step), and each MoE layer's largest rank over the
  // mean (a sample per step, of one layer in turn). Ratios, not seconds, in LatencyStats' fields.
  LatencyStats rank_load_share;
  LatencyStats layer_max_over_mean;

  ExpertLoopReport experts;
  PrefixCacheReport prefix_cache;
  SpeculativeReport speculative;
  std::vector<PoolReport> pools;           // empty without deployment.pools
  std::vector<AllToAllReport> all_to_all;  // a pool of one expert-parallel rank has none
  DisaggregationReport disaggregation;
  MigrationReport migration;
  OperationsReport operations;
  FaultsReport faults;    // with a faults section
  LoadgenReport loadgen;  // run.measure mlperf_server / mlperf_offline: loadgen's figures over every query

  std::vector<GpuStats> gpu;
  GpuStats gpu_mean;
  MemoryStats memory;
  std::vector<std::string> alerts;
  LimitingResource limit;
};

// The readable summary printed on stdout.
std::string format_summary(const Report& r);
// Its MLPerf line (run.measure mlperf_*).
std::string format_loadgen(const LoadgenReport& l);
// Its experts-in-the-loop lines (printed only when a mechanism is on).
std::string format_experts(const Report& r);
// Its pools lines: TTFT split, per-pool figures, KV migration (printed when there are pools or migration).
std::string format_pools(const Report& r);

// The seed's alert rules (section 8): P99 over SLA, GPU utilisation < 30%, memory > 90%,
// All-to-All share > 25%.
std::vector<std::string> evaluate_alerts(const Report& r);

// The resource that limits the deployment, from the report's own figures, in this order: KV-cache memory
// when requests were preempted or the pool's peak reached 95%; GPU time when the queue grew (overloaded);
// step time when the SLA's TPOT fails (every decode token waits for a whole step, prefill chunks
// included); the first token when its TTFT fails (queueing and prefill). When the SLA holds: whichever of
// TPOT, TTFT (at the SLA percentile, against their limits) and the KV pool's peak is nearest its limit,
// the one that runs out first as the load grows.
LimitingResource limiting_resource(const Report& r);

}  // namespace moesim
