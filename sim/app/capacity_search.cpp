#include "sim/app/capacity_search.h"

#include <algorithm>
#include <atomic>
#include <boost/math/distributions/binomial.hpp>
#include <cmath>
#include <cstdio>
#include <exception>
#include <map>
#include <mutex>
#include <sstream>
#include <thread>
#include <variant>

#include "sim/app/replications.h"
#include "sim/engine/check.h"
#include "sim/engine/random.h"
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

// The state of a three-outcome search. Verdicts need not be monotone in the rate (a light probe may see
// too few requests to decide; replications are noisy), so the bounds are read from every verdict so far:
// the lowest rate that failed, the highest that met below it (never above a failure: not optimistic), the
// lowest above that which did not meet and the highest below the failure that did not fail (0: none yet).
struct Search {
  const std::function<SlaVerdict(double)>& verdict;
  const CapacitySearchSettings& s;
  double start;
  CapacityBracket b;
  std::map<double, SlaVerdict> seen;
  double not_met = 0;
  double not_failed = 0;

  SlaVerdict probe(double rate) {
    ++b.probes;
    const SlaVerdict v = verdict(rate);
    seen[rate] = v;
    if (v == SlaVerdict::kUndecided) b.undecided.push_back(rate);
    b.fails_req_s = 0;
    for (const auto& [r, w] : seen) {
      if (w == SlaVerdict::kFails) {
        b.fails_req_s = r;
        break;
      }
    }
    const auto below_fails = [&](double r) { return b.fails_req_s == 0 || r < b.fails_req_s; };
    b.holds_req_s = not_met = not_failed = 0;
    for (const auto& [r, w] : seen) {
      if (w == SlaVerdict::kMeets && below_fails(r)) b.holds_req_s = r;
      if (w != SlaVerdict::kFails && below_fails(r)) not_failed = r;
    }
    for (const auto& [r, w] : seen) {
      if (w != SlaVerdict::kMeets && r > b.holds_req_s) {
        not_met = r;
        break;
      }
    }
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
                                         " requests/s: no arrival rate meets it, or the probes are too "
                                         "short to decide it at low rates (" +
                                         std::to_string(b.undecided.size()) +
                                         " undecided; lengthen run.duration_s)");
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
  Search x{verdict, s, start_req_s, {}, {}};
  x.probe(start_req_s);
  x.up(start_req_s);
  x.down(start_req_s);
  // Narrow the lower bound (meets | the lowest rate that did not meet), then the upper one (the highest
  // rate that did not fail | fails).
  while (x.wide(x.b.holds_req_s, x.not_met)) x.probe(0.5 * (x.b.holds_req_s + x.not_met));
  while (s.narrow_fails && x.wide(x.not_failed, x.b.fails_req_s)) {
    x.probe(0.5 * (x.not_failed + x.b.fails_req_s));
  }
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

std::uint64_t replication_seed(std::uint64_t seed, int k) {
  if (k == 0) return seed;
  return splitmix64(seed + static_cast<std::uint64_t>(k) * 0x9e3779b97f4a7c15ULL) >> 11;
}

namespace {

// The exact binomial (Clopper-Pearson) 95% interval of a share seen `k` times in `n` ([0, 1] without
// requests).
std::pair<double, double> binomial(std::int64_t k, std::int64_t n) {
  if (n <= 0) return {0.0, 1.0};
  using boost::math::binomial_distribution;
  const auto trials = static_cast<double>(n);
  const auto events = static_cast<double>(k);
  return {binomial_distribution<>::find_lower_bound_on_p(trials, events, 0.025),
          binomial_distribution<>::find_upper_bound_on_p(trials, events, 0.025)};
}

// `over` of `counted` per run (runs without a counted request say nothing and are left out).
ShareEstimate estimate(const std::vector<std::pair<std::int64_t, std::int64_t>>& over_counted) {
  std::vector<double> shares;
  std::int64_t over = 0, counted = 0;
  for (const auto& [k, n] : over_counted) {
    if (n <= 0) continue;
    shares.push_back(static_cast<double>(k) / static_cast<double>(n));
    over += k;
    counted += n;
  }
  const auto [blo, bhi] = binomial(over, counted);
  ShareEstimate e;
  if (shares.size() < 2) {  // one run (or none): the counts bound the mean, nothing bounds a new run
    e.mean = counted > 0 ? static_cast<double>(over) / static_cast<double>(counted) : 0;
    e.mean_lo = blo;
    return e;
  }
  const double n = static_cast<double>(shares.size());
  const MeanSd m = mean_sd(shares);
  const double t = student_t_quantile(0.975, static_cast<int>(shares.size()) - 1);
  e.mean = m.mean;
  e.mean_lo = std::max(0.0, std::min(m.mean - t * m.sd / std::sqrt(n), blo));
  e.run_hi = std::min(1.0, std::max(m.mean + t * m.sd * std::sqrt(1 + 1 / n), bhi));
  return e;
}

}  // namespace

ProbeStats probe_stats(const std::vector<Report>& runs) {
  MOESIM_CHECK(!runs.empty(), "probe_stats: needs at least one run");
  ProbeStats p;
  p.runs = static_cast<int>(runs.size());
  p.allowed_share = 1.0 - runs.front().sla_percentile / 100.0;
  std::vector<std::pair<std::int64_t, std::int64_t>> ttft, tpot;
  for (const Report& r : runs) {
    ttft.emplace_back(r.sla_ttft_over, r.sla_requests);
    tpot.emplace_back(r.sla_tpot_over, r.sla_tpot_requests);
    p.dropped += r.requests_dropped > 0 ? 1 : 0;
    p.overloaded += r.overloaded && !r.mser_at_bound ? 1 : 0;
    p.transient += r.mser_at_bound ? 1 : 0;
    p.requests_per_run += static_cast<double>(r.sla_requests) / static_cast<double>(runs.size());
  }
  p.ttft = estimate(ttft);
  p.tpot = estimate(tpot);
  return p;
}

SlaVerdict sla_verdict(const ProbeStats& p) {
  const double a = p.allowed_share;
  if (p.dropped > 0 || 2 * p.overloaded > p.runs) return SlaVerdict::kFails;
  // Over a limit with confidence fails at once: a run that has not left its transient (it starts empty)
  // only understates the shares.
  if (p.ttft.mean_lo > a || p.tpot.mean_lo > a) return SlaVerdict::kFails;
  if (p.transient > 0 || p.overloaded > 0) return SlaVerdict::kUndecided;
  if (p.ttft.run_hi <= a && p.tpot.run_hi <= a) return SlaVerdict::kMeets;
  return SlaVerdict::kUndecided;
}

namespace {

struct Probe {
  ProbeRecord record;
  Report report;  // replication 0's
};

// Appends replications runs.size() .. n - 1 of `p` (each its own seed), on up to `threads` threads; each
// run lands in its own slot, so the order (and everything computed from it) is the same for any count.
void run_replications(ScenarioSpec p, const GpuCostModel& gpu, int n, int threads,
                      std::vector<Report>& runs) {
  const std::uint64_t seed = p.run.seed;
  const auto first = static_cast<int>(runs.size());
  runs.resize(static_cast<std::size_t>(std::max(n, first)));
  std::atomic<int> next{first};
  std::exception_ptr error;
  std::mutex error_mutex;
  auto worker = [&] {
    for (int k = next++; k < n; k = next++) {
      try {
        ScenarioSpec q = p;
        q.run.seed = replication_seed(seed, k);
        runs[static_cast<std::size_t>(k)] = simulate(q, gpu);
      } catch (...) {
        const std::lock_guard lock(error_mutex);
        if (!error) error = std::current_exception();
      }
    }
  };
  std::vector<std::thread> pool;
  for (int t = 1; t < std::min(threads, n - first); ++t) pool.emplace_back(worker);
  worker();
  for (std::thread& t : pool) t.join();
  if (error) std::rethrow_exception(error);
}

// Runs `rate` until its verdict is decided: settings.replications runs of run.duration_s; twice as long
// while a run has not left its transient or while undecided on runs too short for their percentile (up to
// max_probe_factor); otherwise twice as many while undecided (up to max_replications).
Probe run_probe(const ScenarioSpec& spec, const GpuCostModel& gpu, double rate,
                const CapacitySearchSettings& s) {
  ScenarioSpec p = with_arrival_rate(spec, rate);
  p.run.seed = spec.run.seed;
  std::vector<Report> runs;
  int n = std::max(2, s.replications);
  for (double f = 1;;) {
    p.run.duration = Duration::from_seconds(spec.run.duration.seconds() * f);
    run_replications(p, gpu, n, s.threads, runs);
    Probe out{ProbeRecord{rate, SlaVerdict::kUndecided, p.run.duration.seconds(), probe_stats(runs)}, {}};
    out.record.verdict = sla_verdict(out.record.stats);
    const ProbeStats& st = out.record.stats;
    const bool short_runs = st.requests_per_run * st.allowed_share < kMinTailRequests;
    const bool longer = (st.transient > 0 || short_runs) && 2 * f <= s.max_probe_factor;
    const bool more = !longer && 2 * n <= std::max(n, s.max_replications);
    if (out.record.verdict != SlaVerdict::kUndecided || (!longer && !more)) {
      out.report = std::move(runs.front());
      return out;
    }
    if (longer) {
      f *= 2;
      runs.clear();
      n = std::max(2, s.replications);
    } else {
      n *= 2;
    }
  }
}

// run.measure mlperf_server: a probe is one loadgen run (the scenario's seed, arrivals over run.duration_s),
// decided by loadgen's verdict alone (sim/serving/report/loadgen.h): VALID meets, INVALID fails, as a
// submission's run does. No replications: loadgen judges the one run it measured.
Probe run_loadgen_probe(const ScenarioSpec& spec, const GpuCostModel& gpu, double rate) {
  ScenarioSpec p = with_arrival_rate(spec, rate);
  std::vector<Report> runs{simulate(p, gpu)};
  Probe out{ProbeRecord{rate, runs.front().loadgen.valid ? SlaVerdict::kMeets : SlaVerdict::kFails,
                        p.run.duration.seconds(), probe_stats(runs)},
            std::move(runs.front())};
  return out;
}

// Which of loadgen's tests the lowest failing probe's run failed, first named first: queries left
// incomplete, the TTFT or TPOT at the percentile over its limit, then early stopping.
void loadgen_limited_by(const LoadgenReport& l, CapacityResult& c) {
  std::string why;
  const auto add = [&](bool failed, const char* name, const std::string& what) {
    if (!failed) return;
    if (c.limited_by.empty()) c.limited_by = name;
    why += (why.empty() ? "" : "; ") + what;
  };
  char ttft[96], tpot[96];
  std::snprintf(ttft, sizeof ttft, "loadgen P%g TTFT %.1f ms over its limit", 100 * l.percentile,
                1e3 * l.ttft_at_percentile_s);
  std::snprintf(tpot, sizeof tpot, "loadgen P%g TPOT %.2f ms over its limit", 100 * l.percentile,
                1e3 * l.tpot_at_percentile_s);
  const auto early = [](const char* what, const EarlyStoppingResult& e) {
    return std::string(what) + " early stopping: " + std::to_string(e.over) + " over, needs " +
           std::to_string(e.min_passing + e.over) + " queries";
  };
  add(l.queries_completed < l.queries_issued, "drops", "queries did not complete");
  add(l.ttft_at_percentile_s > c.at_capacity.sla_ttft_s, "ttft", ttft);
  add(l.tpot_at_percentile_s > c.at_capacity.sla_tpot_s, "tpot", tpot);
  add(!l.early_stopping_ttft.met, "early_stopping_ttft", early("TTFT", l.early_stopping_ttft));
  add(!l.early_stopping_tpot.met, "early_stopping_tpot", early("TPOT", l.early_stopping_tpot));
  c.limited_why = why + " (" + std::to_string(l.queries_issued) + " queries issued)";
}

std::string percent(double share) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%.2f%%", 100 * share);
  return buf;
}

// Which limit the lowest probe that did not meet the SLA is furthest over (as a share of its limit).
void limited_by(const ProbeStats& p, CapacityResult& c) {
  if (p.dropped > 0) {
    c.limited_by = "drops";
    c.limited_why = "requests were dropped (waiting queue full or too long for the KV cache)";
  } else if (2 * p.overloaded > p.runs) {
    c.limited_by = "overload";
    c.limited_why = "the number in system grows: the deployment serves less than the offered load";
  } else {
    const bool ttft = p.ttft.mean >= p.tpot.mean;
    const ShareEstimate& e = ttft ? p.ttft : p.tpot;
    c.limited_by = ttft ? "ttft" : "tpot";
    c.limited_why = percent(e.mean) + " of requests over the " + (ttft ? "TTFT" : "TPOT") + " limit (" +
                    std::to_string(p.runs) + " runs; one run up to " + percent(e.run_hi) + "; SLA allows " +
                    percent(p.allowed_share) + ")";
  }
}

}  // namespace

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
  const bool loadgen = spec.run.measure == RunMeasure::kMlperfServer;
  std::map<double, Report> probed;  // replication 0 of every probe, by rate
  CapacityResult c;
  c.bracket = find_capacity(start, std::function<SlaVerdict(double)>([&](double rate) {
                              Probe p = loadgen ? run_loadgen_probe(spec, gpu, rate)
                                                : run_probe(spec, gpu, rate, settings);
                              c.probes.push_back(p.record);
                              probed[rate] = std::move(p.report);
                              return p.record.verdict;
                            }),
                            settings);
  c.at_capacity = probed.at(c.bracket.holds_req_s);
  const ProbeRecord* lowest = nullptr;
  for (const ProbeRecord& p : c.probes) {
    if (p.verdict != SlaVerdict::kMeets && p.rate_req_s > c.bracket.holds_req_s &&
        (lowest == nullptr || p.rate_req_s < lowest->rate_req_s))
      lowest = &p;
  }
  if (lowest != nullptr && loadgen) loadgen_limited_by(probed.at(lowest->rate_req_s).loadgen, c);
  if (lowest != nullptr && !loadgen) limited_by(lowest->stats, c);
  return c;
}

}  // namespace moesim
