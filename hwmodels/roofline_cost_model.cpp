#include "hwmodels/roofline_cost_model.h"

#include <algorithm>

namespace moesim {

Duration RooflineCostModel::roofline(double bytes, double flops, double peak_flops, int kernels) const {
  const double mem_s = bytes / (gpu_.hbm_bytes_per_s * gpu_.mem_efficiency);
  const double compute_s = flops / (peak_flops * gpu_.compute_efficiency);
  return gpu_.kernel_overhead * kernels + Duration::from_seconds(std::max(mem_s, compute_s));
}

Duration RooflineCostModel::gemm(const GemmWork& w) const {
  if (w.m <= 0) return Duration::zero();
  const double m = static_cast<double>(w.m);
  const double n = static_cast<double>(w.n);
  const double k = static_cast<double>(w.k);
  // Weights once, activations in and out in BF16.
  const double bytes = k * n * bytes_per_element(w.weights) + 2.0 * (m * k + m * n);
  return roofline(bytes, gemm_flops(w), gpu_.peak_flops(w.weights), 1);
}

Duration RooflineCostModel::expert_ffn(const ExpertFfnWork& w) const {
  if (w.tokens <= 0) return Duration::zero();
  const double t = static_cast<double>(w.tokens);
  const double h = static_cast<double>(w.hidden);
  const double i = static_cast<double>(w.inter);
  // Weights once; x in, the 2I-wide intermediate out and back in, y out (BF16).
  const double bytes = expert_ffn_weight_bytes(w) + 2.0 * (2.0 * t * h + 3.0 * t * i);
  // Three kernels: up GEMM, SwiGLU, down GEMM (as in shared/calibration/h200/expert_ffn_bf16.json).
  return roofline(bytes, expert_ffn_flops(w), gpu_.peak_flops(w.weights), 3);
}

Duration RooflineCostModel::grouped_experts(const GroupedExpertsWork& w) const {
  if (w.tokens <= 0 || w.experts <= 0) return Duration::zero();
  const double t = static_cast<double>(w.tokens);
  const double h = static_cast<double>(w.hidden);
  const double i = static_cast<double>(w.inter);
  const double bytes = static_cast<double>(w.experts) * 3.0 * h * i * bytes_per_element(w.weights) +
                       2.0 * (2.0 * t * h + 3.0 * t * i);
  // Three launches for the whole group: grouped up GEMM, SwiGLU, grouped down GEMM.
  return roofline(bytes, grouped_experts_flops(w), gpu_.peak_flops(w.weights), 3);
}

Duration RooflineCostModel::memory_kernel(MemoryKernel /*k*/, double bytes) const {
  return roofline(bytes, 0.0, gpu_.bf16_flops_per_s, 1);
}

Duration RooflineCostModel::attention(const AttentionWork& w) const {
  if (w.bytes <= 0 && w.flops <= 0) return Duration::zero();
  return roofline(w.bytes, w.flops, gpu_.bf16_flops_per_s, 1);
}

}  // namespace moesim
