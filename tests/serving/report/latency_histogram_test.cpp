// The streaming latency histogram: percentiles within its bucket resolution of the exact order statistics,
// merges equal to one histogram of both streams, weights as repeated samples.
#include "sim/serving/report/latency_histogram.h"

#include <algorithm>
#include <catch2/catch.hpp>
#include <cmath>
#include <vector>

#include "sim/engine/random.h"

using namespace moesim;

namespace {
// Buckets are equal in log(x) over [1e-7, 1e5] s, 2,400 of them: a bucket spans a factor
// (1e12)^(1/2400) = 1.0116, so a percentile read inside one is within 1.2% of any value in it.
constexpr double kResolution = 0.0116;
}  // namespace

TEST_CASE("an empty histogram reads zero") {
  const LatencyHistogram h;
  CHECK(h.count() == 0);
  CHECK(h.mean() == 0);
  CHECK(h.percentile(99) == 0);
}

TEST_CASE("percentiles of 1..10,000 ms are the order statistics within a bucket") {
  LatencyHistogram h;
  for (int i = 1; i <= 10000; ++i) h.add(i * 1e-3);
  CHECK(h.count() == 10000);
  CHECK(h.mean() == Approx(5.0005).epsilon(1e-12));  // (1 + 10,000) / 2 ms, summed exactly
  CHECK(h.max() == 10.0);
  for (const double q : {1.0, 10.0, 50.0, 90.0, 99.0, 99.9}) {
    INFO("q = " << q);
    const double exact = q / 100.0 * 10.0;  // the q-th percentile of 1..10,000 ms is q x 0.1 s
    CHECK(h.percentile(q) == Approx(exact).epsilon(kResolution));
  }
  CHECK(h.percentile(100) == 10.0);  // never past the largest sample
}

TEST_CASE("percentiles of an exponential sample follow -mean x ln(1 - q)") {
  Rng rng(7);
  LatencyHistogram h;
  std::vector<double> xs;
  for (int i = 0; i < 200000; ++i) {
    const double x = -0.05 * std::log(1.0 - rng.uniform());
    h.add(x);
    xs.push_back(x);
  }
  std::sort(xs.begin(), xs.end());
  for (const double q : {50.0, 95.0, 99.0}) {
    INFO("q = " << q);
    const double order = xs[static_cast<std::size_t>(q / 100.0 * static_cast<double>(xs.size())) - 1];
    CHECK(h.percentile(q) == Approx(order).epsilon(kResolution));
    // And the law's quantile, within the sampling error of 200,000 draws (about 1% at P99).
    CHECK(h.percentile(q) == Approx(-0.05 * std::log(1.0 - q / 100.0)).epsilon(0.03));
  }
}

TEST_CASE("merging two histograms gives the histogram of both streams") {
  LatencyHistogram a;
  LatencyHistogram b;
  LatencyHistogram both;
  Rng rng(3);
  for (int i = 0; i < 5000; ++i) {
    const double x = 1e-3 * std::exp(4.0 * rng.uniform());  // 1 ms .. 55 ms
    const double y = 0.5 * std::exp(2.0 * rng.uniform());   // 0.5 s .. 3.7 s: disjoint buckets
    a.add(x);
    b.add(y);
    both.add(x);
    both.add(y);
  }
  LatencyHistogram m = a;
  m.merge(b);
  CHECK(m.count() == both.count());
  CHECK(m.max() == both.max());
  CHECK(m.mean() == Approx(both.mean()).epsilon(1e-12));
  for (const double q : {0.1, 25.0, 49.9, 50.1, 75.0, 99.0, 100.0})
    CHECK(m.percentile(q) == both.percentile(q));
  // Merging into an empty one copies; merging an empty one changes nothing.
  LatencyHistogram e;
  e.merge(a);
  CHECK(e.percentile(90) == a.percentile(90));
  const double before = a.percentile(90);
  a.merge(LatencyHistogram{});
  CHECK(a.percentile(90) == before);
}

TEST_CASE("a weight counts as that many samples, and out-of-range values keep their exact mean") {
  LatencyHistogram w;
  LatencyHistogram r;
  w.add(0.2, 3.0);
  w.add(0.4);
  for (int i = 0; i < 3; ++i) r.add(0.2);
  r.add(0.4);
  CHECK(w.count() == 4);
  CHECK(w.mean() == Approx(0.25));
  for (const double q : {10.0, 75.0, 80.0, 100.0}) CHECK(w.percentile(q) == r.percentile(q));
  LatencyHistogram edge;
  edge.add(1e-9);  // below 100 ns: counted in the first bucket
  edge.add(2e5);   // above 1e5 s: the last bucket
  CHECK(edge.count() == 2);
  CHECK(edge.mean() == Approx((1e-9 + 2e5) / 2));
  CHECK(edge.max() == 2e5);
  CHECK(edge.percentile(1) <= 1.02e-7);
}
