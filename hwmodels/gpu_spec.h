// A GPU and its node as the cost models see them: datasheet ceilings plus achievable fractions.
// Filled from scenarios/catalog/gpus.json by the scenario module; units are SI.
#pragma once

#include <string>

#include "hwmodels/precision.h"
#include "sim/engine/time.h"

namespace moesim {

struct GpuSpec {
  std::string name;
  std::string arch;           // "hopper", "blackwell", ... (labels derived cost models)
  std::string profile_basis;  // catalog name of the GPU whose fitted profile this one derives from

  double hbm_bytes = 0;
  double hbm_bytes_per_s = 0;
  double l2_bytes = 0;  // last-level cache (0: unknown; small-kernel gathers then count every read)
  int sms = 132;        // streaming multiprocessors (H100/H200/H800 SXM: 132)
  // Dense tensor-core peak (no sparsity) by compute format.
  double bf16_flops_per_s = 0;
  double fp8_flops_per_s = 0;
  double int8_ops_per_s = 0;
  double fp4_flops_per_s = 0;  // 0 where the architecture has no FP4 tensor cores
  // Fractions of the peaks a good kernel reaches (datasheet roofline only; a profile replaces them).
  double mem_efficiency = 0.75;
  double compute_efficiency = 0.75;
  Duration kernel_overhead = Duration::from_us(2.0);
  // Node-level links, per GPU and per direction.
  double nvlink_bytes_per_s = 0;
  Duration nvlink_latency = Duration::from_us(2.0);
  double nic_bytes_per_s = 0;
  Duration nic_latency = Duration::from_us(5.0);

  // Peak rate of a GEMM whose weights are stored as `weights`: FP8 and INT8 weights run on their own
  // tensor-core path; INT4/FP4 weights are dequantised and run at the BF16 rate unless FP4 is native.
  [[nodiscard]] double peak_flops(Precision weights) const {
    switch (weights) {
      case Precision::kFP8:
        return fp8_flops_per_s > 0 ? fp8_flops_per_s : bf16_flops_per_s;
      case Precision::kINT8:
        return int8_ops_per_s > 0 ? int8_ops_per_s : bf16_flops_per_s;
      case Precision::kFP4:
        return fp4_flops_per_s > 0 ? fp4_flops_per_s : bf16_flops_per_s;
      default:
        return bf16_flops_per_s;
    }
  }
};

}  // namespace moesim
