// loadgen's figures (sim/serving/report/loadgen.h) on hand-built completions, and its early-stopping rule
// against the binomial form of the incomplete beta, computed here independently.
#include "sim/serving/report/loadgen.h"

#include <catch2/catch.hpp>
#include <cmath>
#include <string>
#include <vector>

#include "sim/engine/check.h"
#include "sim/scenario/scenario_parser.h"

using namespace moesim;

namespace {

// Four queries, given out of issue order. Query (issued, first token, done, tokens):
//   A (0, 0.5, 10.5, 101): TTFT 0.5, TPOT 10 / 100 = 0.1, latency 10.5
//   B (1, 1.2, 5.2, 21):   TTFT 0.2, TPOT 4 / 20 = 0.2,   latency 4.2
//   C (2, 2.1, 20.1, 11):  TTFT 0.1, TPOT 18 / 10 = 1.8,  latency 18.1 (the latest completion)
//   D (3, 3.3, 8.3, 6):    TTFT 0.3, TPOT 5 / 5 = 1.0,    latency 5.3 (the final issued query)
std::vector<LoadgenQuery> four() {
  return {{2, 2.1, 20.1, 11}, {3, 3.3, 8.3, 6}, {0, 0.5, 10.5, 101}, {1, 1.2, 5.2, 21}};
}

// I_x(h, t + 1) for integers as a binomial tail: P(Binomial(h + t, x) >= h), summed in log space.
double ibeta_binomial(std::int64_t h, std::int64_t t, double x) {
  const std::int64_t n = h + t;
  double sum = 0;
  for (std::int64_t k = h; k <= n; ++k) {
    const double lc =
        std::lgamma(double(n + 1)) - std::lgamma(double(k + 1)) - std::lgamma(double(n - k + 1));
    sum += std::exp(lc + double(k) * std::log(x) + double(n - k) * std::log1p(-x));
  }
  return sum;
}

// The least h with that tail under 1 - c, by scanning h upward.
std::int64_t min_passing_by_scan(std::int64_t t, double p, double c) {
  std::int64_t h = 1;
  while (ibeta_binomial(h, t, p) >= 1 - c) ++h;
  return h;
}

}  // namespace

TEST_CASE("loadgen Server: completed tokens over the final issued query's completion, percentiles at n x q") {
  const LoadgenReport r = loadgen_summary(four(), 4, {LoadgenScenario::kServer, 2.0, 1.5, 0.99});
  CHECK(r.tokens == 101 + 21 + 11 + 6);
  // The final issued query (D) finished at 8.3 s, not the latest completion (C at 20.1 s).
  CHECK(r.final_query_done_s == Approx(8.3));
  CHECK(r.final_query_scheduled_s == Approx(3.0));
  CHECK(r.tokens_per_s == Approx(139 / 8.3));
  CHECK(r.samples_per_s == Approx(3 / 8.3));
  CHECK(r.scheduled_samples_per_s == Approx(3 / 3.0));
  CHECK(r.tokens_per_sample == Approx(139 / 4.0));
  // Sorted TTFT 0.1 0.2 0.3 0.5: index floor(4 x 0.5) = 2 and floor(4 x 0.99) = 3.
  CHECK(r.ttft.p50 == Approx(0.3));
  CHECK(r.ttft_at_percentile_s == Approx(0.5));
  CHECK(r.ttft.mean == Approx((0.5 + 0.2 + 0.1 + 0.3) / 4));
  // Sorted TPOT 0.1 0.2 1.0 1.8.
  CHECK(r.tpot.p50 == Approx(1.0));
  CHECK(r.tpot_at_percentile_s == Approx(1.8));
  CHECK(r.latency.mean == Approx((10.5 + 4.2 + 18.1 + 5.3) / 4));
  CHECK(r.max_latency_s == Approx(18.1));
  // TPOT 1.8 > 1.5: the constraint fails; four queries are far too few for early stopping (459 needed
  // with nothing over).
  CHECK(r.perf_constraints_met == false);
  CHECK(r.early_stopping_tpot.over == 1);
  CHECK(r.early_stopping_ttft.over == 0);
  CHECK_FALSE(r.early_stopping_ttft.met);
  CHECK_FALSE(r.valid);
  CHECK_FALSE(r.min_duration_met);
}

TEST_CASE("loadgen Offline: every token over the latest completion from the single issue") {
  const LoadgenReport r = loadgen_summary(four(), 4, {LoadgenScenario::kOffline, 2.0, 1.5, 0.99});
  CHECK(r.max_latency_s == Approx(20.1));
  CHECK(r.tokens_per_s == Approx(139 / 20.1));
  CHECK(r.samples_per_s == Approx(4 / 20.1));
  CHECK(r.latency.mean == Approx((10.5 + 5.2 + 20.1 + 8.3) / 4));  // from the issue at 0
  CHECK(r.valid);
  const LoadgenReport missing = loadgen_summary(four(), 5, {LoadgenScenario::kOffline, 2.0, 1.5, 0.99});
  CHECK_FALSE(missing.valid);  // a query never completed
}

TEST_CASE("loadgen early stopping: the fewest passing queries match the binomial tail") {
  // Nothing over the limit: 0.99^h < 0.01, h = ceil(ln 0.01 / ln 0.99) = 459.
  CHECK(early_stopping_min_passing(0, 0.99, 0, 0.99) == 459);
  CHECK(std::ceil(std::log(0.01) / std::log(0.99)) == 459);
  for (const std::int64_t t : {1, 5, 20, 100}) {
    INFO("t = " << t);
    CHECK(early_stopping_min_passing(t, 0.99, 0, 0.99) == min_passing_by_scan(t, 0.99, 0.99));
  }
  CHECK(early_stopping_min_passing(3, 0.9, 0, 0.99) == min_passing_by_scan(3, 0.9, 0.99));
}

TEST_CASE("loadgen Server verdict: valid exactly when the issued queries reach h + t") {
  // n queries issued one per second, each 11 tokens, TPOT 0.05 s except the first `over` at 0.2 s.
  const auto run = [](int n, int over) {
    std::vector<LoadgenQuery> q;
    for (int i = 0; i < n; ++i) {
      const double tpot = i < over ? 0.2 : 0.05;
      q.push_back({double(i), i + 0.1, i + 0.1 + 10 * tpot, 11});
    }
    return loadgen_summary(q, n, {LoadgenScenario::kServer, 2.0, 0.08, 0.99});
  };
  const std::int64_t t = 3;
  const std::int64_t need = min_passing_by_scan(t, 0.99, 0.99) + t;
  const LoadgenReport at = run(int(need), int(t));
  CHECK(at.early_stopping_tpot.over == t);
  CHECK(at.early_stopping_tpot.met);
  CHECK(at.perf_constraints_met);  // 3 of ~1,000 over: the P99 element is within the limit
  CHECK(at.valid);
  const LoadgenReport short_of = run(int(need - 1), int(t));
  CHECK_FALSE(short_of.early_stopping_tpot.met);
  CHECK_FALSE(short_of.valid);
}

TEST_CASE("run.measure: unknown values and arrivals loadgen does not issue are refused by their path") {
  static const std::string path = std::string(MOESIM_SOURCE_DIR) + "/scenarios/default.json";
  const auto error = [&](const std::vector<std::string>& o) -> std::string {
    try {
      (void)load_scenario(path, o);
    } catch (const InputError& e) {
      return e.what();
    }
    return "";
  };
  CHECK_THAT(
      error({"run.measure=\"mlperf\""}),
      Catch::Contains("run.measure") && Catch::Contains("known: window, mlperf_server, mlperf_offline"));
  CHECK_THAT(error({"run.measure=\"mlperf_offline\""}),
             Catch::Contains("run.measure") && Catch::Contains("closed_loop"));
  CHECK_THAT(error({"run.measure=\"mlperf_server\"", "run.max_drain_s=10"}),
             Catch::Contains("run.max_drain_s"));
  CHECK_THAT(error({"run.measure=\"mlperf_server\"", "sla.percentile=100"}), Catch::Contains("run.measure"));
  CHECK(load_scenario(path, {"run.measure=\"mlperf_server\""}).spec.run.measure == RunMeasure::kMlperfServer);
}
