// The autoscaling planner: load predictors and the target instance count per pool (autoscaler.h).
#include "sim/serving/runtime/autoscaler.h"

#include <algorithm>
#include <cmath>
#include <numeric>

#include "sim/engine/check.h"

namespace moesim {

// Holt's linear method (Holt 1957; Hyndman & Athanasopoulos, Forecasting: Principles and Practice, 3rd ed.,
// section 8.2): level l_t = a y_t + (1 - a)(l_{t-1} + b_{t-1}), trend b_t = b (l_t - l_{t-1}) + (1 - b)
// b_{t-1}, one-step forecast l_t + b_t; started with l_1 = y_1, b_1 = 0. Dynamo's planner offers constant,
// ARIMA and Prophet predictors; Holt's method is the smallest one here that follows a trend.
void LoadPredictor::observe(double rate_per_s) {
  ++seen_;
  last_ = rate_per_s;
  recent_.push_back(rate_per_s);
  if (static_cast<int>(recent_.size()) > spec_.window) recent_.erase(recent_.begin());
  if (seen_ == 1) {
    level_ = rate_per_s;
    trend_ = 0;
    return;
  }
  const double previous = level_;
  level_ = spec_.alpha * rate_per_s + (1 - spec_.alpha) * (level_ + trend_);
  trend_ = spec_.beta * (level_ - previous) + (1 - spec_.beta) * trend_;
}

double LoadPredictor::predict() const {
  if (seen_ == 0) return 0;
  switch (spec_.kind) {
    case PredictorKind::kLast:
      return last_;
    case PredictorKind::kMovingAverage:
      return std::accumulate(recent_.begin(), recent_.end(), 0.0) / static_cast<double>(recent_.size());
    case PredictorKind::kHolt:
      return std::max(0.0, level_ + trend_);
  }
  return last_;
}

namespace {

// The observed percentile over its limit, per the pool's SLA metrics: TTFT (a pool's own part of it under
// disaggregation, PoolObservation::ttft_p_s) for every pool, TPOT for those that decode. 1 when within or
// unobserved.
double sla_ratio(const PoolObservation& p, const AutoscaleView& v) {
  double r = 1;
  const double ttft_limit = p.ttft_limit_s > 0 ? p.ttft_limit_s : v.sla_ttft_s;
  if (ttft_limit > 0) r = std::max(r, p.ttft_p_s / ttft_limit);
  if (p.role != PoolRole::kPrefill && v.sla_tpot_s > 0) r = std::max(r, p.tpot_p_s / v.sla_tpot_s);
  return r;
}

}  // namespace

double instance_capacity_req_per_s(const PoolObservation& p) {
  if (p.capacity_req_per_s > 0) return p.capacity_req_per_s;
  return p.tokens_per_request > 0 ? p.capacity_tokens_per_s / p.tokens_per_request : 0.0;
}

int instances_needed(const PoolObservation& p, double predicted_rate, const AutoscaleView& v) {
  MOESIM_CHECK((p.capacity_req_per_s > 0 || p.capacity_tokens_per_s > 0) && v.interval_s > 0,
               "a pool's capacity and the interval are > 0");
  const double capacity = instance_capacity_req_per_s(p);
  if (capacity <= 0) return std::clamp(p.active + p.loading, p.min_instances, p.max_instances);
  const double correction = sla_ratio(p, v);
  const double rate = predicted_rate * correction + static_cast<double>(p.queued) / v.interval_s;
  // A hair below an integer is that integer: rates are sums of counts over an interval.
  auto need = static_cast<int>(std::ceil(rate / capacity - 1e-9));
  const bool full = p.kv_used_share > kKvPressureShare;
  if (correction > 1 || full) need = std::max(need, p.active + p.loading);
  // A full KV cache with requests waiting: the pool is bound by memory, not by the request rate its
  // capacity assumed (longer contexts hold more blocks per request), so it grows by one.
  if (full && p.queued > 0) need = std::max(need, p.active + p.loading + 1);
  return std::clamp(need, p.min_instances, p.max_instances);
}

std::vector<int> plan_instances(const AutoscaleView& v, std::span<const double> predicted) {
  MOESIM_CHECK(predicted.size() == v.pools.size(), "one predicted rate per pool");
  std::vector<int> want(v.pools.size());
  std::vector<int> target(v.pools.size());
  // The first token waits for the prefill, then for the decode pool: the decode pools' part is held to what
  // the prefill pools' part (at the SLA percentile) leaves of the limit.
  double prefill_part = 0;
  for (const PoolObservation& p : v.pools)
    if (p.role == PoolRole::kPrefill) prefill_part = std::max(prefill_part, p.ttft_p_s);
  int gpus = 0;
  for (std::size_t i = 0; i < v.pools.size(); ++i) {
    PoolObservation p = v.pools[i];
    if (p.role == PoolRole::kDecode && p.ttft_limit_s <= 0 && prefill_part < v.sla_ttft_s)
      p.ttft_limit_s = v.sla_ttft_s - prefill_part;
    want[i] = instances_needed(p, predicted[i], v);
    target[i] = v.pools[i].min_instances;
    gpus += target[i] * v.pools[i].gpus_per_instance;
  }
  for (bool grew = true; grew;) {
    grew = false;
    for (std::size_t i = 0; i < v.pools.size(); ++i) {
      const int g = v.pools[i].gpus_per_instance;
      if (target[i] >= want[i] || (v.gpu_budget > 0 && gpus + g > v.gpu_budget)) continue;
      ++target[i];
      gpus += g;
      grew = true;
    }
  }
  return target;
}

Autoscaler::Autoscaler(PredictorSpec spec, std::size_t pools)
    : predictors_(pools, LoadPredictor(spec)), predicted_(pools, 0.0) {}

std::vector<int> Autoscaler::decide(const AutoscaleView& v) {
  MOESIM_CHECK(v.pools.size() == predictors_.size(), "one observation per pool");
  for (std::size_t i = 0; i < v.pools.size(); ++i) {
    predictors_[i].observe(v.pools[i].arrival_rate_per_s);
    predicted_[i] = predictors_[i].predict();
  }
  return plan_instances(v, predicted_);
}

}  // namespace moesim
