#include "sim/serving/latency_histogram.h"

#include <algorithm>
#include <boost/histogram.hpp>
#include <cmath>

namespace moesim {

namespace bh = boost::histogram;

namespace {
constexpr unsigned kBins = 2400;
constexpr double kLo = 1e-7;
constexpr double kHi = 1e5;
using Axis = bh::axis::regular<double, bh::axis::transform::log>;
using Hist = decltype(bh::make_weighted_histogram(Axis(kBins, kLo, kHi)));
}  // namespace

struct LatencyHistogram::Impl {
  Hist h = bh::make_weighted_histogram(Axis(kBins, kLo, kHi));
  // The last value added and its bin: the tokens of one step mostly share their inter-token latency, and
  // finding the bin on the log axis costs a logarithm.
  double last = -1;
  int last_bin = 0;
};

LatencyHistogram::LatencyHistogram() : impl_(std::make_unique<Impl>()) {}
LatencyHistogram::~LatencyHistogram() = default;
LatencyHistogram::LatencyHistogram(LatencyHistogram&&) noexcept = default;
LatencyHistogram& LatencyHistogram::operator=(LatencyHistogram&&) noexcept = default;

void LatencyHistogram::add(double seconds, double weight) {
  const double x = std::clamp(seconds, kLo, kHi * 0.999999);
  Impl& m = *impl_;
  if (x != m.last) {
    m.last = x;
    m.last_bin = static_cast<int>(m.h.axis(0).index(x));
  }
  m.h.at(m.last_bin) += bh::weight(weight);
  count_ += weight;
  sum_ += seconds * weight;
  max_ = std::max(max_, seconds);
}

double LatencyHistogram::percentile(double q) const {
  if (count_ <= 0) return 0.0;
  const double target = q / 100.0 * count_;
  double cum = 0;
  const auto& axis = impl_->h.axis(0);
  for (int i = 0; i < static_cast<int>(kBins); ++i) {
    const double w = impl_->h.at(i).value();
    if (w <= 0) continue;
    if (cum + w >= target) {
      const double frac = std::clamp((target - cum) / w, 0.0, 1.0);
      const double lo = axis.bin(i).lower();
      const double hi = axis.bin(i).upper();
      return std::min(max_, lo * std::pow(hi / lo, frac));
    }
    cum += w;
  }
  return max_;
}

}  // namespace moesim
