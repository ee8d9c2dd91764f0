// Shared by the cost-model tests: an H200-like GPU from its datasheet (4.8 TB/s HBM3e, 989 dense BF16 and
// 1,979 FP8 TFLOPS), at 75% of peak for memory and compute and 2 us per kernel, so that a test computes the
// roofline it expects by hand.
#pragma once

#include "hwmodels/gpu_spec.h"
#include "sim/engine/time.h"

namespace moesim_test {

inline moesim::GpuSpec h200_like() {
  moesim::GpuSpec g;
  g.name = "test";
  g.hbm_bytes_per_s = 4.8e12;
  g.bf16_flops_per_s = 989e12;
  g.fp8_flops_per_s = 1979e12;
  g.mem_efficiency = 0.75;
  g.compute_efficiency = 0.75;
  g.kernel_overhead = moesim::Duration::from_us(2);
  return g;
}

}  // namespace moesim_test
