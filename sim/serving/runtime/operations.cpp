// Operations in the loop: the scale-up cost model, the router over accepting groups, the interval log.
#include "sim/serving/runtime/operations.h"

#include <algorithm>
#include <cmath>

#include "hwmodels/loader.h"
#include "sim/engine/check.h"

namespace moesim {

namespace {

// Every GPU's weights from its drive array or host link, all asked at time zero (FIFO per server).
Duration loader_time(const ScenarioSpec& s, Tier tier, std::int64_t bytes, int first_gpu, int gpus) {
  ExpertLoader loader(s.experts.tiers.loader, host_link_of(s.cluster.fabric), first_gpu + gpus);
  Time done;
  for (int g = first_gpu; g < first_gpu + gpus; ++g)
    done = std::max(done, loader.load(g, tier, bytes, Time{}));
  return done - Time{};
}

}  // namespace

ScaleUpCost scale_up_cost(const ScenarioSpec& s, const Fabric& fabric, double bytes_per_gpu, int first_gpu,
                          int gpus, int peer_first_gpu) {
  const AutoscaleSpec& a = s.autoscale;
  return load_cost(s, fabric, a.weights_from, a.engine_start + a.cuda_graph_capture, bytes_per_gpu, first_gpu,
                   gpus, peer_first_gpu);
}

ScaleUpCost load_cost(const ScenarioSpec& s, const Fabric& fabric, WeightSource source, Duration fixed,
                      double bytes_per_gpu, int first_gpu, int gpus, int peer_first_gpu) {
  ScaleUpCost c{.weights = Duration::zero(), .fixed = fixed};
  const auto bytes = static_cast<std::int64_t>(std::llround(bytes_per_gpu));
  const int per_node = s.cluster.gpus_per_node;
  switch (source) {
    case WeightSource::kNvme:
      c.weights = loader_time(s, Tier::kNvme, bytes, first_gpu, gpus);
      break;
    case WeightSource::kHostDram:
      c.weights = loader_time(s, Tier::kHostDram, bytes, first_gpu, gpus);
      break;
    case WeightSource::kPeerNvlink:
      // Each GPU from the next GPU of its NVLink domain: one flow into and one out of every GPU.
      for (int g = first_gpu; g < first_gpu + gpus; ++g) {
        const int node_first = g - g % per_node;
        const int from = node_first + (g - node_first + 1) % per_node;
        c.weights = std::max(c.weights, fabric.transfer(bytes_per_gpu, from, g));
      }
      break;
    case WeightSource::kPeerNetwork:
      MOESIM_CHECK(peer_first_gpu >= 0, "a peer load needs a peer instance");
      for (int j = 0; j < gpus; ++j)
        c.weights = std::max(c.weights, fabric.transfer(bytes_per_gpu, peer_first_gpu + j, first_gpu + j));
      break;
  }
  return c;
}

int AcceptingRouter::route(std::span<const GroupLoad> groups) {
  open_.clear();
  index_.clear();
  for (std::size_t i = 0; i < groups.size(); ++i) {
    if (!groups[i].accepting) continue;
    open_.push_back(groups[i]);
    index_.push_back(static_cast<int>(i));
  }
  MOESIM_CHECK(!open_.empty(), "the planner keeps at least one instance of a pool taking requests");
  return index_[static_cast<std::size_t>(inner_->route(open_))];
}

OperationsLog::OperationsLog(const ScenarioSpec& s, std::vector<PoolRole> roles)
    : percentile_(s.sla.percentile),
      ttft_limit_s_(s.sla.ttft.seconds()),
      tpot_limit_s_(s.sla.tpot.seconds()),
      pool_ttft_(roles.size()),
      pool_tpot_(roles.size()),
      roles_(std::move(roles)),
      pool_tokens_(roles_.size(), 0.0),
      pool_requests_(roles_.size(), 0.0),
      tokens_per_request_(roles_.size(), 0.0) {}

// TTFT and TPOT as the recorder defines them (MetricsRecorder::on_finished). Under disaggregation each
// pool is charged its own part of the TTFT: the prefill pool from arrival to the end of the prefill (its
// queue and the prefill), the decode pool from there to the first token out of it (the KV transfer, its
// admission queue and its first step), so that a decode pool whose queue holds the first token grows.
void OperationsLog::on_finished(const Request& r, int prefill_pool, int decode_pool) {
  const double ttft = (r.first_token - r.arrival).seconds();
  ttft_.add(ttft);
  if (prefill_pool != decode_pool) {
    pool_ttft_[static_cast<std::size_t>(prefill_pool)].add((r.prefill_done - r.arrival).seconds());
    pool_ttft_[static_cast<std::size_t>(decode_pool)].add((r.first_token - r.prefill_done).seconds());
  } else {
    pool_ttft_[static_cast<std::size_t>(prefill_pool)].add(ttft);
  }
  bool over = ttft > ttft_limit_s_;
  if (r.output > 1) {
    const double tpot = (r.last_token - r.first_token).seconds() / static_cast<double>(r.output - 1);
    tpot_.add(tpot);
    pool_tpot_[static_cast<std::size_t>(decode_pool)].add(tpot);
    over = over || tpot > tpot_limit_s_;
  }
  ++finished_;
  if (over) ++violations_;
  const auto count = [&](int pool) {
    const auto p = static_cast<std::size_t>(pool);
    const PoolRole role = roles_[p];
    pool_tokens_[p] += static_cast<double>((role != PoolRole::kDecode ? r.prompt : 0) +
                                           (role != PoolRole::kPrefill ? r.output : 0));
    pool_requests_[p] += 1;
  };
  count(decode_pool);
  if (prefill_pool != decode_pool) count(prefill_pool);
}

double OperationsLog::pool_tokens_per_request(std::size_t pool) const {
  return pool_requests_[pool] > 0 ? pool_tokens_[pool] / pool_requests_[pool] : tokens_per_request_[pool];
}

void OperationsLog::gpus_held(Time now, int gpus) {
  gpu_seconds_ = gpu_seconds(now);
  gpus_since_ = now;
  gpus_ = gpus;
}

double OperationsLog::gpu_seconds(Time now) const {
  return gpu_seconds_ + static_cast<double>(gpus_) * (now - gpus_since_).seconds();
}

double OperationsLog::pool_ttft_s(std::size_t pool) const { return pool_ttft_[pool].percentile(percentile_); }
double OperationsLog::pool_tpot_s(std::size_t pool) const { return pool_tpot_[pool].percentile(percentile_); }

void OperationsLog::close_interval(Time since, Time now, std::int64_t arrived, OperationsRow& row) {
  const double w = (now - since).seconds();
  row.start_s = since.seconds();
  row.end_s = now.seconds();
  row.gpus = gpus_;
  row.finished = finished_;
  row.sla_violations = violations_;
  row.offered_req_per_s = w > 0 ? static_cast<double>(arrived) / w : 0.0;
  row.served_req_per_s = w > 0 ? static_cast<double>(finished_) / w : 0.0;
  row.ttft_p_s = ttft_.percentile(percentile_);
  row.tpot_p_s = tpot_.percentile(percentile_);
  ttft_ = tpot_ = LatencyHistogram{};
  for (auto& h : pool_ttft_) h = LatencyHistogram{};
  for (auto& h : pool_tpot_) h = LatencyHistogram{};
  for (std::size_t p = 0; p < roles_.size(); ++p) {
    tokens_per_request_[p] = pool_tokens_per_request(p);
    pool_tokens_[p] = pool_requests_[p] = 0;
  }
  finished_ = violations_ = 0;
}

}  // namespace moesim
