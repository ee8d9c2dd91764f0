// The cluster's operations (cluster.h): the autoscaling planner's instance lifecycle (start, load, drain,
// free; operations.h) and failures (faults.h: lost ranks, restarts, degraded NICs, evicted requests
// recomputed or failed).
#include <algorithm>
#include <memory>
#include <optional>
#include <span>
#include <utility>
#include <vector>

#include "sim/engine/check.h"
#include "sim/serving/runtime/cluster.h"

namespace moesim {

// ---- Autoscaling ---------------------------------------------------------------------------------------

// Each pool's first initial_instances instances are active, the rest idle (no GPUs held).
void Cluster::start_autoscaling() {
  autoscaler_ = std::make_unique<Autoscaler>(s_.autoscale.predictor, pools_.size());
  std::vector<PoolRole> roles;
  for (const ServingPool& p : pools_) roles.push_back(p.spec.role);
  ops_ = std::make_unique<OperationsLog>(s_, std::move(roles));
  state_.assign(replicas_.size(), InstanceState::kActive);
  generation_.assign(replicas_.size(), 0);
  state_since_.assign(replicas_.size(), Time{});
  weights_in_.assign(replicas_.size(), Time{});
  int held = 0;
  for (std::size_t i = 0; i < pools_.size(); ++i) {
    const ServingPool& p = pools_[i];
    const int initial = s_.autoscale.pools[i].initial_instances;
    for (int k = initial; k < p.spec.instances; ++k)
      state_[static_cast<std::size_t>(p.first_replica + k)] = InstanceState::kIdle;
    held += initial * p.spec.deployment.gpus_per_instance();
  }
  ops_->gpus_held(Time{}, held);
}

// The interval's observations go to the planner; its targets start, cancel or drain instances.
void Cluster::on_autoscale_tick() {
  const std::vector<double> rates = interval_rates();
  std::vector<PoolObservation> seen;
  for (std::size_t i = 0; i < pools_.size(); ++i) seen.push_back(observe_pool(i, rates[i]));
  const AutoscaleView view{.pools = seen,
                           .interval_s = s_.autoscale.interval.seconds(),
                           .gpu_budget = s_.autoscale.gpu_budget,
                           .sla_ttft_s = s_.sla.ttft.seconds(),
                           .sla_tpot_s = s_.sla.tpot.seconds()};
  const std::vector<int> targets = autoscaler_->decide(view);
  close_interval(seen, &targets);
  for (std::size_t i = 0; i < pools_.size(); ++i) scale_pool(i, targets[i]);
  const bool done = metrics_.arrivals_ended() && all_out();
  if (!done) tick_ = sim_.schedule_in(s_.autoscale.interval, Phase::kNormal, [this] { on_autoscale_tick(); });
}

// Per pool, the requests per second it received since the interval began: arrivals for the entry pools,
// prefilled requests for the decode pools; several pools of one kind share them in proportion to their
// active instances (the routers spread requests over active groups).
std::vector<double> Cluster::interval_rates() const {
  const double w = (sim_.now() - interval_start_).seconds();
  std::vector<double> out(pools_.size(), 0.0);
  if (w <= 0) return out;
  std::vector<int> active(pools_.size(), 0);
  for (std::size_t k = 0; k < replicas_.size(); ++k) {
    if (state_[k] == InstanceState::kActive) ++active[static_cast<std::size_t>(replicas_[k]->pool())];
  }
  const auto spread = [&](const std::vector<int>& kind, std::int64_t n) {
    int all = 0;
    for (const int i : kind) all += active[static_cast<std::size_t>(i)];
    for (const int i : kind) {
      const auto p = static_cast<std::size_t>(i);
      out[p] = all > 0 ? static_cast<double>(n) * active[p] / all / w : 0.0;
    }
  };
  spread(entry_pools_, metrics_.arrived - interval_arrived_);
  spread(decode_pools_, metrics_.kv_transfers - interval_handed_);
  return out;
}

PoolObservation Cluster::observe_pool(std::size_t pool, double arrival_rate) const {
  const ServingPool& p = pools_[pool];
  const AutoscalePoolSpec& a = s_.autoscale.pools[pool];
  PoolObservation o{.role = p.spec.role,
                    .min_instances = a.min_instances,
                    .max_instances = a.max_instances,
                    .gpus_per_instance = p.spec.deployment.gpus_per_instance(),
                    .capacity_req_per_s = a.capacity_req_per_s,
                    .capacity_tokens_per_s = a.capacity_tokens_per_s,
                    .tokens_per_request = ops_->pool_tokens_per_request(pool),
                    .arrival_rate_per_s = arrival_rate,
                    .ttft_p_s = ops_->pool_ttft_s(pool),
                    .tpot_p_s = ops_->pool_tpot_s(pool)};
  const auto blocks = static_cast<double>(std::max<std::int64_t>(1, p.memory.kv_blocks_per_group));
  for (int k = p.first_replica; k < p.first_replica + p.spec.instances; ++k) {
    const InstanceState st = state_[static_cast<std::size_t>(k)];
    // An active instance restarting after a failure reloads its weights: loading, not serving.
    const bool restarting = st == InstanceState::kActive && faults_ && faults_->down(k);
    o.loading += st == InstanceState::kLoading || restarting ? 1 : 0;
    o.draining += st == InstanceState::kDraining ? 1 : 0;
    if (st != InstanceState::kActive || restarting) continue;
    ++o.active;
    for (const AttentionGroup& g : replicas_[static_cast<std::size_t>(k)]->groups()) {
      o.queued += static_cast<std::int64_t>(g.waiting.size());
      o.kv_used_share = std::max(o.kv_used_share, 1.0 - static_cast<double>(g.kv.free_blocks()) / blocks);
    }
  }
  return o;
}

// The interval's row from the pools as observed at its end (`seen`) and the targets just decided
// (`targets` null for the last, partial interval: the instances as they are).
void Cluster::close_interval(const std::vector<PoolObservation>& seen, const std::vector<int>* targets) {
  OperationsRow row;
  for (std::size_t i = 0; i < pools_.size(); ++i) {
    const PoolObservation& o = seen[i];
    row.pools.push_back(
        OperationsPoolRow{.active = o.active,
                          .loading = o.loading,
                          .draining = o.draining,
                          .target = targets != nullptr ? (*targets)[i] : o.active + o.loading,
                          .arrival_req_per_s = o.arrival_rate_per_s,
                          .predicted_req_per_s = targets != nullptr ? autoscaler_->predicted()[i] : 0.0});
  }
  const Time now = sim_.now();
  ops_->close_interval(interval_start_, now, metrics_.arrived - interval_arrived_, row);
  ops_rows_.push_back(std::move(row));
  interval_start_ = now;
  interval_arrived_ = metrics_.arrived;
  interval_handed_ = metrics_.kv_transfers;
}

// Up to `target` instances active or loading: draining ones return first (their weights are in), then
// idle ones start; down to it: loading ones are cancelled first, then the active ones with the fewest
// requests drain.
void Cluster::scale_pool(std::size_t pool, int target) {
  const ServingPool& p = pools_[pool];
  const int first = p.first_replica;
  const int end = first + p.spec.instances;
  const auto count = [&](InstanceState st) {
    return static_cast<int>(std::count(state_.begin() + first, state_.begin() + end, st));
  };
  const auto find = [&](InstanceState st) {
    for (int k = first; k < end; ++k) {
      if (state_[static_cast<std::size_t>(k)] == st) return k;
    }
    return -1;
  };
  int running = count(InstanceState::kActive) + count(InstanceState::kLoading);
  for (; running < target; ++running) {
    if (const int k = find(InstanceState::kDraining); k >= 0) {
      span(k, "drain (cancelled)", state_since_[static_cast<std::size_t>(k)], sim_.now());
      std::erase(draining_, k);
      set_state(k, InstanceState::kActive);
    } else if (const int idle = find(InstanceState::kIdle); idle >= 0) {
      start_instance(idle);
    }
  }
  for (; running > target; --running) {
    int k = -1;
    for (int j = end - 1; j >= first && k < 0; --j) {
      if (state_[static_cast<std::size_t>(j)] == InstanceState::kLoading) k = j;
    }
    if (k >= 0) {
      ++generation_[static_cast<std::size_t>(k)];
      span(k, "load (cancelled)", state_since_[static_cast<std::size_t>(k)], sim_.now());
      set_state(k, InstanceState::kIdle);
      continue;
    }
    for (int j = end - 1; j >= first; --j) {
      if (state_[static_cast<std::size_t>(j)] != InstanceState::kActive) continue;
      if (k < 0 || replicas_[static_cast<std::size_t>(j)]->in_system() <
                       replicas_[static_cast<std::size_t>(k)]->in_system())
        k = j;
    }
    drain_instance(k);
  }
  free_drained();
}

// The cost of bringing up `replica`: its pool's weights per GPU over the named path (a peer load from the
// pool's first active instance). A pool of one instance never scales: no peer, 0.
ScaleUpCost Cluster::instance_cost(int replica) const {
  const Replica& rep = *replicas_[static_cast<std::size_t>(replica)];
  const ServingPool& p = pools_[static_cast<std::size_t>(rep.pool())];
  int peer = -1;  // an active instance, else (the report's figure at the end) any other
  for (const bool active_only : {true, false}) {
    for (int k = p.first_replica; k < p.first_replica + p.spec.instances && peer < 0; ++k) {
      if (k != replica && (!active_only || state_[static_cast<std::size_t>(k)] == InstanceState::kActive))
        peer = replicas_[static_cast<std::size_t>(k)]->first_gpu();
    }
  }
  if (peer < 0 && s_.autoscale.weights_from == WeightSource::kPeerNetwork) return {};
  return scale_up_cost(s_, models_.fabric(), p.memory.weights_per_gpu.total(), rep.first_gpu(),
                       p.spec.deployment.gpus_per_instance(), peer);
}

void Cluster::start_instance(int replica) {
  const auto k = static_cast<std::size_t>(replica);
  ++scale_ups_;
  set_state(replica, InstanceState::kLoading);
  state_since_[k] = sim_.now();
  const std::uint32_t generation = ++generation_[k];
  const ScaleUpCost cost = instance_cost(replica);
  weights_in_[k] = sim_.now() + cost.weights;
  sim_.schedule_in(cost.total(), Phase::kNormal,
                   [this, replica, generation] { on_instance_ready(replica, generation); });
}

// The weights are in and the engine started: the instance takes requests from now on.
void Cluster::on_instance_ready(int replica, std::uint32_t generation) {
  const auto k = static_cast<std::size_t>(replica);
  if (generation_[k] != generation || state_[k] != InstanceState::kLoading) return;  // cancelled
  span(replica, "load weights", state_since_[k], weights_in_[k]);
  if (weights_in_[k] < sim_.now()) span(replica, "start", weights_in_[k], sim_.now());
  set_state(replica, InstanceState::kActive);
}

void Cluster::drain_instance(int replica) {
  ++scale_downs_;
  set_state(replica, InstanceState::kDraining);
  state_since_[static_cast<std::size_t>(replica)] = sim_.now();
  draining_.push_back(replica);
}

// Draining instances with nothing left (no request, no KV cache on its way in) free their GPUs.
void Cluster::free_drained() {
  std::erase_if(draining_, [this](int k) {
    const Replica& rep = *replicas_[static_cast<std::size_t>(k)];
    if (rep.in_system() > 0) return false;
    const ServingPool& p = pools_[static_cast<std::size_t>(rep.pool())];
    if (p.spec.role == PoolRole::kDecode) {
      const int dp = p.spec.deployment.attention_dp;
      const auto from = static_cast<std::size_t>(p.first_group + (k - p.first_replica) * dp);
      for (std::size_t g = from; g < from + static_cast<std::size_t>(dp); ++g) {
        if (kv_inflight_[g] > 0) return false;
      }
    }
    span(k, "drain", state_since_[static_cast<std::size_t>(k)], sim_.now());
    set_state(k, InstanceState::kIdle);
    return true;
  });
}

// Keeps the GPUs held (every instance not idle) in the log.
void Cluster::set_state(int replica, InstanceState state) {
  const auto k = static_cast<std::size_t>(replica);
  const int gpus = pools_[static_cast<std::size_t>(replicas_[k]->pool())].spec.deployment.gpus_per_instance();
  const bool held_before = state_[k] != InstanceState::kIdle;
  const bool held_after = state != InstanceState::kIdle;
  state_[k] = state;
  if (held_before != held_after) ops_->gpus_held(sim_.now(), ops_->gpus() + (held_after ? gpus : -gpus));
}

void Cluster::span(int replica, const char* what, Time from, Time to) const {
  if (observer_ == nullptr) return;
  observer_->on_instance(InstanceSpan{.replica = replica,
                                      .pool = replicas_[static_cast<std::size_t>(replica)]->pool(),
                                      .what = what,
                                      .start_s = from.seconds(),
                                      .end_s = to.seconds()});
}

// ---- Failures ------------------------------------------------------------------------------------------

void Cluster::start_faults() {
  const FaultsSpec& f = s_.faults;
  faults_ = std::make_unique<FaultTracker>(f, s_.sla.percentile, s_.sla.ttft, s_.sla.tpot);
  for (const auto& rep : replicas_) {
    const DeploymentSpec& d = pools_[static_cast<std::size_t>(rep->pool())].spec.deployment;
    faults_->add_instance(d.gpus_per_instance(), d.attention_dp, d.attention_tp);
  }
  fault_schedule_ = std::make_unique<FaultSchedule>(f, s_.cluster.total_gpus(), s_.cluster.nodes, streams_);
}

// The failure `e` now; then the next one is scheduled unless every request is out.
void Cluster::on_fault(const FaultEvent& e) {
  if (metrics_.arrivals_ended() && all_out()) return;
  if (const std::optional<FaultEvent> next = fault_schedule_->next())
    fault_tick_ =
        sim_.schedule_at(std::max(next->at, sim_.now()), Phase::kNormal, [this, n = *next] { on_fault(n); });
  if (e.kind == FaultKind::kLink) {
    degrade_nic(e);
    return;
  }
  const int per_node = s_.cluster.gpus_per_node;
  const int first = e.kind == FaultKind::kGpu ? e.target : e.target * per_node;
  const int last = e.kind == FaultKind::kGpu ? e.target : first + per_node - 1;  // inclusive
  bool hit = false;
  for (const auto& rep : replicas_) {
    const int gpus = pools_[static_cast<std::size_t>(rep->pool())].spec.deployment.gpus_per_instance();
    std::vector<int> ranks;
    for (int g = std::max(first, rep->first_gpu()); g <= std::min(last, rep->first_gpu() + gpus - 1); ++g)
      ranks.push_back(g - rep->first_gpu());
    if (ranks.empty()) continue;
    hit = true;
    fail_ranks(e, rep->index(), ranks);
  }
  if (!hit) faults_->record(e, -1, "idle");
}

// `ranks` of `replica` fail: the instance goes on without their attention ranks when every expert they
// held has a copy elsewhere (experts_covered), else it stops and restarts.
void Cluster::fail_ranks(const FaultEvent& e, int replica, const std::vector<int>& ranks) {
  Replica& rep = *replicas_[static_cast<std::size_t>(replica)];
  const auto k = static_cast<std::size_t>(replica);
  if (!state_.empty() && state_[k] == InstanceState::kIdle) {
    faults_->record(e, replica, "idle");
    return;
  }
  const bool was_down = faults_->down(replica);
  std::vector<int> groups;
  for (const int r : ranks) {
    if (const int g = faults_->lose_rank(replica, r, sim_.now()); g >= 0) groups.push_back(g);
  }
  const std::int64_t held = rep.in_system();
  if (was_down) {  // already restarting: a replacement or re-shard covers this GPU too
    faults_->record(e, replica, "restarting").requests_hit = 0;
    return;
  }
  // The placement's ranks are expert-parallel ranks of expert_tp GPUs (pipeline stages share them).
  const Placement& p = rep.planner().placement();
  const std::span<const char> lost = faults_->lost_ranks(replica);
  std::vector<char> lost_ep(static_cast<std::size_t>(p.gpus()), 0);
  const std::size_t per_rank = std::max<std::size_t>(1, lost.size() / lost_ep.size());
  for (std::size_t g = 0; g < lost.size(); ++g) {
    if (lost[g] != 0) lost_ep[(g / per_rank) % lost_ep.size()] = 1;
  }
  const DeploymentSpec& d = pools_[static_cast<std::size_t>(rep.pool())].spec.deployment;
  bool any_rank_up = false;
  for (int g = 0; g < d.attention_dp; ++g) any_rank_up = any_rank_up || !faults_->group_lost(replica, g);
  const bool covered = s_.model.routed_experts > 0 && any_rank_up && experts_covered(p, lost_ep);
  if (covered) {
    std::int64_t hit = 0;
    for (const int g : groups) {
      const AttentionGroup& ag = rep.groups()[static_cast<std::size_t>(g)];
      hit += static_cast<std::int64_t>(ag.running.size() + ag.waiting.size());
      rep.evict(g);
    }
    rep.set_lost_ranks(lost_ep);  // the surviving copies take the lost ranks' tokens
    faults_->record(e, replica, "continued").requests_hit = hit;
    if (std::none_of(degraded_since_.begin(), degraded_since_.end(),
                     [&](const auto& x) { return x.first == replica; }))
      degraded_since_.emplace_back(replica, sim_.now());
    return;
  }
  faults_->set_down(replica, sim_.now());
  FaultRecord& rec = faults_->record(e, replica, "restarted");
  rec.requests_hit = held;
  const std::size_t record = faults_->records() - 1;
  rep.halt();
  rep.evict(-1);
  restart_instance(replica, record);
}

// A restart: detection, the replacement's wait (kReplace), the weights over the named path
// (operations.h load_cost, the same path and bandwidths as a scale-up) and the fixed costs.
void Cluster::restart_instance(int replica, std::size_t record) {
  const FaultsSpec& f = s_.faults;
  const Replica& rep = *replicas_[static_cast<std::size_t>(replica)];
  const ServingPool& p = pools_[static_cast<std::size_t>(rep.pool())];
  const bool replace = f.recovery == RecoveryPolicy::kReplace;
  const WeightSource from =
      f.reload_from_set ? static_cast<WeightSource>(f.weights_from) : s_.autoscale.weights_from;
  const Duration fixed = f.reload_from_set ? f.engine_start + f.cuda_graph_capture
                                           : s_.autoscale.engine_start + s_.autoscale.cuda_graph_capture;
  int peer = -1;  // another instance of the pool taking requests, else any other
  for (const bool up_only : {true, false}) {
    for (int k = p.first_replica; k < p.first_replica + p.spec.instances && peer < 0; ++k) {
      if (k != replica && (!up_only || !faults_->down(k)))
        peer = replicas_[static_cast<std::size_t>(k)]->first_gpu();
    }
  }
  const ScaleUpCost c = load_cost(s_, models_.fabric(), from, fixed, p.memory.weights_per_gpu.total(),
                                  rep.first_gpu(), p.spec.deployment.gpus_per_instance(), peer);
  const Time failed = sim_.now();
  const Time load_from = failed + f.detection + (replace ? f.replacement : Duration::zero());
  const Time weights_in = load_from + c.weights;
  const Time ready = weights_in + c.fixed;
  sim_.schedule_at(ready, Phase::kNormal, [this, replica, record, replace, failed, load_from, weights_in] {
    span(replica, "failure: detect", failed, failed + s_.faults.detection);
    if (replace) span(replica, "failure: wait for spare GPUs", failed + s_.faults.detection, load_from);
    span(replica, "failure: reload weights", load_from, weights_in);
    if (weights_in < sim_.now()) span(replica, "failure: start", weights_in, sim_.now());
    on_restarted(replica, record, replace);
  });
}

void Cluster::on_restarted(int replica, std::size_t record, bool replaced) {
  faults_->set_up(replica, replaced, sim_.now());
  Replica& rep = *replicas_[static_cast<std::size_t>(replica)];
  if (replaced)
    rep.set_lost_ranks(std::vector<char>(static_cast<std::size_t>(rep.planner().placement().gpus()), 0));
  faults_->on_recovered(record, sim_.now());
  if (replaced)
    std::erase_if(degraded_since_, [&](const auto& x) {
      if (x.first != replica) return false;
      span(replica, "degraded: ranks lost", x.second, sim_.now());
      return true;
    });
  if (!replaced && std::none_of(degraded_since_.begin(), degraded_since_.end(),
                                [&](const auto& x) { return x.first == replica; }))
    degraded_since_.emplace_back(replica, sim_.now());
  rep.resume();
  on_loads_changed(replica);
  unpark();
}

// Node e.target's NIC keeps e.bandwidth_factor of its bandwidth until e.at + e.duration.
void Cluster::degrade_nic(const FaultEvent& e) {
  const Time until = sim_.now() + e.duration;
  kv_links_.degrade_nic(e.target, e.bandwidth_factor, sim_.now(), until);
  int on_node = -1;  // the first instance with a GPU on the node: the trace's track
  for (const auto& rep : replicas_) {
    const int gpus = pools_[static_cast<std::size_t>(rep->pool())].spec.deployment.gpus_per_instance();
    const int a = rep->first_gpu() / s_.cluster.gpus_per_node;
    const int b = (rep->first_gpu() + gpus - 1) / s_.cluster.gpus_per_node;
    if (on_node < 0 && a <= e.target && e.target <= b) on_node = rep->index();
  }
  faults_->record(e, on_node, "degraded link");
  if (on_node >= 0) span(on_node, "NIC degraded", sim_.now(), until);
}

bool Cluster::any_accepting(const std::vector<int>& pools) const {
  for (const int pi : pools) {
    const ServingPool& p = pools_[static_cast<std::size_t>(pi)];
    for (int r = p.first_replica; r < p.first_replica + p.spec.instances; ++r) {
      for (int g = 0; g < p.spec.deployment.attention_dp; ++g) {
        if (group_accepting(r, g)) return true;
      }
    }
  }
  return false;
}

// A request off a failed rank: recomputed (its prompt and generated tokens prefilled again on the group
// the entry router picks) or failed (out of the run, its user freed).
void Cluster::on_evicted(RequestIdx idx, Time now) {
  Request& r = requests_[idx];
  if (s_.faults.in_flight == InFlightPolicy::kFail) {
    faults_->on_failed(r);
    metrics_.on_failed(now);
    source_->on_finished(now);
    requests_.release(idx);
    if (metrics_.arrivals_ended() && all_out()) sim_.cancel(fault_tick_);
    return;
  }
  faults_->on_recomputed(r);
  r.computed = 0;
  r.target = r.prompt + r.generated;
  reroute(idx);
}

void Cluster::reroute(RequestIdx idx) {
  if (!any_accepting(entry_pools_)) {
    parked_entry_.push_back(idx);
    return;
  }
  const ServingPool& first = pools_[static_cast<std::size_t>(entry_pools_.front())];
  const bool cache_aware = first.router->reads_prefix_cache();
  // The cache-aware router probes the prompt's blocks (the hashes may go on into the answer's).
  std::vector<BlockHash> probe;
  if (cache_aware) {
    const Request& q = requests_[idx];
    const auto n = std::min(q.prompt_hashes.size(),
                            static_cast<std::size_t>(q.prompt / first.spec.deployment.kv_block_tokens));
    probe.assign(q.prompt_hashes.begin(), q.prompt_hashes.begin() + static_cast<std::ptrdiff_t>(n));
  }
  const std::size_t target = route(entry_pools_, *first.router, cache_aware ? &probe : nullptr);
  const auto [rep, group] = group_at(entry_pools_, target);
  Request& r = requests_[idx];
  r.replica = rep->index();
  r.group = group;
  rep->enqueue(group, idx);
}

// An instance takes requests again: the parked ones go to it (or wherever the routers send them).
void Cluster::unpark() {
  if (any_accepting(entry_pools_)) {
    std::vector<RequestIdx> entry;
    entry.swap(parked_entry_);
    for (const RequestIdx idx : entry) reroute(idx);
  }
  if (!decode_pools_.empty() && any_accepting(decode_pools_)) {
    std::vector<RequestIdx> decode;
    decode.swap(parked_decode_);
    for (const RequestIdx idx : decode) to_decode(idx, sim_.now());
  }
}

}  // namespace moesim
