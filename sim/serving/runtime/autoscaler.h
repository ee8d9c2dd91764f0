// The autoscaling planner (docs ARCHITECTURE "The serving runtime"): a policy beside the router and the
// batch policy. Every interval the cluster hands it a read-only view of what it observed per pool; it
// predicts the next interval's arrival rate and returns how many instances each pool should run. Starting
// and stopping instances is the cluster's work (instance_lifecycle.h), not the planner's.
#pragma once

#include <cstdint>
#include <span>
#include <vector>

#include "sim/serving/spec/scenario_spec.h"

namespace moesim {

// The next interval's arrival rate from the rates observed so far, one per interval.
class LoadPredictor {
 public:
  explicit LoadPredictor(PredictorSpec spec) : spec_(spec) {}
  void observe(double rate_per_s);
  // Requests per second expected over the next interval (never negative); 0 before any observation.
  [[nodiscard]] double predict() const;

 private:
  PredictorSpec spec_;
  std::vector<double> recent_;  // moving average: the last `window` rates
  int seen_ = 0;
  double last_ = 0;
  double level_ = 0;  // Holt
  double trend_ = 0;
};

// One pool as the planner sees it at the end of an interval.
struct PoolObservation {
  PoolRole role = PoolRole::kBoth;
  int active = 0;    // taking requests
  int loading = 0;   // weights on the way, not yet taking requests
  int draining = 0;  // no new requests, finishing their own
  int min_instances = 1;
  int max_instances = 1;
  int gpus_per_instance = 1;
  double capacity_req_per_s = 0;  // per instance within the SLA; 0: from capacity_tokens_per_s
  // Per instance within the SLA in the tokens of the pool's role (prefill: prompt, decode: output, both:
  // prompt + output), over the mean tokens of the requests it finished lately (0: none yet).
  double capacity_tokens_per_s = 0;
  double tokens_per_request = 0;
  double arrival_rate_per_s = 0;  // observed over the interval (a decode pool: prefilled requests)
  std::int64_t queued = 0;        // waiting for a batch in its active instances at the end
  // The SLA percentile of TTFT over the interval (0: none finished); under disaggregation the pool's own
  // part: arrival to the end of prefill for a prefill pool, from there to the first token for a decode pool.
  double ttft_p_s = 0;
  // The TTFT limit its part is held to (0: the SLA's). plan_instances gives a decode pool what the prefill
  // pools' part leaves of the SLA's limit (the whole limit when they alone exceed it).
  double ttft_limit_s = 0;
  double tpot_p_s = 0;
  double kv_used_share = 0;  // the fullest active attention group's KV pool
};

struct AutoscaleView {
  std::span<const PoolObservation> pools;
  double interval_s = 60;
  int gpu_budget = 0;
  double sla_ttft_s = 0;
  double sla_tpot_s = 0;
};

// Above this share of its KV pool used, a pool is under pressure (it may be about to preempt).
inline constexpr double kKvPressureShare = 0.9;

// One instance's requests per second within the SLA: capacity_req_per_s, or capacity_tokens_per_s over the
// observed tokens per request (a request rate sized from lengths that change through the day); 0 when
// neither is known yet.
[[nodiscard]] double instance_capacity_req_per_s(const PoolObservation& p);

// The instances pool `p` needs for `predicted_rate` requests per second, within [min, max] (the budget
// aside); with no capacity known yet (tokens per request unobserved) the instances it runs and loads.
// Dynamo's SLA planner (docs.nvidia.com/dynamo, v0.9 "Planner Design", steps 2 and 4) divides the predicted
// load by an instance's throughput at the SLA and corrects that throughput by the ratio of the observed to
// the expected latency; here the throughput is the scenario's capacity_req_per_s and the correction the ratio
// of the observed percentile to its SLA limit when it is over (never below 1):
//   need = ceil((predicted x correction + queued / interval) / capacity)
// The queue term serves the backlog within one interval. A pool over its SLA or its KV pressure share does
// not shrink below the instances it runs and loads, and one over its KV pressure share with requests
// waiting grows by one: a memory-bound pool (long contexts hold more blocks per request than its capacity
// assumed). Dynamo's load-based planner scales decode workers on KV-cache utilisation the same way, one
// worker per adjustment interval (docs.nvidia.com/dynamo, "Planner", load-based scaling).
[[nodiscard]] int instances_needed(const PoolObservation& p, double predicted_rate, const AutoscaleView& v);

// Every pool's target: instances_needed, then the GPU budget shared out one instance at a time, pool
// after pool in order, starting from every pool's minimum (a budget below the minimums is the parser's
// error).
[[nodiscard]] std::vector<int> plan_instances(const AutoscaleView& v, std::span<const double> predicted);

// The planner: one predictor per pool, fed the observed arrival rates.
class Autoscaler {
 public:
  Autoscaler(PredictorSpec spec, std::size_t pools);
  // Observes the interval in `v` and returns each pool's target instance count.
  [[nodiscard]] std::vector<int> decide(const AutoscaleView& v);
  // The rates decide() planned with last (one per pool).
  [[nodiscard]] const std::vector<double>& predicted() const { return predicted_; }

 private:
  std::vector<LoadPredictor> predictors_;
  std::vector<double> predicted_;
};

}  // namespace moesim
