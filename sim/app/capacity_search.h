// Capacity at SLA: the highest Poisson/gamma arrival rate (workload.arrival.rate_per_s) at which a scenario
// still meets its SLA, found by bracketing and bisection on the rate. A probe is a stochastic experiment:
// it runs the scenario (arrivals over run.duration_s, required) and decides from the batch-means intervals
// of the shares of requests over the SLA's limits whether the SLA holds or fails with 95% confidence; an
// undecided probe runs again twice as long, up to a cap, and stays undecided there (said so). The result
// is an interval: the highest rate that meets the SLA with confidence and the lowest that fails.
#pragma once

#include <functional>
#include <optional>
#include <string>
#include <vector>

#include "sim/serving/report/report.h"
#include "sim/serving/spec/scenario_spec.h"

namespace moesim {

class GpuCostModel;

struct CapacitySearchSettings {
  double rel_tol = 0.02;  // stop when the bracket (holds, fails) is narrower than rel_tol x holds
  int max_probes = 60;
  double max_factor = 1e6;      // give up expanding (or shrinking) the bracket this far from the start rate
  double max_probe_factor = 8;  // an undecided probe doubles its run.duration_s up to this factor
};

enum class SlaVerdict { kMeets, kFails, kUndecided };

// The bracket a search ends with: the SLA holds at holds_req_s and fails at fails_req_s (both probed and
// decided). holds_req_s is the reported capacity (the highest rate that meets the SLA with confidence, so
// never optimistic). Rates between them whose probes stayed undecided at the length cap: `undecided`
// (the SLA metric sits at its limit there; the capacity lies somewhere in [holds, fails]).
struct CapacityBracket {
  double holds_req_s = 0;
  double fails_req_s = 0;
  int probes = 0;
  std::vector<double> undecided;
};

// Bracket then bisect: starting at `start_req_s` > 0, double until `holds` fails (or halve until it holds),
// then bisect the bracket. Assumes holds(rate) is true below some rate and false above it. Throws
// InputError when the SLA holds even at start x max_factor or fails even at start / max_factor.
CapacityBracket find_capacity(double start_req_s, const std::function<bool(double)>& holds,
                              const CapacitySearchSettings& settings);
// The same with three outcomes: bisection narrows [highest meets, lowest fails or undecided]; an
// undecided rate never becomes a bound of the reported interval. Assumes meets below some rate, fails
// above a higher one, undecided only between.
CapacityBracket find_capacity(double start_req_s, const std::function<SlaVerdict(double)>& verdict,
                              const CapacitySearchSettings& settings);

// The arrival rate of a scenario's workload; InputError naming workload.arrival when it is not an open
// (Poisson or gamma) arrival process or the scenario replays a trace.
double arrival_rate_per_s(const ScenarioSpec& spec);
ScenarioSpec with_arrival_rate(ScenarioSpec spec, double rate_per_s);

// The SLA holds for a run when its percentile latencies are within the limits (Report::sla_met) and every
// request was served: none dropped and some measured.
bool sla_holds(const Report& r);
// The SLA at percentile p holds when at most a share 1 - p/100 of the requests is over each limit. Meets:
// neither share's 95% interval reaches above that share, and sla_holds; fails: a share's interval lies
// wholly above it, or a request was dropped, or the run is overloaded past its transient; undecided
// otherwise, and whenever the number in system did not settle in the first half of the arrivals
// (Report::mser_at_bound: too short to tell a transient from overload). A share's
// interval is the wider of its batch means (Report::ci_ttft_over_share, ci_tpot_over_share) and the exact
// binomial one of its counts. A run without intervals (a burst) is decided by sla_holds.
SlaVerdict sla_verdict(const Report& r);

struct CapacityResult {
  CapacityBracket bracket;
  Report at_capacity;  // the run at bracket.holds_req_s
  // "Limited by" from the probes: the constraint that fails first as the load grows, read from the
  // lowest failing probe ("ttft", "tpot", "overload", "drops").
  std::string limited_by;
  std::string limited_why;
};
CapacityResult capacity_at_sla(const ScenarioSpec& spec, const GpuCostModel& gpu,
                               const CapacitySearchSettings& settings);

}  // namespace moesim
