// One pool of identical serving instances as the cluster wires it (ScenarioSpec::pool_specs): what the
// cluster routes over and what the report builder reads per pool.
#pragma once

#include <memory>

#include "sim/serving/runtime/batch_policy.h"
#include "sim/serving/runtime/router.h"
#include "sim/serving/spec/memory_plan.h"
#include "sim/serving/spec/scenario_spec.h"

namespace moesim {

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

}  // namespace moesim
