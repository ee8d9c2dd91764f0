// Capacity at SLA: the highest Poisson/gamma arrival rate (workload.arrival.rate_per_s) at which a scenario
// still meets its SLA, found by bracketing and bisection on the rate. A probe is a stochastic experiment
// decided by independent replications (Law & Kelton's replication/deletion approach): runs of the scenario
// (arrivals over run.duration_s, required) with their own seeds, each measured over its steady window. A
// share over an SLA limit is far from normal within one run (its tail events follow rare long prompts, so
// the batch means of one run understate its spread several times); across replications it is estimated
// from what varies between runs. A probe meets when a new run of its length would meet the SLA with 95%
// probability (Student-t prediction bound), fails when the long-run share is over the SLA's with 95%
// confidence, and is undecided otherwise: it doubles its replications, up to a cap. The result is an
// interval: the highest rate that meets and the lowest that fails; the long-run capacity lies between.
#pragma once

#include <cstdint>
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
  double max_factor = 1e6;  // give up expanding (or shrinking) the bracket this far from the start rate
  // A probe whose runs have not left their transient (Report::mser_at_bound), or that stays undecided on
  // runs too short for their percentile (fewer than kMinTailRequests requests above it per run), doubles
  // run.duration_s up to this factor.
  double max_probe_factor = 8;
  int replications = 4;      // independent runs a probe starts with (at least 2)
  int max_replications = 8;  // an undecided probe doubles its runs up to this
  // Bisect the upper end (the lowest rate that fails) to rel_tol too; otherwise it is the lowest rate seen
  // failing while the lower end was narrowed (cheaper where only the capacity itself is wanted).
  bool narrow_fails = true;
  int threads = 1;  // a probe's replications run on this many threads (the result is the same for any)
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

// The SLA holds for one run when its percentile latencies are within the limits (Report::sla_met), every
// request was served (none dropped, some measured) and it was not overloaded.
bool sla_holds(const Report& r);
// The seed of a probe's k-th replication: the scenario's run.seed for k = 0 (the run a capacity reports is
// the user's seed), then splitmix64 outputs (53 bits, so JSON readers keep them exact). Every probe uses the
// same seeds: common random numbers across rates (Law & Kelton 11.2), so the verdicts of nearby rates differ
// by the load, not by the draw.
std::uint64_t replication_seed(std::uint64_t seed, int k);

// A share over an SLA limit estimated from n replications: the mean of their shares, the lower end of its
// 95% interval (the long-run share is at least this) and the upper 95% prediction bound of one new run's
// share (Student t with n - 1 degrees of freedom, mean + t s sqrt(1 + 1/n)); both also bounded by the exact
// binomial interval of the pooled counts (the wider of the two: a few requests decide nothing).
struct ShareEstimate {
  double mean = 0;
  double mean_lo = 0;
  double run_hi = 1;
};

// What a probe's replications say: the TTFT and TPOT shares over their limits, the share the SLA allows
// (1 - percentile / 100), and the runs that dropped requests, were overloaded past their transient (the
// number in system grew through the window) or had not left the transient (Report::mser_at_bound).
struct ProbeStats {
  int runs = 0;
  double allowed_share = 0;
  ShareEstimate ttft;
  ShareEstimate tpot;
  int dropped = 0;
  int overloaded = 0;
  int transient = 0;
  double requests_per_run = 0;  // measured (the TTFT share's population), mean over the runs
};
ProbeStats probe_stats(const std::vector<Report>& runs);

// Fails: a run dropped requests, most runs were overloaded, or a share's mean is over the allowed share
// with confidence (a run that has not left its transient only understates it). Otherwise undecided while
// a run is in its transient (a longer probe decides) or overloaded, or while a share's prediction bound
// exceeds the allowed share; meets when neither does.
SlaVerdict sla_verdict(const ProbeStats& p);

// One probe of the search: its rate, verdict, run length, replications and shares.
// A run's P-th percentile rests on the (1 - P/100) x n requests above it: with fewer than this many, its
// share over a limit is mostly counting noise and a prediction for one run says little, so an undecided
// probe runs longer rather than more often.
constexpr double kMinTailRequests = 10;

struct ProbeRecord {
  double rate_req_s = 0;
  SlaVerdict verdict = SlaVerdict::kUndecided;
  double duration_s = 0;
  ProbeStats stats;
};

struct CapacityResult {
  CapacityBracket bracket;
  Report at_capacity;               // replication 0 (the scenario's seed) at bracket.holds_req_s
  std::vector<ProbeRecord> probes;  // in the order run
  // "Limited by" from the probes: the constraint that fails first as the load grows, read from the
  // lowest failing probe ("ttft", "tpot", "overload", "drops").
  std::string limited_by;
  std::string limited_why;
};
CapacityResult capacity_at_sla(const ScenarioSpec& spec, const GpuCostModel& gpu,
                               const CapacitySearchSettings& settings);

}  // namespace moesim
