// The metrics recorder: what the runtime's entities report as it happens (arrivals, drops, tokens,
// finished requests, steps), accumulated over the measurement window and forwarded to the optional
// observers (CSV, trace). Report assembly reads it afterwards (serving_simulation.cpp).
#pragma once

#include <array>
#include <cstdint>
#include <utility>
#include <vector>

#include "sim/serving/latency_histogram.h"
#include "sim/serving/report.h"
#include "sim/serving/request.h"
#include "sim/serving/scenario_spec.h"
#include "sim/serving/serving_simulation.h"
#include "sim/serving/step_planner.h"

namespace moesim {

class MetricsRecorder {
 public:
  MetricsRecorder(const ScenarioSpec& s, SimulationObserver* observer);

  void on_arrival(Time now);
  void on_drop(const RequestSpec& spec, std::int64_t id, DropReason why);
  void on_admitted(const Request& r) { output_tokens_asked += r.output; }
  // The source has no arrival left: later tokens are the drain, outside the steady window.
  void on_arrivals_end(Time now);
  void on_preemptions(int n) { preemptions += n; }
  // A step of `replica` starting at `rec.start_s`, costed by `planner` (its last plan).
  void on_step(const StepRecord& rec, const StepPlanner& planner, Time start);
  // `r` has just produced a token at `now` (r.generated counts it; r.last_token is the previous one).
  void on_token(const Request& r, Time now);
  void on_prompt_done(const Request& r, Time now) {
    if (now < warmup_end_) return;
    run_prompt_tokens += r.prompt;
    if (now <= arrivals_end_) window_prompt_tokens += r.prompt;
  }
  void on_finished(const Request& r, Time now);
  // A KV cache of `bytes` (on the wire) moved between instances in `took`: prefill -> decode, or a
  // migration between instances of a pool. Counted over the whole run.
  void on_kv_transfer(double bytes, Duration took, bool migration);

  [[nodiscard]] Time warmup_end() const { return warmup_end_; }
  [[nodiscard]] Time arrivals_end() const { return arrivals_end_; }
  [[nodiscard]] bool arrivals_ended() const { return arrivals_end_ != Time::never(); }
  // Mean requests in the system (admitted, not finished) over the first and the last quarter of the
  // measured arrivals (sampled at arrivals, at most kInSystemSamples kept by halving).
  [[nodiscard]] std::pair<double, double> in_system_first_last_quarter() const;

  // Totals (read by report assembly).
  LatencyHistogram ttft;
  LatencyHistogram tpot;
  LatencyHistogram itl;
  LatencyHistogram e2e;
  LatencyHistogram queueing;
  std::int64_t arrived = 0;
  std::int64_t finished = 0;
  std::int64_t dropped = 0;
  std::array<std::int64_t, kDropReasons> dropped_by{};
  std::int64_t measured = 0;
  std::int64_t preemptions = 0;
  std::int64_t output_tokens = 0;
  std::int64_t output_tokens_asked = 0;
  std::int64_t window_output_tokens = 0;  // from warm-up end to the last arrival
  std::int64_t run_output_tokens = 0;     // from warm-up end to the end of the run (drain included)
  std::int64_t window_prompt_tokens = 0;
  std::int64_t run_prompt_tokens = 0;
  std::int64_t window_finished = 0;
  std::int64_t run_finished = 0;
  std::int64_t sla_violations = 0;
  std::int64_t good_requests = 0;
  std::int64_t good_tokens = 0;
  // Steps that started in the window.
  std::int64_t steps = 0;
  double step_s = 0;
  StepSeconds part_s;
  double comm_hidden_s = 0;
  double comm_sm_contention_s = 0;
  double batch_tokens = 0;
  double gpu_imbalance = 0;     // weighted by each step's tokens
  double expert_imbalance = 0;  // weighted by each step's tokens
  double nvlink_bytes = 0;
  double nic_bytes = 0;
  ExpertLoopReport loop;         // window sums of the experts-in-the-loop counters
  std::vector<double> gpu_busy;  // per GPU of the cluster
  std::vector<double> gpu_flops;
  std::vector<double> gpu_bytes;

  // Disaggregation: TTFT split of the measured requests that were prefilled on a prefill instance and
  // decoded on a decode instance (their TTFT is the sum of the four).
  LatencyHistogram prefill_queue;
  LatencyHistogram prefill;
  LatencyHistogram kv_transfer;
  LatencyHistogram decode_queue;
  std::int64_t kv_transfers = 0;
  double kv_transfer_bytes = 0;
  double kv_transfer_s = 0;
  std::int64_t migrations = 0;
  double migration_bytes = 0;
  double migration_s = 0;
  // Per pool (ScenarioSpec::pool_specs): its steps in the window, their seconds and tokens; the TTFT of
  // the measured requests it prefilled and the TPOT of those it decoded.
  struct PoolCounters {
    std::int64_t steps = 0;
    double step_s = 0;
    double tokens = 0;
    LatencyHistogram ttft;
    LatencyHistogram tpot;
  };
  std::vector<PoolCounters> pools;
  std::vector<int> pool_first_slot;  // per pool: its first entry in gpu_busy (each replica has ep_size)
  std::vector<int> pool_slots;

 private:
  std::vector<int> replica_slot_;  // per replica: its first entry in gpu_busy
  std::vector<int> replica_pool_;
  const ScenarioSpec& s_;
  SimulationObserver* observer_;
  Time warmup_end_;
  Time arrivals_end_ = Time::never();
  bool loop_on_;
  static constexpr std::size_t kInSystemSamples = 4096;
  std::vector<float> in_system_;  // requests in the system at measured arrivals, every stride_-th one
  std::int64_t stride_ = 1;
  std::int64_t since_sample_ = 0;
};

}  // namespace moesim
