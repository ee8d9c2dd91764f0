// The cluster (cluster.h): wiring from the scenario, arrivals and routing over the entry groups, the move of
// prefilled requests with their KV caches to decode pools, KV migration, and the run itself. The planner's
// instance lifecycle and failures are in cluster_operations.cpp.
#include "sim/serving/runtime/cluster.h"

#include <algorithm>
#include <cmath>
#include <memory>
#include <optional>
#include <span>
#include <utility>
#include <vector>

#include "sim/engine/check.h"
#include "sim/serving/report/report_builder.h"
#include "sim/serving/runtime/conservation.h"
#include "sim/serving/spec/memory_plan.h"
#include "workloads/prefixed_source.h"

namespace moesim {

Cluster::Cluster(const ScenarioSpec& s, const GpuCostModel& gpu, SimulationObserver* observer, int threads)
    : s_(s),
      gpu_(gpu),
      streams_(s.run.seed),
      models_(s, streams_),
      metrics_(s, observer),
      kv_links_(models_.fabric(), s.cluster.total_gpus(), s.cluster.nodes),
      observer_(observer) {
  const RunLimits limits{.max_requests = s.run.requests, .max_arrival_time = s.run.duration};
  if (!s.workload.trace.empty()) {
    source_ = std::make_unique<TraceSource>(s.workload.trace, s.production.trace_keys,
                                            s.workload.trace_speedup, limits);
    if (const auto& p = s.production.prefix) {  // a declared system prompt over a trace without identity
      source_ = std::make_unique<SystemPromptSource>(std::move(source_), p->system_prompt_tokens,
                                                     p->block_tokens, streams_);
    }
  } else if (s.production.prefix) {
    source_ = std::make_unique<PrefixedSource>(*s.production.prefix, s.workload.arrivals, s.workload.prompt,
                                               s.workload.output, limits, streams_);
  } else {
    source_ = std::make_unique<SyntheticSource>(s.workload.arrivals, s.workload.prompt, s.workload.output,
                                                limits, streams_);
  }
  const std::vector<PoolSpec> specs = s.pool_specs();
  int instances = 0;
  for (const PoolSpec& p : specs) instances += p.instances;
  // One replica's steps are sequential: more threads than replicas would idle. With fewer than
  // kMinReplicasForThreads replicas plans rarely overlap, and handing a plan to another core (its planner's
  // state moves with it) cost more than it saved: a 1P1D hour took 51.0 s on one thread, 57.6 s on two.
  constexpr int kMinReplicasForThreads = 4;
  if (const int t = std::min(threads, instances);
      t > 1 && instances >= kMinReplicasForThreads && models_.plans_may_run_apart())
    plans_ = std::make_unique<WorkerPool>(t - 1);
  pools_.reserve(specs.size());
  for (const PoolSpec& p : specs) add_pool(p, gpu);
  int entry_groups = 0;
  int decode_groups = 0;
  for (std::size_t i = 0; i < pools_.size(); ++i) {
    ServingPool& p = pools_[i];
    if (p.spec.role == PoolRole::kDecode) {
      p.first_group = decode_groups;
      decode_groups += p.groups();
      decode_pools_.push_back(static_cast<int>(i));
    } else {
      p.first_group = entry_groups;
      entry_groups += p.groups();
      entry_pools_.push_back(static_cast<int>(i));
    }
  }
  loads_.resize(static_cast<std::size_t>(std::max(entry_groups, decode_groups)));
  kv_inflight_.assign(static_cast<std::size_t>(decode_groups), 0);
  migration_to_.assign(replicas_.size(), -1);
  load_changed_.assign(replicas_.size(), 0);
  if (s.autoscale.enabled) start_autoscaling();
  if (s.faults.enabled()) start_faults();
}

void Cluster::add_pool(const PoolSpec& p, const GpuCostModel& gpu) {
  const int index = static_cast<int>(pools_.size());
  ServingPool& pool = pools_.emplace_back();
  pool.spec = p;
  if (s_.disaggregated()) {
    pool.own_view = std::make_unique<ScenarioSpec>(s_.pool_view(p));
    pool.view = pool.own_view.get();
  } else {
    pool.view = &s_;
  }
  const ScenarioSpec& v = *pool.view;
  pool.memory = plan_memory(v);
  pool.policy =
      make_batch_policy(v.deployment, v.production.speculative ? &*v.production.speculative : nullptr);
  pool.router = make_router(v);
  if (s_.autoscale.enabled || s_.faults.enabled())
    pool.router = std::make_unique<AcceptingRouter>(std::move(pool.router));
  pool.first_replica = static_cast<int>(replicas_.size());
  // Each instance's expert loop (null when no mechanism is on), which its replica will own.
  std::vector<std::unique_ptr<ExpertLoop>> loops;
  for (int i = 0; i < p.instances; ++i) loops.push_back(models_.make_expert_loop(v));
  // Per-expert precisions and replicas change the routed-expert weights: measured on the placement.
  if (s_.experts.quantization && !loops.empty()) {
    pool.memory = plan_memory(v, loops.front()->routed_expert_bytes_per_gpu());
  }
  check_pool_fits(s_, static_cast<std::size_t>(index), pool.memory);
  const ReplicaContext ctx{.s = v,
                           .sim = sim_,
                           .requests = requests_,
                           .models = models_,
                           .policy = *pool.policy,
                           .metrics = metrics_,
                           .host = *this,
                           .streams = streams_,
                           .role = p.role,
                           .pool = index,
                           .plans = plans_.get()};
  for (int i = 0; i < p.instances; ++i) {
    const auto global = static_cast<std::uint64_t>(pool.first_replica + i);
    replicas_.push_back(
        std::make_unique<Replica>(pool.first_replica + i, ctx, std::move(loops[static_cast<std::size_t>(i)]),
                                  gpu, streams_.stream("routing", global), pool.memory.kv_blocks_per_group,
                                  p.first_gpu + i * p.deployment.gpus_per_instance()));
  }
}

void Cluster::pull_arrival() {
  if (arrival_pending_) return;
  const std::optional<RequestSpec> next = source_->next();
  if (!next) {
    if (source_->exhausted() && !metrics_.arrivals_ended()) end_of_arrivals();
    return;
  }
  arrival_pending_ = true;
  const RequestSpec spec = *next;
  sim_.schedule_at(std::max(spec.arrival, sim_.now()), Phase::kNormal, [this, spec] { on_arrival(spec); });
}

std::optional<DropReason> Cluster::refusal(const RequestSpec& spec, const ServingPool& pool,
                                           const AttentionGroup& g) const {
  if (spec.output_tokens <= 0 || spec.prompt_tokens <= 0) return DropReason::kEmpty;
  const DeploymentSpec& d = pool.spec.deployment;
  // Too long for the KV cache or (chunked prefill off) for one step's token budget. A prefill instance
  // holds the prompt (and the first token); a decode instance of the largest cache the whole request.
  const std::int64_t tokens = spec.prompt_tokens + spec.output_tokens;
  std::int64_t held = tokens;
  std::int64_t decode_room = 0;
  if (pool.spec.role == PoolRole::kPrefill) {
    held = spec.prompt_tokens + 1;
    for (const int i : decode_pools_)
      decode_room = std::max(decode_room, pools_[static_cast<std::size_t>(i)].memory.kv_tokens_per_group);
    if (tokens > decode_room) return DropReason::kTooLong;
  }
  // With chunking off a step holds the whole prompt, and under an evicting scheduler its recompute.
  const std::int64_t one_step = pool.spec.role == PoolRole::kPrefill
                                    ? held
                                    : unchunked_step_tokens(d, spec.prompt_tokens, spec.output_tokens);
  if (held > pool.memory.kv_tokens_per_group || (!d.chunked_prefill && one_step > d.max_batched_tokens))
    return DropReason::kTooLong;
  if (d.max_waiting_requests > 0 && static_cast<std::int64_t>(g.waiting.size()) >= d.max_waiting_requests)
    return DropReason::kQueueFull;
  return std::nullopt;
}

// The last arrival is in: what follows is the drain, bounded by run.max_drain_s when set.
void Cluster::end_of_arrivals() {
  metrics_.on_arrivals_end(sim_.now());
  if (s_.run.max_drain > Duration::zero()) {
    sim_.schedule_in(s_.run.max_drain, Phase::kNormal, [this] { sim_.stop(); });
  }
}

std::size_t Cluster::prompt_hashes(const RequestSpec& spec, std::int64_t block_tokens,
                                   std::vector<BlockHash>& out) {
  out.clear();
  const std::int64_t keyed = source_->prefix_block_tokens();
  if (keyed == 0) return 0;
  std::int64_t tokens = spec.prompt_tokens + spec.output_tokens;
  source_->sequence_block_keys(spec, keys_);
  if (keys_.empty()) {
    tokens = spec.prompt_tokens;
    source_->prompt_block_keys(spec, keys_);
  }
  // A keyed block of `keyed` tokens (512 for Mooncake hash_ids) is `split` KV blocks; each KV block's key
  // is its keyed block's key and its position inside it. Only full KV blocks are cached.
  const std::int64_t block = block_tokens;
  MOESIM_CHECK(keyed % block == 0, "keyed prompt blocks must split into whole KV blocks");
  const std::int64_t split = keyed / block;
  const std::int64_t n = std::min(tokens / block, static_cast<std::int64_t>(keys_.size()) * split);
  out.resize(static_cast<std::size_t>(n));
  BlockHash parent = 0;
  for (std::int64_t i = 0; i < n; ++i) {
    const std::uint64_t key = keys_[static_cast<std::size_t>(i / split)];
    const std::uint64_t sub = split == 1 ? key : splitmix64(key ^ static_cast<std::uint64_t>(i % split));
    out[static_cast<std::size_t>(i)] = parent = chain_block_hash(parent, sub);
  }
  return static_cast<std::size_t>(std::min(n, spec.prompt_tokens / block));
}

std::pair<Replica*, int> Cluster::group_at(const std::vector<int>& pools, std::size_t i) const {
  for (const int pi : pools) {
    const ServingPool& p = pools_[static_cast<std::size_t>(pi)];
    const auto n = static_cast<std::size_t>(p.groups());
    if (i < n) {
      const auto dp = static_cast<std::size_t>(p.spec.deployment.attention_dp);
      return {replicas_[static_cast<std::size_t>(p.first_replica) + i / dp].get(), static_cast<int>(i % dp)};
    }
    i -= n;
  }
  MOESIM_CHECK(false, "group index beyond the pools");
  return {nullptr, 0};
}

namespace {
// A group as routers see it; `inflight`: requests whose KV cache is on its way to it.
GroupLoad load_of(const AttentionGroup& g, std::int64_t inflight) {
  return GroupLoad{.running = static_cast<std::int64_t>(g.running.size()),
                   .waiting = static_cast<std::int64_t>(g.waiting.size()) + inflight,
                   .busy_s = g.busy_ewma_s,
                   .free_kv_blocks = g.kv.free_blocks(),
                   .total_kv_blocks = g.kv.total_blocks(),
                   .active_kv_blocks = g.kv.used_blocks() +
                                       (g.waiting_tokens + g.kv.block_tokens() - 1) / g.kv.block_tokens()};
}
}  // namespace

void Cluster::fill_loads(const std::vector<int>& pools, const std::vector<BlockHash>* hashes) {
  std::size_t k = 0;
  for (const int pi : pools) {
    const ServingPool& p = pools_[static_cast<std::size_t>(pi)];
    for (int r = 0; r < p.spec.instances; ++r) {
      int gi = 0;
      for (const AttentionGroup& g : replicas_[static_cast<std::size_t>(p.first_replica + r)]->groups()) {
        const std::int64_t inflight = &pools == &decode_pools_ ? kv_inflight_[k] : 0;
        GroupLoad& l = loads_[k++];
        l = load_of(g, inflight);
        l.accepting = group_accepting(p.first_replica + r, gi++);
        if (hashes != nullptr) {
          l.prompt_blocks = static_cast<std::int64_t>(hashes->size());
          l.cached_prefix_blocks = g.kv.cached_prefix_blocks(*hashes);
          l.cached_blocks = g.kv.cached_blocks();
        }
      }
    }
  }
}

void Cluster::on_loads_changed(int replica) {
  char& changed = load_changed_[static_cast<std::size_t>(replica)];
  if (changed != 0) return;
  changed = 1;
  const bool decode =
      pools_[static_cast<std::size_t>(replicas_[static_cast<std::size_t>(replica)]->pool())].spec.role ==
      PoolRole::kDecode;
  (decode ? decode_changed_ : entry_changed_).push_back(replica);
}

void Cluster::refresh_index(const std::vector<int>& pools, const Router& router) {
  const bool decode = &pools == &decode_pools_;
  LoadIndex& index = decode ? decode_index_ : entry_index_;
  std::vector<int>& changed = decode ? decode_changed_ : entry_changed_;
  std::size_t n = 0;
  for (const int pi : pools) n += static_cast<std::size_t>(pools_[static_cast<std::size_t>(pi)].groups());
  if (index.size() != n) {  // first route: every group
    index.reset(n);
    for (const int pi : pools) {
      const ServingPool& p = pools_[static_cast<std::size_t>(pi)];
      for (int r = p.first_replica; r < p.first_replica + p.spec.instances; ++r) on_loads_changed(r);
    }
  }
  for (const int r : changed) {
    load_changed_[static_cast<std::size_t>(r)] = 0;
    const Replica& rep = *replicas_[static_cast<std::size_t>(r)];
    const ServingPool& p = pools_[static_cast<std::size_t>(rep.pool())];
    auto flat =
        static_cast<std::size_t>(p.first_group + (r - p.first_replica) * p.spec.deployment.attention_dp);
    for (const AttentionGroup& g : rep.groups()) {
      index.set(flat, router.key(load_of(g, decode ? kv_inflight_[flat] : 0)));
      ++flat;
    }
  }
  changed.clear();
}

std::size_t Cluster::route(const std::vector<int>& pools, Router& router,
                           const std::vector<BlockHash>* hashes) {
  if (router.view() == RouterView::kKey) {
    refresh_index(pools, router);
    return static_cast<std::size_t>((&pools == &decode_pools_ ? decode_index_ : entry_index_).best());
  }
  if (router.view() == RouterView::kLoads) fill_loads(pools, hashes);
  std::size_t n = 0;
  for (const int pi : pools) n += static_cast<std::size_t>(pools_[static_cast<std::size_t>(pi)].groups());
  return static_cast<std::size_t>(router.route(std::span(loads_.data(), n)));
}

RequestIdx Cluster::admit_request(const RequestSpec& spec, std::int64_t id, std::vector<BlockHash> hashes) {
  const RequestIdx idx = requests_.add();
  Request& r = requests_[idx];
  r.id = id;
  r.arrival = spec.arrival;
  r.prompt = spec.prompt_tokens;
  r.output = spec.output_tokens;
  r.target = r.prompt;
  r.prompt_hashes = std::move(hashes);
  metrics_.on_admitted(r);
  return idx;
}

void Cluster::on_arrival(const RequestSpec& spec) {
  arrival_pending_ = false;
  metrics_.on_arrival(sim_.now());
  const std::int64_t id = next_id_++;
  // Prefix caching is the entry pools' (colocated, or the prefill side): the prompt's block hashes, and
  // for the cache-aware router each group's cached prefix of them.
  const ServingPool& first = pools_[static_cast<std::size_t>(entry_pools_.front())];
  std::vector<BlockHash> hashes;
  std::size_t prompt_blocks = 0;
  if (first.spec.deployment.prefix_caching)
    prompt_blocks = prompt_hashes(spec, first.spec.deployment.kv_block_tokens, hashes);
  if (faults_ && !any_accepting(entry_pools_)) {  // every entry instance down: it waits for one
    parked_entry_.push_back(admit_request(spec, id, std::move(hashes)));
    pull_arrival();
    return;
  }
  // The first entry pool's router picks among every entry group (one router for the arrivals), probing
  // the prompt's blocks.
  std::vector<BlockHash> probe;
  const bool probes = first.router->reads_prefix_cache();
  if (probes) probe.assign(hashes.begin(), hashes.begin() + static_cast<std::ptrdiff_t>(prompt_blocks));
  const std::size_t target = route(entry_pools_, *first.router, probes ? &probe : nullptr);
  const auto [rep, group] = group_at(entry_pools_, target);
  const ServingPool& pool = pools_[static_cast<std::size_t>(rep->pool())];
  if (const auto why = refusal(spec, pool, rep->groups()[static_cast<std::size_t>(group)])) {
    metrics_.on_drop(spec, id, *why);
    source_->on_finished(sim_.now());
  } else {
    const RequestIdx idx = admit_request(spec, id, std::move(hashes));
    requests_[idx].replica = rep->index();
    requests_[idx].group = group;
    rep->enqueue(group, idx);
  }
  pull_arrival();
}

// Prefill done on a prefill instance: the decode router picks a group, and the KV cache moves there.
void Cluster::on_prefilled(RequestIdx idx, Time now) {
  Request& r = requests_[idx];
  r.prefill_replica = r.replica;
  r.prefill_admitted = r.admitted;
  r.admitted = Time::never();  // the decode instance's admission (set by its batch policy)
  r.prefill_done = now;
  if (faults_ && !any_accepting(decode_pools_)) {  // every decode instance down: its KV waits for one
    parked_decode_.push_back(idx);
    return;
  }
  to_decode(idx, now);
}

void Cluster::to_decode(RequestIdx idx, Time now) {
  const Request& r = requests_[idx];
  const ServingPool& first = pools_[static_cast<std::size_t>(decode_pools_.front())];
  const std::size_t target = route(decode_pools_, *first.router);
  const auto [to, group] = group_at(decode_pools_, target);
  ++kv_inflight_[target];
  on_loads_changed(to->index());
  send_kv(idx, *replicas_[static_cast<std::size_t>(r.replica)], *to, group, now, false);
}

// KV transfer: each GPU of the destination attention group receives its share of the
// request's KV cache (kv_transfer_size: MLA replicated on every TP rank, GQA heads sharded) from a GPU of
// the source group (round robin over the source's TP ranks), costed and queued by the KV link ledger
// (KvLinks::send: the fabric route, the source GPU's FIFO send engine, NIC sharing). Across nodes the
// transfer shares the NIC paths with the All-to-All of the instances at both ends, the larger of their NIC
// busy shares (Replica::nic_busy_share); in turn their steps see it on those NICs (kv_on_nics).
// A pipeline-staged instance sends from its first stage's GPUs.
void Cluster::send_kv(RequestIdx idx, const Replica& from, Replica& to, int group, Time now, bool migration) {
  Request& r = requests_[idx];
  const DeploymentSpec& src = pools_[static_cast<std::size_t>(from.pool())].spec.deployment;
  const DeploymentSpec& dst = pools_[static_cast<std::size_t>(to.pool())].spec.deployment;
  const KvTransferSize size = kv_transfer_size(s_.model, s_.precision.kv_cache, r.computed, dst.attention_tp);
  const double nic_busy = std::max(from.nic_busy_share(), to.nic_busy_share());
  Time done = now;
  for (int j = 0; j < dst.attention_tp; ++j) {
    const int src_gpu = from.first_gpu() + r.group * src.attention_tp + j % src.attention_tp;
    const int dst_gpu = to.first_gpu() + group * dst.attention_tp + j;
    done = std::max(done, kv_links_.send(size.bytes_per_dest_gpu, src_gpu, dst_gpu, now, nic_busy));
  }
  metrics_.on_kv_transfer(size.wire_bytes, done - now, migration);
  MOESIM_CHECK(r.kv_in_transit == 0, "a KV cache sent while the request's previous one is on the way");
  r.kv_in_transit = std::llround(size.wire_bytes);
  metrics_.on_kv_sent(r.kv_in_transit);
  r.replica = to.index();
  r.group = group;
  r.target = r.computed + 1;  // the next step writes the last sampled token's KV and samples the next
  Replica* dest = &to;
  sim_.schedule_at(done, Phase::kNormal, [this, idx, dest, group, migration] {
    metrics_.on_kv_received(std::exchange(requests_[idx].kv_in_transit, 0));
    if (!migration) {
      requests_[idx].kv_arrived = sim_.now();
      std::size_t flat = static_cast<std::size_t>(group);
      const ServingPool& p = pools_[static_cast<std::size_t>(dest->pool())];
      flat += static_cast<std::size_t>(p.first_group) +
              static_cast<std::size_t>((dest->index() - p.first_replica) * p.spec.deployment.attention_dp);
      --kv_inflight_[flat];
      on_loads_changed(dest->index());
    }
    if (faults_ && !faults_->takes_requests(dest->index(), group)) {  // it failed meanwhile: the KV is lost
      on_evicted(idx, sim_.now());
      return;
    }
    dest->enqueue(group, idx, migration);
  });
}

// KV migration: the policy (choose_migration) reads the pool's instances' loads and whether each one's
// previous migration is still under way; the chosen instance lets the requests go at its next step.
void Cluster::check_migration(int pool) {
  const ServingPool& p = pools_[static_cast<std::size_t>(pool)];
  const KvMigrationSpec& m = p.spec.deployment.kv_migration;
  migration_view_.clear();
  for (int i = p.first_replica; i < p.first_replica + p.spec.instances; ++i) {
    const Replica& rep = *replicas_[static_cast<std::size_t>(i)];
    int& to = migration_to_[static_cast<std::size_t>(i)];
    if (!rep.migration_pending()) to = -1;
    migration_view_.push_back(MigrationLoad{.in_system = rep.in_system(), .migrating = to >= 0});
  }
  if (const std::optional<Migration> mig = choose_migration(migration_view_, m)) {
    const int most = p.first_replica + mig->from;
    migration_to_[static_cast<std::size_t>(most)] = p.first_replica + mig->to;
    replicas_[static_cast<std::size_t>(most)]->request_migration(mig->requests);
  }
  // Checks go on while requests remain and something else can still happen: with no other event pending
  // every replica is idle, and checking again could only loop to the end of time.
  const bool done = metrics_.arrivals_ended() && all_out();
  if (!done && sim_.pending() > 0)
    sim_.schedule_in(m.check_every, Phase::kNormal, [this, pool] { check_migration(pool); });
}

bool Cluster::kv_on_nics(int first_gpu, Time now, Duration horizon, std::span<double> out,
                         std::span<double> in) {
  return kv_links_.on_nics(first_gpu, now, horizon, out, in);
}

void Cluster::on_migrated_out(RequestIdx idx, Time now) {
  Request& r = requests_[idx];
  Replica& from = *replicas_[static_cast<std::size_t>(r.replica)];
  const int to_index = migration_to_[static_cast<std::size_t>(r.replica)];
  MOESIM_CHECK(to_index >= 0, "a migration without a destination");
  Replica& to = *replicas_[static_cast<std::size_t>(to_index)];
  // The destination group with the most free KV blocks.
  int group = 0;
  for (std::size_t g = 1; g < to.groups().size(); ++g) {
    if (to.groups()[g].kv.free_blocks() > to.groups()[static_cast<std::size_t>(group)].kv.free_blocks())
      group = static_cast<int>(g);
  }
  send_kv(idx, from, to, group, now, true);
}

void Cluster::on_request_finished(const Request& r, Time now) {
  source_->on_finished(now);
  if (faults_) {
    faults_->on_finished(r, now);
    if (metrics_.arrivals_ended() && all_out()) sim_.cancel(fault_tick_);
  }
  if (!ops_) return;
  const int decode = replicas_[static_cast<std::size_t>(r.replica)]->pool();
  const int prefill =
      r.prefill_replica >= 0 ? replicas_[static_cast<std::size_t>(r.prefill_replica)]->pool() : decode;
  ops_->on_finished(r, prefill, decode);
  // The last request is out: no further interval, so that the run ends here.
  if (metrics_.arrivals_ended() && all_out()) sim_.cancel(tick_);
}

Report Cluster::run() {
  for (std::size_t i = 0; i < pools_.size(); ++i) {
    const PoolSpec& p = pools_[i].spec;
    if (!p.deployment.kv_migration.enabled() || p.instances < 2 || p.role == PoolRole::kPrefill) continue;
    sim_.schedule_in(p.deployment.kv_migration.check_every, Phase::kNormal,
                     [this, i] { check_migration(static_cast<int>(i)); });
  }
  if (fault_schedule_) {
    if (const std::optional<FaultEvent> e = fault_schedule_->next())
      fault_tick_ = sim_.schedule_at(e->at, Phase::kNormal, [this, f = *e] { on_fault(f); });
  }
  if (autoscaler_) {
    tick_ = sim_.schedule_in(s_.autoscale.interval, Phase::kNormal, [this] { on_autoscale_tick(); });
  }
  pull_arrival();
  sim_.run();
  for (const auto& r : replicas_) r->settle();  // a drain cut short can leave plans in flight
  metrics_.on_run_end(sim_.now());
  if (autoscaler_ && sim_.now() > interval_start_) {  // the last, partial interval
    std::vector<PoolObservation> seen;
    const std::vector<double> rates = interval_rates();
    for (std::size_t i = 0; i < pools_.size(); ++i) seen.push_back(observe_pool(i, rates[i]));
    close_interval(seen, nullptr);
  }
  // Every request finishes or is dropped, unless run.max_drain_s cut the drain short.
  for (const auto& [k, since] : degraded_since_) span(k, "degraded: ranks lost", since, sim_.now());
  MOESIM_CHECK(all_out() || s_.run.max_drain > Duration::zero(),
               "every request must finish, fail or be dropped");
  check_conservation(metrics_, requests_, replicas_);  // requests and KV blocks balance
  return make_report();
}

Report Cluster::make_report() const {
  std::vector<double> scale_up_s;
  if (ops_) {
    for (const ServingPool& p : pools_)
      scale_up_s.push_back(instance_cost(p.first_replica + p.spec.instances - 1).total().seconds());
  }
  return build_report(RunRecord{.s = s_,
                                .gpu = gpu_,
                                .sim = sim_,
                                .metrics = metrics_,
                                .pools = pools_,
                                .decode_pools = decode_pools_,
                                .replicas = replicas_,
                                .ops = ops_.get(),
                                .ops_rows = &ops_rows_,
                                .scale_ups = scale_ups_,
                                .scale_downs = scale_downs_,
                                .scale_up_s = std::move(scale_up_s),
                                .faults = faults_.get()});
}

}  // namespace moesim
