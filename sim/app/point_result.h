// What one point of run, sweep or compare produced: its replications (one per seed), each reduced at once
// to the metric values the tables need and its report JSON, a form that crosses process boundaries (MPI)
// unchanged, so that a distributed sweep writes the same bytes as a one-process one.
#pragma once

#include <cstdint>
#include <limits>
#include <string>
#include <vector>

#include "sim/app/capacity_search.h"
#include "sim/app/replications.h"
#include "sim/scenario/json_reader.h"

namespace moesim {

struct PointSettings {
  bool capacity = false;  // search the highest arrival rate meeting the SLA and report at that rate
  CapacitySearchSettings search;
  bool roofline = false;  // cost with the datasheet roofline even where a calibrated profile exists
};

struct Replication {
  std::uint64_t seed = 0;
  std::vector<double> metrics;  // metric_columns() order, computed from the report
  double capacity_req_s = std::numeric_limits<double>::quiet_NaN();  // capacity mode only
  double capacity_fails_req_s = std::numeric_limits<double>::quiet_NaN();
  int probes = 0;
  Json report;  // report_to_json without the scenario echo (the run at capacity in capacity mode)
  std::string error;
  bool internal = false;  // the error is a broken invariant (a bug), not bad input: the CLI exits 3
};

// Simulates one replication of `spec` with run.seed = seed; errors are caught into Replication::error.
Replication run_replication(ScenarioSpec spec, std::uint64_t seed, const PointSettings& settings);

// Exact text round trip (metric values travel as their bits, so infinities and NaN survive).
std::string encode_replication(const Replication& r);
Replication decode_replication(const std::string& text);

struct PointResult {
  std::vector<Replication> replications;
  [[nodiscard]] bool ok() const;
  // The first replication's error (a point fails when any of its replications fails).
  [[nodiscard]] std::string error() const;
  // Some replication failed on a broken invariant (not on bad input).
  [[nodiscard]] bool internal_error() const;
  [[nodiscard]] MeanInterval metric(std::size_t column) const;
  [[nodiscard]] MeanInterval capacity() const;
  // The other end of the capacity interval: the lowest rate the search saw fail the SLA (mean over seeds).
  [[nodiscard]] MeanInterval capacity_fails() const;
  // Every replication met the SLA (capacity mode: every search found a rate where it holds).
  [[nodiscard]] bool meets_sla(bool capacity_mode) const;
};

}  // namespace moesim

namespace moesim {

class TaskPool;

// Runs replications[i] = seeds[i] seeds (seed, seed + 1, ...) of specs[i] for every point on the pool;
// on the output rank returns one PointResult per point, elsewhere an empty vector.
std::vector<PointResult> run_points(TaskPool& pool, const std::vector<ScenarioSpec>& specs,
                                    const std::vector<int>& seeds, const std::vector<std::string>& labels,
                                    const PointSettings& settings);

// Throws InternalError naming the point (`label`, and the seed) when a replication of any point broke an
// invariant: run, sweep and compare exit 3 for it, as a single run does, after writing what they can.
void throw_if_internal(const std::vector<PointResult>& points, const std::vector<std::string>& labels);

// A point in sweep.json/compare.json. One plain replication: {"report": ...} as before replications
// existed; otherwise {"replications": [{"seed", ["capacity_req_s", "capacity_fails_req_s", "probes"],
// "report"}...], "summary": {metric: {"mean", "ci95"}}}; a failed point: {"error": ...}.
Json point_json(const PointResult& p, bool detailed);

}  // namespace moesim
