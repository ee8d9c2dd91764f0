// A replica (ARCHITECTURE.md "The serving runtime"): one serving instance, the entity that runs
// continuous-batching iterations. It owns its attention groups (queues and KV-cache managers), its step
// planner and with it the expert-loop state, and it alone hands the current time to what it owns.
#pragma once

#include <cstdint>
#include <memory>
#include <vector>

#include "sim/engine/simulator.h"
#include "sim/serving/attention_group.h"
#include "sim/serving/batch_policy.h"
#include "sim/serving/metrics_recorder.h"
#include "sim/serving/serving_models.h"
#include "sim/serving/step_planner.h"

namespace moesim {

// What a replica tells the rest of the cluster.
class ReplicaHost {
 public:
  virtual ~ReplicaHost() = default;
  virtual void on_request_finished(Time now) = 0;  // a request left the replica (frees a closed-loop user)
  virtual void on_step_done() = 0;                 // after the replica has scheduled its next decision
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
  const RandomStreams& streams;  // the replica draws accepted drafts from stream ("speculative", index)
};

// Speculative decoding figures of a replica: decode sequence-steps and the tokens they emitted.
struct SpeculativeCounts {
  std::int64_t sequence_steps = 0;
  std::int64_t tokens = 0;
};

class Replica {
 public:
  // `kv_blocks_per_group` blocks for each of the deployment's attention groups.
  Replica(int index, ReplicaContext ctx, std::unique_ptr<StepPlanner> planner,
          std::int64_t kv_blocks_per_group);

  // Queues request `idx` on group `group` and wakes the replica.
  void enqueue(int group, RequestIdx idx);

  [[nodiscard]] int index() const { return index_; }
  [[nodiscard]] const std::vector<AttentionGroup>& groups() const { return groups_; }
  [[nodiscard]] const StepPlanner& planner() const { return *planner_; }
  [[nodiscard]] const SpeculativeCounts& speculative_counts() const { return speculative_; }

 private:
  void wake();
  void on_decide();
  void on_step_done();
  void emit_token(Request& r, Time now);
  void finish(RequestIdx idx, Time now);

  int index_;
  ReplicaContext ctx_;
  std::unique_ptr<StepPlanner> planner_;
  std::vector<AttentionGroup> groups_;
  std::vector<GroupBatch> batches_;
  std::vector<ScheduledWork> scheduled_;
  Rng accept_rng_;
  SpeculativeCounts speculative_;
  bool busy_ = false;
  bool decide_pending_ = false;
};

}  // namespace moesim
