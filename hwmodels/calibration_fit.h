// Fits the per-operation parameters of a GpuProfile (RooflineFit, see profile_cost_model.h) to measured
// points by nonlinear least squares on relative (log) errors, and reports residuals and leave-one-out
// errors. Used by `moesim calibrate`; Eigen stays inside the .cpp.
#pragma once

#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "hwmodels/profile_cost_model.h"

namespace moesim {

struct FitOptions {
  // Weak Tikhonov prior, in log units: pulls fixed_s, bytes_per_s and flops_per_s toward given values (0 = no
  // prior on that one). With memory- and compute-bound points of several shapes the data dominate; with one
  // shape only, the fixed cost and the bandwidth are not separable from the data alone and the prior decides.
  double prior_bytes_per_s = 0;
  double prior_flops_per_s = 0;
  double prior_fixed_s = 0;
  double prior_weight = 0.03;
  // Weight of the priors fit_all derives from its own fits (expert FFN from GEMM, one shape from all shapes):
  // stronger, as they describe the same kernels.
  double derived_prior_weight = 0.1;
  // Weight of the prior a grouped-experts fit takes from the all-shapes BF16 expert FFN fit (bandwidth and
  // rate): the grouped measurements reach ~130 tokens per expert, so beyond that the single-expert sweeps
  // (up to 8192 tokens) decide the compute rate of the same tensor-core GEMMs.
  double grouped_prior_weight = 0.3;
  // A point is an anomaly when it (or one of its component kernels) is slower by more than this fraction
  // than a point of the same sweep that does at least as much work and at least twice as much of bytes or
  // flops: a library heuristic picking a slow kernel, which an implementation could avoid by padding.
  double anomaly_tolerance = 0.05;
  // The flops prior of a non-BF16 fit is prior_flops_per_s times its scale here (1 when absent).
  std::vector<std::pair<Precision, double>> prior_rate_scale;
};

// Sets CalibrationPoint::is_anomaly by the rule in FitOptions::anomaly_tolerance. O(n^2) per sweep.
void flag_anomalies(std::vector<CalibrationPoint>& points, double tolerance);

// Fits one operation to `points` (all of one op and precision; anomalies are skipped). Each sweep has the
// same total weight, whatever its number of points. Throws std::invalid_argument with fewer than two
// usable points.
[[nodiscard]] RooflineFit fit_operation(const std::vector<CalibrationPoint>& points, const FitOptions& opt);

// Fits every (op, precision) present in `points`: one all-shapes fit each (GEMM first), then, where an
// operation was measured at several shapes, one fit per shape with the all-shapes fit as its prior.
// The all-shapes expert FFN fit takes its prior from the all-shapes BF16 GEMM fit (an expert FFN is two
// GEMMs and an elementwise kernel: twice the GEMM fixed cost, the GEMM bandwidth and rate); that prior
// decides what one expert shape alone cannot (fixed cost versus bandwidth).
[[nodiscard]] std::vector<OperationFit> fit_all(const std::vector<CalibrationPoint>& points,
                                                const FitOptions& opt);

// Fixed cost per kernel of expert FFNs run as a loop (kExpertLoop points), the rest of each kernel's cost
// from `ffn` (the expert FFN fit of that shape): 1-D least squares on log errors (golden section).
[[nodiscard]] double fit_loop_fixed_s(const std::vector<CalibrationPoint>& loop_points,
                                      const RooflineFit& ffn);

// Predicted seconds of a measured point under `profile`; negative when the profile cannot cost it.
// The minimiser of a unimodal `cost` on [lo, hi] by golden-section search (Kiefer 1953), `iterations`
// shrinkings of the bracket by 0.618; the bracket's midpoint.
template <typename Cost>
[[nodiscard]] double golden_section_min(const Cost& cost, double lo, double hi, int iterations) {
  const double g = 0.6180339887498949;  // (sqrt(5) - 1) / 2
  for (int i = 0; i < iterations; ++i) {
    const double a = hi - g * (hi - lo);
    const double b = lo + g * (hi - lo);
    if (cost(a) < cost(b)) {
      hi = b;
    } else {
      lo = a;
    }
  }
  return 0.5 * (lo + hi);
}

[[nodiscard]] double predict_seconds(const GpuProfile& profile, const CalibrationPoint& p);

// Relative error |predicted - measured| / measured, summarised per sweep.
struct SweepResidual {
  CostOp op = CostOp::kGemm;
  Precision precision = Precision::kBF16;
  std::string sweep;
  int points = 0;
  int anomalies = 0;
  double median_rel_error = 0;   // over all points, anomalies included
  double max_rel_error = 0;      // over points that are not anomalies
  std::string worst_label;       // the point of max_rel_error
  double max_rel_error_all = 0;  // over all points, anomalies included
};
[[nodiscard]] std::vector<SweepResidual> residual_report(const GpuProfile& profile,
                                                         const std::vector<CalibrationPoint>& points);

// Leaves the points of `sweep` out, fits the rest with fit_all (so the all-shapes fit predicts the held-out
// shape), and reports the errors on `sweep`.
// Throws std::invalid_argument when the sweep is unknown or nothing would be left to fit.
[[nodiscard]] SweepResidual leave_one_out(const std::vector<CalibrationPoint>& points, std::string_view sweep,
                                          const FitOptions& opt);

// A fixed-width text table of `rows` (one line per sweep), for the CLI and CALIBRATION.md.
[[nodiscard]] std::string format_residuals(const std::vector<SweepResidual>& rows);

}  // namespace moesim
