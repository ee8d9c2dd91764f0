// A replica (docs/architecture.md "The runtime"): one serving instance, the entity that runs
// continuous-batching iterations. It owns its attention groups (queues and KV-cache managers), its expert
// loop (when a mechanism is on) and its step planner, and it alone hands the current time to what it owns:
// it runs the expert loop's step boundary around each step's plan.
#pragma once

#include <cstdint>
#include <memory>
#include <span>
#include <vector>

#include "sim/engine/simulator.h"
#include "sim/engine/worker_pool.h"
#include "sim/serving/runtime/attention_group.h"
#include "sim/serving/runtime/batch_policy.h"
#include "sim/serving/runtime/metrics_recorder.h"
#include "sim/serving/step/serving_models.h"
#include "sim/serving/step/step_planner.h"

namespace moesim {

// What a replica tells the rest of the cluster.
class ReplicaHost {
 public:
  virtual ~ReplicaHost() = default;
  // Request `r` finished at `now` and leaves the replica (frees a closed-loop user).
  virtual void on_request_finished(const Request& r, Time now) = 0;
  virtual void on_step_done() = 0;  // after the replica has scheduled its next decision
  // A prefill instance sampled `idx`'s first token and let go of it (its KV blocks are freed): the host
  // moves its KV cache to a decode instance.
  virtual void on_prefilled(RequestIdx idx, Time now) = 0;
  // `idx` left the replica to migrate with its KV cache (KV blocks freed).
  virtual void on_migrated_out(RequestIdx idx, Time now) = 0;
  // `idx` left the replica because its attention rank or the instance failed (its KV blocks are freed):
  // the host recomputes it elsewhere or counts it failed.
  virtual void on_evicted(RequestIdx idx, Time now) { (void)idx, (void)now; }
  // Replica `replica`'s groups' queues, running sets or KV blocks may have changed (what routers read).
  virtual void on_loads_changed(int replica) { (void)replica; }
  // KV-cache transfers on the NIC paths of GPUs [first_gpu, first_gpu + out.size()) during [now, now +
  // horizon): the fraction of that window each GPU's outgoing and incoming NIC path carries one. False when
  // none does (then `out` and `in` are untouched).
  virtual bool kv_on_nics(int first_gpu, Time now, Duration horizon, std::span<double> out,
                          std::span<double> in) {
    (void)first_gpu, (void)now, (void)horizon, (void)out, (void)in;
    return false;
  }
};

// What a replica needs from the run: the engine, the request table, the shared models, the batch policy
// and the recorder. All outlive the replica.
struct ReplicaContext {
  const ScenarioSpec& s;
  Simulator& sim;
  RequestTable& requests;
  ServingModels& models;
  BatchPolicy& policy;
  MetricsRecorder& metrics;
  ReplicaHost& host;
  const RandomStreams& streams;     // the replica draws accepted drafts from stream ("speculative", index)
  PoolRole role = PoolRole::kBoth;  // of the replica's pool; `s.deployment` is that pool's
  int pool = 0;
  // Where the expensive half of each step plan runs; null: at once, on the event loop's thread. Only
  // when nothing the plan reads changes under it (ServingModels::plans_may_run_apart).
  WorkerPool* plans = nullptr;
};

// Speculative decoding figures of a replica: decode sequence-steps and the tokens they emitted.
struct SpeculativeCounts {
  std::int64_t sequence_steps = 0;
  std::int64_t tokens = 0;
};

class Replica {
 public:
  // `kv_blocks_per_group` blocks for each of the deployment's attention groups. `loop`: its expert loop
  // (ServingModels::make_expert_loop of `ctx.s`; null when every mechanism is off), which it owns: built by
  // the caller, whose memory plan reads the first instance's placement before the replicas exist. Its step
  // planner is built from `ctx.models` on `gpu` (which outlives the replica) and follows `loop`; routing is
  // drawn from `routing`. `first_gpu`: of the cluster (fabric paths of KV transfers).
  Replica(int index, ReplicaContext ctx, std::unique_ptr<ExpertLoop> loop, const GpuCostModel& gpu,
          Rng routing, std::int64_t kv_blocks_per_group, int first_gpu = 0);

  // Queues request `idx` on group `group` and wakes the replica; `front`: ahead of the queue (a migrated
  // request that was already running).
  void enqueue(int group, RequestIdx idx, bool front = false);
  // Asks up to `n` running decode requests (the newest) to leave for migration: now if the replica is idle,
  // else when its step ends; each goes to ReplicaHost::on_migrated_out.
  void request_migration(int n);

  // A failure: every request of group `group` (-1: of every group) leaves for ReplicaHost::on_evicted, now
  // if the replica is idle, else when the step in flight ends (its tokens are the last it delivers).
  void evict(int group);
  // A failure its redundant copies cover: the expert-parallel ranks flagged in `lost` (one flag per rank)
  // hold no copy from its next step on (ExpertLoop::set_lost_ranks, which the planner follows); no flag
  // set: the whole placement returns. Waits for a plan being computed first.
  void set_lost_ranks(std::span<const char> lost);
  // A stopped instance runs no step until resume() (a step in flight still ends).
  void halt() { halted_ = true; }
  void resume() {
    halted_ = false;
    wake();
  }
  [[nodiscard]] bool halted() const { return halted_; }

  [[nodiscard]] bool migration_pending() const { return migrate_ > 0; }
  [[nodiscard]] int first_gpu() const { return first_gpu_; }
  [[nodiscard]] int pool() const { return ctx_.pool; }
  [[nodiscard]] std::int64_t running() const;
  [[nodiscard]] std::int64_t in_system() const;  // running + waiting
  [[nodiscard]] int index() const { return index_; }
  [[nodiscard]] const std::vector<AttentionGroup>& groups() const { return groups_; }
  [[nodiscard]] const StepPlanner& planner() const { return *planner_; }
  // Null when every experts-in-the-loop mechanism is off.
  [[nodiscard]] const ExpertLoop* expert_loop() const { return loop_.get(); }
  [[nodiscard]] const SpeculativeCounts& speculative_counts() const { return speculative_; }
  // The share of its last step that the All-to-All kept a GPU's NIC path busy (the mean GPU's), which a KV
  // transfer through that NIC shares; 0 while the replica is idle with nothing to run (no step is coming).
  [[nodiscard]] double nic_busy_share() const { return busy_ || in_system() > 0 ? nic_busy_share_ : 0.0; }
  // Waits for a step plan still being computed (before reading the planner at the end of a run).
  void settle();

 private:
  void wake();
  void on_decide();
  void on_planned();
  void on_step_done();
  void emit_token(Request& r, Time now);
  void finish(RequestIdx idx, Time now);
  void migrate_out(Time now);
  void evict_now(Time now);
  void attach_prefill_chunks();
  // Under an executor that schedules a step ahead (fetches_at_step_start): which queued requests its
  // next batch may admit (AttentionGroup::unfetched_since).
  void fetch_all_if_idle();
  void fetch_queued_before(Time start);

  int index_;
  ReplicaContext ctx_;
  std::unique_ptr<ExpertLoop> loop_;  // before the planner, which follows it
  std::unique_ptr<StepPlanner> planner_;
  std::vector<AttentionGroup> groups_;
  std::vector<GroupBatch> batches_;
  std::vector<ScheduledWork> scheduled_;
  // Under two-batch overlap: the step's prefill chunks that batches_ point to (GroupBatch::prefill_chunks),
  // and how many of them each group has.
  std::vector<std::size_t> group_chunks_;
  std::vector<PrefillChunk> prefill_chunks_;
  AdpBalanceCounters adp_;  // the batch policy's instance-wide decision's state
  Rng accept_rng_;
  WorkerPool::Job plan_job_;
  bool plan_in_flight_ = false;
  StepRecord step_;  // the step being planned: what on_step receives
  Time step_start_;
  SpeculativeCounts speculative_;
  bool busy_ = false;
  bool decide_pending_ = false;
  int first_gpu_;
  int migrate_ = 0;          // requests asked to leave at the next step boundary
  std::vector<char> evict_;  // per group: its requests leave at the next step boundary
  bool halted_ = false;
  std::vector<RequestIdx> handoff_;  // prefilled in the last step, for the host
  double nic_busy_share_ = 0;
  std::vector<double> kv_out_, kv_in_;  // KV transfers' share of each GPU's NIC path in this step
};

}  // namespace moesim
