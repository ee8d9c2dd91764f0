// Replications over seeds: the Student-t interval against the textbook formula and t table, its coverage
// on normal samples, and `moesim run/sweep --seeds` through the real binary (means and intervals of the
// per-seed reports, the run.seeds scenario key, the _ci95 columns).
#include "sim/app/replications.h"

#include <algorithm>
#include <catch2/catch.hpp>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <random>
#include <string>
#include <vector>

#include "sim/scenario/json_reader.h"
#include "tests/app/cli_support.h"

using namespace moesim;
namespace fs = std::filesystem;

namespace {

struct Tmp : moesim_test::TempDir {
  Tmp() : TempDir("moesim-replications-test-") {}
};

// Two-sided 95% quantiles t_{0.975, dof} from the printed Student t table (e.g. NIST/SEMATECH e-Handbook
// of Statistical Methods, table 1.3.6.7.2).
struct TableRow {
  int dof;
  double t975;
};
constexpr TableRow kTTable[] = {{1, 12.706}, {2, 4.303}, {4, 2.776}, {9, 2.262}, {29, 2.045}, {100, 1.984}};

}  // namespace

TEST_CASE("the Student t quantile matches the printed table") {
  for (const TableRow& row : kTTable) {
    INFO("dof " << row.dof);
    CHECK(student_t_quantile(0.975, row.dof) == Approx(row.t975).margin(5e-4));
  }
  // Symmetry, and the normal limit for many degrees of freedom (z_{0.975} = 1.95996).
  CHECK(student_t_quantile(0.025, 7) == Approx(-student_t_quantile(0.975, 7)));
  CHECK(student_t_quantile(0.975, 100000) == Approx(1.95996).margin(1e-4));
}

TEST_CASE("the 95% interval of known samples is t times the standard error") {
  // 1..5: mean 3, sample variance ((4 + 1 + 0 + 1 + 4) / 4) = 2.5, standard error sqrt(2.5 / 5).
  const MeanInterval v = mean_ci95({1, 2, 3, 4, 5});
  CHECK(v.n == 5);
  CHECK(v.mean == Approx(3.0));
  CHECK(v.half_width_95 == Approx(2.776 * std::sqrt(2.5 / 5)).epsilon(2e-4));
  // Two samples: mean 15, s = |20 - 10| / sqrt(2), half width t_{0.975,1} s / sqrt(2) = 12.706 * 5.
  const MeanInterval two = mean_ci95({10, 20});
  CHECK(two.mean == Approx(15.0));
  CHECK(two.half_width_95 == Approx(12.706 * 5).epsilon(1e-4));
  // Identical samples: no spread, a zero-width interval.
  CHECK(mean_ci95({7, 7, 7}).half_width_95 == 0.0);
}

TEST_CASE("one sample has a mean but no interval, and no sample has neither") {
  const MeanInterval one = mean_ci95({4.5});
  CHECK(one.mean == 4.5);
  CHECK(std::isnan(one.half_width_95));
  const MeanInterval none = mean_ci95({});
  CHECK(none.n == 0);
  CHECK(std::isnan(none.mean));
}

TEST_CASE("the 95% interval covers the true mean of normal samples about 95% of the time") {
  // 4,000 intervals of 5 samples each from N(10, 3^2): the count covering 10 is Binomial(4000, 0.95),
  // standard deviation sqrt(4000 * 0.95 * 0.05) = 13.8, so 3,800 +- 55 holds at four sigma.
  std::mt19937_64 rng(12345);
  std::normal_distribution<double> normal(10.0, 3.0);
  int covered = 0;
  constexpr int kTrials = 4000;
  for (int t = 0; t < kTrials; ++t) {
    std::vector<double> xs(5);
    for (double& x : xs) x = normal(rng);
    const MeanInterval v = mean_ci95(xs);
    covered += std::abs(v.mean - 10.0) <= v.half_width_95 ? 1 : 0;
  }
  CHECK(covered == Approx(0.95 * kTrials).margin(55));
}

TEST_CASE("run --seeds 3 reports the mean and interval of the three seeds' own runs") {
  const Tmp t;
  const std::string scenario = "scenarios/tiny/tiny_poisson_ep4.json --set run.requests=80";
  const auto r = moesim_test::run_moesim(
      t, "run " + scenario + " --seed 5 --seeds 3 -j 2 --out " + (t.dir / "rep").string());
  INFO(r.out << r.err);
  REQUIRE(r.code == 0);
  CHECK_THAT(r.out, Catch::Contains("3 seed(s) from 5") && Catch::Contains("\u00b1"));
  const Json j = load_json_file((t.dir / "rep" / "replications.json").string());
  REQUIRE(j["replications"].size() == 3);
  std::vector<double> tpot;
  std::vector<double> throughput;
  for (int k = 0; k < 3; ++k) {
    const Json& rep = j["replications"][k];
    CHECK(rep["seed"] == 5 + k);
    // Each replication is exactly the single run with that seed.
    const auto one =
        moesim_test::run_moesim(t, "run " + scenario + " -q --seed " + std::to_string(5 + k) + " --out " +
                                       (t.dir / ("one" + std::to_string(k))).string());
    REQUIRE(one.code == 0);
    const Json single = load_json_file((t.dir / ("one" + std::to_string(k)) / "report.json").string());
    CHECK(rep["report"]["fingerprint"] == single["fingerprint"]);
    tpot.push_back(single["latency"]["tpot"]["p99_s"].get<double>() * 1e3);
    throughput.push_back(single["throughput"]["output_tokens_per_s"].get<double>());
  }
  // The summary against the formula computed here from the single runs.
  for (const auto& [name, xs] : {std::pair{"tpot_p99_ms", tpot}, std::pair{"output_tok_s", throughput}}) {
    INFO(name);
    double mean = 0;
    for (const double x : xs) mean += x / 3;
    double sq = 0;
    for (const double x : xs) sq += (x - mean) * (x - mean);
    const double half = 4.303 * std::sqrt(sq / 2) / std::sqrt(3.0);  // t_{0.975, 2} = 4.303
    CHECK(j["summary"][name]["mean"].get<double>() == Approx(mean));
    CHECK(j["summary"][name]["ci95"].get<double>() == Approx(half).epsilon(2e-4));
    CHECK(j["summary"][name]["n"] == 3);
  }
}

TEST_CASE("the scenario key run.seeds replicates like --seeds, and a bad value names the key") {
  const Tmp t;
  const auto r = moesim_test::run_moesim(
      t,
      "sweep scenarios/tiny/tiny_poisson_ep4.json --set run.requests=60 --set run.seeds=2 "
      "--set deployment.max_batch_size=8,32 -j 2 --out " +
          (t.dir / "s").string());
  INFO(r.out << r.err);
  REQUIRE(r.code == 0);
  std::ifstream f(t.dir / "s" / "sweep.csv");
  std::string header;
  std::getline(f, header);
  CHECK_THAT(header, Catch::Contains(",output_tok_s,output_tok_s_ci95,") &&
                         Catch::Contains(",ttft_p99_ms,ttft_p99_ms_ci95,") &&
                         Catch::Contains(",tpot_p99_ms,tpot_p99_ms_ci95,") && Catch::EndsWith(",seeds"));
  std::string row;
  std::getline(f, row);
  CHECK_THAT(row, Catch::StartsWith("60,2,8,ok,") && Catch::EndsWith(",2"));
  const Json j = load_json_file((t.dir / "s" / "sweep.json").string());
  CHECK(j["rows"][0]["replications"].size() == 2);
  CHECK(j["rows"][0]["replications"][1]["seed"] == 12);  // the scenario's run.seed 11, then 12
  CHECK(j["scenario"]["run"]["seeds"] == 2);

  const auto bad = moesim_test::run_moesim(t, "run scenarios/tiny/tiny_poisson_ep4.json --set run.seeds=0");
  CHECK(bad.code == 2);
  CHECK_THAT(bad.err, Catch::Contains("run.seeds") && Catch::Contains("from 1 to"));
}
