// Drifting popularity: the law's shape is kept, rank correlation decays with the half-life as the
// bivariate-normal theory says, phases decorrelate, and nothing moves without drift.
#include "workloads/popularity_drift.h"

#include <algorithm>
#include <catch2/catch.hpp>
#include <cmath>
#include <numbers>
#include <numeric>
#include <vector>

namespace moesim {
namespace {

// Spearman rank correlation between two probability rows (no ties).
double spearman(std::span<const double> a, std::span<const double> b) {
  const std::size_t n = a.size();
  auto ranks = [n](std::span<const double> v) {
    std::vector<int> idx(n);
    std::iota(idx.begin(), idx.end(), 0);
    std::sort(idx.begin(), idx.end(),
              [&](int x, int y) { return v[static_cast<std::size_t>(x)] > v[static_cast<std::size_t>(y)]; });
    std::vector<double> r(n);
    for (std::size_t i = 0; i < n; ++i) r[static_cast<std::size_t>(idx[i])] = static_cast<double>(i);
    return r;
  };
  const auto ra = ranks(a);
  const auto rb = ranks(b);
  double d2 = 0;
  for (std::size_t i = 0; i < n; ++i) d2 += (ra[i] - rb[i]) * (ra[i] - rb[i]);
  const double nd = static_cast<double>(n);
  return 1.0 - 6.0 * d2 / (nd * (nd * nd - 1.0));
}

double mean_spearman(const std::vector<double>& before, const DriftingPopularity& d) {
  double s = 0;
  const auto n = static_cast<std::size_t>(d.experts());
  for (int l = 0; l < d.layers(); ++l) {
    s += spearman(std::span<const double>(before).subspan(static_cast<std::size_t>(l) * n, n), d.layer(l));
  }
  return s / d.layers();
}

std::vector<double> snapshot(const DriftingPopularity& d) {
  std::vector<double> v;
  for (int l = 0; l < d.layers(); ++l) v.insert(v.end(), d.layer(l).begin(), d.layer(l).end());
  return v;
}

const PopularitySpec kZipf{.kind = PopularitySpec::Kind::kZipf, .zipf_exponent = 0.8};

}  // namespace

TEST_CASE("drifting popularity starts at the base and keeps its shape") {
  const ExpertPopularity base(kZipf, 4, 256, 8, Rng(1));
  DriftingPopularity d(base, {.half_life_s = 10.0}, Rng(2));
  for (int l = 0; l < 4; ++l) {
    CHECK(std::equal(d.layer(l).begin(), d.layer(l).end(), base.layer(l).begin()));
  }
  d.advance_to(25.0);
  for (int l = 0; l < 4; ++l) {
    std::vector<double> a(d.layer(l).begin(), d.layer(l).end());
    std::vector<double> b(base.layer(l).begin(), base.layer(l).end());
    std::sort(a.begin(), a.end());
    std::sort(b.begin(), b.end());
    CHECK(a == b);
  }
}

TEST_CASE("after one half-life the rank correlation is (6/pi) asin(1/4), as for correlated normals") {
  // Scores with correlation rho = 1/2 have Spearman correlation (6/pi) asin(rho/2) = 0.4826.
  const ExpertPopularity base(kZipf, 64, 256, 8, Rng(3));
  DriftingPopularity d(base, {.half_life_s = 5.0}, Rng(4));
  const auto t0 = snapshot(d);
  d.advance_to(5.0);
  CHECK(mean_spearman(t0, d) == Approx(6.0 / std::numbers::pi * std::asin(0.25)).margin(0.03));
  const auto t1 = snapshot(d);
  d.advance_to(5.0 + 10.0);  // two more half-lives: rho = 1/4
  CHECK(mean_spearman(t1, d) == Approx(6.0 / std::numbers::pi * std::asin(0.125)).margin(0.03));
}

TEST_CASE("a phase change decorrelates the hot set and no drift means no change") {
  const ExpertPopularity base(kZipf, 32, 256, 8, Rng(5));
  DriftingPopularity phases(base, {.phase_times_s = {100.0}}, Rng(6));
  const auto t0 = snapshot(phases);
  phases.advance_to(99.0);
  CHECK(phases.version() == 0);
  CHECK(snapshot(phases) == t0);
  phases.advance_to(100.0);
  CHECK(phases.version() == 1);
  CHECK(std::abs(mean_spearman(t0, phases)) < 0.05);
  const auto t1 = snapshot(phases);
  phases.advance_to(1e6);
  CHECK(snapshot(phases) == t1);
}

TEST_CASE("drift updates no more often than the update interval") {
  const ExpertPopularity base(kZipf, 2, 16, 2, Rng(7));
  DriftingPopularity d(base, {.half_life_s = 1.0, .update_interval_s = 0.5}, Rng(8));
  d.advance_to(0.2);
  CHECK(d.version() == 0);
  d.advance_to(0.5);
  CHECK(d.version() == 1);
  d.advance_to(0.9);
  CHECK(d.version() == 1);
  d.advance_to(1.0);
  CHECK(d.version() == 2);
}

}  // namespace moesim
