// The serving runtime's cluster (docs/architecture.md "The serving runtime"): the replicas in pools, the
// request source and the routers, wired from a scenario. Arrivals are pulled lazily and routed to an
// attention group of an entry pool; under prefill/decode disaggregation prefilled requests move with their
// KV cache to a decode pool (kv_transfer.h); KV migration (kv_migration.h), the autoscaling planner's
// instance lifecycle and failures (cluster_operations.cpp) act on the replicas; at the end the report
// builder (report_builder.h) reads what the run recorded.
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <span>
#include <utility>
#include <vector>

#include "hwmodels/gpu_cost_model.h"
#include "sim/engine/random.h"
#include "sim/engine/simulator.h"
#include "sim/engine/worker_pool.h"
#include "sim/serving/features/kv_transfer.h"
#include "sim/serving/report/report.h"
#include "sim/serving/runtime/autoscaler.h"
#include "sim/serving/runtime/faults.h"
#include "sim/serving/runtime/kv_migration.h"
#include "sim/serving/runtime/metrics_recorder.h"
#include "sim/serving/runtime/operations.h"
#include "sim/serving/runtime/prefix_cache.h"
#include "sim/serving/runtime/replica.h"
#include "sim/serving/runtime/request.h"
#include "sim/serving/runtime/router.h"
#include "sim/serving/runtime/serving_pool.h"
#include "sim/serving/runtime/serving_simulation.h"
#include "sim/serving/step/serving_models.h"
#include "workloads/request_source.h"

namespace moesim {

// The host of the replicas: it owns the engine, the request table, the recorder and the replicas, routes
// what arrives and what they hand back (prefilled, migrating, evicted requests), and runs the planner and
// the failures. One per run; a test may build one on a scenario and drive it by hand.
class Cluster final : public ReplicaHost {
 public:
  // Wires the pools, replicas, routers and request source of `s`; throws InputError if a pool does not fit.
  // `threads` > 1 computes the step plans of different replicas on that many threads.
  Cluster(const ScenarioSpec& s, const GpuCostModel& gpu, SimulationObserver* observer, int threads);
  // Runs the scenario to its end and builds the report; once.
  Report run();

  // An arrival now: it is routed to an entry group and queued there, dropped, or parked (failures); the
  // next arrival is pulled. The event loop calls it at each arrival's time; a test may call it directly.
  void on_arrival(const RequestSpec& spec);

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

  // What a test reads (and may change through the replicas: requests queued by hand).
  [[nodiscard]] Simulator& sim() { return sim_; }
  [[nodiscard]] RequestTable& requests() { return requests_; }
  [[nodiscard]] const MetricsRecorder& metrics() const { return metrics_; }
  [[nodiscard]] const std::vector<ServingPool>& pools() const { return pools_; }
  [[nodiscard]] const std::vector<std::unique_ptr<Replica>>& replicas() const { return replicas_; }
  [[nodiscard]] const KvLinks& kv_links() const { return kv_links_; }

 private:
  void add_pool(const PoolSpec& p, const GpuCostModel& gpu);
  void pull_arrival();
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
  // KV migration in decode pool `pool` (kv_migration.h decides, the replicas carry it out); then the next
  // check.
  void check_migration(int pool);
  void end_of_arrivals();
  // The report from what the run recorded (report_builder.h).
  [[nodiscard]] Report make_report() const;
  // Prefix caching: the chained hashes of `spec`'s full prompt KV blocks of `block_tokens` into `out`.
  // The chained hashes of spec's full KV blocks into `out`: its prompt's, then its answer's when the
  // workload keys answers (conversations), which the cache names as decode computes them (vLLM V1 caches
  // generated tokens' full blocks, SGLang inserts a finished request's tokens into its radix tree), so a
  // next turn hits on the previous answer. Returns how many are the prompt's.
  std::size_t prompt_hashes(const RequestSpec& spec, std::int64_t block_tokens, std::vector<BlockHash>& out);
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
  std::vector<std::int64_t> kv_inflight_;  // per decode group (flat over decode_pools_): KV on the way
  KvLinks kv_links_;                       // the KV sends on each GPU's link and NIC paths
  std::vector<int> migration_to_;          // per replica: where its migrating requests go (-1: none)
  // Scratch: a pool's instances as the migration policy sees them.
  std::vector<MigrationLoad> migration_view_;
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
  // Failures: the tracker and schedule (null without faults), the next failure's event (degraded NICs are
  // kv_links_'), requests waiting for an instance to take them (entry, or prefilled waiting for a decode
  // instance), and the instances degraded since when (spans closed at the end).
  std::unique_ptr<FaultTracker> faults_;
  std::unique_ptr<FaultSchedule> fault_schedule_;
  EventId fault_tick_;
  std::vector<RequestIdx> parked_entry_, parked_decode_;
  std::vector<std::pair<int, Time>> degraded_since_;
  // Declared last: destroyed first, so its workers are gone before the planners their jobs touch.
  std::unique_ptr<WorkerPool> plans_;
};

}  // namespace moesim
