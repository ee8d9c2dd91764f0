// Datasheet roofline: time = fixed kernel overhead + max(bytes / achievable bandwidth,
// flops / achievable rate) (Williams, Waterman, Patterson, "Roofline", CACM 2009).
#pragma once

#include "hwmodels/gpu_cost_model.h"
#include "hwmodels/gpu_spec.h"

namespace moesim {

class RooflineCostModel final : public GpuCostModel {
 public:
  explicit RooflineCostModel(GpuSpec gpu) : gpu_(std::move(gpu)) {}
  [[nodiscard]] Duration gemm(const GemmWork& w) const override;
  [[nodiscard]] Duration expert_ffn(const ExpertFfnWork& w) const override;
  [[nodiscard]] Duration attention(const AttentionWork& w) const override;
  [[nodiscard]] Duration grouped_experts(const GroupedExpertsWork& w) const override;
  [[nodiscard]] Duration memory_kernel(MemoryKernel k, double bytes) const override;
  [[nodiscard]] std::string source() const override { return "roofline (datasheet " + gpu_.name + ")"; }

  // Roofline time of `kernels` kernels moving `bytes` and computing `flops` at `peak_flops`.
  [[nodiscard]] Duration roofline(double bytes, double flops, double peak_flops, int kernels) const;

 private:
  GpuSpec gpu_;
};

}  // namespace moesim
