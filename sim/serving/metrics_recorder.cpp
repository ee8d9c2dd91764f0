#include "sim/serving/metrics_recorder.h"

namespace moesim {

MetricsRecorder::MetricsRecorder(const ScenarioSpec& s, SimulationObserver* observer)
    : s_(s),
      observer_(observer),
      warmup_end_(Time::at(s.run.warmup)),
      loop_on_(s.experts.any() || s.workload.drift || s.workload.coactivation) {
  loop.gpu_load_imbalance_weighted = 0;
  // Each replica reports its EP group's GPUs (ep_size of them), replica after replica.
  int slots = 0;
  for (const PoolSpec& p : s.pool_specs()) {
    pool_first_slot.push_back(slots);
    for (int i = 0; i < p.instances; ++i) {
      replica_slot_.push_back(slots);
      replica_pool_.push_back(static_cast<int>(pools.size()));
      slots += p.deployment.ep_size;
    }
    pool_slots.push_back(slots - pool_first_slot.back());
    pools.emplace_back();
  }
  const auto gpus = static_cast<std::size_t>(slots);
  gpu_busy.assign(gpus, 0.0);
  gpu_flops.assign(gpus, 0.0);
  gpu_bytes.assign(gpus, 0.0);
}

void MetricsRecorder::on_arrival(Time now) {
  ++arrived;
  if (now < warmup_end_ || arrivals_ended()) return;
  if (++since_sample_ < stride_) return;
  since_sample_ = 0;
  in_system_.push_back(static_cast<float>(arrived - finished - dropped - 1));
  if (in_system_.size() < kInSystemSamples) return;
  // Full: keep every other sample and sample half as often (the series stays evenly spaced).
  for (std::size_t i = 0; i < in_system_.size() / 2; ++i) in_system_[i] = in_system_[2 * i + 1];
  in_system_.resize(in_system_.size() / 2);
  stride_ *= 2;
}

void MetricsRecorder::on_arrivals_end(Time now) {
  if (!arrivals_ended()) arrivals_end_ = now;
}

std::pair<double, double> MetricsRecorder::in_system_first_last_quarter() const {
  const std::size_t q = in_system_.size() / 4;
  if (q == 0) return {0.0, 0.0};
  double first = 0;
  double last = 0;
  for (std::size_t i = 0; i < q; ++i) {
    first += in_system_[i];
    last += in_system_[in_system_.size() - 1 - i];
  }
  return {first / static_cast<double>(q), last / static_cast<double>(q)};
}

void MetricsRecorder::on_drop(const RequestSpec& spec, std::int64_t id, DropReason why) {
  ++dropped;
  ++dropped_by[static_cast<std::size_t>(why)];
  if (observer_ == nullptr) return;
  observer_->on_request(RequestRecord{.id = id,
                                      .arrival_s = spec.arrival.seconds(),
                                      .prompt_tokens = spec.prompt_tokens,
                                      .output_tokens = spec.output_tokens,
                                      .dropped = true});
}

void MetricsRecorder::on_step(const StepRecord& rec, const StepPlanner& planner, Time start) {
  const StepPlan& plan = *rec.plan;
  if (start >= warmup_end_) {
    ++steps;
    step_s += plan.total.seconds();
    part_s.add(plan.parts);
    comm_hidden_s += plan.comm_hidden.seconds();
    comm_sm_contention_s += plan.comm_sm_contention.seconds();
    batch_tokens += static_cast<double>(plan.tokens);
    gpu_imbalance += plan.gpu_imbalance * static_cast<double>(plan.tokens);
    expert_imbalance += plan.expert_imbalance * static_cast<double>(plan.tokens);
    nvlink_bytes += plan.dispatch_nvlink_bytes;
    nic_bytes += plan.dispatch_nic_bytes;
    if (loop_on_) {
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
    PoolCounters& pool = pools[static_cast<std::size_t>(rec.pool)];
    ++pool.steps;
    pool.step_s += plan.total.seconds();
    pool.tokens += static_cast<double>(plan.tokens);
    const auto base = static_cast<std::size_t>(replica_slot_[static_cast<std::size_t>(rec.replica)]);
    const auto busy = planner.gpu_busy_s();
    const auto flops = planner.gpu_flops();
    const auto bytes = planner.gpu_bytes();
    for (std::size_t g = 0; g < busy.size(); ++g) {
      gpu_busy[base + g] += busy[g];
      gpu_flops[base + g] += flops[g];
      gpu_bytes[base + g] += bytes[g];
    }
  }
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
  if (now >= warmup_end_) {
    ++run_output_tokens;
    if (now <= arrivals_end_) ++window_output_tokens;
  }
  if (r.generated > 1 && r.measured) itl.add((now - r.last_token).seconds());
}

void MetricsRecorder::on_finished(const Request& r, Time now) {
  ++finished;
  const double ttft_s = (r.first_token - r.arrival).seconds();
  const double e2e_s = (now - r.arrival).seconds();
  const double tpot_s =
      r.output > 1 ? (r.last_token - r.first_token).seconds() / static_cast<double>(r.output - 1) : 0.0;
  const bool split = r.prefill_replica >= 0;
  // Disaggregated: the prefill queue and the decode queue.
  const double queueing_s = split ? (r.prefill_admitted - r.arrival + (r.admitted - r.kv_arrived)).seconds()
                                  : (r.admitted - r.arrival).seconds();
  if (now >= warmup_end_) {
    ++run_finished;
    if (now <= arrivals_end_) ++window_finished;
  }
  if (r.measured) {
    ++measured;
    ttft.add(ttft_s);
    e2e.add(e2e_s);
    queueing.add(queueing_s);
    if (r.output > 1) tpot.add(tpot_s);
    const int entry = split ? r.prefill_replica : r.replica;
    pools[static_cast<std::size_t>(replica_pool_[static_cast<std::size_t>(entry)])].ttft.add(ttft_s);
    if (r.output > 1)
      pools[static_cast<std::size_t>(replica_pool_[static_cast<std::size_t>(r.replica)])].tpot.add(tpot_s);
    if (split) {
      prefill_queue.add((r.prefill_admitted - r.arrival).seconds());
      prefill.add((r.prefill_done - r.prefill_admitted).seconds());
      kv_transfer.add((r.kv_arrived - r.prefill_done).seconds());
      decode_queue.add((r.first_token - r.kv_arrived).seconds());
    }
    const bool violates = ttft_s > s_.sla.ttft.seconds() || (r.output > 1 && tpot_s > s_.sla.tpot.seconds());
    if (violates) {
      ++sla_violations;
    } else {
      ++good_requests;
      good_tokens += r.output;
    }
  }
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
