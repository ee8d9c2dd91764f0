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

std::unique_ptr<StepPlanner> ServingModels::make_planner(const GpuCostModel& gpu, Rng routing) const {
  return make_planner(s_, gpu, routing);
}

std::unique_ptr<StepPlanner> ServingModels::make_planner(const ScenarioSpec& pool_view,
                                                         const GpuCostModel& gpu, Rng routing) const {
  auto planner = std::make_unique<StepPlanner>(pool_view, gpu, fabric_, popularity_, routing, drift_.get(),
                                               coactivation_.get());
  if (planner->routing_shareable()) {
    auto [it, fresh] = routing_tables_.try_emplace(&pool_view, planner->routing_tables());
    if (!fresh) planner->share_routing(it->second);
  }
  auto [memo, fresh] = grouped_memos_.try_emplace({&pool_view, &gpu}, planner->grouped_memo());
  if (!fresh) planner->share_grouped_memo(memo->second);
  return planner;
}

}  // namespace moesim
