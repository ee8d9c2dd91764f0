// The measurement series, window and output analysis (MSER-5, trend test, batch means) on series whose
// answer is known: a GPU busy through every step, events at known instants, a ramp of known length,
// draws of known mean.
#include "sim/serving/report/measurement.h"

#include <catch2/catch.hpp>
#include <cmath>
#include <random>
#include <vector>

using namespace moesim;

namespace {

// One replica of one GPU whose steps of `step_s` run back to back from 0 to `end_s`, busy for `busy_share`
// of each, with `flops` per step; arrivals end at `t1`.
MeasurementSeries busy_replica(double step_s, double busy_share, double flops, double t1, double end_s) {
  MeasurementSeries m(0.0, 1, 1, 1);
  for (double start = 0; start < end_s - 1e-12; start += step_s) {
    if (start > t1 && !m.arrivals_ended()) m.end_arrivals(t1);
    const std::vector<double> busy{busy_share * step_s}, f{flops}, b{0.0};
    m.step_span(0, 0, start, start + step_s, busy, f, b);
  }
  if (!m.arrivals_ended()) m.end_arrivals(t1);
  m.end_run(end_s);
  return m;
}

}  // namespace

TEST_CASE(
    "a GPU busy through every step is busy for the whole window, the step across its end by its overlap") {
  const double t1 = 20.05;  // inside a step of 0.3 s (19.8 to 20.1)
  const MeasurementSeries m = busy_replica(0.3, 1.0, 3.0, t1, 30.0);
  const WindowTotals w = m.sum(0, false);
  REQUIRE(w.gpu_busy_s[0] == Approx(t1).epsilon(1e-12));
  // FLOPs at 3 per 0.3 s step are spread evenly: 10 per second of the window.
  REQUIRE(w.gpu_flops[0] == Approx(10.0 * t1).epsilon(1e-12));
  REQUIRE(m.drain().gpu_busy_s[0] == Approx(30.0 - t1).epsilon(1e-12));
  // From any segment on: the window's length from that segment's start.
  const std::size_t k = m.full_segments() / 3;
  REQUIRE(m.sum(k, false).gpu_busy_s[0] == Approx(t1 - static_cast<double>(k) * m.width()).epsilon(1e-12));
  REQUIRE(m.segments().size() <= static_cast<std::size_t>(MeasurementSeries::kMaxSegments));
}

TEST_CASE("a run cut while a step runs counts only the step's part before the cut") {
  // Steps of 0.3 s to 30 s, the run stopped at 25.05: the drain holds 25.05 - t1 busy seconds.
  MeasurementSeries m(0.0, 1, 1, 1);
  for (double start = 0; start < 25.0; start += 0.3) {
    if (start > 10.0 && !m.arrivals_ended()) m.end_arrivals(10.0);
    const std::vector<double> busy{0.15}, f{0.0}, b{0.0};
    m.step_span(0, 0, start, start + 0.3, busy, f, b);
  }
  m.end_run(25.05);
  // Busy half of each step: half the time, spread evenly.
  REQUIRE(m.sum(0, false).gpu_busy_s[0] == Approx(0.5 * 10.0).epsilon(1e-12));
  REQUIRE(m.drain().gpu_busy_s[0] == Approx(0.5 * 15.05).epsilon(1e-12));
}

TEST_CASE("events land in the segment of their instant and merging segments loses none") {
  MeasurementSeries m(0.0, 1, 1, 1);
  const double t1 = 37.0;
  int before = 0;
  for (int i = 0; i < 5000; ++i) {
    const double t = (i + 0.5) * 0.01;  // never on a segment edge (edges are multiples of 2^-10 s)
    if (t > t1 && !m.arrivals_ended()) m.end_arrivals(t1);
    ++m.at(t).output_tokens;
    before += t < t1 ? 1 : 0;
  }
  m.end_run(50.0);
  REQUIRE(m.sum(0, false).output_tokens == before);
  REQUIRE(m.sum(0, true).output_tokens == 5000);
  const std::size_t k = m.full_segments() / 2;
  const double from = static_cast<double>(k) * m.width();
  int after_from = 0;
  for (int i = 0; i < 5000; ++i) {
    const double t = (i + 0.5) * 0.01;
    after_from += (t >= from && t < t1) ? 1 : 0;
  }
  REQUIRE(m.sum(k, false).output_tokens == after_from);
}

TEST_CASE("the number in system integrates to its time average, and the series starts at its origin") {
  MeasurementSeries m(2.0, 1, 1, 1);  // a warm-up override of 2 s: time before it is not in any window
  m.in_system(1.0, 1);
  m.in_system(3.0, 2);
  m.in_system(5.0, 0);
  m.end_arrivals(6.0);
  m.end_run(6.0);
  const WindowTotals w = m.sum(0, false);
  // From 2 s: 1 request for 1 s, 2 for 2 s, none for 1 s.
  REQUIRE(w.in_system_s == Approx(1.0 + 4.0));
  REQUIRE(w.covered_s == Approx(4.0));
}

TEST_CASE("MSER-5 truncates a linear ramp where it meets the stationary level") {
  // 100 batch means: a ramp from 0 to 10 over the first 20, then N(10, 1). Past the ramp, truncating
  // more only loses data; before its end the ramp's bias dominates the standard error.
  std::mt19937_64 rng(7);
  std::normal_distribution<double> noise(0.0, 1.0);
  for (int trial = 0; trial < 20; ++trial) {
    std::vector<double> y;
    for (int i = 0; i < 100; ++i) y.push_back((i < 20 ? 10.0 * i / 20.0 : 10.0) + noise(rng));
    const MserResult r = mser(y);
    INFO("trial " << trial);
    REQUIRE(r.truncate >= 14);
    REQUIRE(r.truncate <= 30);
    REQUIRE_FALSE(r.at_bound);
  }
}

TEST_CASE("MSER-5 on a series that never settles ends at its bound, half the series") {
  std::vector<double> y;
  for (int i = 0; i < 100; ++i) y.push_back(0.5 * i);
  const MserResult r = mser(y);
  REQUIRE(r.truncate == 50);
  REQUIRE(r.at_bound);
}

TEST_CASE("the trend test finds a known slope and rejects a flat series at its nominal rate") {
  std::mt19937_64 rng(11);
  std::normal_distribution<double> noise(0.0, 1.0);
  std::vector<double> y;
  for (int i = 0; i < 10; ++i) y.push_back(2.0 + 0.5 * i + noise(rng));
  const TrendTest t = trend_test(y);
  // OLS slope's standard error with sigma 1 over x = 0..9: 1 / sqrt(sum (x - 4.5)^2) = 1 / sqrt(82.5).
  REQUIRE(t.slope == Approx(0.5).margin(3.0 / std::sqrt(82.5)));
  REQUIRE(t.p_growth < 0.01);
  // Under no trend, a 1% one-sided test rejects 1% of i.i.d. series (binomial sd over 4000: 0.16%).
  int rejected = 0;
  const int trials = 4000;
  for (int k = 0; k < trials; ++k) {
    std::vector<double> z;
    for (int i = 0; i < 10; ++i) z.push_back(noise(rng));
    rejected += trend_test(z).p_growth < 0.01 ? 1 : 0;
  }
  REQUIRE(rejected / double(trials) == Approx(0.01).margin(0.005));
}

TEST_CASE("batch means of i.i.d. draws cover the true mean in about 95% of runs") {
  // 20 batches of 50 exponential draws of mean 1: the t interval's nominal coverage is 95%; over 2000
  // runs the binomial sd of the coverage is 0.5%.
  std::mt19937_64 rng(3);
  std::exponential_distribution<double> draw(1.0);
  int covered = 0;
  double lag1 = 0;
  const int runs = 2000;
  for (int k = 0; k < runs; ++k) {
    std::vector<double> x;
    for (int b = 0; b < 20; ++b) {
      double s = 0;
      for (int i = 0; i < 50; ++i) s += draw(rng);
      x.push_back(s / 50);
    }
    const BatchMeans bm = batch_means(x);
    covered += std::abs(bm.mean - 1.0) <= bm.half_width ? 1 : 0;
    lag1 += bm.lag1 / runs;
  }
  REQUIRE(covered / double(runs) == Approx(0.95).margin(0.02));
  // Independent batches: the lag-1 estimate's mean is about -1/b (its small-sample bias), near zero.
  REQUIRE(std::abs(lag1) < 0.1);
}

TEST_CASE("a ratio whose batches all hold it has no spread") {
  const BatchMeans r = batch_ratio({1, 2, 3, 4}, {10, 20, 30, 40});
  REQUIRE(r.mean == Approx(0.1));
  REQUIRE(r.half_width == Approx(0.0).margin(1e-12));
  REQUIRE(student_t_quantile(0.975, 1e6) == Approx(1.959964).epsilon(1e-5));
}

TEST_CASE("an origin that is not a binary fraction still splits time into segments that end after it") {
  // run.warmup_s = 40 / 6: segment edges origin + k x width round onto instants; every piece must advance.
  const double origin = 40.0 / 6.0;
  MeasurementSeries m(origin, 1, 1, 1);
  for (double start = 0; start < 40.0 - 1e-12; start += 0.0371) {
    const std::vector<double> busy{0.0371}, f{0.0}, b{0.0};
    m.step_span(0, 0, start, start + 0.0371, busy, f, b);
    m.in_system(start, 3);
  }
  m.end_arrivals(40.0);
  m.end_run(41.0);
  const WindowTotals w = m.sum(0, false);
  REQUIRE(w.gpu_busy_s[0] == Approx(40.0 - origin).epsilon(1e-9));
  REQUIRE(w.in_system_s == Approx(3.0 * (40.0 - origin)).epsilon(1e-9));
}
