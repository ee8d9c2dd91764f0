// Report assembly at the end of a run: reads a const view of what the run recorded (the metrics recorder,
// the replicas and pools, the operations log, the failure tracker) and writes the Report. The cluster calls
// it once, after the event loop ends.
#pragma once

#include <cstdint>
#include <memory>
#include <vector>

#include "hwmodels/gpu_cost_model.h"
#include "sim/engine/simulator.h"
#include "sim/serving/report/report.h"
#include "sim/serving/runtime/faults.h"
#include "sim/serving/runtime/metrics_recorder.h"
#include "sim/serving/runtime/operations.h"
#include "sim/serving/runtime/replica.h"
#include "sim/serving/runtime/serving_pool.h"

namespace moesim {

// What a finished run recorded, read-only.
struct RunRecord {
  const ScenarioSpec& s;
  const GpuCostModel& gpu;
  const Simulator& sim;
  const MetricsRecorder& metrics;
  const std::vector<ServingPool>& pools;
  const std::vector<int>& decode_pools;  // where prefilled requests went (empty: no disaggregation)
  const std::vector<std::unique_ptr<Replica>>& replicas;
  // Operations under the planner (null without deployment.autoscale): the log, its intervals' rows, the
  // instances started and drained, and per pool the time to bring up an instance (its last one's).
  const OperationsLog* ops = nullptr;
  const std::vector<OperationsRow>* ops_rows = nullptr;
  std::int64_t scale_ups = 0;
  std::int64_t scale_downs = 0;
  std::vector<double> scale_up_s;
  const FaultTracker* faults = nullptr;  // null without failures
};

// The run's report: counts, the measurement window and every figure measured over it, memory, pools,
// experts, prefix cache, operations, failures, speculative decoding, alerts and the limiting resource.
[[nodiscard]] Report build_report(const RunRecord& run);

}  // namespace moesim
