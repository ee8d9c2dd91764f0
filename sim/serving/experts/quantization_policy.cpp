#include "sim/serving/experts/quantization_policy.h"

#include <cmath>
#include <numeric>

namespace moesim {

Precision expert_precision(const QuantizationSpec& spec, ExpertKind kind, Hotness hotness) {
  switch (kind) {
    case ExpertKind::kShared:
      return spec.shared_expert;
    case ExpertKind::kRouter:
      return spec.router;
    case ExpertKind::kRouted:
      break;
  }
  switch (hotness) {
    case Hotness::kHot:
      return spec.hot;
    case Hotness::kWarm:
      return spec.warm;
    case Hotness::kCold:
      return spec.cold;
  }
  return spec.hot;
}

std::int64_t expert_copy_bytes(const QuantizationSpec& spec, std::int64_t params, Precision p) {
  double bytes = static_cast<double>(params) * bytes_per_element(p);
  if (p == Precision::kINT8 || p == Precision::kINT4 || p == Precision::kFP4) {
    bytes += std::ceil(static_cast<double>(params) / spec.scale_group_size) * spec.scale_bytes;
  }
  return static_cast<std::int64_t>(std::ceil(bytes));
}

std::int64_t QualityProxy::total() const {
  return std::accumulate(tokens_.begin(), tokens_.end(), std::int64_t{0});
}

double QualityProxy::share(Precision p) const {
  const std::int64_t t = total();
  return t > 0 ? static_cast<double>(tokens_[precision_index(p)]) / static_cast<double>(t) : 0.0;
}

double QualityProxy::value(const QuantizationSpec& spec) const {
  const std::int64_t t = total();
  if (t <= 0) return 0.0;
  double v = 0;
  for (std::size_t i = 0; i < kPrecisionCount; ++i) {
    v += static_cast<double>(tokens_[i]) / static_cast<double>(t) * spec.quality_penalty[i];
  }
  return v;
}

}  // namespace moesim
