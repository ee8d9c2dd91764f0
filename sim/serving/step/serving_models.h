// The composition root of what every replica's step planner reads: the fabric, the expert popularity
// (with its drift and co-activation groups when the scenario has them). Built in one place for `run`,
// `plan` and the tests, so a planner is never wired without a part that the scenario asks for.
#pragma once

#include <map>
#include <memory>

#include "hwmodels/fabric.h"
#include "hwmodels/gpu_cost_model.h"
#include "sim/engine/random.h"
#include "sim/serving/experts/expert_loop.h"
#include "sim/serving/spec/scenario_spec.h"
#include "sim/serving/step/step_planner.h"
#include "workloads/coactivation.h"
#include "workloads/expert_popularity.h"
#include "workloads/popularity_drift.h"

namespace moesim {

// A step planner and the expert loop it follows, owned together, for a caller that costs steps without a
// replica (`moesim plan`, the deployment search, tests): plan() runs the loop's step boundary around the
// planner's two halves in the order a replica does (Replica::on_decide, on_planned).
struct StandalonePlanner {
  std::unique_ptr<ExpertLoop> loop;  // null when every experts-in-the-loop mechanism is off
  std::unique_ptr<StepPlanner> planner;

  const StepPlan& plan(std::span<const GroupBatch> groups, Time now);
  StepPlanner& operator*() const { return *planner; }
  StepPlanner* operator->() const { return planner.get(); }
};

class ServingModels {
 public:
  // Draws from the streams "popularity", "drift" and "coactivation".
  ServingModels(const ScenarioSpec& s, const RandomStreams& streams);
  ServingModels(const ServingModels&) = delete;
  ServingModels& operator=(const ServingModels&) = delete;

  [[nodiscard]] const Fabric& fabric() const { return fabric_; }
  [[nodiscard]] const ExpertPopularity& popularity() const { return popularity_; }
  [[nodiscard]] const DriftingPopularity* drift() const { return drift_.get(); }
  [[nodiscard]] const CoactivationModel* coactivation() const { return coactivation_.get(); }
  // Whether step plans of different replicas may be computed at the same time on different threads: only
  // when nothing they read moves during the run (a drifting popularity is advanced by the event loop).
  [[nodiscard]] bool plans_may_run_apart() const { return drift_ == nullptr; }
  // Moves the drifting popularity (if any) to `now`; never backwards.
  void advance_to(Time now) {
    if (drift_) drift_->advance_to(now.seconds());
  }

  // The expert loop of an instance of `view`'s deployment (ScenarioSpec::pool_view for a pool; it must
  // outlive the loop); null when every experts-in-the-loop mechanism is off.
  [[nodiscard]] std::unique_ptr<ExpertLoop> make_expert_loop(const ScenarioSpec& view) const;
  // The step planner of an instance of `view`'s deployment, wired with every part the scenario names and
  // following `loop` (make_expert_loop's, owned by the caller and outliving the planner).
  [[nodiscard]] std::unique_ptr<StepPlanner> make_planner(const ScenarioSpec& view, const GpuCostModel& gpu,
                                                          Rng routing, ExpertLoop* loop) const;
  // A planner with its own expert loop, for a caller that costs steps without a replica.
  [[nodiscard]] StandalonePlanner make_standalone(const GpuCostModel& gpu, Rng routing) const;
  [[nodiscard]] StandalonePlanner make_standalone(const ScenarioSpec& view, const GpuCostModel& gpu,
                                                  Rng routing) const;

 private:
  const ScenarioSpec& s_;
  Fabric fabric_;
  ExpertPopularity popularity_;
  std::unique_ptr<DriftingPopularity> drift_;
  std::unique_ptr<CoactivationModel> coactivation_;
  // Routing tables per scenario view (a pool), shared by its replicas' planners (StepPlanner's `routing`).
  mutable std::map<const ScenarioSpec*, std::shared_ptr<StepPlanner::RoutingTables>> routing_tables_;
  // Grouped-launch and token-count memos per scenario view and cost model, shared the same way
  // (StepPlanner::GroupedMemo, StepPlanner::TokenMemo).
  struct PoolMemos {
    std::shared_ptr<StepPlanner::GroupedMemo> grouped;
    std::shared_ptr<StepPlanner::TokenMemo> tokens;
  };
  mutable std::map<std::pair<const ScenarioSpec*, const GpuCostModel*>, PoolMemos> pool_memos_;
};

}  // namespace moesim
