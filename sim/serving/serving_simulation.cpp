// The serving simulation: the cluster of replicas in pools, the request source and the routers, wired from
// a scenario; arrivals are pulled lazily and routed to an attention group of an entry pool; under
// prefill/decode disaggregation prefilled requests move with their KV cache to a decode pool. Report
// assembly at the end reads the metrics recorder.
#include "sim/serving/serving_simulation.h"

#include <algorithm>
#include <cmath>
#include <memory>
#include <optional>
#include <span>
#include <utility>
#include <vector>

#include "sim/engine/check.h"
#include "sim/engine/simulator.h"
#include "sim/engine/version.h"
#include "sim/serving/autoscaler.h"
#include "sim/serving/conservation.h"
#include "sim/serving/faults.h"
#include "sim/serving/kv_transfer.h"
#include "sim/serving/memory_plan.h"
#include "sim/serving/metrics_recorder.h"
#include "sim/serving/operations.h"
#include "sim/serving/replica.h"
#include "sim/serving/router.h"
#include "sim/serving/serving_models.h"
#include "workloads/prefixed_source.h"

namespace moesim {

namespace {

// Batches of the within-run confidence intervals (Law & Kelton 5th ed. 9.5.3 suggest 10 to 30).
constexpr int kCiBatches = 20;
constexpr double kMaxLag1 = 0.2;

// One pool of identical instances (ScenarioSpec::pool_specs): the scenario as its instances see it, its
// memory plan, batch policy and router, and its replicas' range in the cluster's list.
struct ServingPool {
  PoolSpec spec;
  const ScenarioSpec* view = nullptr;  // the scenario itself for the colocated pool
  std::unique_ptr<ScenarioSpec> own_view;
  MemoryPlan memory;
  std::unique_ptr<BatchPolicy> policy;
  std::unique_ptr<Router> router;
  int first_replica = 0;
  int first_group = 0;  // of the groups its router sees (entry pools, or decode pools)
  [[nodiscard]] int groups() const { return spec.instances * spec.deployment.attention_dp; }
};

class Cluster final : public ReplicaHost {
 public:
  Cluster(const ScenarioSpec& s, const GpuCostModel& gpu, SimulationObserver* observer, int threads);
  Report run();

  void on_request_finished(const Request& r, Time now) override;
  void on_step_done() override {
    pull_arrival();
    if (!draining_.empty()) free_drained();
  }
  void on_prefilled(RequestIdx idx, Time now) override;
  void on_migrated_out(RequestIdx idx, Time now) override;
  void on_loads_changed(int replica) override;
  void on_evicted(RequestIdx idx, Time now) override;
  // A prefilled request's KV cache to the group the decode router picks.
  void to_decode(RequestIdx idx, Time now);
  bool kv_on_nics(int first_gpu, Time now, Duration horizon, std::span<double> out,
                  std::span<double> in) override;

 private:
  void add_pool(const PoolSpec& p, const GpuCostModel& gpu);
  void pull_arrival();
  void on_arrival(const RequestSpec& spec);
  // A new entry in the request table for an arrival that is kept (queued, or parked while no entry
  // instance takes requests).
  RequestIdx admit_request(const RequestSpec& spec, std::int64_t id, std::vector<BlockHash> hashes);
  // Why `spec` cannot join group `g` of `pool`, if it cannot.
  [[nodiscard]] std::optional<DropReason> refusal(const RequestSpec& spec, const ServingPool& pool,
                                                  const AttentionGroup& g) const;
  // The router's view of the groups of `pools` (entry or decode), replica-major, pool after pool; with
  // `hashes` (the cache-aware router), each group's cached prefix of them.
  void fill_loads(const std::vector<int>& pools, const std::vector<BlockHash>* hashes = nullptr);
  // The flat index over `pools` of the group that `router` picks: from its load index when it keeps one
  // (RouterView::kKey), else from loads_ filled afresh (`hashes`: as fill_loads).
  [[nodiscard]] std::size_t route(const std::vector<int>& pools, Router& router,
                                  const std::vector<BlockHash>* hashes = nullptr);
  // Brings `pools`' load index up to date with the replicas changed since the last route.
  void refresh_index(const std::vector<int>& pools, const Router& router);
  // (replica, group) of the flat group index `i` over `pools`.
  [[nodiscard]] std::pair<Replica*, int> group_at(const std::vector<int>& pools, std::size_t i) const;
  // Moves `idx`'s KV cache (its `computed` tokens) from its group on `from` to group `group` of `to` over
  // the fabric; the request joins that group's queue when the last byte is in.
  void send_kv(RequestIdx idx, const Replica& from, Replica& to, int group, Time now, bool migration);
  void check_migration(int pool);
  void end_of_arrivals();
  Report build_report() const;
  // The window (measurement.h) and the figures summed over it.
  WindowChoice fill_window(Report& r) const;
  void fill_rates(Report& r, const WindowTotals& m) const;
  void fill_steps(Report& r, const WindowTotals& m) const;
  void fill_all_to_all(Report& r, const WindowTotals& m) const;
  void fill_intervals(Report& r, const WindowChoice& c) const;
  void fill_intervals(Report& r, const WindowChoice& c, int batches) const;
  void fill_experts(Report& r, const WindowTotals& m) const;
  void fill_prefix(Report& r) const;
  // Prefix caching: the chained hashes of `spec`'s full prompt KV blocks of `block_tokens` into `out`.
  // The chained hashes of spec's full KV blocks into `out`: its prompt's, then its answer's when the
  // workload keys answers (conversations), which the cache names as decode computes them (vLLM V1 caches
  // generated tokens' full blocks, SGLang inserts a finished request's tokens into its radix tree), so a
  // next turn hits on the previous answer. Returns how many are the prompt's.
  std::size_t prompt_hashes(const RequestSpec& spec, std::int64_t block_tokens, std::vector<BlockHash>& out);
  void fill_pools(Report& r, const WindowTotals& m) const;
  // Operations under the planner (deployment.autoscale; operations.h): the instances beyond each pool's
  // initial count start idle; every interval the planner's targets start, cancel or drain instances.
  void start_autoscaling();
  void on_autoscale_tick();
  [[nodiscard]] std::vector<double> interval_rates() const;
  [[nodiscard]] PoolObservation observe_pool(std::size_t pool, double arrival_rate) const;
  void close_interval(const std::vector<PoolObservation>& seen, const std::vector<int>* targets);
  void scale_pool(std::size_t pool, int target);
  void start_instance(int replica);
  void on_instance_ready(int replica, std::uint32_t generation);
  void drain_instance(int replica);
  void free_drained();
  void set_state(int replica, InstanceState state);
  [[nodiscard]] bool accepting(int replica) const {
    return state_.empty() || state_[static_cast<std::size_t>(replica)] == InstanceState::kActive;
  }
  [[nodiscard]] ScaleUpCost instance_cost(int replica) const;
  void span(int replica, const char* what, Time from, Time to) const;
  void fill_operations(Report& r) const;
  // Failures (faults; faults.h): GPUs, nodes and NICs fail at the schedule's times; an instance whose lost
  // GPUs' experts have other copies goes on without their attention ranks, any other stops and restarts.
  void start_faults();
  void on_fault(const FaultEvent& e);
  void fail_ranks(const FaultEvent& e, int replica, const std::vector<int>& ranks);
  void restart_instance(int replica, std::size_t record);
  void on_restarted(int replica, std::size_t record, bool replaced);
  void degrade_nic(const FaultEvent& e);
  // Whether a group of `pools` takes requests (an instance taking them, its rank not lost).
  [[nodiscard]] bool any_accepting(const std::vector<int>& pools) const;
  [[nodiscard]] bool group_accepting(int replica, int group) const {
    return accepting(replica) && (!faults_ || faults_->takes_requests(replica, group));
  }
  // Sends a recomputed (or parked) request to an entry group, or parks it while none takes requests.
  void reroute(RequestIdx idx);
  void unpark();
  // Every arrived request finished, was dropped or failed.
  [[nodiscard]] bool all_out() const {
    return metrics_.finished + metrics_.dropped + metrics_.failed == metrics_.arrived;
  }
  [[nodiscard]] std::int64_t failed() const { return metrics_.failed; }

  const ScenarioSpec& s_;
  const GpuCostModel& gpu_;
  Simulator sim_;
  RandomStreams streams_;
  ServingModels models_;
  std::unique_ptr<RequestSource> source_;
  RequestTable requests_;
  MetricsRecorder metrics_;
  std::vector<ServingPool> pools_;
  std::vector<int> entry_pools_;   // where requests arrive: role both or prefill
  std::vector<int> decode_pools_;  // where prefilled requests go
  std::vector<std::unique_ptr<Replica>> replicas_;
  std::vector<GroupLoad> loads_;  // the view of a router that reads every group, refilled per route
  // A kKey router's view, entry and decode: each group's key, updated for the replicas whose groups
  // changed since the last route (`changed_`, listed once each: `load_changed_` per replica).
  LoadIndex entry_index_, decode_index_;
  std::vector<int> entry_changed_, decode_changed_;
  std::vector<char> load_changed_;
  std::vector<std::int64_t> kv_inflight_;         // per decode group (flat over decode_pools_): KV on the way
  std::vector<Time> link_free_;                   // per GPU of the cluster: when its KV sends are done
  std::vector<Time> nic_out_free_, nic_in_free_;  // per GPU: when KV transfers leave its NIC path free
  std::vector<int> migration_to_;                 // per replica: where its migrating requests go (-1: none)
  bool arrival_pending_ = false;
  std::int64_t next_id_ = 0;
  std::vector<std::uint64_t> keys_;  // scratch: a prompt's block keys from the source
  SimulationObserver* observer_;
  // The planner (null without deployment.autoscale), each replica's state, the generation of its pending
  // start (a cancelled start's ready event is stale), when its load or drain began, the draining ones,
  // and the interval's log and counters at its start.
  std::unique_ptr<Autoscaler> autoscaler_;
  std::unique_ptr<OperationsLog> ops_;
  std::vector<InstanceState> state_;
  std::vector<std::uint32_t> generation_;
  std::vector<Time> state_since_;
  std::vector<Time> weights_in_;  // per loading replica: when its last GPU has its weights
  std::vector<int> draining_;
  std::vector<OperationsRow> ops_rows_;
  EventId tick_;  // the next interval's end
  Time interval_start_;
  std::int64_t interval_arrived_ = 0;
  std::int64_t interval_handed_ = 0;
  std::int64_t scale_ups_ = 0;
  std::int64_t scale_downs_ = 0;
  // Failures: the tracker and schedule (null without faults), the next failure's event, each node's NIC
  // bandwidth share and until when, requests waiting for an instance to take them (entry, or prefilled
  // waiting for a decode instance), and the instances degraded since when (spans closed at the end).
  std::unique_ptr<FaultTracker> faults_;
  std::unique_ptr<FaultSchedule> fault_schedule_;
  EventId fault_tick_;
  std::vector<double> nic_share_;
  std::vector<Time> nic_until_;
  std::vector<RequestIdx> parked_entry_, parked_decode_;
  std::vector<std::pair<int, Time>> degraded_since_;
  // Declared last: destroyed first, so its workers are gone before the planners their jobs touch.
  std::unique_ptr<WorkerPool> plans_;
};

Cluster::Cluster(const ScenarioSpec& s, const GpuCostModel& gpu, SimulationObserver* observer, int threads)
    : s_(s),
      gpu_(gpu),
      streams_(s.run.seed),
      models_(s, streams_),
      metrics_(s, observer),
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
  link_free_.assign(static_cast<std::size_t>(s.cluster.total_gpus()), Time{});
  nic_out_free_.assign(link_free_.size(), Time{});
  nic_in_free_.assign(link_free_.size(), Time{});
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
  std::vector<std::unique_ptr<StepPlanner>> planners;
  for (int i = 0; i < p.instances; ++i) {
    const auto global = static_cast<std::uint64_t>(pool.first_replica + i);
    planners.push_back(models_.make_planner(v, gpu, streams_.stream("routing", global)));
  }
  // Per-expert precisions and replicas change the routed-expert weights: measured on the placement.
  if (s_.experts.quantization && !planners.empty()) {
    pool.memory = plan_memory(v, planners.front()->routed_expert_bytes_per_gpu());
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
    replicas_.push_back(std::make_unique<Replica>(
        pool.first_replica + i, ctx, std::move(planners[static_cast<std::size_t>(i)]),
        pool.memory.kv_blocks_per_group, p.first_gpu + i * p.deployment.gpus_per_instance()));
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
  if (held > pool.memory.kv_tokens_per_group || (!d.chunked_prefill && held > d.max_batched_tokens))
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
// the source group (round robin over the source's TP ranks), over the fabric route between them
// (Fabric::transfer: the bottleneck link of the route, its latency and p2p overhead). Transfers leaving one
// GPU queue behind each other (one KV send engine per GPU, FIFO). Across nodes a transfer shares the NIC
// paths with the All-to-All of the instances at both ends: fair sharing halves its rate while theirs is
// on, so its data time stretches by 1 + the larger of their NIC busy shares (Replica::nic_busy_share); in
// turn their steps see it on those NICs (kv_on_nics). Inside a node it goes over NVLink, not shared.
// A pipeline-staged instance sends from its first stage's GPUs.
void Cluster::send_kv(RequestIdx idx, const Replica& from, Replica& to, int group, Time now, bool migration) {
  Request& r = requests_[idx];
  const DeploymentSpec& src = pools_[static_cast<std::size_t>(from.pool())].spec.deployment;
  const DeploymentSpec& dst = pools_[static_cast<std::size_t>(to.pool())].spec.deployment;
  const KvTransferSize size = kv_transfer_size(s_.model, s_.precision.kv_cache, r.computed, dst.attention_tp);
  Time done = now;
  for (int j = 0; j < dst.attention_tp; ++j) {
    const int src_gpu = from.first_gpu() + r.group * src.attention_tp + j % src.attention_tp;
    const int dst_gpu = to.first_gpu() + group * dst.attention_tp + j;
    Time& free = link_free_[static_cast<std::size_t>(src_gpu)];
    const Time start = std::max(now, free);
    const Topology& topo = models_.fabric().topology();
    const bool across = topo.node_of(src_gpu) != topo.node_of(dst_gpu);
    double shared = across ? std::max(from.nic_busy_share(), to.nic_busy_share()) : 0.0;
    // A degraded NIC at share f of its bandwidth stretches the data time by 1 / f = 1 + (1 / f - 1).
    if (across && !nic_share_.empty()) {
      for (const int g : {src_gpu, dst_gpu}) {
        const auto node = static_cast<std::size_t>(topo.node_of(g));
        if (now < nic_until_[node]) shared += 1.0 / nic_share_[node] - 1.0;
      }
    }
    free = start + models_.fabric().transfer(size.bytes_per_dest_gpu, src_gpu, dst_gpu, shared);
    done = std::max(done, free);
    if (across) {
      Time& out = nic_out_free_[static_cast<std::size_t>(src_gpu)];
      Time& in = nic_in_free_[static_cast<std::size_t>(dst_gpu)];
      out = std::max(out, free);
      in = std::max(in, free);
    }
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

// KV migration: the most loaded instance of the pool gives running decode requests to
// the least loaded when its load passes imbalance_ratio x the least loaded's.
void Cluster::check_migration(int pool) {
  const ServingPool& p = pools_[static_cast<std::size_t>(pool)];
  const KvMigrationSpec& m = p.spec.deployment.kv_migration;
  int most = -1;
  int least = -1;
  for (int i = p.first_replica; i < p.first_replica + p.spec.instances; ++i) {
    if (!replicas_[static_cast<std::size_t>(i)]->migration_pending())
      migration_to_[static_cast<std::size_t>(i)] = -1;
  }
  for (int i = p.first_replica; i < p.first_replica + p.spec.instances; ++i) {
    const std::int64_t load = replicas_[static_cast<std::size_t>(i)]->in_system();
    if (most < 0 || load > replicas_[static_cast<std::size_t>(most)]->in_system()) most = i;
    if (least < 0 || load < replicas_[static_cast<std::size_t>(least)]->in_system()) least = i;
  }
  const std::int64_t hi = replicas_[static_cast<std::size_t>(most)]->in_system();
  const std::int64_t lo = replicas_[static_cast<std::size_t>(least)]->in_system();
  if (most != least && hi - lo >= 2 &&
      static_cast<double>(hi) > m.imbalance_ratio * static_cast<double>(std::max<std::int64_t>(lo, 1)) &&
      migration_to_[static_cast<std::size_t>(most)] < 0) {
    migration_to_[static_cast<std::size_t>(most)] = least;
    const auto n = static_cast<int>(std::min<std::int64_t>(m.max_requests_per_check, (hi - lo) / 2));
    replicas_[static_cast<std::size_t>(most)]->request_migration(n);
  }
  // Checks go on while requests remain and something else can still happen: with no other event pending
  // every replica is idle, and checking again could only loop to the end of time.
  const bool done = metrics_.arrivals_ended() && all_out();
  if (!done && sim_.pending() > 0)
    sim_.schedule_in(m.check_every, Phase::kNormal, [this, pool] { check_migration(pool); });
}

// The KV sends of a GPU run back to back from now until nic_out_free_ (its FIFO queue); a GPU's receives
// are counted busy until the last of them ends.
bool Cluster::kv_on_nics(int first_gpu, Time now, Duration horizon, std::span<double> out,
                         std::span<double> in) {
  bool any = false;
  const double h = horizon.seconds();
  for (std::size_t j = 0; j < out.size(); ++j) {
    const std::size_t g = static_cast<std::size_t>(first_gpu) + j;
    const Time o = nic_out_free_[g];
    const Time i = nic_in_free_[g];
    out[j] = o > now ? std::min(1.0, (o - now).seconds() / h) : 0.0;
    in[j] = i > now ? std::min(1.0, (i - now).seconds() / h) : 0.0;
    any = any || out[j] > 0 || in[j] > 0;
  }
  // A degraded NIC at share f of its bandwidth: the All-to-All's data time on it stretches by 1 / f,
  // which AllToAllTraffic::nic_out_shared expresses as other traffic holding it (1 / f - 1) of the time.
  if (!nic_share_.empty()) {
    const Topology& topo = models_.fabric().topology();
    for (std::size_t j = 0; j < out.size(); ++j) {
      const auto node = static_cast<std::size_t>(topo.node_of(first_gpu + static_cast<int>(j)));
      if (now >= nic_until_[node]) continue;
      out[j] += 1.0 / nic_share_[node] - 1.0;
      in[j] += 1.0 / nic_share_[node] - 1.0;
      any = true;
    }
  }
  return any;
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

LatencyStats stats_of(const LatencyHistogram& h) {
  return LatencyStats{.mean = h.mean(),
                      .p50 = h.percentile(50),
                      .p95 = h.percentile(95),
                      .p99 = h.percentile(99),
                      .max = h.max()};
}

Report Cluster::build_report() const {
  Report r;
  r.scenario = s_.name;
  r.version = std::string(version());
  r.seed = s_.run.seed;
  r.fingerprint = sim_.fingerprint();
  r.events = sim_.events_processed();
  r.cost_model = gpu_.source();
  r.engine = std::string(s_.deployment.engine.name);
  r.replicas = static_cast<int>(replicas_.size());
  r.gpus = 0;
  for (const ServingPool& p : pools_) r.gpus += p.spec.gpus();
  r.requests_arrived = metrics_.arrived;
  r.requests_finished = metrics_.finished;
  r.requests_dropped = metrics_.dropped;
  r.dropped_queue_full = metrics_.dropped_by[static_cast<std::size_t>(DropReason::kQueueFull)];
  r.dropped_too_long = metrics_.dropped_by[static_cast<std::size_t>(DropReason::kTooLong)];
  r.dropped_empty = metrics_.dropped_by[static_cast<std::size_t>(DropReason::kEmpty)];
  r.requests_unfinished = metrics_.arrived - metrics_.finished - metrics_.dropped - failed();
  r.preemptions = metrics_.preemptions;
  r.output_tokens = metrics_.output_tokens;
  r.output_tokens_asked = metrics_.output_tokens_asked;
  r.sim_end_s = sim_.now().seconds();
  const WindowChoice c = fill_window(r);
  const WindowTotals m = metrics_.series().sum(c.first_segment, c.with_drain);
  fill_rates(r, m);
  fill_steps(r, m);
  fill_intervals(r, c);
  // Memory of the first pool's GPUs (every pool's KV pool and peak in Report::pools).
  const ServingPool& first = pools_.front();
  const MemoryPlan& memory = first.memory;
  std::int64_t peak_blocks = 0;
  for (int i = first.first_replica; i < first.first_replica + first.spec.instances; ++i) {
    for (const AttentionGroup& g : replicas_[static_cast<std::size_t>(i)]->groups())
      peak_blocks = std::max(peak_blocks, g.kv.peak_used_blocks());
  }
  r.memory.hbm = s_.cluster.gpu.hbm_bytes;
  r.memory.weights = memory.weights_per_gpu.total();
  r.memory.routed_expert_weights = memory.weights_per_gpu.routed_experts;
  r.memory.activations_and_overhead = memory.activation_bytes + memory.overhead_bytes;
  r.memory.kv_pool = memory.kv_pool_bytes_per_gpu;
  r.memory.kv_peak_used = memory.kv_blocks_per_group > 0
                              ? memory.kv_pool_bytes_per_gpu * static_cast<double>(peak_blocks) /
                                    static_cast<double>(memory.kv_blocks_per_group)
                              : 0.0;
  fill_pools(r, m);
  fill_experts(r, m);
  fill_prefix(r);
  fill_operations(r);
  if (faults_) r.faults = faults_->report(sim_.now());
  if (const auto& sp = s_.production.speculative) {
    SpeculativeReport& x = r.speculative;
    x.enabled = true;
    x.draft = sp->draft == DraftKind::kMtp ? "mtp" : sp->draft_model_name;
    x.draft_tokens = sp->draft_tokens;
    x.expected_tokens_per_step = expected_tokens_per_step(*sp);
    x.acceptance_rate = mean_acceptance_rate(*sp);
    std::int64_t tokens = 0;
    for (const auto& rep : replicas_) {
      x.sequence_steps += rep->speculative_counts().sequence_steps;
      tokens += rep->speculative_counts().tokens;
    }
    if (x.sequence_steps > 0) {
      x.mean_tokens_per_step = double(tokens) / double(x.sequence_steps);
      x.measured_acceptance_rate = (x.mean_tokens_per_step - 1.0) / x.draft_tokens;
    }
  }
  r.alerts = evaluate_alerts(r);
  r.limit = limiting_resource(r);
  return r;
}

// The window every figure is measured over (measurement.h): its bounds, why, and the overload test.
WindowChoice Cluster::fill_window(Report& r) const {
  const double end = sim_.now().seconds();
  const MeasurementSeries& series = metrics_.series();
  const double last = series.arrivals_ended() ? series.arrivals_end() : end;
  r.arrivals_end_s = last;
  r.drain_s = std::max(0.0, end - last);
  const double mean_step_s = metrics_.steps > 0 ? metrics_.step_s / static_cast<double>(metrics_.steps) : 0.0;
  const WindowChoice c = choose_window(series, metrics_.warmup_override(), end, mean_step_s);
  r.window_kind = c.kind;
  r.window_why = c.why;
  r.window_from_s = c.from_s;
  r.window_to_s = c.to_s;
  r.window_s = std::max(0.0, c.to_s - c.from_s);
  r.warmup_method = c.warmup_method;
  r.mser_s = c.mser_s;
  r.mser_at_bound = c.mser_at_bound;
  r.mser_batches = c.mser_batches;
  // The trend's levels per batch; its slope per second.
  const double batch_s = c.trend.n > 0 ? (last - c.trend_from_s) / c.trend.n : 0.0;
  r.trend.from_s = c.trend_from_s;
  r.trend.batches = c.trend.n;
  r.trend.slope_per_s = batch_s > 0 ? c.trend.slope / batch_s : 0.0;
  r.trend.arrival_rate = c.arrival_rate;
  r.trend.waiting_slope_per_s = batch_s > 0 ? c.waiting_trend.slope / batch_s : 0.0;
  r.trend.waiting_p_growth = c.waiting_trend.p_growth;
  r.trend.t = c.trend.t;
  r.trend.df = c.trend.df;
  r.trend.lag1 = c.trend.lag1;
  r.trend.p_growth = c.trend.p_growth;
  // The fitted line estimates a mean count: where it dips below zero (a series rising from an empty
  // system) the estimate is zero.
  r.in_system_start = std::max(0.0, c.trend.start);
  r.in_system_end = std::max(0.0, c.trend.end);
  r.overloaded = c.overloaded;
  return c;
}

// Rates and the population's latencies: tokens emitted and requests finished inside the window, over it.
void Cluster::fill_rates(Report& r, const WindowTotals& m) const {
  const double w = r.window_s;
  r.requests_measured = m.finished;
  if (w > 0) {
    r.output_tokens_per_s = static_cast<double>(m.output_tokens) / w;
    r.total_tokens_per_s = static_cast<double>(m.output_tokens + m.prompt_tokens) / w;
    r.requests_per_s = static_cast<double>(m.finished) / w;
    r.goodput_requests_per_s = static_cast<double>(m.good) / w;
    // The good requests' share of the finished requests' tokens, of the tokens emitted in the window:
    // never above the throughput, and equal to it when every request meets the SLA.
    const double good_share = m.finished_output_tokens > 0 ? static_cast<double>(m.good_output_tokens) /
                                                                 static_cast<double>(m.finished_output_tokens)
                                                           : 0.0;
    r.goodput_tokens_per_s = r.output_tokens_per_s * good_share;
  }
  r.output_tokens_per_s_per_gpu = r.output_tokens_per_s / r.gpus;
  r.total_tokens_per_s_per_gpu = r.total_tokens_per_s / r.gpus;
  r.ttft = stats_of(m.ttft);
  r.tpot = stats_of(m.tpot);
  r.itl = stats_of(m.itl);
  r.e2e = stats_of(m.e2e);
  r.queueing = stats_of(m.queueing);
  r.sla_ttft_s = s_.sla.ttft.seconds();
  r.sla_tpot_s = s_.sla.tpot.seconds();
  r.sla_percentile = s_.sla.percentile;
  r.sla_ttft_at_percentile = m.ttft.percentile(s_.sla.percentile);
  r.sla_tpot_at_percentile = m.tpot.percentile(s_.sla.percentile);
  r.sla_met =
      m.finished > 0 && r.sla_ttft_at_percentile <= r.sla_ttft_s && r.sla_tpot_at_percentile <= r.sla_tpot_s;
  r.sla_violation_rate =
      m.finished > 0 ? static_cast<double>(m.finished - m.good) / static_cast<double>(m.finished) : 0.0;
}

// Steps that started in the window; utilisation from the step time inside it.
void Cluster::fill_steps(Report& r, const WindowTotals& m) const {
  const double w = r.window_s;
  r.steps = m.steps;
  if (m.steps > 0) {
    const double n = static_cast<double>(m.steps);
    r.mean_step_s = m.step_s / n;
    r.mean_batch_tokens = m.batch_tokens / n;
    if (m.batch_tokens > 0) {
      r.gpu_load_imbalance = m.gpu_imbalance / m.batch_tokens;
      r.expert_load_imbalance = m.expert_imbalance / m.batch_tokens;
    }
    r.rank_load_share = stats_of(m.rank_load_share);
    r.layer_max_over_mean = stats_of(m.layer_max_over_mean);
    r.nvlink_bytes_per_step = m.nvlink_bytes / n;
    r.nic_bytes_per_step = m.nic_bytes / n;
  }
  fill_all_to_all(r, m);
  if (m.step_s > 0) {
    r.comm_hidden_share = m.comm_hidden_s / m.step_s;
    r.comm_sm_contention_share = m.comm_sm_contention_s / m.step_s;
    for (std::size_t p = 0; p < kStepParts; ++p) r.part_share[p] = m.part_s.s[p] / m.step_s;
  }
  const GpuSpec& gpu = s_.cluster.gpu;
  const double peak = gpu.peak_flops(s_.precision.routed_experts);
  const auto gpus = static_cast<double>(m.gpu_busy_s.size());
  for (std::size_t g = 0; g < m.gpu_busy_s.size(); ++g) {
    GpuStats st;
    if (w > 0) {
      st.busy = m.gpu_busy_s[g] / w;
      st.compute_util = m.gpu_flops[g] / (w * peak);
      st.hbm_bw_util = m.gpu_bytes[g] / (w * gpu.hbm_bytes_per_s);
    }
    r.gpu.push_back(st);
    r.gpu_mean.busy += st.busy / gpus;
    r.gpu_mean.compute_util += st.compute_util / gpus;
    r.gpu_mean.hbm_bw_util += st.hbm_bw_util / gpus;
  }
}

void Cluster::fill_all_to_all(Report& r, const WindowTotals& m) const {
  for (std::size_t i = 0; i < pools_.size(); ++i) {
    const WindowTotals::Pool& p = m.pools[i];
    if (p.steps == 0 || p.layer_a2a_s.empty()) continue;
    AllToAllReport a;
    a.role = to_string(pools_[i].spec.role);
    a.pool = static_cast<int>(i);
    a.steps = p.steps;
    a.first_moe_layer = s_.model.num_dense_layers;
    const double ms = 1e3 / static_cast<double>(p.steps);
    for (std::size_t k = 0; k + 1 < p.layer_a2a_s.size(); k += 2) {
      a.layer_dispatch_ms.push_back(p.layer_a2a_s[k] * ms);
      a.layer_combine_ms.push_back(p.layer_a2a_s[k + 1] * ms);
    }
    double collectives = 0;
    for (const double x : p.gpu_slowest) collectives += x;
    for (std::size_t g = 0; g + 1 < p.gpu_a2a_s.size(); g += 2) {
      a.gpu_dispatch_ms.push_back(p.gpu_a2a_s[g] * ms);
      a.gpu_combine_ms.push_back(p.gpu_a2a_s[g + 1] * ms);
      a.gpu_slowest_share.push_back(collectives > 0 ? p.gpu_slowest[g / 2] / collectives : 0.0);
    }
    r.all_to_all.push_back(std::move(a));
  }
}

// Within-run 95% intervals by batch means over the steady window's segments.
void Cluster::fill_intervals(Report& r, const WindowChoice& c) const {
  if (c.with_drain) return;
  // Batches long enough to be nearly independent: 20, or 10 when a lag-1 autocorrelation of 20 is above
  // kMaxLag1 (Law & Kelton 5th ed. 9.5.3); the lag-1 values stay in the report.
  for (const int batches : {kCiBatches, kCiBatches / 2}) {
    fill_intervals(r, c, batches);
    const double lag1 =
        std::max({r.ci_output_tokens_per_s.lag1, r.ci_ttft_over_share.lag1, r.ci_tpot_over_share.lag1});
    if (lag1 <= kMaxLag1) return;
  }
}

void Cluster::fill_intervals(Report& r, const WindowChoice& c, int batches) const {
  const std::vector<WindowTotals> b = batch_segments(metrics_.series(), c.first_segment, batches);
  if (b.size() < 2) return;
  const double batch_s =
      metrics_.series().width() *
      static_cast<double>((metrics_.series().full_segments() - c.first_segment) / b.size());
  r.sla_requests = r.sla_ttft_over = r.sla_tpot_requests = r.sla_tpot_over = 0;
  for (const WindowTotals& t : b) {
    r.sla_requests += t.finished;
    r.sla_ttft_over += t.ttft_over;
    r.sla_tpot_requests += t.tpot_counted;
    r.sla_tpot_over += t.tpot_over;
  }
  std::vector<double> tokens, ttft_over, tpot_over, finished, tpot_counted;
  for (const WindowTotals& t : b) {
    tokens.push_back(static_cast<double>(t.output_tokens) / batch_s);
    ttft_over.push_back(static_cast<double>(t.ttft_over));
    tpot_over.push_back(static_cast<double>(t.tpot_over));
    finished.push_back(static_cast<double>(t.finished));
    tpot_counted.push_back(static_cast<double>(t.tpot_counted));
  }
  r.ci_output_tokens_per_s = batch_means(tokens);
  r.ci_ttft_over_share = batch_ratio(ttft_over, finished);
  r.ci_tpot_over_share = batch_ratio(tpot_over, tpot_counted);
}

void Cluster::fill_experts(Report& r, const WindowTotals& m) const {
  const ExpertsSpec& x = s_.experts;
  const WorkloadSpec& w = s_.workload;
  if (!x.any() && !w.drift && !w.coactivation) return;
  ExpertLoopReport& e = r.experts;
  e = m.loop;
  e.gpu_load_imbalance_weighted = 1;
  e.enabled = true;
  static constexpr const char* kNames[] = {"contiguous", "round_robin", "coactivation", "eplb"};
  e.placement = kNames[static_cast<int>(x.placement)];
  e.redundant_experts = x.redundant_experts;
  e.slots_per_gpu = x.slots_per_gpu(s_.model.routed_experts, s_.deployment.expert_ranks());
  e.tiers = x.tiers.enabled;
  e.stall_share = m.step_s > 0 ? m.loop.stall_s / m.step_s : 0.0;
  e.rerouting = x.reroute_threshold > 0;
  e.rerouted_share =
      m.loop.rerouted_share > 0 ? static_cast<double>(m.loop.rerouted_pairs) / m.loop.rerouted_share : 0.0;
  e.admission = x.load_aware_admission;
  const double tokens = m.batch_tokens;
  e.gpu_load_imbalance_weighted = tokens > 0 ? m.loop.gpu_load_imbalance_weighted / tokens : 1.0;
  e.dispatch_bytes_per_token = tokens > 0 ? m.loop.dispatch_bytes_per_token / tokens : 0.0;
  e.drift = w.drift;
  e.coactivation = w.coactivation;
  e.coactivation_rho = w.coactivation ? w.coactivation_spec.rho : 0.0;
  for (const auto& rep : replicas_)
    e.drift_updates += static_cast<std::int64_t>(rep->planner().drift_updates());
  e.quantization = x.quantization;
  if (x.quantization) {
    QualityProxy all;
    for (std::size_t i = 0; i < kPrecisionCount; ++i) {
      const auto p = static_cast<Precision>(i);
      for (const auto& rep : replicas_) {
        const QualityProxy& q = rep->planner().quality();
        all.add(p, static_cast<std::int64_t>(std::llround(q.share(p) * static_cast<double>(q.total()))));
      }
    }
    for (std::size_t i = 0; i < kPrecisionCount; ++i) {
      const auto p = static_cast<Precision>(i);
      if (all.share(p) > 0) e.precision_share.emplace_back(std::string(to_string(p)), all.share(p));
    }
    e.quality_proxy = all.value(x.quant);
  }
}

void Cluster::fill_prefix(Report& r) const {
  if (!s_.deployment.prefix_caching) return;
  PrefixCacheStats all;
  for (const auto& rep : replicas_) {
    for (const AttentionGroup& g : rep->groups()) all += g.kv.prefix_stats();
  }
  PrefixCacheReport& p = r.prefix_cache;
  p.enabled = true;
  p.lookups = all.lookups;
  p.lookup_blocks = all.lookup_blocks;
  p.hit_blocks = all.hit_blocks;
  p.lookup_tokens = all.lookup_tokens;
  p.hit_tokens = all.hit_tokens;
  p.prefill_tokens_saved = all.saved_tokens;
  p.evicted_blocks = all.evicted_blocks;
  p.block_hit_rate = all.lookup_blocks > 0 ? double(all.hit_blocks) / double(all.lookup_blocks) : 0.0;
  p.token_hit_rate = all.lookup_tokens > 0 ? double(all.hit_tokens) / double(all.lookup_tokens) : 0.0;
}

// Per pool (disaggregation or several pools): utilisation, throughput and its own SLA figure; the TTFT
// split and the KV moved. Nothing for the single colocated pool (its figures are the report's).
void Cluster::fill_pools(Report& r, const WindowTotals& m) const {
  const double w = r.window_s;
  for (std::size_t i = 0; i < pools_.size() && s_.disaggregated(); ++i) {
    const ServingPool& p = pools_[i];
    const WindowTotals::Pool& c = m.pools[i];
    PoolReport pr;
    pr.role = to_string(p.spec.role);
    pr.instances = p.spec.instances;
    pr.gpus = p.spec.gpus();
    pr.first_gpu = p.spec.first_gpu;
    pr.ep_size = p.spec.deployment.ep_size;
    pr.steps = c.steps;
    pr.mean_step_s = c.steps > 0 ? c.step_s / static_cast<double>(c.steps) : 0.0;
    const auto first = static_cast<std::size_t>(metrics_.pool_first_slot[i]);
    const auto slots = static_cast<std::size_t>(metrics_.pool_slots[i]);
    for (std::size_t g = first; g < first + slots && w > 0; ++g)
      pr.busy += m.gpu_busy_s[g] / w / static_cast<double>(slots);
    pr.tokens_per_s = w > 0 ? c.tokens / w : 0.0;
    const bool decode = p.spec.role == PoolRole::kDecode;
    pr.sla_metric = decode ? "tpot" : "ttft";
    pr.sla_limit_s = decode ? s_.sla.tpot.seconds() : s_.sla.ttft.seconds();
    const LatencyHistogram& h = decode ? c.tpot : c.ttft;
    pr.sla_at_percentile_s = h.percentile(s_.sla.percentile);
    pr.sla_met = h.count() > 0 && pr.sla_at_percentile_s <= pr.sla_limit_s;
    pr.weights_bytes_per_gpu = p.memory.weights_per_gpu.total();
    pr.routed_expert_bytes_per_gpu = p.memory.weights_per_gpu.routed_experts;
    pr.activations_and_overhead_bytes = p.memory.activation_bytes + p.memory.overhead_bytes;
    pr.kv_pool_bytes_per_gpu = p.memory.kv_pool_bytes_per_gpu;
    std::int64_t peak = 0;
    for (int k = p.first_replica; k < p.first_replica + p.spec.instances; ++k) {
      for (const AttentionGroup& g : replicas_[static_cast<std::size_t>(k)]->groups())
        peak = std::max(peak, g.kv.peak_used_blocks());
    }
    pr.kv_peak_used_share =
        p.memory.kv_blocks_per_group > 0
            ? static_cast<double>(peak) / static_cast<double>(p.memory.kv_blocks_per_group)
            : 0.0;
    r.pools.push_back(pr);
  }
  DisaggregationReport& d = r.disaggregation;
  d.enabled = !decode_pools_.empty();
  if (d.enabled) {
    d.prefill_queue = stats_of(m.prefill_queue);
    d.prefill = stats_of(m.prefill);
    d.kv_transfer = stats_of(m.kv_transfer);
    d.decode_queue = stats_of(m.decode_queue);
    d.kv_transfers = metrics_.kv_transfers;
    d.kv_bytes = metrics_.kv_transfer_bytes;
    d.kv_transfer_s = metrics_.kv_transfer_s;
  }
  MigrationReport& mig = r.migration;
  for (const ServingPool& p : pools_) mig.enabled = mig.enabled || p.spec.deployment.kv_migration.enabled();
  mig.count = metrics_.migrations;
  mig.bytes = metrics_.migration_bytes;
  mig.seconds = metrics_.migration_s;
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
    o.loading += st == InstanceState::kLoading ? 1 : 0;
    o.draining += st == InstanceState::kDraining ? 1 : 0;
    if (st != InstanceState::kActive) continue;
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

// GPU-hours held against every pool's instances held all along, per million output tokens and in money.
void Cluster::fill_operations(Report& r) const {
  if (!ops_) return;
  OperationsReport& o = r.operations;
  o.enabled = true;
  o.interval_s = s_.autoscale.interval.seconds();
  static constexpr const char* kPredictors[] = {"last", "moving_average", "holt"};
  o.predictor = kPredictors[static_cast<int>(s_.autoscale.predictor.kind)];
  o.weights_from = to_string(s_.autoscale.weights_from);
  o.gpu_hours = ops_->gpu_seconds(sim_.now()) / 3600.0;
  o.gpu_hours_static = static_cast<double>(r.gpus) * sim_.now().seconds() / 3600.0;
  const double millions = static_cast<double>(metrics_.output_tokens) / 1e6;
  o.gpu_hours_per_million_output_tokens = millions > 0 ? o.gpu_hours / millions : 0.0;
  o.usd_per_million_output_tokens = o.gpu_hours_per_million_output_tokens * s_.autoscale.usd_per_gpu_hour;
  o.scale_ups = scale_ups_;
  o.scale_downs = scale_downs_;
  for (const ServingPool& p : pools_) {
    const int last = p.first_replica + p.spec.instances - 1;
    o.scale_up_s.push_back(instance_cost(last).total().seconds());
  }
  o.intervals = ops_rows_;
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
  nic_share_.assign(static_cast<std::size_t>(s_.cluster.nodes), 1.0);
  nic_until_.assign(nic_share_.size(), Time{});
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
  replicas_[static_cast<std::size_t>(replica)]->resume();
  on_loads_changed(replica);
  unpark();
}

// Node e.target's NIC keeps e.bandwidth_factor of its bandwidth until e.at + e.duration.
void Cluster::degrade_nic(const FaultEvent& e) {
  const auto node = static_cast<std::size_t>(e.target);
  const Time until = sim_.now() + e.duration;
  nic_share_[node] =
      sim_.now() < nic_until_[node] ? std::min(nic_share_[node], e.bandwidth_factor) : e.bandwidth_factor;
  nic_until_[node] = std::max(nic_until_[node], until);
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
  return build_report();
}

}  // namespace

std::vector<MemoryPlan> deployed_memory_plans(const ScenarioSpec& s, const GpuCostModel& gpu) {
  std::vector<MemoryPlan> out;
  const RandomStreams streams(s.run.seed);
  std::unique_ptr<ServingModels> models;
  if (s.experts.quantization) models = std::make_unique<ServingModels>(s, streams);
  int first_replica = 0;
  for (const PoolSpec& p : s.pool_specs()) {
    std::unique_ptr<ScenarioSpec> own;
    if (s.disaggregated()) own = std::make_unique<ScenarioSpec>(s.pool_view(p));
    const ScenarioSpec& view = own ? *own : s;
    if (!models || p.instances == 0) {
      out.push_back(plan_memory(view));
    } else {
      // As a run wires the pool's first instance.
      const auto planner = models->make_planner(
          view, gpu, streams.stream("routing", static_cast<std::uint64_t>(first_replica)));
      out.push_back(plan_memory(view, planner->routed_expert_bytes_per_gpu()));
    }
    first_replica += p.instances;
  }
  return out;
}

MemoryPlan deployed_memory_plan(const ScenarioSpec& s, const GpuCostModel& gpu) {
  const std::vector<MemoryPlan> plans = deployed_memory_plans(s, gpu);
  for (const MemoryPlan& m : plans) {
    if (!m.fits()) return m;
  }
  return plans.front();
}

void check_pool_fits(const ScenarioSpec& s, std::size_t pool, const MemoryPlan& m) {
  if (!s.disaggregated()) {
    check_fits(s, m);
    return;
  }
  try {
    check_fits(s.pool_view(s.pools[pool]), m);
  } catch (const InputError& e) {
    throw InputError("deployment.pools[" + std::to_string(pool) + "]", e.what());
  }
}

void check_deployment_fits(const ScenarioSpec& s, const GpuCostModel& gpu) {
  const std::vector<MemoryPlan> plans = deployed_memory_plans(s, gpu);
  for (std::size_t i = 0; i < plans.size(); ++i) check_pool_fits(s, i, plans[i]);
}

Report simulate(const ScenarioSpec& s, const GpuCostModel& gpu, SimulationObserver* observer, int threads) {
  Cluster cluster(s, gpu, observer, threads);
  return cluster.run();
}

}  // namespace moesim
