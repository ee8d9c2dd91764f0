// The metrics recorder: what the runtime's entities report as it happens (arrivals, drops, tokens,
// finished requests, steps), accumulated into the measurement series (measurement.h) and forwarded to the
// optional observers (CSV, trace). Report assembly chooses the window and reads it afterwards.
#pragma once

#include <array>
#include <cstdint>
#include <utility>
#include <vector>

#include "sim/serving/report/loadgen.h"
#include "sim/serving/report/measurement.h"
#include "sim/serving/report/report.h"
#include "sim/serving/runtime/request.h"
#include "sim/serving/runtime/serving_simulation.h"
#include "sim/serving/spec/scenario_spec.h"
#include "sim/serving/step/step_planner.h"

namespace moesim {

class MetricsRecorder {
 public:
  MetricsRecorder(const ScenarioSpec& s, SimulationObserver* observer);

  void on_arrival(Time now);
  void on_drop(const RequestSpec& spec, std::int64_t id, DropReason why);
  void on_admitted(const Request& r) { output_tokens_asked += r.output; }
  // The source has no arrival left: later time is the drain, outside a steady window.
  void on_arrivals_end(Time now);
  void on_preemptions(int n) { preemptions += n; }
  // A step of `replica` starting at `rec.start_s`, costed by `planner` (its last plan).
  void on_step(const StepRecord& rec, const StepPlanner& planner, Time start);
  // `r` has just produced a token at `now` (r.generated counts it; r.last_token is the previous one).
  void on_token(const Request& r, Time now);
  void on_prompt_done(const Request& r, Time now) { series_.at(now.seconds()).prompt_tokens += r.prompt; }
  void on_finished(const Request& r, Time now);
  // A request failed with its instance (faults.in_flight "fail"): out of the system, not finished.
  void on_failed(Time now);
  // A KV cache of `bytes` (on the wire) moved between instances in `took`: prefill -> decode, or a
  // migration between instances of a pool. Counted over the whole run.
  void on_kv_transfer(double bytes, Duration took, bool migration);
  // The KV-transfer ledger (conservation): every cache sent is received or still on the way.
  void on_kv_sent(std::int64_t bytes) {
    ++kv_sent;
    kv_bytes_sent += bytes;
  }
  void on_kv_received(std::int64_t bytes) {
    ++kv_received;
    kv_bytes_received += bytes;
  }
  // The run stopped at `now` (steps still running are cut there).
  void on_run_end(Time now) { series_.end_run(now.seconds()); }

  [[nodiscard]] bool arrivals_ended() const { return series_.arrivals_ended(); }
  // Where the measurement series starts: run.warmup_s when the scenario sets it, else 0 (MSER-5 then
  // finds the end of the transient after the run).
  [[nodiscard]] bool warmup_override() const { return warmup_override_; }
  [[nodiscard]] const MeasurementSeries& series() const { return series_; }
  // Every finished request as loadgen sees a query (run.measure mlperf_*; empty otherwise).
  [[nodiscard]] const std::vector<LoadgenQuery>& loadgen_queries() const { return loadgen_queries_; }

  // Whole-run totals.
  std::int64_t arrived = 0;
  std::int64_t finished = 0;
  std::int64_t dropped = 0;
  std::int64_t failed = 0;
  std::array<std::int64_t, kDropReasons> dropped_by{};
  std::int64_t preemptions = 0;
  std::int64_t output_tokens = 0;
  std::int64_t output_tokens_asked = 0;
  std::int64_t steps = 0;
  double step_s = 0;
  std::int64_t kv_sent = 0;
  std::int64_t kv_received = 0;
  std::int64_t kv_bytes_sent = 0;
  std::int64_t kv_bytes_received = 0;
  std::int64_t kv_transfers = 0;
  double kv_transfer_bytes = 0;
  double kv_transfer_s = 0;
  std::int64_t migrations = 0;
  double migration_bytes = 0;
  double migration_s = 0;
  std::vector<int> pool_first_slot;  // per pool: its first GPU slot (each replica has ep_size)
  std::vector<int> pool_slots;

 private:
  void add_step(WindowTotals& w, const StepRecord& rec) const;
  void add_expert_load(WindowTotals& w, const StepPlanner& planner) const;
  static void add_all_to_all(WindowTotals& w, int pool, const StepPlanner& planner);
  void add_finished(WindowTotals& w, const Request& r, double ttft_s, double tpot_s, double queueing_s,
                    double e2e_s) const;
  std::vector<int> replica_slot_;  // per replica: its first GPU slot
  std::vector<int> replica_pool_;
  const ScenarioSpec& s_;
  SimulationObserver* observer_;
  bool warmup_override_;
  bool loop_on_;
  MeasurementSeries series_;
  Time last_arrival_;
  std::vector<LoadgenQuery> loadgen_queries_;
  std::vector<std::int64_t> replica_waiting_;  // per replica: waiting for a batch at its last step
  std::int64_t waiting_ = 0;
};

}  // namespace moesim
