#include "sim/serving/report/latency_histogram.h"

#include <algorithm>
#include <cmath>

namespace moesim {

namespace {
constexpr int kBins = 2400;
constexpr double kLo = 1e-7;
constexpr double kHi = 1e5;
// Bucket i covers [kLo * r^i, kLo * r^(i+1)) with r = (kHi / kLo)^(1 / kBins): equal widths in log(x).
// (Boost.Histogram's regular axis with a log transform, which this replaced, has the same edges.)
const double kLogLo = std::log(kLo);
const double kLogHi = std::log(kHi);
const double kLogSpan = kLogHi - kLogLo;

int bin_of(double x) {
  const int i = static_cast<int>(std::floor((std::log(x) - kLogLo) / kLogSpan * kBins));
  return std::clamp(i, 0, kBins - 1);
}
double lower_edge(int i) {
  const double z = static_cast<double>(i) / kBins;
  return std::exp((1.0 - z) * kLogLo + z * kLogHi);
}
}  // namespace

void LatencyHistogram::grow_to(int bin) {
  if (w_.empty()) {
    first_ = bin;
    w_.assign(1, 0.0);
    return;
  }
  if (bin < first_) {
    w_.insert(w_.begin(), static_cast<std::size_t>(first_ - bin), 0.0);
    first_ = bin;
  } else if (bin >= first_ + static_cast<int>(w_.size())) {
    w_.resize(static_cast<std::size_t>(bin - first_ + 1), 0.0);
  }
}

void LatencyHistogram::add(double seconds, double weight) {
  const double x = std::clamp(seconds, kLo, kHi * 0.999999);
  if (x != last_) {
    last_ = x;
    last_bin_ = bin_of(x);
  }
  grow_to(last_bin_);
  w_[static_cast<std::size_t>(last_bin_ - first_)] += weight;
  count_ += weight;
  sum_ += seconds * weight;
  max_ = std::max(max_, seconds);
}

void LatencyHistogram::merge(const LatencyHistogram& o) {
  if (o.w_.empty()) return;
  grow_to(o.first_);
  grow_to(o.first_ + static_cast<int>(o.w_.size()) - 1);
  for (std::size_t i = 0; i < o.w_.size(); ++i)
    w_[static_cast<std::size_t>(o.first_ - first_) + i] += o.w_[i];
  count_ += o.count_;
  sum_ += o.sum_;
  max_ = std::max(max_, o.max_);
}

double LatencyHistogram::percentile(double q) const {
  if (count_ <= 0) return 0.0;
  const double target = q / 100.0 * count_;
  double cum = 0;
  for (std::size_t k = 0; k < w_.size(); ++k) {
    const double w = w_[k];
    if (w <= 0) continue;
    if (cum + w >= target) {
      const int i = first_ + static_cast<int>(k);
      const double frac = std::clamp((target - cum) / w, 0.0, 1.0);
      const double lo = lower_edge(i);
      const double hi = lower_edge(i + 1);
      return std::min(max_, lo * std::pow(hi / lo, frac));
    }
    cum += w;
  }
  return max_;
}

}  // namespace moesim
