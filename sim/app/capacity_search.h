// Capacity at SLA: the highest Poisson/gamma arrival rate (workload.arrival.rate_per_s) at which a scenario
// still meets its SLA, found by bracketing and bisection on the rate. Each probe is a full simulation with
// the scenario's run section: arrivals over run.duration_s (required), measured after run.warmup_s.
#pragma once

#include <functional>
#include <optional>

#include "sim/serving/report.h"
#include "sim/serving/scenario_spec.h"

namespace moesim {

class GpuCostModel;

struct CapacitySearchSettings {
  double rel_tol = 0.02;  // stop when the bracket (holds, fails) is narrower than rel_tol x holds
  int max_probes = 60;
  double max_factor = 1e6;  // give up expanding (or shrinking) the bracket this far from the start rate
};

// The bracket a search ends with: the SLA holds at holds_req_s and fails at fails_req_s (both probed).
// holds_req_s is the reported capacity (the highest probed rate that holds, so never optimistic).
struct CapacityBracket {
  double holds_req_s = 0;
  double fails_req_s = 0;
  int probes = 0;
};

// Bracket then bisect: starting at `start_req_s` > 0, double until `holds` fails (or halve until it holds),
// then bisect the bracket. Assumes holds(rate) is true below some rate and false above it. Throws
// InputError when the SLA holds even at start x max_factor or fails even at start / max_factor.
CapacityBracket find_capacity(double start_req_s, const std::function<bool(double)>& holds,
                              const CapacitySearchSettings& settings);

// The arrival rate of a scenario's workload; InputError naming workload.arrival when it is not an open
// (Poisson or gamma) arrival process or the scenario replays a trace.
double arrival_rate_per_s(const ScenarioSpec& spec);
ScenarioSpec with_arrival_rate(ScenarioSpec spec, double rate_per_s);

// The SLA holds for a run when its percentile latencies are within the limits (Report::sla_met) and every
// request was served: none dropped and some measured.
bool sla_holds(const Report& r);

struct CapacityResult {
  CapacityBracket bracket;
  Report at_capacity;  // the run at bracket.holds_req_s
};
CapacityResult capacity_at_sla(const ScenarioSpec& spec, const GpuCostModel& gpu,
                               const CapacitySearchSettings& settings);

}  // namespace moesim
