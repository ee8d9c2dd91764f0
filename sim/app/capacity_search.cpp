#include "sim/app/capacity_search.h"

#include <cmath>
#include <map>
#include <sstream>
#include <variant>

#include "sim/engine/check.h"
#include "sim/serving/serving_simulation.h"

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
  MOESIM_CHECK(start_req_s > 0 && s.rel_tol > 0, "find_capacity: needs a positive start rate and tolerance");
  CapacityBracket b;
  auto probe = [&](double rate) {
    ++b.probes;
    return holds(rate);
  };
  if (probe(start_req_s)) {
    b.holds_req_s = start_req_s;
    for (double r = start_req_s * 2;; r *= 2) {
      if (r > start_req_s * s.max_factor) {
        throw InputError("capacity", "the SLA still holds at " + rate_text(b.holds_req_s) +
                                         " requests/s; no capacity found below that");
      }
      if (!probe(r)) {
        b.fails_req_s = r;
        break;
      }
      b.holds_req_s = r;
    }
  } else {
    b.fails_req_s = start_req_s;
    for (double r = start_req_s / 2;; r /= 2) {
      if (r < start_req_s / s.max_factor) {
        throw InputError("capacity", "the SLA fails even at " + rate_text(b.fails_req_s) +
                                         " requests/s (no arrival rate meets it)");
      }
      if (probe(r)) {
        b.holds_req_s = r;
        break;
      }
      b.fails_req_s = r;
    }
  }
  while (b.fails_req_s - b.holds_req_s > s.rel_tol * b.holds_req_s && b.probes < s.max_probes) {
    const double mid = 0.5 * (b.holds_req_s + b.fails_req_s);
    (probe(mid) ? b.holds_req_s : b.fails_req_s) = mid;
  }
  return b;
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
  std::map<double, Report> holding;  // the runs that held, by rate
  const CapacityBracket b = find_capacity(
      start,
      [&](double rate) {
        Report r = simulate(with_arrival_rate(spec, rate), gpu);
        const bool ok = sla_holds(r);
        if (ok) holding[rate] = std::move(r);
        return ok;
      },
      settings);
  return CapacityResult{b, holding.at(b.holds_req_s)};
}

}  // namespace moesim
