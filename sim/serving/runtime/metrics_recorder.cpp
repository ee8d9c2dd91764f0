#include "sim/serving/runtime/metrics_recorder.h"

#include <algorithm>

namespace moesim {

namespace {
int count_replicas(const ScenarioSpec& s) {
  int n = 0;
  for (const PoolSpec& p : s.pool_specs()) n += p.instances;
  return n;
}
int count_slots(const ScenarioSpec& s) {
  int n = 0;
  for (const PoolSpec& p : s.pool_specs()) n += p.instances * p.deployment.ep_size;
  return n;
}
}  // namespace

MetricsRecorder::MetricsRecorder(const ScenarioSpec& s, SimulationObserver* observer)
    : s_(s),
      observer_(observer),
      warmup_override_(!s.run.warmup_auto),
      loop_on_(s.experts.any() || s.workload.drift || s.workload.coactivation),
      series_(s.run.warmup_auto ? 0.0 : s.run.warmup.seconds(), count_slots(s),
              static_cast<int>(s.pool_specs().size()), count_replicas(s)) {
  // Each replica reports its EP group's GPUs (ep_size of them), replica after replica.
  int slots = 0;
  int pool = 0;
  for (const PoolSpec& p : s.pool_specs()) {
    pool_first_slot.push_back(slots);
    for (int i = 0; i < p.instances; ++i) {
      replica_slot_.push_back(slots);
      replica_pool_.push_back(pool);
      slots += p.deployment.ep_size;
    }
    pool_slots.push_back(slots - pool_first_slot.back());
    ++pool;
  }
  replica_waiting_.assign(replica_slot_.size(), 0);
}

void MetricsRecorder::on_arrival(Time now) {
  ++arrived;
  last_arrival_ = now;
  ++series_.at(now.seconds()).arrivals;
  series_.in_system(now.seconds(), arrived - finished - dropped - failed);
}

void MetricsRecorder::on_arrivals_end(Time now) { series_.end_arrivals(now.seconds()); }

void MetricsRecorder::on_drop(const RequestSpec& spec, std::int64_t id, DropReason why) {
  ++dropped;
  ++dropped_by[static_cast<std::size_t>(why)];
  series_.in_system(last_arrival_.seconds(), arrived - finished - dropped - failed);
  if (observer_ == nullptr) return;
  observer_->on_request(RequestRecord{.id = id,
                                      .arrival_s = spec.arrival.seconds(),
                                      .prompt_tokens = spec.prompt_tokens,
                                      .output_tokens = spec.output_tokens,
                                      .dropped = true});
}

void MetricsRecorder::add_step(WindowTotals& w, const StepRecord& rec) const {
  const StepPlan& plan = *rec.plan;
  ++w.steps;
  w.step_s += plan.total.seconds();
  w.part_s.add(plan.parts);
  w.comm_hidden_s += plan.comm_hidden.seconds();
  w.comm_sm_contention_s += plan.comm_sm_contention.seconds();
  w.first_gpu_dispatch_wait_s += plan.first_gpu_dispatch_wait.seconds();
  w.first_gpu_combine_wait_s += plan.first_gpu_combine_wait.seconds();
  w.batch_tokens += static_cast<double>(plan.tokens);
  w.padded_rows += static_cast<double>(plan.padded_rows);
  w.gpu_imbalance += plan.gpu_imbalance * static_cast<double>(plan.tokens);
  if (plan.expert_imbalance_measured) {
    w.expert_imbalance += plan.expert_imbalance * static_cast<double>(plan.tokens);
    w.expert_imbalance_tokens += static_cast<double>(plan.tokens);
  }
  w.nvlink_bytes += plan.dispatch_nvlink_bytes;
  w.nic_bytes += plan.dispatch_nic_bytes;
  if (loop_on_) {
    ExpertLoopReport& loop = w.loop;
    loop.rebalances += plan.rebalances;
    loop.rebalance_bytes += plan.rebalance_bytes;
    loop.rebalance_s += plan.part(StepPart::kRebalance).seconds();
    loop.expert_uses += plan.expert_uses;
    loop.hbm_hits += plan.hbm_hits;
    loop.host_loads += plan.host_loads;
    loop.nvme_loads += plan.nvme_loads;
    loop.prefetches += plan.prefetches;
    loop.evictions += plan.evictions;
    loop.host_bytes += plan.host_bytes;
    loop.nvme_bytes += plan.nvme_bytes;
    loop.stall_s += plan.part(StepPart::kExpertStall).seconds();
    loop.rerouted_pairs += plan.rerouted;
    loop.rerouted_share += static_cast<double>(plan.tokens) * s_.model.top_k * s_.model.moe_layers();
    loop.gpu_load_imbalance_weighted += plan.gpu_imbalance * static_cast<double>(plan.tokens);
    loop.dispatch_bytes_per_token += plan.dispatch_nvlink_bytes + plan.dispatch_nic_bytes;
  }
  WindowTotals::Pool& pool = w.pools[static_cast<std::size_t>(rec.pool)];
  ++pool.steps;
  pool.step_s += plan.total.seconds();
  pool.tokens += static_cast<double>(plan.tokens);
}

// The step's per-rank loads as shares of their mean and its per-layer max/mean (LatencyHistogram's log
// buckets resolve a ratio to 1.2%; an idle rank's zero share lands in its lowest bucket).
void MetricsRecorder::add_expert_load(WindowTotals& w, const StepPlanner& planner) const {
  const std::span<const double> pairs = planner.rank_pairs();
  if (pairs.empty()) return;
  double sum = 0;
  for (const double p : pairs) sum += p;
  if (sum <= 0) return;
  const double mean = sum / static_cast<double>(pairs.size());
  for (const double p : pairs) w.rank_load_share.add(p / mean);
  // One MoE layer a step, in turn: the same distribution over layers and steps, sampled (a histogram add
  // per layer and step was 1% of a run's instructions).
  const std::span<const double> layers = planner.layer_imbalance();
  const auto l = static_cast<std::size_t>(planner.sampled_layer());
  if (l < layers.size()) w.layer_max_over_mean.add(layers[l]);
}

void MetricsRecorder::add_all_to_all(WindowTotals& w, int pool, const StepPlanner& planner) {
  if (planner.layer_all_to_all_s().empty()) return;
  WindowTotals::Pool& p = w.pools[static_cast<std::size_t>(pool)];
  add_grown(p.layer_a2a_s, planner.layer_all_to_all_s());
  add_grown(p.gpu_a2a_s, planner.gpu_all_to_all_s());
  add_grown(p.gpu_slowest, planner.gpu_slowest());
}

void MetricsRecorder::on_step(const StepRecord& rec, const StepPlanner& planner, Time start) {
  const double total_s = rec.plan->total.seconds();
  ++steps;
  step_s += total_s;
  WindowTotals& w = series_.at(start.seconds());
  add_step(w, rec);
  add_expert_load(w, planner);
  add_all_to_all(w, rec.pool, planner);
  std::int64_t& was = replica_waiting_[static_cast<std::size_t>(rec.replica)];
  waiting_ += rec.waiting - was;
  was = rec.waiting;
  series_.waiting(start.seconds(), waiting_);
  series_.step_span(rec.replica, replica_slot_[static_cast<std::size_t>(rec.replica)], start.seconds(),
                    start.seconds() + total_s, planner.gpu_busy_s(), planner.gpu_flops(),
                    planner.gpu_bytes());
  if (observer_ != nullptr) observer_->on_step(rec);
}

void MetricsRecorder::on_kv_transfer(double bytes, Duration took, bool migration) {
  if (migration) {
    ++migrations;
    migration_bytes += bytes;
    migration_s += took.seconds();
  } else {
    ++kv_transfers;
    kv_transfer_bytes += bytes;
    kv_transfer_s += took.seconds();
  }
}

void MetricsRecorder::on_token(const Request& r, Time now) {
  ++output_tokens;
  WindowTotals& w = series_.at(now.seconds());
  ++w.output_tokens;
  if (r.generated > 1) w.itl.add((now - r.last_token).seconds());
}

void MetricsRecorder::add_finished(WindowTotals& w, const Request& r, double ttft_s, double tpot_s,
                                   double queueing_s, double e2e_s) const {
  ++w.finished;
  w.finished_output_tokens += r.output;
  w.ttft.add(ttft_s);
  w.e2e.add(e2e_s);
  w.queueing.add(queueing_s);
  const bool ttft_over = ttft_s > s_.sla.ttft.seconds();
  const bool tpot_over = r.output > 1 && tpot_s > s_.sla.tpot.seconds();
  w.ttft_over += ttft_over ? 1 : 0;
  if (r.output > 1) {
    w.tpot.add(tpot_s);
    ++w.tpot_counted;
    w.tpot_over += tpot_over ? 1 : 0;
  }
  if (!ttft_over && !tpot_over) {
    ++w.good;
    w.good_output_tokens += r.output;
  }
  const bool split = r.prefill_replica >= 0;
  const int entry = split ? r.prefill_replica : r.replica;
  w.pools[static_cast<std::size_t>(replica_pool_[static_cast<std::size_t>(entry)])].ttft.add(ttft_s);
  if (r.output > 1)
    w.pools[static_cast<std::size_t>(replica_pool_[static_cast<std::size_t>(r.replica)])].tpot.add(tpot_s);
  if (split) {
    w.prefill_queue.add((r.prefill_admitted - r.arrival).seconds());
    w.prefill.add((r.prefill_done - r.prefill_admitted).seconds());
    w.kv_transfer.add((r.kv_arrived - r.prefill_done).seconds());
    w.decode_queue.add((r.first_token - r.kv_arrived).seconds());
  }
}

void MetricsRecorder::on_failed(Time now) {
  ++failed;
  series_.in_system(now.seconds(), arrived - finished - dropped - failed);
}

void MetricsRecorder::on_finished(const Request& r, Time now) {
  ++finished;
  series_.in_system(now.seconds(), arrived - finished - dropped - failed);
  const double ttft_s = (r.first_token - r.arrival).seconds();
  const double e2e_s = (now - r.arrival).seconds();
  const double tpot_s =
      r.output > 1 ? (r.last_token - r.first_token).seconds() / static_cast<double>(r.output - 1) : 0.0;
  const bool split = r.prefill_replica >= 0;
  // Disaggregated: the prefill queue and the decode queue.
  const double queueing_s = split ? (r.prefill_admitted - r.arrival + (r.admitted - r.kv_arrived)).seconds()
                                  : (r.admitted - r.arrival).seconds();
  add_finished(series_.at(now.seconds()), r, ttft_s, tpot_s, queueing_s, e2e_s);
  if (s_.run.measure != RunMeasure::kWindow)
    loadgen_queries_.push_back({r.arrival.seconds(), r.first_token.seconds(), now.seconds(), r.output});
  if (observer_ == nullptr) return;
  observer_->on_request(RequestRecord{.id = r.id,
                                      .arrival_s = r.arrival.seconds(),
                                      .prompt_tokens = r.prompt,
                                      .output_tokens = r.output,
                                      .dropped = false,
                                      .queueing_s = queueing_s,
                                      .ttft_s = ttft_s,
                                      .tpot_s = tpot_s,
                                      .e2e_s = e2e_s,
                                      .preemptions = r.preemptions,
                                      .replica = r.replica,
                                      .group = r.group});
}

}  // namespace moesim
