// Operations in the loop (deployment.autoscale): what an instance's life costs and how it is recorded.
// The planner decides (autoscaler.h); the cluster acts (cluster_operations.cpp starts, drains and frees
// instances); here are the cost model of a scale-up, the router that sees only the instances taking
// requests, and the per-interval log behind report.json's `operations` time series.
#pragma once

#include <cstdint>
#include <memory>
#include <span>
#include <vector>

#include "hwmodels/fabric.h"
#include "sim/engine/time.h"
#include "sim/serving/report/latency_histogram.h"
#include "sim/serving/report/report.h"
#include "sim/serving/runtime/request.h"
#include "sim/serving/runtime/router.h"
#include "sim/serving/spec/scenario_spec.h"

namespace moesim {

// kActive takes requests; kLoading has its GPUs and waits for its weights and start; kDraining takes no
// new requests and finishes its own; kIdle holds no GPUs.
enum class InstanceState : std::uint8_t { kActive, kLoading, kDraining, kIdle };

struct ScaleUpCost {
  Duration weights;  // the last GPU's weights in
  Duration fixed;    // engine start + CUDA graph capture, after the weights
  [[nodiscard]] Duration total() const { return weights + fixed; }
};

// The time to bring up an instance of `gpus` GPUs from `first_gpu`, each loading `bytes_per_gpu` of
// weights at once over s.autoscale.weights_from, with idle links:
// - nvme, host_dram: the expert loaders (hwmodels/loader.h) of the instance's GPUs, s.experts.tiers.loader's
//   drives behind the fabric's host links: the GPUs behind one drive array or host link queue on it;
// - peer_nvlink: each GPU from a neighbour in its NVLink domain (Fabric::transfer over NVLink);
// - peer_network: GPU j from GPU j of the peer instance at `peer_first_gpu` (Fabric::transfer over the
//   route between them: NVLink inside a node, the NICs across nodes);
// then the fixed costs s.autoscale.engine_start + cuda_graph_capture.
[[nodiscard]] ScaleUpCost scale_up_cost(const ScenarioSpec& s, const Fabric& fabric, double bytes_per_gpu,
                                        int first_gpu, int gpus, int peer_first_gpu);
// The same over the path `from` with fixed costs `fixed` (a restart after a failure: faults.h).
[[nodiscard]] ScaleUpCost load_cost(const ScenarioSpec& s, const Fabric& fabric, WeightSource from,
                                    Duration fixed, double bytes_per_gpu, int first_gpu, int gpus,
                                    int peer_first_gpu);

// Routes among the groups that take requests (GroupLoad::accepting) with the pool's own router, which sees
// only those; the index it returns is into the full span. Used only under the planner, so that runs
// without it route exactly as before.
class AcceptingRouter final : public Router {
 public:
  explicit AcceptingRouter(std::unique_ptr<Router> inner) : inner_(std::move(inner)) {}
  int route(std::span<const GroupLoad> groups) override;

 private:
  std::unique_ptr<Router> inner_;
  std::vector<GroupLoad> open_;
  std::vector<int> index_;
};

// The planner's interval log: requests finished per interval (their SLA percentile of TTFT and TPOT, over
// all and per pool), and the integral of GPUs held.
class OperationsLog {
 public:
  // `roles`: each pool's, which says the tokens a request counts for it (prefill: prompt, decode: output,
  // both: prompt + output).
  OperationsLog(const ScenarioSpec& s, std::vector<PoolRole> roles);
  // `r` finished: its TPOT counts for `decode_pool`; its TTFT for `prefill_pool` (where it was prefilled)
  // or, under disaggregation, each pool's own part of it (arrival to the end of prefill, then to the first
  // token).
  void on_finished(const Request& r, int prefill_pool, int decode_pool);
  // From `now` on, `gpus` GPUs are held.
  void gpus_held(Time now, int gpus);
  [[nodiscard]] int gpus() const { return gpus_; }
  [[nodiscard]] double gpu_seconds(Time now) const;
  // The SLA percentile of the interval so far (0 when nothing finished).
  [[nodiscard]] double pool_ttft_s(std::size_t pool) const;
  [[nodiscard]] double pool_tpot_s(std::size_t pool) const;
  // Mean tokens per request of the pool's role over the requests it finished in the last interval with
  // any (0 before the first).
  [[nodiscard]] double pool_tokens_per_request(std::size_t pool) const;
  // Closes the interval [since, now): its latencies and counts into `row` (with offered and served
  // requests `arrived` and the finished count over its length); starts the next one.
  void close_interval(Time since, Time now, std::int64_t arrived, OperationsRow& row);

 private:
  double percentile_;
  double ttft_limit_s_;
  double tpot_limit_s_;
  LatencyHistogram ttft_, tpot_;
  std::vector<LatencyHistogram> pool_ttft_, pool_tpot_;
  std::vector<PoolRole> roles_;
  std::vector<double> pool_tokens_, pool_requests_;  // this interval
  std::vector<double> tokens_per_request_;           // of the last interval with any
  std::int64_t finished_ = 0;
  std::int64_t violations_ = 0;
  int gpus_ = 0;
  Time gpus_since_;
  double gpu_seconds_ = 0;
};

}  // namespace moesim
