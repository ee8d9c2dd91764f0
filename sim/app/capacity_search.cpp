#include "sim/app/capacity_search.h"

#include <algorithm>
#include <boost/math/distributions/binomial.hpp>
#include <cmath>
#include <cstdio>
#include <map>
#include <sstream>
#include <variant>

#include "sim/engine/check.h"
#include "sim/serving/runtime/serving_simulation.h"

namespace moesim {

namespace {
std::string rate_text(double r) {
  std::ostringstream o;
  o << r;
  return o.str();
}
}  // namespace

CapacityBracket find_capacity(double start_req_s, const std::function<bool(double)>& holds,
                              const CapacitySearchSettings& s) {
  return find_capacity(start_req_s, std::function<SlaVerdict(double)>([&](double rate) {
                         return holds(rate) ? SlaVerdict::kMeets : SlaVerdict::kFails;
                       }),
                       s);
}

namespace {

// The state of a three-outcome search: the highest rate that met, the lowest that did not meet, the
// highest that did not fail, the lowest that failed (0: none yet).
struct Search {
  const std::function<SlaVerdict(double)>& verdict;
  const CapacitySearchSettings& s;
  double start;
  CapacityBracket b;
  double not_met = 0;
  double not_failed = 0;

  SlaVerdict probe(double rate) {
    ++b.probes;
    const SlaVerdict v = verdict(rate);
    if (v == SlaVerdict::kMeets) b.holds_req_s = std::max(b.holds_req_s, rate);
    if (v != SlaVerdict::kMeets && (not_met == 0 || rate < not_met)) not_met = rate;
    if (v != SlaVerdict::kFails) not_failed = std::max(not_failed, rate);
    if (v == SlaVerdict::kFails && (b.fails_req_s == 0 || rate < b.fails_req_s)) b.fails_req_s = rate;
    if (v == SlaVerdict::kUndecided) b.undecided.push_back(rate);
    return v;
  }
  // Doubles from `from` until a probe fails.
  void up(double from) {
    for (double r = from * 2; b.fails_req_s == 0; r *= 2) {
      if (r > start * s.max_factor) {
        throw InputError("capacity", "the SLA does not fail even at " + rate_text(r / 2) +
                                         " requests/s; no capacity found below that");
      }
      probe(r);
    }
  }
  // Halves from `from` until a probe meets.
  void down(double from) {
    for (double r = from / 2; b.holds_req_s == 0; r /= 2) {
      if (r < start / s.max_factor) {
        throw InputError("capacity", "the SLA is not met even at " + rate_text(r * 2) +
                                         " requests/s (no arrival rate meets it)");
      }
      probe(r);
    }
  }
  bool wide(double lo, double hi) const { return hi - lo > s.rel_tol * lo && b.probes < s.max_probes; }
};

}  // namespace

CapacityBracket find_capacity(double start_req_s, const std::function<SlaVerdict(double)>& verdict,
                              const CapacitySearchSettings& s) {
  MOESIM_CHECK(start_req_s > 0 && s.rel_tol > 0, "find_capacity: needs a positive start rate and tolerance");
  Search x{verdict, s, start_req_s, {}};
  x.probe(start_req_s);
  x.up(start_req_s);
  x.down(start_req_s);
  // Narrow the lower bound (meets | the lowest rate that did not meet), then the upper one (the highest
  // rate that did not fail | fails).
  while (x.wide(x.b.holds_req_s, x.not_met)) x.probe(0.5 * (x.b.holds_req_s + x.not_met));
  while (x.wide(x.not_failed, x.b.fails_req_s)) x.probe(0.5 * (x.not_failed + x.b.fails_req_s));
  std::vector<double> between;
  for (const double r : x.b.undecided) {
    if (r > x.b.holds_req_s && r < x.b.fails_req_s) between.push_back(r);
  }
  std::sort(between.begin(), between.end());
  x.b.undecided = between;
  return x.b;
}

double arrival_rate_per_s(const ScenarioSpec& spec) {
  if (!spec.workload.trace.empty()) {
    throw InputError("workload.trace", "capacity search varies the arrival rate; a recorded trace has none");
  }
  if (const auto* p = std::get_if<PoissonArrivals>(&spec.workload.arrivals)) return p->rate_per_s;
  if (const auto* g = std::get_if<GammaArrivals>(&spec.workload.arrivals)) return g->rate_per_s;
  throw InputError("workload.arrival.kind",
                   "capacity search needs open arrivals (poisson or gamma) whose rate_per_s it can vary");
}

ScenarioSpec with_arrival_rate(ScenarioSpec spec, double rate_per_s) {
  if (auto* p = std::get_if<PoissonArrivals>(&spec.workload.arrivals)) p->rate_per_s = rate_per_s;
  if (auto* g = std::get_if<GammaArrivals>(&spec.workload.arrivals)) g->rate_per_s = rate_per_s;
  return spec;
}

// Met, nothing dropped, something measured, and the queue did not grow through the window (a probe
// that is overloaded only meets its SLA because it is short).
bool sla_holds(const Report& r) {
  return r.sla_met && r.requests_dropped == 0 && r.requests_measured > 0 && !r.overloaded;
}

namespace {

struct Probe {
  SlaVerdict verdict = SlaVerdict::kUndecided;
  Report report;
};

// Runs `rate` until its verdict is decided: run.duration_s, then twice as long, up to max_probe_factor.
Probe run_probe(const ScenarioSpec& spec, const GpuCostModel& gpu, double rate,
                const CapacitySearchSettings& s) {
  ScenarioSpec p = with_arrival_rate(spec, rate);
  for (double f = 1;; f *= 2) {
    p.run.duration = Duration::from_seconds(spec.run.duration.seconds() * f);
    Probe out{SlaVerdict::kUndecided, simulate(p, gpu)};
    out.verdict = sla_verdict(out.report);
    if (out.verdict != SlaVerdict::kUndecided || 2 * f > s.max_probe_factor) return out;
  }
}

// Which limit the lowest probe that did not meet the SLA is furthest over (as a share of its limit).
void limited_by(const Report& r, CapacityResult& c) {
  const double alpha = 1.0 - r.sla_percentile / 100.0;
  if (r.requests_dropped > 0) {
    c.limited_by = "drops";
    c.limited_why = "requests were dropped (waiting queue full or too long for the KV cache)";
  } else if (r.overloaded) {
    c.limited_by = "overload";
    c.limited_why = "the number in system grows: the deployment serves less than the offered load";
  } else {
    const bool ttft = r.ci_ttft_over_share.mean >= r.ci_tpot_over_share.mean;
    const BatchMeans& share = ttft ? r.ci_ttft_over_share : r.ci_tpot_over_share;
    c.limited_by = ttft ? "ttft" : "tpot";
    char buf[160];
    std::snprintf(buf, sizeof buf, "%.2f%% of requests over the %s limit (SLA allows %.2f%%)",
                  100 * share.mean, ttft ? "TTFT" : "TPOT", 100 * alpha);
    c.limited_why = buf;
  }
}

}  // namespace

namespace {
struct ShareBounds {
  double lo = 0, hi = 1;
};
// The exact binomial (Clopper-Pearson) interval at 95% of a share seen `k` times in `n` ([0, 1] without
// requests): a few events decide it (a tail share of 1% needs about 370 requests without one to be below it
// with confidence).
ShareBounds binomial(std::int64_t k, std::int64_t n) {
  if (n <= 0) return ShareBounds{};
  using boost::math::binomial_distribution;
  const auto trials = static_cast<double>(n);
  const auto events = static_cast<double>(k);
  return ShareBounds{binomial_distribution<>::find_lower_bound_on_p(trials, events, 0.025),
                     binomial_distribution<>::find_upper_bound_on_p(trials, events, 0.025)};
}
// The share over a limit, bounded both by its batch-means interval (correlation) and by the binomial one of
// its counts: the wider of the two.
ShareBounds bounds(const BatchMeans& bm, std::int64_t k, std::int64_t n) {
  if (n <= 0) return ShareBounds{};
  const ShareBounds b = binomial(k, n);
  return ShareBounds{std::min(bm.mean - bm.half_width, b.lo), std::max(bm.mean + bm.half_width, b.hi)};
}
}  // namespace

SlaVerdict sla_verdict(const Report& r) {
  if (r.requests_dropped > 0) return SlaVerdict::kFails;
  const double alpha = 1.0 - r.sla_percentile / 100.0;
  const bool intervals = r.ci_ttft_over_share.batches >= 2 && r.ci_tpot_over_share.batches >= 2;
  const ShareBounds a = bounds(r.ci_ttft_over_share, r.sla_ttft_over, r.sla_requests);
  const ShareBounds b = bounds(r.ci_tpot_over_share, r.sla_tpot_over, r.sla_tpot_requests);
  // Over a limit with confidence fails at once: a run that has not reached its steady state yet (it starts
  // empty) only understates the shares. Without batches as long as the time in system (ci_too_short) the
  // counts alone decide it by the exact binomial bound: too narrow for correlated requests, but a wrong
  // "fails" only lowers the capacity reported (never optimistic).
  if (intervals && (a.lo > alpha || b.lo > alpha)) return SlaVerdict::kFails;
  if (r.ci_too_short && (binomial(r.sla_ttft_over, r.sla_requests).lo > alpha ||
                         binomial(r.sla_tpot_over, r.sla_tpot_requests).lo > alpha))
    return SlaVerdict::kFails;
  // The number in system did not settle in the first half of the arrivals (MSER-5 at its bound): the run is
  // too short to tell a steady state from a transient or from overload, and its intervals describe the
  // transient (White, Cobb & Spratt 2000 lengthen such a run). A longer probe decides.
  if (r.mser_at_bound) return SlaVerdict::kUndecided;
  if (r.overloaded) return SlaVerdict::kFails;
  // Too short for an interval: a longer probe decides.
  if (r.ci_too_short) return SlaVerdict::kUndecided;
  if (!intervals) return sla_holds(r) ? SlaVerdict::kMeets : SlaVerdict::kFails;  // a burst
  if (a.hi <= alpha && b.hi <= alpha && sla_holds(r)) return SlaVerdict::kMeets;
  return SlaVerdict::kUndecided;
}

CapacityResult capacity_at_sla(const ScenarioSpec& spec, const GpuCostModel& gpu,
                               const CapacitySearchSettings& settings) {
  const double start = arrival_rate_per_s(spec);
  if (spec.run.requests > 0) {
    throw InputError("run.requests",
                     "capacity search needs arrivals over a fixed time: a request cap makes a "
                     "probe at a higher rate a shorter burst, not a heavier load (set "
                     "run.requests=0 and run.duration_s)");
  }
  if (spec.run.duration.seconds() <= 0) {
    // With only a request count, a higher rate is a shorter burst of the same requests, not a heavier
    // load: a burst that fits in one batch meets any SLA at any rate.
    throw InputError("run.duration_s",
                     "capacity search needs arrivals over a fixed time (run.duration_s > 0), "
                     "so that a probe at a higher rate is a heavier load, not a shorter burst");
  }
  if (!(start > 0)) throw InputError("workload.arrival.rate_per_s", "capacity search needs a rate above 0");
  std::map<double, Report> probed;  // every probe's last run, by rate
  std::map<double, SlaVerdict> verdicts;
  CapacityResult c;
  c.bracket = find_capacity(start, std::function<SlaVerdict(double)>([&](double rate) {
                              Probe p = run_probe(spec, gpu, rate, settings);
                              verdicts[rate] = p.verdict;
                              probed[rate] = std::move(p.report);
                              return p.verdict;
                            }),
                            settings);
  c.at_capacity = probed.at(c.bracket.holds_req_s);
  for (const auto& [rate, v] : verdicts) {
    if (v != SlaVerdict::kMeets && rate > c.bracket.holds_req_s) {
      limited_by(probed.at(rate), c);
      break;
    }
  }
  return c;
}

}  // namespace moesim
