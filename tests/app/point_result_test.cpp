// The results of a point: the exact text encoding that carries a replication between MPI ranks, and the
// mean, interval and SLA verdict a point takes from its replications.
#include "sim/app/point_result.h"

#include <catch2/catch.hpp>
#include <cmath>
#include <cstring>
#include <limits>

#include "sim/app/metrics_table.h"
#include "sim/app/task_pool.h"
#include "sim/engine/check.h"
#include "sim/scenario/scenario_parser.h"

using namespace moesim;

namespace {

Replication replication(std::uint64_t seed, double first_metric, bool sla_met) {
  Replication r;
  r.seed = seed;
  r.metrics.assign(metric_columns().size(), 0.0);
  r.metrics[0] = first_metric;
  r.metrics[metric_index("sla_met")] = sla_met ? 1.0 : 0.0;
  r.report = Json{{"seed", seed}};
  return r;
}

bool same_bits(double a, double b) { return std::memcmp(&a, &b, sizeof a) == 0; }

}  // namespace

TEST_CASE("a replication survives its text encoding bit for bit, infinities and NaN included") {
  Replication r = replication(42, 0.1 + 0.2, true);
  r.metrics[1] = std::numeric_limits<double>::infinity();
  r.metrics[2] = std::nextafter(1.0, 2.0);
  r.metrics[3] = std::numeric_limits<double>::denorm_min();
  r.capacity_req_s = 12.345678901234567;
  r.probes = 9;
  r.error = "a \"quoted\" error\nwith a newline";
  const Replication back = decode_replication(encode_replication(r));
  CHECK(back.seed == 42);
  REQUIRE(back.metrics.size() == r.metrics.size());
  for (std::size_t i = 0; i < r.metrics.size(); ++i) CHECK(same_bits(back.metrics[i], r.metrics[i]));
  CHECK(same_bits(back.capacity_req_s, r.capacity_req_s));
  CHECK(std::isnan(back.capacity_fails_req_s));
  CHECK(back.probes == 9);
  CHECK(back.error == r.error);
  CHECK(back.report == r.report);
}

TEST_CASE("a point meets its SLA only when every replication does, and fails when any replication fails") {
  PointResult p;
  p.replications = {replication(1, 10, true), replication(2, 14, true)};
  CHECK(p.ok());
  CHECK(p.meets_sla(false));
  CHECK(p.metric(0).mean == Approx(12));
  // Two samples 10 and 14: s = 2 sqrt(2), half width t_{0.975,1} s / sqrt(2) = 12.706 * 2.
  CHECK(p.metric(0).half_width_95 == Approx(12.706 * 2).epsilon(1e-4));
  p.replications.push_back(replication(3, 12, false));
  CHECK_FALSE(p.meets_sla(false));
  p.replications.back().error = "does not fit";
  CHECK_FALSE(p.ok());
  CHECK(p.error() == "seed 3: does not fit");
}

TEST_CASE("a broken invariant stays an internal error through replications and names the point once") {
  // A Zipf exponent the parser refuses (its tail underflows): given to the simulator directly, the routing
  // sampler's invariant breaks, a bug-class error as any other.
  const std::string file = MOESIM_SOURCE_DIR "/scenarios/tiny/tiny_poisson_ep4.json";
  ScenarioSpec spec = load_scenario(file, {}).spec;
  spec.workload.popularity.kind = PopularitySpec::Kind::kZipf;
  spec.workload.popularity.zipf_exponent = 800;
  TaskPool pool(2);
  const std::vector<PointResult> results = run_points(pool, {spec}, {2}, {"point A"}, PointSettings{});
  REQUIRE(results.size() == 1);
  REQUIRE(results[0].internal_error());
  const std::string error = results[0].replications[0].error;
  CHECK(error.rfind("internal error: ", 0) == 0);
  CHECK(error.find("internal error: internal error") == std::string::npos);
  REQUIRE_THROWS_AS(throw_if_internal(results, {"point A"}), InternalError);
  REQUIRE_THROWS_WITH(
      throw_if_internal(results, {"point A"}),
      Catch::StartsWith("internal error: point A (seed " + std::to_string(spec.run.seed) + "): "));
  // The flag survives the text encoding (MPI ranks), and input errors are not internal.
  Replication r = results[0].replications[0];
  CHECK(decode_replication(encode_replication(r)).internal);
  PointResult input;
  input.replications.push_back(replication(1, 0, false));
  input.replications.back().error = "run.requests: bad";
  REQUIRE_NOTHROW(throw_if_internal({input}, {"p"}));
  // Text that is not UTF-8 in an error still encodes (replaced), never a throw in a worker thread.
  r.error = "bad \xff byte";
  CHECK_NOTHROW(decode_replication(encode_replication(r)));
}
