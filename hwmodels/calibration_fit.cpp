#include "hwmodels/calibration_fit.h"

#include <Eigen/Dense>
#include <algorithm>
#include <array>
#include <cmath>
#include <cstdio>
#include <limits>
#include <map>
#include <stdexcept>

namespace moesim {

namespace {

// Parameters in log space, so every one stays positive: log fixed_s, log bytes_per_s, log flops_per_s,
// log(sharpness - 1) (sharpness >= 1: never below the no-overlap sum). A parameter the data do not
// determine (the rate of a copy kernel, the sharpness of a purely memory-bound sweep) stays at its start.
constexpr int kParams = 4;
using Theta = Eigen::Matrix<double, kParams, 1>;

// Sharpness above 32 is the max to within 2.2% (2^(1/32)); the cap keeps an unbounded direction finite.
constexpr double kMaxSharpness = 32;

RooflineFit to_fit(const Theta& t) {
  return {.fixed_s = std::exp(t[0]),
          .bytes_per_s = std::exp(t[1]),
          .flops_per_s = std::exp(t[2]),
          .sharpness = std::min(1.0 + std::exp(t[3]), kMaxSharpness)};
}

struct Problem {
  std::vector<const CalibrationPoint*> pts;
  std::vector<double> weight;  // 1 / sqrt(points in the sweep): each sweep weighs the same
  FitOptions opt;

  [[nodiscard]] Eigen::Index rows() const { return static_cast<Eigen::Index>(pts.size()) + 3; }

  [[nodiscard]] Eigen::VectorXd residuals(const Theta& t) const {
    Eigen::VectorXd r(rows());
    const RooflineFit f = to_fit(t);
    for (std::size_t i = 0; i < pts.size(); ++i) {
      const double pred = f.seconds(pts[i]->bytes, pts[i]->flops);
      r[static_cast<Eigen::Index>(i)] = weight[i] * std::log(pred / pts[i]->seconds);
    }
    const auto n = static_cast<Eigen::Index>(pts.size());
    const double w = opt.prior_weight;
    r[n] = opt.prior_bytes_per_s > 0 ? w * (t[1] - std::log(opt.prior_bytes_per_s)) : 0.0;
    r[n + 1] = opt.prior_flops_per_s > 0 ? w * (t[2] - std::log(opt.prior_flops_per_s)) : 0.0;
    r[n + 2] = opt.prior_fixed_s > 0 ? w * (t[0] - std::log(opt.prior_fixed_s)) : 0.0;
    return r;
  }

  // Central differences: the model is cheap and smooth in log space.
  [[nodiscard]] Eigen::MatrixXd jacobian(const Theta& t) const {
    Eigen::MatrixXd j(rows(), kParams);
    constexpr double kStep = 1e-6;
    for (int c = 0; c < kParams; ++c) {
      Theta hi = t;
      Theta lo = t;
      hi[c] += kStep;
      lo[c] -= kStep;
      j.col(c) = (residuals(hi) - residuals(lo)) / (2 * kStep);
    }
    return j;
  }
};

// Levenberg-Marquardt (Marquardt 1963; Nocedal & Wright, Numerical Optimization, 2nd ed., sec. 10.3):
// each step is the linear least-squares problem [J; sqrt(lambda) D] d = -[r; 0], solved by Householder QR.
Theta levenberg_marquardt(const Problem& pb, Theta t) {
  double lambda = 1e-3;
  double cost = pb.residuals(t).squaredNorm();
  for (int iter = 0; iter < 300; ++iter) {
    const Eigen::VectorXd r = pb.residuals(t);
    const Eigen::MatrixXd j = pb.jacobian(t);
    const Eigen::VectorXd scale = j.colwise().norm().transpose().cwiseMax(1e-12);
    bool improved = false;
    while (lambda < 1e12) {
      Eigen::MatrixXd a(pb.rows() + kParams, kParams);
      a << j, (std::sqrt(lambda) * scale).asDiagonal().toDenseMatrix();
      Eigen::VectorXd b = Eigen::VectorXd::Zero(pb.rows() + kParams);
      b.head(pb.rows()) = -r;
      const Theta step = a.householderQr().solve(b);
      const Theta trial = t + step;
      const double trial_cost = pb.residuals(trial).squaredNorm();
      if (std::isfinite(trial_cost) && trial_cost < cost) {
        const double gain = cost - trial_cost;
        t = trial;
        cost = trial_cost;
        lambda = std::max(lambda / 3.0, 1e-12);
        improved = true;
        if (gain < 1e-14 * std::max(cost, 1e-30) || step.norm() < 1e-10) return t;
        break;
      }
      lambda *= 4.0;
    }
    if (!improved) return t;
  }
  return t;
}

std::vector<double> sweep_weights(const std::vector<const CalibrationPoint*>& pts) {
  std::map<std::string, int> count;
  for (const auto* p : pts) ++count[p->sweep];
  std::vector<double> w;
  w.reserve(pts.size());
  for (const auto* p : pts) w.push_back(1.0 / std::sqrt(static_cast<double>(count[p->sweep])));
  return w;
}

double median(std::vector<double> v) {
  if (v.empty()) return 0;
  std::sort(v.begin(), v.end());
  const std::size_t n = v.size();
  return n % 2 == 1 ? v[n / 2] : 0.5 * (v[n / 2 - 1] + v[n / 2]);
}

bool does_more(const CalibrationPoint& big, const CalibrationPoint& small) {
  return big.bytes >= small.bytes && big.flops >= small.flops &&
         (big.bytes >= 2 * small.bytes || big.flops >= 2 * small.flops);
}

bool same_kind(const CalibrationPoint& a, const CalibrationPoint& b) {
  return a.op == b.op && a.precision == b.precision;
}

}  // namespace

void flag_anomalies(std::vector<CalibrationPoint>& points, double tolerance) {
  const double f = 1.0 + tolerance;
  for (auto& p : points) {
    p.is_anomaly = false;
    for (const auto& q : points) {
      if (&q == &p || q.sweep != p.sweep || q.op != p.op || !does_more(q, p)) continue;
      bool slower = p.seconds > f * q.seconds;
      if (p.parts_s.size() == q.parts_s.size()) {
        for (std::size_t k = 0; k < p.parts_s.size(); ++k) slower = slower || p.parts_s[k] > f * q.parts_s[k];
      }
      if (slower) {
        p.is_anomaly = true;
        break;
      }
    }
  }
}

RooflineFit fit_operation(const std::vector<CalibrationPoint>& points, const FitOptions& opt) {
  Problem pb{.pts = {}, .weight = {}, .opt = opt};
  for (const auto& p : points) {
    if (!p.is_anomaly && p.seconds > 0 && (p.bytes > 0 || p.flops > 0)) pb.pts.push_back(&p);
  }
  if (pb.pts.size() < 2) throw std::invalid_argument("calibration fit: fewer than two usable points");
  pb.weight = sweep_weights(pb.pts);

  // Start: the fastest point is mostly fixed cost; the best observed bandwidth and rate are near the
  // ceilings. Several starting sharpnesses guard against a poor local minimum.
  double t_min = std::numeric_limits<double>::max();
  double bw = 1.0;
  double rate = 1.0;
  for (const auto* p : pb.pts) {
    t_min = std::min(t_min, p->seconds);
    bw = std::max(bw, p->bytes / p->seconds);
    rate = std::max(rate, p->flops / p->seconds);
  }
  if (opt.prior_bytes_per_s > 0) bw = opt.prior_bytes_per_s;
  if (opt.prior_flops_per_s > 0) rate = opt.prior_flops_per_s;
  Theta best;
  double best_cost = std::numeric_limits<double>::max();
  for (double fixed_share : {0.2, 0.5}) {
    for (double p0 : {1.5, 3.0, 8.0}) {
      const double fixed = opt.prior_fixed_s > 0 ? opt.prior_fixed_s : fixed_share * t_min;
      Theta t0;
      t0 << std::log(fixed), std::log(bw), std::log(rate), std::log(p0 - 1.0);
      const Theta t = levenberg_marquardt(pb, t0);
      const double c = pb.residuals(t).squaredNorm();
      if (std::isfinite(c) && c < best_cost) {
        best_cost = c;
        best = t;
      }
    }
  }
  return to_fit(best);
}

namespace {

// One expert of a kExpertLoop point.
BytesFlops loop_expert_work(const CalibrationPoint& p, std::int32_t count) {
  return work_bytes_flops(
      ExpertFfnWork{.tokens = count, .hidden = p.shape_a, .inter = p.shape_b, .weights = p.precision});
}

}  // namespace

double fit_loop_fixed_s(const std::vector<CalibrationPoint>& loop_points, const RooflineFit& ffn) {
  auto cost = [&](double fixed_s) {
    RooflineFit f = ffn;
    f.fixed_s = fixed_s;
    double c = 0;
    for (const auto& p : loop_points) {
      if (p.is_anomaly) continue;
      double pred = 0;
      for (const std::int32_t n : p.counts) {
        if (n <= 0) continue;
        const BytesFlops bf = loop_expert_work(p, n);
        pred += f.seconds(bf.bytes, bf.flops);
      }
      c += std::pow(std::log(pred / p.seconds), 2);
    }
    return c;
  };
  // On [0, 2 x the single-kernel fixed cost] (the cost is unimodal in fixed_s).
  return golden_section_min(cost, 0.0, 2 * ffn.fixed_s, 100);
}

namespace {

std::vector<OperationFit> fit_kinds(const std::vector<CalibrationPoint>& points, const FitOptions& opt);

}  // namespace

std::vector<OperationFit> fit_all(const std::vector<CalibrationPoint>& points, const FitOptions& opt) {
  std::vector<CalibrationPoint> kernels;
  std::vector<CalibrationPoint> loops;
  for (const auto& p : points) (p.op == CostOp::kExpertLoop ? loops : kernels).push_back(p);
  std::vector<OperationFit> fits = fit_kinds(kernels, opt);
  // Loops: one fixed cost per (precision, shape) measured, against that shape's expert FFN fit.
  std::vector<std::pair<Precision, std::pair<std::int64_t, std::int64_t>>> done;
  for (const auto& p : loops) {
    const std::pair key{p.precision, std::pair{p.shape_a, p.shape_b}};
    if (std::find(done.begin(), done.end(), key) != done.end()) continue;
    done.push_back(key);
    const auto ffn = std::find_if(fits.begin(), fits.end(), [&](const OperationFit& f) {
      return f.op == CostOp::kExpertFfn && f.precision == p.precision && f.shape_a == p.shape_a &&
             f.shape_b == p.shape_b;
    });
    const auto any = std::find_if(fits.begin(), fits.end(), [&](const OperationFit& f) {
      return f.op == CostOp::kExpertFfn && f.precision == p.precision && f.shape_a == 0 && f.shape_b == 0;
    });
    const auto base = ffn != fits.end() ? ffn : any;
    if (base == fits.end()) continue;  // no expert FFN measured: nothing to compare the loop with
    std::vector<CalibrationPoint> same;
    for (const auto& q : loops) {
      if (q.precision == p.precision && q.shape_a == p.shape_a && q.shape_b == p.shape_b) same.push_back(q);
    }
    RooflineFit loop = base->params;
    loop.fixed_s = fit_loop_fixed_s(same, base->params);
    // Stored for all shapes: the per-kernel saving it implies applies to any expert shape.
    fits.push_back(
        {.op = CostOp::kExpertLoop, .precision = p.precision, .shape_a = 0, .shape_b = 0, .params = loop});
    fits.push_back({.op = CostOp::kExpertLoop,
                    .precision = p.precision,
                    .shape_a = p.shape_a,
                    .shape_b = p.shape_b,
                    .params = loop});
  }
  return fits;
}

namespace {

std::vector<OperationFit> fit_kinds(const std::vector<CalibrationPoint>& points, const FitOptions& opt) {
  // Kinds (op, precision) in order of first appearance, GEMM first: the expert FFN prior needs its fit.
  std::vector<const CalibrationPoint*> kinds;
  for (const auto& p : points) {
    if (std::none_of(kinds.begin(), kinds.end(),
                     [&](const CalibrationPoint* k) { return same_kind(*k, p); })) {
      kinds.push_back(&p);
    }
  }
  std::stable_partition(kinds.begin(), kinds.end(),
                        [](const CalibrationPoint* k) { return k->op != CostOp::kGroupedExperts; });
  std::stable_partition(kinds.begin(), kinds.end(),
                        [](const CalibrationPoint* k) { return k->op == CostOp::kGemm; });

  std::vector<OperationFit> fits;
  for (const CalibrationPoint* kind : kinds) {
    double rate_scale = 1.0;
    for (const auto& [prec, scale] : opt.prior_rate_scale) {
      if (prec == kind->precision) rate_scale = scale;
    }
    FitOptions o = opt;
    o.prior_flops_per_s *= rate_scale;
    const auto gemm = std::find_if(fits.begin(), fits.end(), [](const OperationFit& f) {
      return f.op == CostOp::kGemm && f.precision == Precision::kBF16 && f.shape_a == 0 && f.shape_b == 0;
    });
    if (kind->op == CostOp::kExpertFfn && gemm != fits.end()) {
      o.prior_fixed_s = 2 * gemm->params.fixed_s;
      o.prior_bytes_per_s = gemm->params.bytes_per_s;
      o.prior_flops_per_s = gemm->params.flops_per_s * rate_scale;
      o.prior_weight = opt.derived_prior_weight;
    }
    const auto ffn = std::find_if(fits.begin(), fits.end(), [](const OperationFit& f) {
      return f.op == CostOp::kExpertFfn && f.precision == Precision::kBF16 && f.shape_a == 0 &&
             f.shape_b == 0;
    });
    if (kind->op == CostOp::kGroupedExperts && ffn != fits.end()) {
      o.prior_fixed_s = 0;
      o.prior_bytes_per_s = ffn->params.bytes_per_s;
      o.prior_flops_per_s = ffn->params.flops_per_s * rate_scale;
      o.prior_weight = opt.grouped_prior_weight;
    }
    std::vector<CalibrationPoint> same;
    std::vector<std::pair<std::int64_t, std::int64_t>> shapes;
    for (const auto& q : points) {
      if (!same_kind(q, *kind)) continue;
      same.push_back(q);
      const std::pair shape{q.shape_a, q.shape_b};
      if (std::find(shapes.begin(), shapes.end(), shape) == shapes.end()) shapes.push_back(shape);
    }
    const RooflineFit all = fit_operation(same, o);
    fits.push_back({.op = kind->op, .precision = kind->precision, .shape_a = 0, .shape_b = 0, .params = all});
    if (shapes.size() < 2) continue;
    // Per-shape fits, pulled toward the all-shapes fit.
    FitOptions shape_opt = opt;
    shape_opt.prior_fixed_s = all.fixed_s;
    shape_opt.prior_bytes_per_s = all.bytes_per_s;
    shape_opt.prior_flops_per_s = all.flops_per_s;
    shape_opt.prior_weight = opt.derived_prior_weight;
    for (const auto& [a, b] : shapes) {
      if (a == 0 && b == 0) continue;
      std::vector<CalibrationPoint> one;
      for (const auto& q : same) {
        if (q.shape_a == a && q.shape_b == b) one.push_back(q);
      }
      const auto usable =
          std::count_if(one.begin(), one.end(), [](const CalibrationPoint& q) { return !q.is_anomaly; });
      if (usable < 4) continue;
      fits.push_back({.op = kind->op,
                      .precision = kind->precision,
                      .shape_a = a,
                      .shape_b = b,
                      .params = fit_operation(one, shape_opt)});
    }
  }
  return fits;
}

}  // namespace

double predict_seconds(const GpuProfile& profile, const CalibrationPoint& p) {
  if (p.op == CostOp::kExpertLoop) {
    if (profile.find_fit(CostOp::kExpertLoop, p.precision, p.shape_a, p.shape_b) == nullptr) return -1.0;
    const double delta = profile.loop_fixed_delta_s(p.precision, p.shape_a, p.shape_b);
    double sum = 0;
    for (const std::int32_t n : p.counts) {
      if (n <= 0) continue;
      const BytesFlops bf = loop_expert_work(p, n);
      const auto s =
          profile.seconds(CostOp::kExpertFfn, p.precision, p.shape_a, p.shape_b, bf.bytes, bf.flops);
      if (!s) return -1.0;
      sum += *s + delta;
    }
    return sum;
  }
  return profile.seconds(p.op, p.precision, p.shape_a, p.shape_b, p.bytes, p.flops).value_or(-1.0);
}

std::vector<SweepResidual> residual_report(const GpuProfile& profile,
                                           const std::vector<CalibrationPoint>& points) {
  std::vector<SweepResidual> rows;
  std::vector<std::vector<double>> errors;
  for (const auto& p : points) {
    const double pred = predict_seconds(profile, p);
    if (pred < 0) continue;
    auto it = std::find_if(rows.begin(), rows.end(), [&](const SweepResidual& r) {
      return r.sweep == p.sweep && r.op == p.op && r.precision == p.precision;
    });
    if (it == rows.end()) {
      SweepResidual row;
      row.op = p.op;
      row.precision = p.precision;
      row.sweep = p.sweep;
      rows.push_back(row);
      errors.emplace_back();
      it = rows.end() - 1;
    }
    const double e = std::abs(pred - p.seconds) / p.seconds;
    errors[static_cast<std::size_t>(it - rows.begin())].push_back(e);
    ++it->points;
    it->max_rel_error_all = std::max(it->max_rel_error_all, e);
    if (p.is_anomaly) {
      ++it->anomalies;
    } else if (e >= it->max_rel_error) {
      it->max_rel_error = e;
      it->worst_label = p.label;
    }
  }
  for (std::size_t i = 0; i < rows.size(); ++i) rows[i].median_rel_error = median(errors[i]);
  return rows;
}

SweepResidual leave_one_out(const std::vector<CalibrationPoint>& points, std::string_view sweep,
                            const FitOptions& opt) {
  std::vector<CalibrationPoint> train;
  std::vector<CalibrationPoint> test;
  for (const auto& p : points) (p.sweep == sweep ? test : train).push_back(p);
  if (test.empty()) throw std::invalid_argument("leave-one-out: no sweep named '" + std::string(sweep) + "'");
  if (std::none_of(train.begin(), train.end(),
                   [&](const CalibrationPoint& p) { return same_kind(p, test.front()); })) {
    throw std::invalid_argument("leave-one-out: nothing left to fit " +
                                std::string(to_string(test.front().op)));
  }
  GpuProfile profile;
  profile.fits = fit_all(train, opt);
  // The held-out shape has no fit of its own unless another sweep measured the same shape: drop such fits so
  // the all-shapes fit predicts it.
  std::erase_if(profile.fits, [&](const OperationFit& f) {
    return f.shape_a == test.front().shape_a && f.shape_b == test.front().shape_b &&
           (f.shape_a != 0 || f.shape_b != 0);
  });
  return residual_report(profile, test).front();
}

std::string format_residuals(const std::vector<SweepResidual>& rows) {
  std::string out =
      "operation          precision  sweep                                          points"
      "  median    max  worst      anomalies (max incl.)\n";
  for (const auto& r : rows) {
    std::array<char, 256> line{};
    std::snprintf(line.data(), line.size(), "%-18s %-10s %-46s %6d  %5.1f%%  %5.1f%%  %-10s %d",
                  std::string(to_string(r.op)).c_str(), std::string(to_string(r.precision)).c_str(),
                  r.sweep.c_str(), r.points, 100 * r.median_rel_error, 100 * r.max_rel_error,
                  r.worst_label.c_str(), r.anomalies);
    out += line.data();
    if (r.anomalies > 0) {
      std::snprintf(line.data(), line.size(), " (%.1f%%)", 100 * r.max_rel_error_all);
      out += line.data();
    }
    out += '\n';
  }
  return out;
}

}  // namespace moesim
