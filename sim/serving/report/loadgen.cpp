#include "sim/serving/report/loadgen.h"

#include <algorithm>
#include <boost/math/special_functions/beta.hpp>
#include <cmath>
#include <numeric>

#include "sim/engine/check.h"

namespace moesim {

double loadgen_percentile(const std::vector<double>& sorted, double q) {
  MOESIM_CHECK(!sorted.empty() && q >= 0 && q < 1, "loadgen_percentile: needs values and q in [0, 1)");
  // results.cc: pr.sample_latencies[sample_count * percentile], the product truncated to an index.
  return sorted[static_cast<std::size_t>(static_cast<double>(sorted.size()) * q)];
}

std::int64_t early_stopping_min_passing(std::int64_t t, double p, double d, double c) {
  MOESIM_CHECK(t >= 0 && p - d > 0 && p - d < 1 && c > 0 && c < 1,
               "early_stopping_min_passing: bad arguments");
  // I_x(h, t + 1) falls as h grows (more passing queries make the percentile likelier to hold): bracket the
  // least h with I < 1 - c by doubling, then bisect.
  const auto passes = [&](std::int64_t h) {
    return boost::math::ibeta(static_cast<double>(h), static_cast<double>(t + 1), p - d) < 1 - c;
  };
  std::int64_t lo = 0;  // fails (h = 0 is no query at all)
  std::int64_t hi = 1;
  while (!passes(hi)) {
    lo = hi;
    hi *= 2;
  }
  while (hi - lo > 1) {
    const std::int64_t mid = lo + (hi - lo) / 2;
    (passes(mid) ? hi : lo) = mid;
  }
  return hi;
}

namespace {

LoadgenStats stats_of(std::vector<double>& v) {
  LoadgenStats s;
  if (v.empty()) return s;
  std::sort(v.begin(), v.end());
  s.mean = std::accumulate(v.begin(), v.end(), 0.0) / static_cast<double>(v.size());
  s.min = v.front();
  s.max = v.back();
  s.p50 = loadgen_percentile(v, 0.50);
  s.p90 = loadgen_percentile(v, 0.90);
  s.p95 = loadgen_percentile(v, 0.95);
  s.p97 = loadgen_percentile(v, 0.97);
  s.p99 = loadgen_percentile(v, 0.99);
  s.p999 = loadgen_percentile(v, 0.999);
  return s;
}

EarlyStoppingResult early_stopping(const std::vector<double>& v, double limit_s, double p,
                                   std::int64_t issued) {
  EarlyStoppingResult e;
  e.over = std::count_if(v.begin(), v.end(), [&](double x) { return x > limit_s; });
  e.min_passing = early_stopping_min_passing(e.over, p, 0.0, 0.99);
  e.met = issued >= e.min_passing + e.over;
  return e;
}

// The throughput figures: Server from the final issued query's completion, Offline from the latest one.
// `origin`: the first issue, loadgen's start.
void throughput(const std::vector<LoadgenQuery>& q, double origin, LoadgenReport& r, bool server) {
  const auto n = static_cast<double>(q.size());
  double last_done = origin;
  for (const LoadgenQuery& x : q) last_done = std::max(last_done, x.done_s);
  if (server) {
    // The final query: the last issued (ties: the later completion).
    const LoadgenQuery& f = *std::max_element(q.begin(), q.end(), [](const auto& a, const auto& b) {
      return a.issued_s != b.issued_s ? a.issued_s < b.issued_s : a.done_s < b.done_s;
    });
    r.final_query_scheduled_s = f.issued_s - origin;
    r.final_query_done_s = f.done_s - origin;
    r.samples_per_s = r.final_query_done_s > 0 ? (n - 1) / r.final_query_done_s : 0;
    r.tokens_per_s = r.final_query_done_s > 0 ? static_cast<double>(r.tokens) / r.final_query_done_s : 0;
    r.scheduled_samples_per_s = r.final_query_scheduled_s > 0 ? (n - 1) / r.final_query_scheduled_s : 0;
    r.min_duration_met = r.final_query_scheduled_s >= kLoadgenMinDurationS;
  } else {
    r.max_latency_s = last_done - origin;
    r.samples_per_s = r.max_latency_s > 0 ? n / r.max_latency_s : 0;
    r.tokens_per_s = r.max_latency_s > 0 ? static_cast<double>(r.tokens) / r.max_latency_s : 0;
    r.min_duration_met = r.max_latency_s >= kLoadgenMinDurationS;
  }
}

}  // namespace

LoadgenReport loadgen_summary(std::vector<LoadgenQuery> queries, std::int64_t issued,
                              const LoadgenSettings& s) {
  LoadgenReport r;
  r.enabled = true;
  const bool server = s.scenario == LoadgenScenario::kServer;
  r.scenario = server ? "server" : "offline";
  r.queries_issued = issued;
  r.queries_completed = static_cast<std::int64_t>(queries.size());
  r.percentile = s.percentile;
  if (queries.empty()) return r;
  // loadgen starts at the first issue; Offline issues one query of every sample there, so a sample's latency
  // runs from it.
  const double origin = std::min_element(queries.begin(), queries.end(), [](const auto& a, const auto& b) {
                          return a.issued_s < b.issued_s;
                        })->issued_s;
  std::vector<double> latency, ttft, tpot;
  for (const LoadgenQuery& q : queries) {
    r.tokens += q.tokens;
    latency.push_back(q.done_s - (server ? q.issued_s : origin));
    ttft.push_back(q.first_token_s - q.issued_s);
    r.single_token_queries += q.tokens <= 1 ? 1 : 0;
    // logging.cc RecordSampleCompletion: (latency - first token latency) / (n_tokens - 1).
    tpot.push_back(q.tokens > 1 ? (q.done_s - q.first_token_s) / static_cast<double>(q.tokens - 1) : 0.0);
  }
  r.tokens_per_sample = static_cast<double>(r.tokens) / static_cast<double>(queries.size());
  throughput(queries, origin, r, server);
  r.latency = stats_of(latency);
  r.ttft = stats_of(ttft);
  r.tpot = stats_of(tpot);
  if (server) r.max_latency_s = r.latency.max;
  r.ttft_at_percentile_s = loadgen_percentile(ttft, s.percentile);
  r.tpot_at_percentile_s = loadgen_percentile(tpot, s.percentile);
  const bool all_done = r.queries_completed == issued;
  if (!server) {
    r.valid = all_done;
    return r;
  }
  r.perf_constraints_met =
      r.ttft_at_percentile_s <= s.ttft_limit_s && r.tpot_at_percentile_s <= s.tpot_limit_s;
  r.early_stopping_ttft = early_stopping(ttft, s.ttft_limit_s, s.percentile, issued);
  r.early_stopping_tpot = early_stopping(tpot, s.tpot_limit_s, s.percentile, issued);
  r.valid = all_done && r.perf_constraints_met && r.early_stopping_ttft.met && r.early_stopping_tpot.met;
  return r;
}

}  // namespace moesim
