// The MLPerf Inference figures of a run, computed as MLCommons' loadgen computes them (mlcommons/inference,
// loadgen/results.cc PerformanceSummary, loadgen/loadgen.cc RunPerformanceMode, loadgen/logging.cc
// RecordSampleCompletion, loadgen/early_stopping.cc), over every query of the run from a cold start:
// - Server: completed tokens/s = all tokens of all queries / the time the final issued query finished,
//   from the first issue (`result_completed_tokens_per_second`, the figure the results table publishes for
//   deepseek-r1 Server); completed samples/s = (queries - 1) / that time; scheduled samples/s = (queries -
//   1) / the final query's issue time.
// - Offline: every query is issued at the start; tokens/s = all tokens / the latest completion
//   (`result_tokens_per_second`); samples/s = queries / that time.
// - Per query: TTFT = first token - issue; TPOT = (latency - TTFT) / (tokens - 1); percentile q of n values
//   is the sorted array's element at index floor(n x q), over all queries (no warm-up is cut).
// - Server verdict: the TTFT and TPOT at the target percentile within their limits (a value over its limit
//   by any amount fails, results.cc PerfConstraintsMet) and early stopping for both: with t queries over a
//   limit, the run needs at least h + t queries, h the fewest passing queries for which the regularized
//   incomplete beta I_{p}(h, t + 1) < 1 - c (p the percentile, confidence c = 0.99, tolerance 0).
//   loadgen's minimum duration (600 s) and query count are reported, not part of the verdict: a simulated
//   run is shortened on purpose and says so.
// Pure functions: the metrics recorder collects the queries, report assembly calls loadgen_summary.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace moesim {

enum class LoadgenScenario { kServer, kOffline };

// One query (one sample) as loadgen sees it: when it was issued, when its first token and its last token
// came back (seconds of simulated time), and how many output tokens it returned.
struct LoadgenQuery {
  double issued_s = 0;
  double first_token_s = 0;
  double done_s = 0;
  std::int64_t tokens = 0;
};

struct LoadgenSettings {
  LoadgenScenario scenario = LoadgenScenario::kServer;
  double ttft_limit_s = 0;
  double tpot_limit_s = 0;
  double percentile = 0.99;  // in (0, 1): mlperf.conf *.Server.target_latency_percentile = 99
};

// loadgen's summary statistics of one latency array: mean, min, max and its percentiles (50, 90, 95, 97,
// 99, 99.9 as the summary prints them), seconds.
struct LoadgenStats {
  double mean = 0, min = 0, max = 0;
  double p50 = 0, p90 = 0, p95 = 0, p97 = 0, p99 = 0, p999 = 0;
};

// One early-stopping test (results.cc EarlyStopping, Server case).
struct EarlyStoppingResult {
  std::int64_t over = 0;         // t: queries over the limit
  std::int64_t min_passing = 0;  // h
  bool met = false;              // queries issued >= h + t
};

struct LoadgenReport {
  bool enabled = false;
  std::string scenario;             // "server" or "offline"
  std::int64_t queries_issued = 0;  // arrived
  std::int64_t queries_completed = 0;
  std::int64_t single_token_queries = 0;  // loadgen refuses them (logging.cc); TPOT counted as 0 here
  std::int64_t tokens = 0;                // output tokens of the completed queries
  double final_query_scheduled_s = 0;     // issue time of the last issued query (Server)
  double final_query_done_s = 0;          // its completion (Server)
  double max_latency_s = 0;               // the latest completion (Offline), the longest query (Server)
  double samples_per_s = 0;               // Server: completed; Offline: samples per second
  double tokens_per_s = 0;                // Server: completed tokens per second; Offline: tokens per second
  double scheduled_samples_per_s = 0;     // Server
  double tokens_per_sample = 0;
  LoadgenStats latency, ttft, tpot;
  double percentile = 0.99;
  double ttft_at_percentile_s = 0;
  double tpot_at_percentile_s = 0;
  bool perf_constraints_met = false;
  EarlyStoppingResult early_stopping_ttft, early_stopping_tpot;
  bool min_duration_met = false;  // loadgen's 600 s (Server: the final query's issue; Offline: max latency)
  // Server: every query completed, performance constraints and both early-stopping tests met. Offline:
  // every query completed (loadgen's Offline has no latency constraint).
  bool valid = false;
};

// loadgen's minimum duration for both scenarios, seconds (mlperf.conf *.Server.min_duration and
// *.Offline.min_duration = 600000 ms).
inline constexpr double kLoadgenMinDurationS = 600;

// The element at index floor(n x q) of `sorted` (loadgen's percentile; `sorted` not empty, q in [0, 1)).
double loadgen_percentile(const std::vector<double>& sorted, double q);

// h: the fewest queries within the limit for which, with t over it, the percentile p holds with confidence
// c at tolerance d (early_stopping.cc): the least h >= 1 with I_{p - d}(h, t + 1) < 1 - c.
std::int64_t early_stopping_min_passing(std::int64_t t, double p, double d, double c);

// The summary of `queries` (the completed ones, any order) out of `issued` queries issued.
LoadgenReport loadgen_summary(std::vector<LoadgenQuery> queries, std::int64_t issued,
                              const LoadgenSettings& s);

}  // namespace moesim
