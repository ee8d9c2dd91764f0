// The calibration fitter: recovers known parameters from synthetic points, flags anomalies, reports
// residuals and leave-one-out errors.
#include "hwmodels/calibration_fit.h"

#include <algorithm>
#include <catch2/catch.hpp>
#include <cmath>
#include <random>
#include <string>

namespace moesim {
namespace {

// GEMM points of shape (n, k) for M = 1, 4, ..., 4096, timed by `truth` (times `noise(rng)` when given).
std::vector<CalibrationPoint> gemm_sweep(const RooflineFit& truth, std::int64_t n, std::int64_t k,
                                         std::mt19937_64* rng = nullptr, double noise = 0) {
  std::vector<CalibrationPoint> pts;
  std::uniform_real_distribution<double> u(-noise, noise);
  for (std::int64_t m = 1; m <= 4096; m *= 4) {
    const BytesFlops bf = work_bytes_flops(GemmWork{.m = m, .n = n, .k = k, .weights = Precision::kBF16});
    CalibrationPoint p;
    p.op = CostOp::kGemm;
    p.sweep = "gemm N=" + std::to_string(n) + " K=" + std::to_string(k);
    p.label = "M=" + std::to_string(m);
    p.shape_a = n;
    p.shape_b = k;
    p.bytes = bf.bytes;
    p.flops = bf.flops;
    p.seconds = truth.seconds(bf.bytes, bf.flops) * (rng != nullptr ? 1.0 + u(*rng) : 1.0);
    pts.push_back(p);
  }
  return pts;
}

const RooflineFit kTruth{.fixed_s = 6e-6, .bytes_per_s = 3.5e12, .flops_per_s = 650e12, .sharpness = 3.0};

std::vector<CalibrationPoint> three_shapes(std::mt19937_64* rng = nullptr, double noise = 0) {
  std::vector<CalibrationPoint> pts;
  for (auto [n, k] : {std::pair<std::int64_t, std::int64_t>{4096, 7168}, {7168, 2048}, {24576, 1536}}) {
    auto s = gemm_sweep(kTruth, n, k, rng, noise);
    pts.insert(pts.end(), s.begin(), s.end());
  }
  return pts;
}

}  // namespace

TEST_CASE("the fitter recovers the parameters that generated noiseless points") {
  const auto pts = three_shapes();
  FitOptions opt;
  opt.prior_weight = 0;
  const RooflineFit f = fit_operation(pts, opt);
  CHECK(f.fixed_s == Approx(kTruth.fixed_s).epsilon(0.02));
  CHECK(f.bytes_per_s == Approx(kTruth.bytes_per_s).epsilon(0.02));
  CHECK(f.flops_per_s == Approx(kTruth.flops_per_s).epsilon(0.02));
  CHECK(f.sharpness == Approx(kTruth.sharpness).epsilon(0.05));
}

TEST_CASE("with 2% noise every point is reproduced within a few percent") {
  std::mt19937_64 rng(7);
  const auto pts = three_shapes(&rng, 0.02);
  GpuProfile profile;
  profile.fits = fit_all(pts, FitOptions{});
  for (const auto& r : residual_report(profile, pts)) {
    CHECK(r.points == 7);
    CHECK(r.median_rel_error < 0.02);
    CHECK(r.max_rel_error < 0.05);
  }
}

TEST_CASE("fit_all adds a fit per measured shape, which the profile prefers for that shape") {
  const auto pts = three_shapes();
  GpuProfile profile;
  profile.fits = fit_all(pts, FitOptions{});
  REQUIRE(profile.fits.size() == 4);
  CHECK(profile.find_fit(CostOp::kGemm, Precision::kBF16, 7168, 2048)->shape_a == 7168);
  CHECK(profile.find_fit(CostOp::kGemm, Precision::kBF16, 1000, 1000)->shape_a == 0);
}

TEST_CASE("a point slower than a point with twice the work is an anomaly") {
  auto pts = gemm_sweep(kTruth, 4096, 7168);
  pts[3].seconds = pts[4].seconds * 1.2;  // M=64 slower than M=256 by 20%
  flag_anomalies(pts, 0.05);
  for (std::size_t i = 0; i < pts.size(); ++i) CHECK(pts[i].is_anomaly == (i == 3));
}

TEST_CASE("a slow component kernel makes its point an anomaly even when the total is monotone") {
  auto pts = gemm_sweep(kTruth, 4096, 7168);
  for (auto& p : pts) p.parts_s = {0.6 * p.seconds, 0.4 * p.seconds};
  pts[2].parts_s[0] = pts[3].parts_s[0] * 1.1;
  flag_anomalies(pts, 0.05);
  CHECK(pts[2].is_anomaly);
  CHECK_FALSE(pts[1].is_anomaly);
}

TEST_CASE("anomalies are left out of the fit and out of the max, but not of the median") {
  auto pts = three_shapes();
  pts[2].seconds *= 1.5;
  pts[2].is_anomaly = true;
  GpuProfile profile;
  FitOptions opt;
  opt.prior_weight = 0;
  profile.fits = {{.op = CostOp::kGemm,
                   .precision = Precision::kBF16,
                   .shape_a = 0,
                   .shape_b = 0,
                   .params = fit_operation(pts, opt)}};
  const auto rows = residual_report(profile, pts);
  CHECK(rows[0].anomalies == 1);
  CHECK(rows[0].max_rel_error < 0.01);
  CHECK(rows[0].max_rel_error_all == Approx(1.0 - 1.0 / 1.5).epsilon(0.03));
}

TEST_CASE("leaving one shape out, the others predict it") {
  const auto pts = three_shapes();
  const SweepResidual r = leave_one_out(pts, "gemm N=7168 K=2048", FitOptions{});
  CHECK(r.sweep == "gemm N=7168 K=2048");
  CHECK(r.points == 7);
  CHECK(r.max_rel_error < 0.02);
}

TEST_CASE("an unknown sweep or too few points is an error") {
  const auto pts = three_shapes();
  CHECK_THROWS_AS(leave_one_out(pts, "gemm N=1 K=1", FitOptions{}), std::invalid_argument);
  const std::vector<CalibrationPoint> one(pts.begin(), pts.begin() + 1);
  CHECK_THROWS_AS(fit_operation(one, FitOptions{}), std::invalid_argument);
}

TEST_CASE(
    "the expert FFN fit takes its prior from the GEMM fit when one shape cannot separate fixed cost "
    "from bandwidth") {
  // One expert shape, memory-bound only: fixed + bytes / bandwidth is one number per shape.
  auto pts = three_shapes();
  const RooflineFit ffn{.fixed_s = 2 * kTruth.fixed_s,
                        .bytes_per_s = kTruth.bytes_per_s,
                        .flops_per_s = kTruth.flops_per_s,
                        .sharpness = 3};
  for (std::int64_t t = 1; t <= 8192; t *= 2) {
    const BytesFlops bf = work_bytes_flops(
        ExpertFfnWork{.tokens = t, .hidden = 7168, .inter = 2048, .weights = Precision::kBF16});
    CalibrationPoint p;
    p.op = CostOp::kExpertFfn;
    p.sweep = "expert_ffn H=7168 I=2048";
    p.shape_a = 7168;
    p.shape_b = 2048;
    p.bytes = bf.bytes;
    p.flops = bf.flops;
    p.seconds = ffn.seconds(bf.bytes, bf.flops);
    pts.push_back(p);
  }
  GpuProfile profile;
  profile.fits = fit_all(pts, FitOptions{});
  const OperationFit* f = profile.find_fit(CostOp::kExpertFfn, Precision::kBF16);
  REQUIRE(f != nullptr);
  CHECK(f->params.fixed_s == Approx(ffn.fixed_s).epsilon(0.05));
  CHECK(f->params.bytes_per_s == Approx(ffn.bytes_per_s).epsilon(0.05));
}

TEST_CASE("the residual table has a line per sweep") {
  const auto pts = three_shapes();
  GpuProfile profile;
  profile.fits = fit_all(pts, FitOptions{});
  const std::string table = format_residuals(residual_report(profile, pts));
  CHECK(std::count(table.begin(), table.end(), '\n') == 4);
  CHECK(table.find("gemm N=24576 K=1536") != std::string::npos);
}

}  // namespace moesim
