#include "sim/serving/step/serving_models.h"

namespace moesim {

ServingModels::ServingModels(const ScenarioSpec& s, const RandomStreams& streams)
    : s_(s),
      fabric_(s.cluster.fabric),
      popularity_(s.workload.popularity, s.model.moe_layers(), s.model.routed_experts, s.model.top_k,
                  streams.stream("popularity")) {
  if (s.workload.drift) {
    drift_ =
        std::make_unique<DriftingPopularity>(popularity_, s.workload.drift_spec, streams.stream("drift"));
  }
  if (s.workload.coactivation) {
    coactivation_ =
        std::make_unique<CoactivationModel>(s.workload.coactivation_spec, s.model.moe_layers(),
                                            s.model.routed_experts, streams.stream("coactivation"));
  }
}

const StepPlan& StandalonePlanner::plan(std::span<const GroupBatch> groups, Time now) {
  if (!loop) return planner->plan(groups, now);
  (void)planner->begin_plan(groups, now);
  planner->add_loop_events(loop->begin_step());
  const StepPlan& p = planner->finish_plan();
  if (p.tokens > 0) planner->add_loop_events(loop->end_step(now + p.total, p.gpu_imbalance));
  return p;
}

std::unique_ptr<ExpertLoop> ServingModels::make_expert_loop(const ScenarioSpec& view) const {
  if (!view.experts.any()) return nullptr;
  const DriftingPopularity* drift = drift_.get();
  const ExpertPopularity* popularity = &popularity_;
  return std::make_unique<ExpertLoop>(
      view, fabric_,
      [drift, popularity](int l) { return drift != nullptr ? drift->layer(l) : popularity->layer(l); },
      coactivation_.get());
}

StandalonePlanner ServingModels::make_standalone(const GpuCostModel& gpu, Rng routing) const {
  return make_standalone(s_, gpu, routing);
}

StandalonePlanner ServingModels::make_standalone(const ScenarioSpec& view, const GpuCostModel& gpu,
                                                 Rng routing) const {
  StandalonePlanner out;
  out.loop = make_expert_loop(view);
  out.planner = make_planner(view, gpu, routing, out.loop.get());
  return out;
}

std::unique_ptr<StepPlanner> ServingModels::make_planner(const ScenarioSpec& pool_view,
                                                         const GpuCostModel& gpu, Rng routing,
                                                         ExpertLoop* loop) const {
  // The pool's first planner prepares the routing tables; the others of the pool take them (neither
  // prepared nor binned again: most of a planner's construction).
  std::shared_ptr<StepPlanner::RoutingTables> tables;
  const bool shareable = loop == nullptr && drift_ == nullptr && coactivation_ == nullptr;
  if (const auto it = routing_tables_.find(&pool_view); shareable && it != routing_tables_.end())
    tables = it->second;
  auto planner = std::make_unique<StepPlanner>(pool_view, gpu, fabric_, popularity_, routing, drift_.get(),
                                               coactivation_.get(), loop, tables);
  if (shareable && !tables) routing_tables_.emplace(&pool_view, planner->routing_tables());
  auto [memo, fresh] =
      pool_memos_.try_emplace({&pool_view, &gpu}, PoolMemos{planner->grouped_memo(), planner->token_memo()});
  if (!fresh) {
    planner->share_grouped_memo(memo->second.grouped);
    planner->share_token_memo(memo->second.tokens);
  }
  return planner;
}

}  // namespace moesim
